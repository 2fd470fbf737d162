"""The flavors a submission accepts (DESIGN §14): one flavor, or several in the owner's order
of preference (``A100-80G|Ascend-910B``), less those below a framework requirement.

The scheduler takes the first of them it can place (jobs/scheduler/engine/cycle.py); here only what can
be decided at submission: the list is well formed and the framework requirement leaves one.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from quotas.models import Flavor

SEPARATOR = "|"


def parse_names(text: str) -> list[str]:
    """``"A100-80G|Ascend-910B"`` → the names in order (blank parts are an error)."""
    names = [part.strip() for part in text.split(SEPARATOR)]
    if not all(names):
        raise ValidationError(_("Separate flavor names with a single '|'."))
    return names


def by_names(names: Sequence[str]) -> list[Flavor]:
    """The flavors named, in the given order; an unknown or repeated name is an error."""
    repeated = sorted({n for n in names if list(names).count(n) > 1})
    if repeated:
        raise ValidationError(_("Flavor listed twice: %(names)s.") % {"names": ", ".join(repeated)})
    found = {f.name: f for f in Flavor.objects.filter(name__in=names)}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise ValidationError(_("Unknown flavor: %(names)s.") % {"names": ", ".join(unknown)})
    return [found[n] for n in names]


def coverage(flavor: Flavor, framework: str) -> Decimal | None:
    """The flavor's operator coverage (0..1) for ``framework``; None when its profile has none."""
    entry = {k.lower(): v for k, v in (flavor.operator_coverage or {}).items()}.get(framework.lower())
    value = entry.get("coverage") if isinstance(entry, dict) else entry
    try:
        return None if value is None else Decimal(str(value))
    except InvalidOperation:
        return None


def acceptable(
    flavors: Flavor | Sequence[Flavor], *, framework: str = "", min_coverage: Decimal | None = None
) -> list[Flavor]:
    """The listed flavors, in order, that meet the framework requirement. A framework without a
    minimum needs a flavor whose profile lists that framework at all."""
    listed = [flavors] if isinstance(flavors, Flavor) else list(flavors)
    if not listed:
        raise ValidationError({"flavor": [_("Name at least one flavor.")]})
    if len({f.pk for f in listed}) != len(listed):
        raise ValidationError({"flavor": [_("A flavor is listed twice.")]})
    framework = framework.strip()
    if min_coverage is not None and not framework:
        raise ValidationError({"framework": [_("A minimum operator coverage needs a framework.")]})
    if not framework:
        return listed
    need = min_coverage if min_coverage is not None else Decimal(0)
    kept = [f for f in listed if (c := coverage(f, framework)) is not None and c >= need]
    if kept:
        return kept
    have = ", ".join(f"{f.name} {_percent(coverage(f, framework))}" for f in listed)
    raise ValidationError(
        {
            "framework": [
                _("No listed flavor reaches %(need)s operator coverage for %(framework)s (%(have)s).")
                % {"need": _percent(need), "framework": framework, "have": have}
            ]
        }
    )


def _percent(value: Decimal | None) -> str:
    if value is None:
        return _("not profiled")
    return f"{(value * 100).normalize():f} %"

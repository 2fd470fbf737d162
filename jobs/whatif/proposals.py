"""The advisor's "apply" (docs/advisor.md, "Apply"): a candidate that beats today's settings
becomes the normal approval requests — one quota request per project quota node its overcommit
ratio changes, and ONE rule-change request (``jobs.rule_changes``) with every other change —
shown first as a preview, filed only on confirm (issue 32 item 6).

The preview is the filing itself, run in a savepoint that is rolled back (as the rule-change
request's own dry run is): it lists exactly what the confirm would file, the portal's refusals
included. Its ``digest`` covers what would be filed; the confirm carries it back, and a filing
that comes out different (a quota or a rule edited in between) is refused with nothing filed, so
nobody files requests they did not see.
"""

from __future__ import annotations

import hashlib
import json
from decimal import ROUND_FLOOR, Decimal

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from jobs.whatif.advisor import objective, space
from jobs.whatif.models import AdvisorCandidate, AdvisorEvent, CandidateState
from jobs.whatif.services import visible_searches
from portal.texts import message

NIGHT_WINDOW = "advisor-night"  # the name of the quota windows the advisor's night limits become


class ProposalChanged(ValidationError):
    """The requests a confirm would file are not the ones its preview showed (``digest``)."""


class _Preview(Exception):
    def __init__(self, out: dict):
        self.out = out


def _check(actor, candidate: AdvisorCandidate) -> None:
    if not visible_searches(actor).filter(pk=candidate.search_id).exists():
        raise PermissionDenied
    if candidate.state != CandidateState.DONE or not candidate.feasible or candidate.number == 0:
        raise ValidationError(_("Only a finished, feasible candidate other than today's can be applied."))
    if not objective.beats_today(candidate.objective):
        raise ValidationError(_("This candidate does not beat today's settings (objective %(value)s; "
                                "today's is 1.000): there is nothing to gain by applying it.")
                              % {"value": f"{candidate.objective:.3f}"})


def advisor_candidate_preview(*, actor, candidate: AdvisorCandidate) -> dict:
    """What :func:`advisor_candidate_apply` would file now, nothing filed: ``{"quota_requests":
    [{"project", "flavor", "before", "after", "line"}], "rule_lines": [messages], "rule_changes":
    [entries], "unmapped": [{"change", "reason"}], "skipped": [texts], "digest"}``."""
    _check(actor, candidate)
    try:
        with transaction.atomic():
            raise _Preview(_file(actor, candidate))
    except _Preview as preview:  # the savepoint is rolled back: its rows and on-commit hooks are gone
        out = preview.out
    for row in out["quota_requests"]:
        row.pop("id")
    return {k: v for k, v in out.items() if k not in ("requests", "rule_change_request")}


def advisor_candidate_apply(*, actor, candidate: AdvisorCandidate, digest: str | None = None) -> dict:
    """File the candidate's requests. ``digest``: its preview's (the page always sends it; the API
    may): when what would be filed now differs, :class:`ProposalChanged` and nothing is filed.
    Returns the preview's keys with ``requests`` (quota request ids) and ``rule_change_request``
    (id or None)."""
    _check(actor, candidate)
    with transaction.atomic():
        out = _file(actor, candidate)
        if digest is not None and digest != out["digest"]:
            raise ProposalChanged(_("What this candidate would file changed since its preview (a quota or a "
                                    "rule was edited meanwhile); nothing was filed. Review the new preview."))
        AdvisorEvent.objects.create(search_id=candidate.search_id, candidate=candidate,
                                    from_state=candidate.state, to_state=candidate.state,
                                    reason=f"applied: {len(out['requests'])} quota request(s), rule change "
                                           f"request {out['rule_change_request']}")
    return out


def _file(actor, candidate: AdvisorCandidate) -> dict:
    """The overcommit ratio r: one quota request per project quota node (quota × r, in the node's
    units, :func:`_floor`), decided by the usual approvers; departments are not touched (the
    guarantee the search kept). Every other change: one entry of one rule-change request
    (:func:`_rule_changes`). A quota request the portal refuses is ``skipped``; a rule entry it
    refuses is ``unmapped`` with its message, and the request is made with the rest."""
    from jobs.rule_changes import ChangesRefused, quantity_text, rule_change_request_create
    from quotas.approvals import quota_request_create

    changes = space.changes(candidate.params, candidate.search.projects)
    ratio = changes.pop("overcommit_ratio", None)
    out = {"quota_requests": [], "requests": [], "rule_change_request": None, "rule_lines": [],
           "rule_changes": [], "unmapped": [], "skipped": []}
    if ratio is not None:
        reason = _("Policy advisor: search #%(search)s, candidate %(n)s (overcommit ratio %(r)s).") % {
            "search": candidate.search_id, "n": candidate.number, "r": f"{ratio:.2f}"}
        for node in _project_quota_nodes().order_by("project__name", "flavor__name"):
            quota = _floor(node.quota * Decimal(str(ratio)), node)
            if quota == node.quota:
                continue
            try:
                with transaction.atomic():  # a refusal leaves no half-made request behind
                    req = quota_request_create(actor=actor, flavor=node.flavor, quota=quota,
                                               project=node.project, reason=reason)
            except ValidationError as exc:
                out["skipped"].append(f"{node.project.name} / {node.flavor.name}: {'; '.join(exc.messages)}")
                continue
            before, after = quantity_text(node.quota), quantity_text(quota)
            out["requests"].append(req.pk)
            line = message(gettext_noop("Quota of %(owner)s for %(flavor)s: %(old)s → %(new)s"),
                           owner=str(node.project), flavor=node.flavor.name, old=before, new=after)
            out["quota_requests"].append({"id": req.pk, "project": node.project.code,
                                          "flavor": node.flavor.name, "before": before, "after": after,
                                          "line": line})
    entries, out["unmapped"] = _rule_changes(changes, candidate.search.bounds)
    label = _("Policy advisor: search #%(search)s, candidate %(n)s.") % {
        "search": candidate.search_id, "n": candidate.number}
    while entries:
        try:
            with transaction.atomic():
                req = rule_change_request_create(actor=actor, changes=entries, reason=label)
        except ChangesRefused as exc:
            # An entry the portal refuses (a lend limit its department's level rule does not allow)
            # is left out with the reason and the rest asked for; the dry run names one at a time.
            for i, text in sorted(exc.refused.items()):
                out["unmapped"].append({"change": entries[i]["type"], "reason": text})
            entries = [e for i, e in enumerate(entries) if i not in exc.refused]
        except ValidationError as exc:  # about the request as a whole: nothing to leave out
            out["unmapped"].append({"change": "rule_change_request", "reason": "; ".join(exc.messages)})
            break
        else:
            out["rule_change_request"] = req.pk
            out["rule_lines"], out["rule_changes"] = req.payload["lines"], req.payload["changes"]
            break
    out["digest"] = _digest(out)
    return out


def _digest(out: dict) -> str:
    """What is filed, and nothing else (not ids, not texts in the reader's language)."""
    filed = {"quota": [[r["project"], r["flavor"], r["before"], r["after"]] for r in out["quota_requests"]],
             "rules": out["rule_changes"]}
    return hashlib.sha256(json.dumps(filed, sort_keys=True).encode()).hexdigest()[:20]


def _project_quota_nodes():
    """Every project quota node with a quota: what the advisor's ratios apply to."""
    from quotas.models import QuotaNode

    return QuotaNode.objects.filter(project__isnull=False, quota__gt=0).select_related("flavor", "project")


def _floor(value: Decimal, node) -> Decimal:
    """``value`` floored to the units the advisor proposes for ``node``: whole units — on a
    shareable flavor too — unless the node's quota today already has a fraction (then milli-units,
    the finest the flavor takes). A ratio found by a few hundred replays is not precise to a
    thousandth of a GPU, and "10 → 11.371" asks approvers to weigh a precision nobody measured."""
    fractional = node.flavor.shareable and node.quota != node.quota.to_integral_value()
    return value.quantize(Decimal("0.001") if fractional else Decimal(1), rounding=ROUND_FLOOR)


def _portal_projects() -> dict[str, object]:
    """Replay tenant path → portal project: the paths a history scenario's projects carry
    (``dept/sub-dept/project``, every department from the top; ``jobs.whatif.history``)."""
    from jobs.whatif.history import _tenant_paths  # the export's own naming, so that they always agree
    from portal.models import Project

    _depts, paths = _tenant_paths()
    by_id = Project.objects.in_bulk(list(paths))
    return {path: by_id[pk] for pk, path in paths.items()}


def _rule_changes(changes: dict, bounds: dict) -> tuple[list[dict], list[dict]]:
    """The candidate's changes (other than the overcommit ratio) as rule-change entries on this
    portal's objects, and what cannot be mapped with the reason. Ratios apply to each project
    quota node's quota today, floored to the advisor's units (:func:`_floor`); the night window
    becomes a daily quota window ``NIGHT_WINDOW`` (hours of ``bounds.night_hours``, site time) on
    every project quota node; the grace period goes onto every priority class; a replay project
    (its tenant path, :func:`_portal_projects`) maps onto the portal project of that path."""
    from jobs.models import PriorityClass
    from jobs.rule_changes import new_values, quantity_text, window_values
    from jobs.scheduling.settings import engine_flags, fair_share_settings
    from quotas.models import QuotaWindow

    entries, unmapped = [], []
    nodes = list(_project_quota_nodes().order_by("project__code", "flavor__name"))

    def floor(ratio, node) -> str:
        return quantity_text(_floor(node.quota * Decimal(str(ratio)), node))

    def above_quota(key, node, value) -> None:
        text = _("%(owner)s / %(flavor)s: %(value)s is above its quota")
        unmapped.append({"change": key, "reason": text % {
            "owner": node.project.code, "flavor": node.flavor.name, "value": value}})

    limits: dict[int, dict] = {}
    for key in ("borrow_limit", "lend_limit"):
        if f"{key}_ratio" not in changes:
            continue
        ratio = changes.pop(f"{key}_ratio")
        for node in nodes:
            value = None if ratio is None else floor(ratio, node)
            if key == "lend_limit" and value is not None and Decimal(value) > node.quota:
                above_quota(f"{key}_ratio", node, value)
                continue
            if value != quantity_text(getattr(node, key)):
                limits.setdefault(node.pk, {"type": "quota_limits", "project": node.project.code,
                                            "flavor": node.flavor.name})[key] = value
    entries.extend(limits.values())
    if "night_lend_limit_ratio" in changes:
        ratio = changes.pop("night_lend_limit_ratio")
        start, end = bounds["night_hours"]  # check_bounds always fills it
        windows: dict[int, QuotaWindow] = {}  # node id → its first night window by id
        for w in QuotaWindow.objects.filter(quota_node__in=nodes, name=NIGHT_WINDOW).order_by("-id"):
            windows[w.quota_node_id] = w
        for node in nodes:
            window = windows.get(node.pk)
            if ratio is None:
                if window is not None:
                    unmapped.append({"change": "night_lend_limit_ratio", "reason": _(
                        "%(owner)s / %(flavor)s: no night window — deactivate its window “%(name)s” "
                        "by hand") % {
                        "owner": node.project.code, "flavor": node.flavor.name, "name": NIGHT_WINDOW}})
                continue
            value = floor(ratio, node)
            if Decimal(value) > node.quota:
                above_quota("night_lend_limit_ratio", node, value)
                continue
            entry = {"type": "quota_window", "project": node.project.code, "flavor": node.flavor.name,
                     "name": NIGHT_WINDOW, "start_hour": start, "end_hour": end, "quota": None,
                     "lend_limit": value}
            if window_values(window) != new_values(entry):
                entries.append(entry)
        if not nodes:
            unmapped.append({"change": "night_lend_limit_ratio", "reason": _("no project holds a quota")})
    if "grace_s" in changes:
        grace = int(changes.pop("grace_s"))
        others = PriorityClass.objects.exclude(grace_seconds=grace).order_by("name")
        for name in others.values_list("name", flat=True):
            entries.append({"type": "priority_grace", "priority_class": name, "grace_seconds": grace})
    flags = engine_flags()
    if "backfill" in changes:
        value = bool(changes.pop("backfill"))
        if value != flags["backfill"]:
            entries.append({"type": "scheduler_backfill", "backfill": value})
    if "packing" in changes:
        value = changes.pop("packing")
        if (value == "fragmentation_aware") != flags["fragmentation_aware"]:
            entries.append({"type": "scheduler_packing", "packing": value})
    if "fair_half_life_s" in changes:
        value = changes.pop("fair_half_life_s")  # None: the replay's input's own — nothing to set
        if value is not None and int(value) != fair_share_settings()[0]:
            entries.append({"type": "scheduler_fair_share", "fair_share_half_life_seconds": int(value)})
    _queueing(changes, entries, unmapped)
    for key in sorted(k for k in changes if k.startswith("fair_weight:")):
        # A weight is a platform admin's direct edit (quotas.FairShareWeight), not a rule change.
        unmapped.append({"change": key, "reason": _(
            "a fair-share weight is not a rule change: set it on the quota tree page (“Edit weight”) "
            "as the department's shares × %(r)s") % {"r": f"{changes.pop(key):.3g}"}})
    for key in sorted(changes):
        unmapped.append({"change": key, "reason": _("no rule of this portal corresponds to it")})
    return entries, unmapped


def _queueing(changes: dict, entries: list[dict], unmapped: list[dict]) -> None:
    """The per-project queueing changes (popped from ``changes``) as ``project_queueing`` entries."""
    keys = sorted(k for k in changes if k.startswith("queueing:"))
    projects = _portal_projects() if keys else {}
    for key in keys:
        value, path = changes.pop(key), key.split(":", 1)[1]
        project = projects.get(path)
        if project is None:
            unmapped.append({"change": key, "reason": _(
                "no project %(path)s in this portal (the replay's projects are the scenario's)")
                % {"path": path}})
        elif project.queueing != value:
            entries.append({"type": "project_queueing", "project": project.code, "queueing": value})

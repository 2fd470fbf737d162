"""A candidate's changes from today as people read them (issue 32 item 6): "Preemption grace
period: 24 s", not ``grace_s = 24``, in the reader's language. The keys are
:func:`jobs.whatif.advisor.space.changes`'s."""

from __future__ import annotations

from collections.abc import Mapping

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

# The values' words: the same msgids as the rule-change request's lines (jobs.rule_changes).
_QUEUEING = {"best_effort": gettext_noop("best effort"), "strict_fifo": gettext_noop("strict FIFO")}
_PACKING = {"fragmentation_aware": gettext_noop("fragmentation-aware"), "best_fit": gettext_noop("best fit")}


def _ratio(value) -> str:
    return f"{value:.3g}"


def change_label(key: str, value, bounds: Mapping) -> str:
    """One change, labelled."""
    if key == "overcommit_ratio":
        return _("Project quotas × %(r)s (overcommit ratio)") % {"r": _ratio(value)}
    if key == "borrow_limit_ratio":
        return _("Borrow limit: no cap") if value is None else \
            _("Borrow limit: %(r)s × the project's quota") % {"r": _ratio(value)}
    if key == "lend_limit_ratio":
        return _("Lend limit: lends all") if value is None else \
            _("Lend limit: %(r)s × the project's quota") % {"r": _ratio(value)}
    if key == "night_lend_limit_ratio":
        if value is None:
            return _("Night window: none")
        start, end = bounds.get("night_hours", (20, 8))
        return _("Night window %(start)02d:00–%(end)02d:00, lend limit: %(r)s × the project's quota") % {
            "start": start, "end": end, "r": _ratio(value)}
    if key == "grace_s":
        return _("Preemption grace period: %(s)s s") % {"s": int(value)}
    if key == "backfill":
        return _("EASY backfill: %(v)s") % {"v": _("on") if value else _("off")}
    if key == "packing":
        return _("Packing: %(v)s") % {"v": _(_PACKING.get(value, value))}
    if key == "fair_half_life_s":
        return _("Fair-share half-life: as the input has it") if value is None else \
            _("Fair-share half-life: %(s)s s") % {"s": int(value)}
    if key.startswith("queueing:"):
        return _("Queueing of project %(project)s: %(v)s") % {
            "project": key.split(":", 1)[1], "v": _(_QUEUEING.get(value, value))}
    if key.startswith("fair_weight:"):
        return _("Fair-share weight of department %(department)s: %(r)s × its shares") % {
            "department": key.split(":", 1)[1], "r": _ratio(value)}
    return f"{key} = {value}"  # a dimension without a label yet: its key, as before


# as docs/advisor.md lists the dimensions; the projects' queueing last
_ORDER = ("overcommit_ratio", "borrow_limit_ratio", "lend_limit_ratio", "night_lend_limit_ratio", "grace_s",
          "backfill", "packing", "fair_half_life_s")


def change_labels(changes: Mapping, bounds: Mapping) -> list[str]:
    def order(key: str) -> tuple:
        return (_ORDER.index(key) if key in _ORDER else len(_ORDER), key)

    return [change_label(k, changes[k], bounds) for k in sorted(changes, key=order)]


# What a change that was not applied was (apply's ``unmapped``): a dimension, or a rule-change
# entry's type when the portal refused that entry.
_NAMES = {
    "overcommit_ratio": gettext_noop("Overcommit ratio"),
    "borrow_limit_ratio": gettext_noop("Borrow limit"),
    "lend_limit_ratio": gettext_noop("Lend limit"),
    "night_lend_limit_ratio": gettext_noop("Night window"),
    "grace_s": gettext_noop("Grace period"),
    "backfill": gettext_noop("EASY backfill"),
    "packing": gettext_noop("Packing"),
    "fair_half_life_s": gettext_noop("Fair-share half-life"),
    "quota_limits": gettext_noop("Quota limits"),
    "quota_window": gettext_noop("Quota window"),
    "priority_grace": gettext_noop("Grace period"),
    "project_queueing": gettext_noop("Queueing strategy"),
    "scheduler_backfill": gettext_noop("EASY backfill"),
    "scheduler_packing": gettext_noop("Packing"),
    "rule_change_request": gettext_noop("Rule-change request"),
}


def change_name(key: str) -> str:
    """A dimension or rule-change type by name, in the reader's language."""
    if key.startswith("queueing:"):
        return _("Queueing of project %(project)s") % {"project": key.split(":", 1)[1]}
    if key.startswith("fair_weight:"):
        return _("Fair-share weight of department %(department)s") % {"department": key.split(":", 1)[1]}
    return _(_NAMES[key]) if key in _NAMES else key


def not_applied(unmapped: list[dict]) -> list[dict]:
    """Apply's ``unmapped`` with each change named for people."""
    return [{**item, "change": change_name(item["change"])} for item in unmapped]

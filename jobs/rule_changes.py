"""Rule-change requests (策略变更, issue 25): a kind of the generic approval engine that changes
scheduling rules — a project's queueing strategy, a quota node's borrow / lend limits, a quota
window, a priority class's grace period, the scheduler's backfill and packing, the fair-share
half-life and entry time (docs/approvals.md, "Rule changes").

One request carries a list of changes. Each change names its target and the new values, and
holds the values it expects to replace (``before``: given by the requester, or read when the
request is made). Asked and decided by platform admins (one platform step). On approval every
change is applied in the decision's transaction, each under its row's lock and only if the row
still holds ``before`` — a value someone changed meanwhile is never overwritten: the approval is
refused, nothing is applied, and the message names the change. Every change applied writes a
``RuleChangeEvent`` (who, when, old → new, the request).

Change types (keys of an entry besides ``type`` and ``before``):

====================  =======================================  =====================================
type                  target                                   values
====================  =======================================  =====================================
project_queueing      project (code)                           queueing, aging_bound_seconds
quota_limits          project or department (code), flavor     borrow_limit, lend_limit (null: none)
quota_window          project or department, flavor, name      start_hour, end_hour, quota, lend_limit
priority_grace        priority_class (name)                    grace_seconds
scheduler_backfill    —                                        backfill
scheduler_packing     —                                        packing
scheduler_fair_share  —                                        fair_share_half_life_seconds,
                                                               fair_share_entry_seconds
scheduler_consolidation  —                                     consolidation_moves_per_hour (0: off)
====================  =======================================  =====================================
"""

from __future__ import annotations

import contextlib
import json
from datetime import time
from decimal import Decimal, InvalidOperation

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from jobs.models import PriorityClass
from jobs.rule_models import (
    FAIR_ENTRY_MAX_SECONDS,
    FAIR_HALF_LIFE_MAX_SECONDS,
    FAIR_HALF_LIFE_MIN_SECONDS,
    Packing,
    RuleChangeEvent,
    SchedulerSettings,
)
from portal import permissions as perm
from portal.approvals import StepSpec, approval_request_create
from portal.models import (
    AGING_BOUND_MAX_SECONDS,
    AGING_BOUND_MIN_SECONDS,
    ApprovalKind,
    ApprovalRequest,
    Department,
    Project,
    Queueing,
    Role,
    User,
)
from portal.selectors import scope_for
from portal.services import project_update
from portal.texts import message
from quotas.models import Flavor, QuotaNode, QuotaWindow
from quotas.services import quota_node_update, window_create, window_update

MAX_CHANGES = 500
MAX_GRACE_SECONDS = 86400
WEEKDAYS_ALL = "0123456"

# type: (target keys, value keys); every value key is optional but one must be given.
TYPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "project_queueing": (("project",), ("queueing", "aging_bound_seconds")),
    "quota_limits": (("project", "department", "flavor"), ("borrow_limit", "lend_limit")),
    "quota_window": (("project", "department", "flavor", "name"),
                     ("start_hour", "end_hour", "quota", "lend_limit")),
    "priority_grace": (("priority_class",), ("grace_seconds",)),
    "scheduler_backfill": ((), ("backfill",)),
    "scheduler_packing": ((), ("packing",)),
    "scheduler_fair_share": ((), ("fair_share_half_life_seconds", "fair_share_entry_seconds")),
    "scheduler_consolidation": ((), ("consolidation_moves_per_hour",)),
}
MAX_MOVES_PER_HOUR = 10_000
_REQUIRED_VALUES = {"quota_window": ("start_hour", "end_hour")}


class _Bad(Exception):
    """One entry's refusal (turned into the request's 400 naming the entry)."""


class ChangesRefused(ValidationError):
    """The request's 400 on ``changes``, one message per refused entry; ``refused`` maps each
    entry's position to its message, for a caller that asks again without them (the advisor)."""

    def __init__(self, refused: dict[int, str]):
        super().__init__({"changes": list(refused.values())})
        self.refused = refused


# --- reading what is there now ------------------------------------------------------------------


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def quantity_text(value: Decimal | None) -> str | None:
    """A quantity in the stored form: a decimal string without trailing zeros (None stays None)."""
    return None if value is None else f"{value.normalize():f}"


def _hhmm(t: time) -> str:
    return t.strftime("%H:%M")


def window_values(w: QuotaWindow | None) -> dict | None:
    if w is None:
        return None
    return {"start_time": _hhmm(w.start_time), "end_time": _hhmm(w.end_time), "weekdays": w.weekdays,
            "quota": quantity_text(w.quota), "lend_limit": quantity_text(w.lend_limit), "active": w.active}


def _settings(lock: bool = False) -> SchedulerSettings:
    qs = SchedulerSettings.objects.select_for_update() if lock else SchedulerSettings.objects
    row = qs.filter(pk=1).first()
    if row is None:  # the migration creates it; a missing row is today's defaults
        SchedulerSettings.objects.get_or_create(pk=1)
        row = qs.get(pk=1)
    return row


def _owner(entry: dict) -> tuple[str, Project | Department]:
    has_p, has_d = entry.get("project") is not None, entry.get("department") is not None
    if has_p == has_d:
        raise _Bad(_("give exactly one of project or department"))
    if has_p:
        project = Project.objects.select_related("department").filter(code=entry["project"]).first()
        if project is None:
            raise _Bad(_("unknown project %(code)r") % {"code": entry["project"]})
        return "project", project
    department = Department.objects.filter(code=entry["department"]).first()
    if department is None:
        raise _Bad(_("unknown department %(code)r") % {"code": entry["department"]})
    return "department", department


def _node(entry: dict, lock: bool = False) -> QuotaNode:
    kind, owner = _owner(entry)
    flavor = Flavor.objects.filter(name=entry.get("flavor")).first() if isinstance(entry.get("flavor"), str) \
        else None
    if flavor is None:
        raise _Bad(_("unknown flavor %(name)r") % {"name": entry.get("flavor")})
    if lock:  # the order of the quota services: the flavor first (it serialises edits of its tree)
        Flavor.objects.select_for_update().get(pk=flavor.pk)
    qs = QuotaNode.objects.select_related("flavor", "project__department", "department")
    node = (qs.select_for_update(of=("self",)) if lock else qs).filter(flavor=flavor, **{kind: owner}).first()
    if node is None:
        raise _Bad(_("%(owner)s holds no quota of %(flavor)s") % {"owner": owner, "flavor": flavor.name})
    return node


def _project(entry: dict, lock: bool = False) -> Project:
    qs = Project.objects.select_related("department")
    project = (qs.select_for_update(of=("self",)) if lock else qs).filter(code=entry.get("project")).first()
    if project is None:
        raise _Bad(_("unknown project %(code)r") % {"code": entry.get("project")})
    return project


def _class(entry: dict, lock: bool = False) -> PriorityClass:
    qs = PriorityClass.objects.select_for_update() if lock else PriorityClass.objects
    pc = qs.filter(name=entry.get("priority_class")).first()
    if pc is None:
        raise _Bad(_("unknown priority class %(name)r") % {"name": entry.get("priority_class")})
    return pc


def _window(node: QuotaNode, name: str, lock: bool = False) -> QuotaWindow | None:
    qs = QuotaWindow.objects.select_for_update() if lock else QuotaWindow.objects
    return qs.filter(quota_node=node, name=name).order_by("id").first()


def current(entry: dict, *, lock: bool = False) -> dict | None:
    """What the entry's target holds now, in the entry's ``before`` form (the keys it changes;
    a window: all its values, or None when there is none of that name)."""
    kind = entry["type"]
    keys = [k for k in TYPES[kind][1] if k in entry]
    if kind == "project_queueing":
        p = _project(entry, lock)
        return {k: getattr(p, k) for k in keys}
    if kind == "quota_limits":
        node = _node(entry, lock)
        return {k: quantity_text(getattr(node, k)) for k in keys}
    if kind == "quota_window":
        return window_values(_window(_node(entry, lock), entry["name"], lock))
    if kind == "priority_grace":
        return {"grace_seconds": _class(entry, lock).grace_seconds}
    row = _settings(lock)
    if kind in ("scheduler_fair_share", "scheduler_consolidation"):
        return {k: getattr(row, k) for k in keys}
    return {"backfill": row.backfill} if kind == "scheduler_backfill" else {"packing": row.packing}


# --- validation -----------------------------------------------------------------------------------


def _quantity(name: str, value) -> Decimal | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _Bad(_("%(field)s: a number or null") % {"field": name})
    try:
        d = Decimal(str(value))
    except InvalidOperation:
        raise _Bad(_("%(field)s: a number or null") % {"field": name}) from None
    if not d.is_finite() or d < 0 or d > 1_000_000 or d != d.quantize(Decimal("0.001")):
        raise _Bad(_("%(field)s: between 0 and 1,000,000, at most 3 decimals") % {"field": name})
    return d


def _whole(name: str, value, low: int, high: int, *, null: bool = False) -> int | None:
    if value is None and null:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _Bad(_("%(field)s: a whole number from %(low)s to %(high)s") % {
            "field": name, "low": low, "high": high} + (_(" or null") if null else ""))
    return value


def _clean_entry(raw) -> dict:
    """One entry checked and normalised (quantities as decimal strings), without ``before``. The
    quota rules (units, lend limit ≤ quota, what a window may override) are the quota services'
    own: the dry run of :func:`rule_change_request_create` calls them, naming the entry."""
    if not isinstance(raw, dict):
        raise _Bad(_("each change is a JSON object"))
    kind = raw.get("type")
    if not isinstance(kind, str) or kind not in TYPES:
        raise _Bad(_("unknown type %(type)r; choose one of: %(types)s") % {
            "type": kind, "types": ", ".join(TYPES)})
    targets, values = TYPES[kind]
    unknown = sorted(set(raw) - {"type", "before", *targets, *values})
    if unknown:
        raise _Bad(_("unknown key(s): %(keys)s") % {"keys": ", ".join(unknown)})
    if not any(k in raw for k in values):
        raise _Bad(_("give at least one of: %(keys)s") % {"keys": ", ".join(values)})
    missing = [k for k in _REQUIRED_VALUES.get(kind, ()) if k not in raw]
    if missing:
        raise _Bad(_("missing key(s): %(keys)s") % {"keys": ", ".join(missing)})
    out = {"type": kind}
    for k in targets:
        if raw.get(k) is not None:
            if not isinstance(raw[k], str) or not raw[k]:
                raise _Bad(_("%(field)s: a name") % {"field": k})
            out[k] = raw[k]
    if kind == "project_queueing":
        _project(out)
        if "queueing" in raw:
            if raw["queueing"] not in Queueing.values:
                raise _Bad(_("queueing: one of %(c)s") % {"c": ", ".join(Queueing.values)})
            out["queueing"] = raw["queueing"]
        if "aging_bound_seconds" in raw:
            out["aging_bound_seconds"] = _whole("aging_bound_seconds", raw["aging_bound_seconds"],
                                                AGING_BOUND_MIN_SECONDS, AGING_BOUND_MAX_SECONDS, null=True)
    elif kind in ("quota_limits", "quota_window"):
        _node(out)
        quantities = {k: _quantity(k, raw[k]) for k in ("borrow_limit", "lend_limit", "quota") if k in raw}
        out.update({k: quantity_text(v) for k, v in quantities.items()})
        if kind == "quota_window":
            if not isinstance(out.get("name"), str) or len(out["name"]) > 80:
                raise _Bad(_("name: the window's name, at most 80 characters"))
            out["start_hour"] = _whole("start_hour", raw["start_hour"], 0, 23)
            out["end_hour"] = _whole("end_hour", raw["end_hour"], 0, 23)
            if out["start_hour"] == out["end_hour"]:
                raise _Bad(_("start_hour and end_hour must differ"))
            out.setdefault("quota", None)
            out.setdefault("lend_limit", None)
    elif kind == "priority_grace":
        _class(out)
        out["grace_seconds"] = _whole("grace_seconds", raw["grace_seconds"], 0, MAX_GRACE_SECONDS)
    elif kind == "scheduler_backfill":
        if not isinstance(raw["backfill"], bool):
            raise _Bad(_("backfill: true or false"))
        out["backfill"] = raw["backfill"]
    elif kind == "scheduler_fair_share":
        if "fair_share_half_life_seconds" in raw:
            out["fair_share_half_life_seconds"] = _whole(
                "fair_share_half_life_seconds", raw["fair_share_half_life_seconds"],
                FAIR_HALF_LIFE_MIN_SECONDS, FAIR_HALF_LIFE_MAX_SECONDS)
        if "fair_share_entry_seconds" in raw:
            out["fair_share_entry_seconds"] = _whole(
                "fair_share_entry_seconds", raw["fair_share_entry_seconds"], 0, FAIR_ENTRY_MAX_SECONDS)
    elif kind == "scheduler_consolidation":
        out["consolidation_moves_per_hour"] = _whole(
            "consolidation_moves_per_hour", raw["consolidation_moves_per_hour"], 0, MAX_MOVES_PER_HOUR)
    else:
        if raw["packing"] not in Packing.values:
            raise _Bad(_("packing: one of %(c)s") % {"c": ", ".join(Packing.values)})
        out["packing"] = raw["packing"]
    return out


def _given_before(clean: dict, before):
    """A requester's ``before`` in the stored form: quantities of a quota node as decimal strings
    (``2``, ``2.0`` and ``"2"`` are the same value); anything malformed is left as given (and then
    differs from what is there)."""
    if clean["type"] != "quota_limits" or not isinstance(before, dict):
        return before
    out = dict(before)
    for key in ("borrow_limit", "lend_limit"):
        if key in out:
            with contextlib.suppress(_Bad):
                out[key] = quantity_text(_quantity(key, out[key]))
    return out


def _target_key(entry: dict) -> tuple:
    targets = TYPES[entry["type"]][0]
    return (entry["type"], *(entry.get(k) for k in targets))


def new_values(entry: dict) -> dict:
    """What the entry sets, in the ``before`` form (a window: all its values)."""
    if entry["type"] == "quota_window":
        return {"start_time": f"{entry['start_hour']:02d}:00", "end_time": f"{entry['end_hour']:02d}:00",
                "weekdays": WEEKDAYS_ALL, "quota": entry["quota"], "lend_limit": entry["lend_limit"],
                "active": True}
    return {k: entry[k] for k in TYPES[entry["type"]][1] if k in entry}


def check_changes(raw) -> list[dict]:
    """The request's changes checked, normalised and each with its ``before`` (given, and then
    equal to what is there now, or read now). Any bad entry: ValidationError on ``changes``
    naming every bad entry by its position; nothing is stored."""
    if not isinstance(raw, list) or not raw:
        raise ValidationError({"changes": [_("Give a non-empty list of changes.")]})
    if len(raw) > MAX_CHANGES:
        raise ValidationError({"changes": [_("At most %(n)s changes per request.") % {"n": MAX_CHANGES}]})
    errors, out, seen = {}, [], {}
    for i, entry in enumerate(raw):
        label = f"changes[{i}]" + (f" ({entry['type']})" if isinstance(entry, dict)
                                    and isinstance(entry.get("type"), str) else "")
        try:
            clean = _clean_entry(entry)
            key = _target_key(clean)
            if key in seen:
                raise _Bad(_("the same target as changes[%(j)s]") % {"j": seen[key]})
            seen[key] = i
            now = current(clean)
            if "before" in entry and _given_before(clean, entry["before"]) != now:
                raise _Bad(_("before is %(given)s but the value now is %(now)s") % {
                    "given": _json(entry["before"]), "now": _json(now)})
            if now == new_values(clean):
                raise _Bad(_("nothing to change: the value is already %(now)s") % {"now": _json(now)})
            clean["before"] = now
            out.append(clean)
        except _Bad as exc:
            errors[i] = f"{label}: {exc}"
    if errors:
        raise ChangesRefused(errors)
    return out


# --- readable lines (stored as messages: each reader gets them in their language) -----------------

_QUEUEING = {"best_effort": gettext_noop("best effort"), "strict_fifo": gettext_noop("strict FIFO")}
_PACKING = {"fragmentation_aware": gettext_noop("fragmentation-aware"), "best_fit": gettext_noop("best fit")}


def _m(msgid: str, **params) -> dict:
    return message(msgid, **params)


def _qty(value: str | None, none_text: str) -> dict | str:
    return _m(none_text) if value is None else value


def _aging(value: int | None) -> dict | str:
    return _m(gettext_noop("the centre's default")) if value is None else f"{value} s"


def _window_text(values: dict | None) -> dict:
    if values is None:
        return _m(gettext_noop("none"))
    return _m(gettext_noop("%(start)s–%(end)s daily, quota %(quota)s, lend limit %(lend)s"),
              start=values["start_time"], end=values["end_time"],
              quota=_qty(values["quota"], gettext_noop("unchanged")),
              lend=_qty(values["lend_limit"], gettext_noop("unchanged")))


def _departments(entries: list[dict]) -> dict[str, str]:
    """Project code → its department's code, for every project the entries name (one query)."""
    codes = {e["project"] for e in entries if e.get("project")}
    if not codes:
        return {}
    return dict(Project.objects.filter(code__in=codes).values_list("code", "department__code"))


def _owner_label(entry: dict, depts: dict[str, str]) -> str:
    if entry.get("project"):
        dept = depts.get(entry["project"])
        return f"{dept}/{entry['project']}" if dept else entry["project"]
    return entry.get("department") or ""


def lines(entry: dict, depts: dict[str, str] | None = None) -> list[dict]:
    """One message per value the entry changes, e.g. "Project d1/p04 queueing: best effort →
    strict FIFO". ``depts``: :func:`_departments` of the request's entries (read here if not given)."""
    kind, before = entry["type"], entry["before"]
    depts = _departments([entry]) if depts is None else depts
    if kind == "project_queueing":
        who, out = _owner_label(entry, depts), []
        if "queueing" in entry:
            out.append(_m(gettext_noop("Project %(project)s queueing: %(old)s → %(new)s"), project=who,
                          old=_m(_QUEUEING[before["queueing"]]), new=_m(_QUEUEING[entry["queueing"]])))
        if "aging_bound_seconds" in entry:
            out.append(_m(gettext_noop("Project %(project)s aging bound: %(old)s → %(new)s"), project=who,
                          old=_aging(before["aging_bound_seconds"]),
                          new=_aging(entry["aging_bound_seconds"])))
        return out
    if kind == "quota_limits":
        who, out = _owner_label(entry, depts), []
        if "borrow_limit" in entry:
            none = gettext_noop("no cap")
            out.append(_m(gettext_noop("Quota of %(owner)s for %(flavor)s, borrow limit: %(old)s → %(new)s"),
                          owner=who, flavor=entry["flavor"], old=_qty(before["borrow_limit"], none),
                          new=_qty(entry["borrow_limit"], none)))
        if "lend_limit" in entry:
            none = gettext_noop("lends all")
            out.append(_m(gettext_noop("Quota of %(owner)s for %(flavor)s, lend limit: %(old)s → %(new)s"),
                          owner=who, flavor=entry["flavor"], old=_qty(before["lend_limit"], none),
                          new=_qty(entry["lend_limit"], none)))
        return out
    if kind == "quota_window":
        return [_m(gettext_noop("Quota window “%(name)s” of %(owner)s for %(flavor)s: %(old)s → %(new)s"),
                   name=entry["name"], owner=_owner_label(entry, depts), flavor=entry["flavor"],
                   old=_window_text(before), new=_window_text(new_values(entry)))]
    if kind == "priority_grace":
        return [_m(gettext_noop("Priority class %(name)s grace period: %(old)s s → %(new)s s"),
                   name=entry["priority_class"], old=before["grace_seconds"], new=entry["grace_seconds"])]
    if kind == "scheduler_backfill":
        on, off = gettext_noop("on"), gettext_noop("off")
        return [_m(gettext_noop("Scheduler EASY backfill: %(old)s → %(new)s"),
                   old=_m(on if before["backfill"] else off), new=_m(on if entry["backfill"] else off))]
    if kind == "scheduler_fair_share":
        out = []
        if "fair_share_half_life_seconds" in entry:
            out.append(_m(gettext_noop("Fair-share half-life: %(old)s s → %(new)s s"),
                          old=before["fair_share_half_life_seconds"],
                          new=entry["fair_share_half_life_seconds"]))
        if "fair_share_entry_seconds" in entry:
            out.append(_m(gettext_noop("Fair-share entry time: %(old)s s → %(new)s s"),
                          old=before["fair_share_entry_seconds"], new=entry["fair_share_entry_seconds"]))
        return out
    if kind == "scheduler_consolidation":
        return [_m(gettext_noop("Consolidation moves per hour: %(old)s → %(new)s"),
                   old=before["consolidation_moves_per_hour"], new=entry["consolidation_moves_per_hour"])]
    return [_m(gettext_noop("Scheduler packing: %(old)s → %(new)s"),
               old=_m(_PACKING[before["packing"]]), new=_m(_PACKING[entry["packing"]]))]


# --- create ---------------------------------------------------------------------------------------


def rule_change_request_create(*, actor: User, changes, reason: str = "") -> ApprovalRequest:
    """Ask for the rule changes (platform admins only; another platform admin decides)."""
    perm.require(scope_for(actor).platform_admin)
    with transaction.atomic():
        clean = check_changes(changes)
        depts = _departments(clean)
        _dry_run(clean, actor, depts)
        all_lines = [line for entry in clean for line in lines(entry, depts)]
        if len(all_lines) == 1:
            summary = _m(gettext_noop("Rule change: %(change)s"), change=all_lines[0])
        else:
            summary = _m(gettext_noop("Rule changes (%(n)s): %(first)s; …"), n=len(all_lines),
                         first=all_lines[0])
        return approval_request_create(
            requester=actor,
            kind=ApprovalKind.POLICY,
            payload={"changes": clean, "lines": all_lines},
            summary=summary,
            reason=reason,
            steps=[StepSpec(Role.PLATFORM_ADMIN)],
        )


class _DryRun(Exception):
    pass


def _dry_run(clean: list[dict], actor: User, depts: dict[str, str]) -> None:
    """Apply the changes in a savepoint that is rolled back: what the quota services would refuse
    at approval (a lend limit that breaks a department's level rules, a window over a loan…) is a
    400 now. Nothing of it is kept (the savepoint's rows and its on-commit hooks are dropped)."""
    i = 0
    try:
        with transaction.atomic():
            while i < len(clean):
                _apply_one(clean[i], actor, depts)
                i += 1
            raise _DryRun
    except _DryRun:
        return
    except (ValidationError, PermissionDenied) as exc:
        text = " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        raise ChangesRefused({i: f"changes[{i}] ({clean[i]['type']}): {text}"}) from None


# --- apply (in the decision's transaction) --------------------------------------------------------


def _refuse(entry_no: int, entry: dict, text: str) -> ValidationError:
    return ValidationError(_("Change %(i)s (%(type)s): %(why)s") % {"i": entry_no, "type": entry["type"],
                                                                     "why": text})


def rule_change_request_apply(request: ApprovalRequest, actor: User) -> None:
    """Apply every change or none: each target is locked and must still hold ``before``."""
    at = timezone.now()
    depts = _departments(request.payload["changes"])
    for i, entry in enumerate(request.payload["changes"]):
        try:
            now = current(entry, lock=True)
        except _Bad as exc:
            raise _refuse(i, entry, str(exc)) from None
        if now != entry["before"]:
            raise _refuse(i, entry, _(
                "it was changed since the request (expected %(before)s, now %(now)s); nothing was "
                "applied — reject this request and ask again if the change is still wanted") % {
                "before": _json(entry["before"]), "now": _json(now)})
        try:
            target = _apply_one(entry, actor, depts)
        except (ValidationError, PermissionDenied) as exc:
            text = " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
            raise _refuse(i, entry, text) from None
        RuleChangeEvent.objects.create(at=at, actor=actor, request=request, type=entry["type"], target=target,
                                       old=entry["before"], new=new_values(entry))
    from jobs.transitions import request_cycle

    transaction.on_commit(request_cycle)


def _apply_one(entry: dict, actor: User, depts: dict[str, str]) -> str:
    kind = entry["type"]
    values = {k: entry[k] for k in TYPES[kind][1] if k in entry}
    if kind == "project_queueing":
        project = _project(entry)
        project_update(actor=actor, project=project, **values)
        return _owner_label(entry, depts)
    if kind == "quota_limits":
        node = _node(entry)
        quota_node_update(actor=actor, node=node,
                          **{k: None if v is None else Decimal(v) for k, v in values.items()})
        return f"{_owner_label(entry, depts)} / {entry['flavor']}"
    if kind == "quota_window":
        node = _node(entry)
        fields = {"start_time": time(entry["start_hour"]), "end_time": time(entry["end_hour"]),
                  "weekdays": WEEKDAYS_ALL, "active": True,
                  "quota": None if entry["quota"] is None else Decimal(entry["quota"]),
                  "lend_limit": None if entry["lend_limit"] is None else Decimal(entry["lend_limit"])}
        window = _window(node, entry["name"])
        if window is None:
            window_create(actor=actor, quota_node=node, name=entry["name"], **fields)
        else:
            window_update(actor=actor, window=window, **fields)
        return f"{_owner_label(entry, depts)} / {entry['flavor']} / {entry['name']}"
    # The actor is a platform admin (checked by rule_change_request_create, and by the approval
    # step when applied); the row holds ``before`` (just read by the dry run; locked and compared
    # by rule_change_request_apply).
    if kind == "priority_grace":
        PriorityClass.objects.filter(name=entry["priority_class"]).update(grace_seconds=entry["grace_seconds"])
        return entry["priority_class"]
    SchedulerSettings.objects.filter(pk=1).update(**values, updated_at=timezone.now())
    return ""


def rule_change_request_close(request, outcome, actor, comment) -> None:
    """Nothing was changed before approval, so there is nothing to undo."""

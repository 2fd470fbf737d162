"""Explain answers for people (DESIGN §4 Explain): one sentence in the reader's language, with
quantities in the flavor's units (72 + 8 > 72 cards, 0.5 of a shared card, slices of a MIG
flavor) and quota levels by name — never the engine's milli-units or tree ids (``d3``, ``p1``).

The engine's answer (``jobs.scheduling.cycle.explain_to_dict``: reason, numbers in units, blocking
node id, holders, reservation) stays as it is for programs; this adds ``text`` and
``blocking_node_name`` to it. A blocking level the reader may not see is named only as "a
department above your project"."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.utils import timezone
from django.utils.timezone import localtime
from django.utils.translation import gettext_lazy, ngettext

from jobs.models import DependencyCondition
from jobs.selectors import tree_node_names
from portal.models import User
from quotas.models import Node

HIDDEN_LEVEL = gettext_lazy("a department above your project")

# reason → the sentence; "%(name)s" placeholders are filled from the numbers (in units), the
# blocking level's name ("node") and the flavor. Two reasons read differently with other numbers.
_TEXTS = {
    "budget": gettext_lazy("%(node)s is over its budget: the job waits for an approval."),
    "user_cap": gettext_lazy(
        "The per-user cap of %(cap)s GPUs in %(node)s is reached: its submitter's running jobs hold "
        "%(usage)s + %(request)s requested."
    ),
    "user_cap_jobs": gettext_lazy(
        "The per-user cap of %(cap_jobs)s running jobs in %(node)s is reached: its submitter runs "
        "%(running_jobs)s."
    ),
    "quota": gettext_lazy(
        "Not in quota at %(node)s: in-quota usage %(in_quota_usage)s + %(request)s requested > "
        "quota %(quota)s, and it may not borrow."
    ),
    "borrow_limit": gettext_lazy(
        "The borrow limit of %(node)s is reached: usage %(usage)s + %(request)s requested > "
        "quota %(quota)s + borrow limit %(borrow_limit)s."
    ),
    "lend_limit": gettext_lazy(
        "On loan it needs usage %(usage)s + %(request)s requested + %(held_back)s held back by "
        "lend limits ≤ capacity %(capacity)s: the idle quota of others is not lent to it."
    ),
    "capacity": gettext_lazy(
        "The pool of %(flavor)s is full: %(usage)s in use + %(request)s requested > capacity "
        "%(capacity)s."
    ),
    "placement": gettext_lazy(
        "No set of nodes fits %(workers)s × %(per_worker)s of %(flavor)s: the largest free node "
        "has %(largest_free_node)s (resource fragmentation)."
    ),
    "reservation": gettext_lazy("Starting it now would delay job #%(job)s, which holds a reservation."),
    "reclaimed": gettext_lazy(
        "It was admitted, then reclaimed by an in-quota job; it is tried again at the next cycle."
    ),
    "invalid": gettext_lazy(
        "No node of %(flavor)s is big enough: it asks for %(per_worker)s per worker, the largest "
        "node has %(largest_node)s."
    ),
    "resources": gettext_lazy(
        "It waits for %(resource)s on nodes of %(flavor)s: %(nodes_with_gpus)s node(s) have the GPUs "
        "free but not the %(resource)s for %(workers)s × %(per_worker)s (their GPUs are stranded)."
    ),
    "invalid_resource": gettext_lazy(
        "No node of %(flavor)s has the %(resource)s one worker asks for: ask less, or another flavor."
    ),
    "cuda": gettext_lazy(
        "It requires CUDA %(resource)s or newer: %(nodes_below)s node(s) of %(flavor)s run an older "
        "version and are never chosen, and the others have no room for %(workers)s × %(per_worker)s now."
    ),
    "admissible": gettext_lazy("It is admitted at the next scheduling cycle."),
    "min_runtime": gettext_lazy(
        "The jobs it may preempt have not yet run the minimum runtime of their priority class "
        "(%(min_runtime)s): the last of them it needs may be preempted in %(exempt_for)s."
    ),
    "fifo": gettext_lazy(
        "It waits behind job #%(behind)s of its project, which cannot start yet: the project queues "
        "in strict FIFO order."
    ),
    "fifo_aging": gettext_lazy(
        "It waits behind job #%(behind)s of its project, which has waited longer than the aging bound "
        "and goes first."
    ),
    "external": gettext_lazy(
        "An external job: it waits in its cluster's own queue, not the portal's. The cluster's "
        "reason: %(message)s."
    ),
    "queue_hold": gettext_lazy("Queue on hold: %(node)s admits no new jobs until its queue is opened again."),
    "maintenance": gettext_lazy(
        "Not placed on %(window_nodes)s: its maximum runtime crosses the maintenance at %(window_start)s."
    ),
    "reserved": gettext_lazy(
        "Not placed on %(window_nodes)s: its maximum runtime crosses another project's reservation from "
        "%(window_start)s."
    ),
    "power": gettext_lazy(
        "GPUs of %(flavor)s are free, but only in racks at or near their power cap: no room under the "
        "caps for %(workers)s × %(per_worker)s (%(racks_at_cap)s rack(s) at their cap take no new job)."
    ),
    "reserved_count": gettext_lazy(
        "%(reserved)s GPUs of %(flavor)s are reserved for another project from %(window_start)s while it "
        "would run; the rest has no room for %(workers)s × %(per_worker)s."
    ),
    # DESIGN §17: held back before the engine (jobs.workflows.held_back).
    "dependency": gettext_lazy("It waits for job #%(job)s (%(condition)s)."),
    "array_cap": gettext_lazy(
        "It waits: array cap of %(cap)s running tasks (%(running_tasks)s of its array's tasks hold GPUs)."
    ),
}
# DESIGN §17: a requeued job waiting out its backoff (``jobs.scheduling.cycle.explain_backoff``).
BACKOFF_RETRY = gettext_lazy("Retry %(retry)s of %(max_retries)s after backoff until %(until)s.")
BACKOFF_START = gettext_lazy(
    "It did not start within the start timeout (%(why)s): requeued, it waits out its backoff until %(until)s."
)
_OTHERWISE = {
    "external": gettext_lazy(
        "An external job: it waits in its cluster's own queue, not the portal's; the cluster gave no reason."
    ),
    "capacity": gettext_lazy("Capacity was freed during this cycle: the job is considered at the next one."),
    "reservation": gettext_lazy("It waits behind a job that holds a reservation (backfill is off)."),
}


def quantity(value) -> str:
    """A figure in the flavor's units: whole cards without decimals, up to three otherwise
    (72, 0.5, 0.143)."""
    return format(Decimal(str(value)).quantize(Decimal("0.001")).normalize(), "f")


AGED = gettext_lazy(
    "It has waited %(waited)s h, longer than the aging bound of %(bound)s h: it now blocks the later "
    "jobs of its project and holds a reservation."
)


def explain_text(explain: dict, node_name: str | None) -> str:
    """The sentence(s) for one explain answer; "" when the job does not wait."""
    text = _reason_text(explain, node_name)
    if text and explain.get("waited_seconds") and explain.get("aging_bound_seconds"):
        text += " " + str(AGED) % {"waited": _hours(explain["waited_seconds"]),
                                   "bound": _hours(explain["aging_bound_seconds"])}
    return text


def _duration(seconds) -> str:
    """Seconds as people read them (``duration`` of the templates: "9 min", "1 h 30 min")."""
    from jobs.templatetags.jobs_ui import duration

    return str(duration(int(Decimal(seconds or 0))))


def _local(iso: str) -> str:
    """An instant in the reader's zone, to the minute."""
    return timezone.localtime(datetime.fromisoformat(iso)).strftime("%Y-%m-%d %H:%M")


def _hours(seconds) -> str:
    return format(Decimal(seconds / 3600).quantize(Decimal("0.1")).normalize(), "f")


# The engine's names of a node's dimensions (jobs/scheduler/engine/explain.py) in the reader's words.
RESOURCE_NAMES = {
    "CPU": gettext_lazy("CPU"),
    "memory": gettext_lazy("memory"),
    "local disk": gettext_lazy("local disk"),
}


def _backoff_text(explain: dict) -> str:
    """"Retry 2 of 3 after backoff until 14:05": the instant in the reader's zone, to the minute."""
    until = localtime(datetime.fromisoformat(explain["until"])).strftime("%H:%M")
    if "start_timeouts" in explain:
        return str(BACKOFF_START) % {"why": explain.get("backend_reason") or "?", "until": until}
    return str(BACKOFF_RETRY) % {"retry": explain.get("retry"), "max_retries": explain.get("max_retries"),
                                 "until": until}


def _reason_text(explain: dict, node_name: str | None) -> str:
    reason = explain.get("reason") or ""
    if reason == "consolidated":  # admitted after jobs were moved out of its way (issue 36)
        moved = int((explain.get("numbers") or {}).get("moved") or 0)
        return ngettext("Placed after moving %(moved)s job out of its way (consolidation).",
                        "Placed after moving %(moved)s jobs out of its way (consolidation).", moved) % {
            "moved": moved}
    if reason == "backoff" and explain.get("until"):
        return _backoff_text(explain)
    if reason == "fifo" and explain.get("behind_why") == "aging":
        reason = "fifo_aging"
    if reason == "invalid" and explain.get("resource"):
        reason = "invalid_resource"
    if reason == "user_cap" and "cap_jobs" in (explain.get("numbers") or {}):
        reason = "user_cap_jobs"
    if reason == "reserved" and "reserved" in (explain.get("numbers") or {}):
        reason = "reserved_count"
    if reason not in _TEXTS:
        return ""
    values = {key: quantity(v) for key, v in (explain.get("numbers") or {}).items()}
    values["flavor"] = explain.get("flavor") or ""
    values["node"] = node_name or str(HIDDEN_LEVEL)
    if explain.get("resource"):
        values["resource"] = str(RESOURCE_NAMES.get(explain["resource"], explain["resource"]))
    if reason == "external" and explain.get("message"):
        values["message"] = explain["message"]  # the backend's own word (Slurm's Reason), as it is
    if explain.get("behind") is not None:
        values["behind"] = explain["behind"]
    if reason == "min_runtime":  # seconds, for people
        values["min_runtime"] = _duration(values.get("min_runtime_s"))
        values["exempt_for"] = _duration(values.get("exempt_for_s"))
    window = explain.get("window") or {}
    if window:
        values["window_nodes"] = ", ".join(window.get("node_names") or ()) or "?"
        values["window_start"] = _local(window["starts_at"])
    dependency = explain.get("dependency") or {}
    if dependency:
        values["job"] = dependency["job"]
        values["condition"] = str(DependencyCondition(dependency["condition"]).label)
    reservation = explain.get("reservation") or {}
    if reservation.get("job"):
        values["job"] = reservation["job"]
    try:
        return str(_TEXTS[reason]) % values
    except KeyError:  # an answer without the figures this sentence needs (an older cache entry)
        return str(_OTHERWISE.get(reason, ""))


def for_reader(explains: list[dict], user: User) -> list[dict]:
    """The answers with ``text`` and ``blocking_node_name`` added, for ``user`` (one query for
    the names of every blocking level among them)."""
    # A job with acceptable flavors carries one answer per flavor (``alternatives``): readable too.
    every = [x for e in explains if e for x in (e, *(e.get("alternatives") or ()))]
    ids = sorted({e["blocking_node"] for e in every if e.get("blocking_node")})
    names = tree_node_names(user, ids) if ids else {}

    node_ids = sorted({n for e in every for n in ((e.get("window") or {}).get("nodes") or ())})
    node_names = dict(Node.objects.filter(pk__in=node_ids).values_list("pk", "name")) if node_ids else {}

    def one(e: dict) -> dict:
        name = names.get(e.get("blocking_node") or "")
        if e.get("window"):
            e = {**e, "window": {**e["window"], "node_names": [node_names.get(n, str(n))
                                                                for n in e["window"]["nodes"]]}}
        return {**e, "blocking_node_name": name, "text": explain_text(e, name)}

    out = []
    for e in explains:
        if not e:
            out.append(e)
        elif e.get("alternatives"):
            out.append({**one(e), "alternatives": [one(x) for x in e["alternatives"]]})
        else:
            out.append(one(e))
    return out


def readable(explain: dict, user: User) -> dict:
    return for_reader([explain], user)[0]


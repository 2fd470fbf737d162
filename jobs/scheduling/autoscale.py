"""Autoscaling inference jobs from load (docs/scheduling.md "Autoscaling"): the owner's settings
(``job_autoscale_set``) and the beat task's pass (``autoscale_tick``).

Every minute, for each running inference job with a query: ask Prometheus for the per-replica
value (no transaction open), decide (:mod:`jobs.scheduler.autoscale_decision`, pure), then, with the job's
row locked, apply through the owner's scale paths (:mod:`jobs.resize`): a scale-down releases
the newest replicas at once (a ``scaled`` event), a scale-up sets the target that the grow pass
reaches as quota and capacity allow (a ``scale_target`` event, then one ``scaled`` event per
growth) — quota is enforced where it always is. A scale-up the quota rules would not let
through is recorded as the decision's reason and not made. The job's ``autoscale_status`` keeps
the last decision: value, target, replicas, desired, reason, when.

Idempotent: a second pass with the same ``now`` sees its own change inside the cool-down.
"""

from __future__ import annotations

import logging
import math
import re
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs import reasons
from jobs.models import (
    AUTOSCALE_COOLDOWN_DEFAULT,
    AUTOSCALE_COOLDOWN_MAX,
    AUTOSCALE_COOLDOWN_MIN,
    AUTOSCALE_QUERY_MAX_LENGTH,
    Job,
    JobKind,
    backend_name,
)
from jobs.scheduler import autoscale_decision as rule
from jobs.scheduler import promql
from jobs.states import TERMINAL, JobState
from jobs.transitions import request_cycle
from portal import permissions as perm
from portal.models import User
from portal.selectors import scope_for
from portal.texts import Message, message, pgettext_noop, render, when

log = logging.getLogger(__name__)

CONTEXT = "autoscale"
# What makes a selector read one job's series (issue 32 item 18): a matcher on a label that
# carries the job's backend name (gp-<id>: the simulator's and dcgm-exporter's HPC mapping, the
# portal's own relabelling, a federated copy), its pods' names (<name>-<suffix>; a dev job's pod is
# named <name>), or its id. A regex matcher counts only as the name itself or the name followed by
# "-" — "gp-4-.*" cannot match gp-42's pods. Any other label, even one holding "{job_id}" (a bare
# number that a status code or a CPU index could equal), scopes nothing.
JOB_NAME_LABELS = ("job", "hpc_job", "gp_job", "exported_job")
POD_LABELS = ("pod", "pod_name", "exported_pod")
POD_SUFFIXES = ("-.*", "-.+")
JOB_ID_LABELS = ("job_id", "gpupool_job", "label_gpupool_io_job")
TARGET_MAX = Decimal("1e9")
# Printable ASCII on one line: PromQL needs nothing else, and a control character or a newline
# in a stored query is a paste accident.
_QUERY_CHARS = re.compile(r"[\x20-\x7e]+")

# The catalogue needs the context as a literal (xgettext); it is CONTEXT.
REASONS = {
    rule.UP: pgettext_noop(
        "autoscale",
        "%(value)s per replica is above the target %(target)s: %(current)s → %(desired)s replicas",
    ),
    rule.DOWN: pgettext_noop(
        "autoscale",
        "%(value)s per replica is below the target %(target)s: %(current)s → %(desired)s replicas",
    ),
    rule.STEADY: pgettext_noop("autoscale", "%(value)s per replica is within 10%% of the target %(target)s"),
    rule.AT_MAX: pgettext_noop(
        "autoscale",
        "%(value)s per replica is above the target %(target)s, and the job is at its maximum of "
        "%(maximum)s replicas",
    ),
    rule.AT_MIN: pgettext_noop(
        "autoscale",
        "%(value)s per replica is below the target %(target)s, and the job is at its minimum of "
        "%(minimum)s replicas",
    ),
    rule.COOLDOWN: pgettext_noop(
        "autoscale",
        "%(value)s per replica against the target %(target)s wants %(wanted)s replicas: "
        "cool-down until %(until)s",
    ),
}
QUOTA_NONE = pgettext_noop(
    "autoscale",
    "%(value)s per replica against the target %(target)s wants %(wanted)s replicas, but the quota allows no "
    "more: no change",
)
QUOTA_SOME = pgettext_noop(
    "autoscale",
    "%(value)s per replica against the target %(target)s wants %(wanted)s replicas, "
    "the quota allows %(desired)s",
)
NO_ANSWER = pgettext_noop("autoscale", "Prometheus did not answer: no change")
NO_DATA = pgettext_noop("autoscale", "the query returned no value: no change")
SERIES = pgettext_noop("autoscale", "the query returned %(n)s series, not one: no change")
NOT_SCOPED = pgettext_noop("autoscale", "the query reads series that are not the job's own: not asked")
NOT_A_NUMBER = pgettext_noop("autoscale", "the query returned %(value)s, not a number ≥ 0: no change")


def _reason(msgid: str, **params) -> Message:
    return message(msgid, context=CONTEXT, **params)


# ---- settings ------------------------------------------------------------------------------


def clean_settings(*, kind: str, min_workers: int | None, workers: int, query: str, target, cooldown_seconds):
    """The checked ``(query, target, cooldown_seconds)``; an empty query turns autoscaling off
    (target None). ValidationError names the field."""
    if kind != JobKind.INFERENCE:
        raise ValidationError({"autoscale_query": [_("Only inference jobs scale from load.")]})
    query = (query or "").strip()
    if cooldown_seconds is None:
        cooldown_seconds = AUTOSCALE_COOLDOWN_DEFAULT
    if not query:
        return "", None, AUTOSCALE_COOLDOWN_DEFAULT
    errors: dict[str, list[str]] = {}
    query_error = _query_error(query, min_workers, workers)
    if query_error:
        errors["autoscale_query"] = [query_error]
    target = _target(target)
    if target is None:
        errors["autoscale_target"] = [_("A number above 0 (at most 3 decimals).")]
    if not isinstance(cooldown_seconds, int) or isinstance(cooldown_seconds, bool) or not (
        AUTOSCALE_COOLDOWN_MIN <= cooldown_seconds <= AUTOSCALE_COOLDOWN_MAX
    ):
        bounds = {"lo": AUTOSCALE_COOLDOWN_MIN, "hi": AUTOSCALE_COOLDOWN_MAX}
        errors["autoscale_cooldown_seconds"] = [_("Between %(lo)d and %(hi)d seconds.") % bounds]
    if errors:
        raise ValidationError(errors)
    return query, target, cooldown_seconds


SUBMITTED_KEYS = ("query", "target", "cooldown_seconds")


def clean_submitted(*, kind: str, min_workers: int | None, workers: int, autoscale) -> dict:
    """The ``Job.autoscale_*`` fields of a submission's ``autoscale`` (``{"query", "target",
    "cooldown_seconds"}``, or None: off), checked by ``clean_settings`` — the rules of the job
    page's form and ``PUT …/autoscale/``. Unlike there, an empty query is refused when a target
    or cool-down is given: a submission that names settings means them, never silently dropped."""
    if autoscale is None:
        return {}
    if not isinstance(autoscale, dict) or set(autoscale) - set(SUBMITTED_KEYS):
        raise ValidationError({"autoscale": [_("An object with query, target and cooldown_seconds.")]})
    query = autoscale.get("query")
    if not isinstance(query, str):
        raise ValidationError({"autoscale_query": [_("A PromQL query is needed to scale from load.")]})
    target, cooldown = autoscale.get("target"), autoscale.get("cooldown_seconds")
    if not query.strip():
        if target not in (None, "") or cooldown is not None:
            raise ValidationError({"autoscale_query": [_("A PromQL query is needed to scale from load.")]})
        return {}  # nothing asked for: off, whatever the kind
    query, target, cooldown = clean_settings(
        kind=kind, min_workers=min_workers, workers=workers, query=query, target=target,
        cooldown_seconds=cooldown,
    )
    return {"autoscale_query": query, "autoscale_target": target, "autoscale_cooldown_seconds": cooldown}


def _query_error(query: str, min_workers: int | None, workers: int) -> str | None:
    if min_workers is None or min_workers >= workers:
        return _("Autoscaling needs room to move: the job's minimum replicas must be below its replicas.")
    if len(query) > AUTOSCALE_QUERY_MAX_LENGTH:
        return _("At most %(n)d characters.") % {"n": AUTOSCALE_QUERY_MAX_LENGTH}
    if not _QUERY_CHARS.fullmatch(query):
        return _("One line of printable ASCII characters (PromQL).")
    return scope_error(query, name="{job}", job_id="{job_id}")


def job_scope(*, name: str, job_id: str) -> promql.Scope:
    """The matchers that scope a selector to the job named ``name`` (``gp-42``, or the
    placeholder ``{job}`` in a query as typed) with id ``job_id``."""
    allowed = {(label, op, name) for label in JOB_NAME_LABELS + POD_LABELS for op in ("=", "=~")}
    allowed |= {(label, "=~", name + suffix) for label in POD_LABELS for suffix in POD_SUFFIXES}
    allowed |= {(label, op, job_id) for label in JOB_ID_LABELS for op in ("=", "=~")}
    return promql.Scope(allowed)


def scope_error(query: str, *, name: str, job_id: str) -> str | None:
    """Why ``query`` may read series other than the job's, or None: it must parse (a PromQL
    parser, not a substring test: a placeholder in a comment or in an ``or`` branch of another
    metric names nothing), select at least one series, and every selector must carry one of
    ``job_scope``'s matchers."""
    try:
        found = list(promql.selectors(promql.parse(query)))
    except promql.PromQLError as exc:
        return _("Not a PromQL query the portal can read: %(error)s.") % {"error": exc}
    if not found:
        return _("Name the job with {job} (its backend name, e.g. gp-42) or {job_id} in the query.")
    scope = job_scope(name=name, job_id=job_id)
    outside = [s for s in found if not scope.covers(s)]
    if outside:
        return _(
            "Every series the query reads must be the job's own: %(selector)s is not. Give each "
            'selector a matcher such as hpc_job="{job}", job="{job}", pod=~"{job}-.*" or '
            'job_id="{job_id}".'
        ) % {"selector": outside[0].text()[:80]}
    return None


def _target(value) -> Decimal | None:
    """A target per replica: a number in (0, 10⁹] with at most 3 decimals, or None."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        target = Decimal(str(value).strip())
    except InvalidOperation:
        return None
    if not target.is_finite() or not Decimal("0.001") <= target <= TARGET_MAX:
        return None
    return target if target == target.quantize(Decimal("0.001")) else None


def job_autoscale_set(
    *, actor: User, job: Job, query: str, target=None, cooldown_seconds: int | None = None
) -> Job:
    """Turn autoscaling on (or change it), or off with an empty query: the owner or an admin of
    the job's project, on a job that has not finished."""
    scope = scope_for(actor)
    perm.require(job.submitted_by_id == actor.pk or perm.can_edit_project(scope, job.project))
    with transaction.atomic():
        job = Job.objects.select_for_update(of=("self",)).get(pk=job.pk)
        query, target, cooldown_seconds = clean_settings(
            kind=job.kind, min_workers=job.min_workers, workers=job.workers, query=query, target=target,
            cooldown_seconds=cooldown_seconds,
        )
        if job.state in TERMINAL:
            raise ValidationError(_("This job has finished."))
        Job.objects.filter(pk=job.pk).update(
            autoscale_query=query, autoscale_target=target, autoscale_cooldown_seconds=cooldown_seconds,
            autoscale_status={} if not query else job.autoscale_status,
        )
    job.refresh_from_db()
    return job


# ---- the pass ------------------------------------------------------------------------------


def filled_query(job: Job) -> str:
    return job.autoscale_query.replace("{job_id}", str(job.pk)).replace("{job}", backend_name(job.pk))


def _prometheus():
    from prometheus_api_client import PrometheusConnect

    return PrometheusConnect(url=settings.GPUPOOL["PROMETHEUS_URL"], disable_ssl=True)


def query_value(job: Job) -> tuple[Decimal | None, Message | None]:
    """The query's one value for ``job``, or None and why not. Never raises for Prometheus. The
    query as sent is checked again, with the job's own name and id: a query stored before the
    check existed (or by any path around it) never reads another tenant's series."""
    query = filled_query(job)
    if scope_error(query, name=backend_name(job.pk), job_id=str(job.pk)):
        log.warning("autoscale query of job %s is not scoped to the job: not sent", job.pk)
        return None, _reason(NOT_SCOPED)
    try:
        result = _prometheus().custom_query(query)
    except Exception:
        log.warning("autoscale query for job %s failed", job.pk, exc_info=True)
        return None, _reason(NO_ANSWER)
    if result and isinstance(result[0], int | float) and len(result) == 2:  # a scalar: [ts, "v"]
        raw = result[1]
    elif not result:
        return None, _reason(NO_DATA)
    elif len(result) > 1:
        return None, _reason(SERIES, n=len(result))
    else:
        raw = (result[0].get("value") or [None, None])[1]
    try:
        number = float(raw)
    except (TypeError, ValueError):
        return None, _reason(NOT_A_NUMBER, value=str(raw)[:40])
    if math.isnan(number):
        return None, _reason(NO_DATA)
    if not math.isfinite(number) or number < 0 or number > float(TARGET_MAX) * 1e6:
        return None, _reason(NOT_A_NUMBER, value=str(raw)[:40])
    return Decimal(repr(number)), None


def autoscale_tick(now: datetime | None = None) -> int:
    """One pass over the running inference jobs with autoscaling; the number that changed."""
    now = now or timezone.now()
    ids = list(
        Job.objects.filter(state=JobState.RUNNING, kind=JobKind.INFERENCE)
        .exclude(autoscale_query="").values_list("pk", flat=True)
    )
    changed = 0
    for job_id in ids:
        job = Job.objects.get(pk=job_id)
        value, why_not = query_value(job)
        changed += autoscale_job(job_id, value=value, why_not=why_not, now=now)
    return changed


def autoscale_job(job_id: int, *, value: Decimal | None, why_not: Message | None, now: datetime) -> bool:
    """Decide and apply for one job (row locked); True when its size or target changed."""
    from jobs.resize import scale_down, set_target, why_not_scalable

    with transaction.atomic():
        job = Job.objects.select_for_update(of=("self",)).select_related("cluster").filter(pk=job_id).first()
        if job is None or not job.autoscale_query or job.autoscale_target is None:
            return False
        if why_not_scalable(job) is not None:
            return False  # stopping, not running yet, or a Slurm cluster: the settings wait
        current = len(job.placement)
        status = {"value": None if value is None else rule.figure(value),
                  "target": rule.figure(job.autoscale_target), "replicas": current,
                  "desired": job.target_workers or job.workers, "decided_at": now.isoformat()}
        if value is None:
            _save(job, status | {"reason": why_not})
            return False
        decision = rule.decide(
            current=current, value=value, target=job.autoscale_target, minimum=job.min_workers,
            maximum=job.workers, last_scaled_at=job.autoscale_scaled_at, now=now,
            cooldown_seconds=job.autoscale_cooldown_seconds,
        )
        desired, why = _within_quota(job, decision)
        status |= {"desired": desired, "reason": why}
        asked = job.target_workers or job.workers
        # No change: none decided, the quota let none through, or the target already asks for it
        # (the grow pass works on it).
        if not decision.change or desired == current or (desired == asked and desired > current):
            _save(job, status)
            return False
        if desired < current:
            scale_down(job, desired, actor=None, at=now, by=reasons.SCALED_BY_AUTOSCALER)
        else:
            set_target(job, desired, actor=None, at=now, by=reasons.TARGET_BY_AUTOSCALER)
        _save(job, status, scaled_at=now)
        request_cycle()  # freed GPUs, or a new target for the grow pass
    return True


def _within_quota(job: Job, decision: rule.Decision) -> tuple[int, Message]:
    """The decision's replicas cut to what the quota rules let through now, and its reason."""
    params = dict(decision.params)
    if "until" in params:
        params["until"] = when(params["until"])
    if decision.code != rule.UP:
        return decision.desired, _reason(REASONS[decision.code], **params)
    current = params["current"]
    room = quota_room(job)
    if room >= decision.desired - current:
        return decision.desired, _reason(REASONS[rule.UP], **params)
    params["wanted"] = decision.desired
    if room <= 0:
        return current, _reason(QUOTA_NONE, **params)
    params["desired"] = current + room
    return current + room, _reason(QUOTA_SOME, **params)


def quota_room(job: Job) -> int:
    """How many more replicas of ``job`` the quota rules of DESIGN §3 let through now (in quota,
    or on loan within the borrow caps and lend limits — the grow pass's gate, without placement)."""
    from jobs.scheduler.engine.state import State
    from jobs.scheduling.snapshot import MILLI, build_snapshot
    from quotas.admission import INF

    state = State(build_snapshot(timezone.now()))
    state.resplit()
    ledger = state.ledgers.get(job.flavor.name)
    if ledger is None:
        return 0
    _proj, path = state.project(f"p{job.project_id}")
    root = ledger.root_room()
    cap = min(ledger.tree_cap_room(path), root)
    room = min(cap, max(ledger.in_quota_room(path), root - ledger.sibling_hold(path)))
    if room >= INF:
        return 1 << 20
    return max(room, 0) // (job.gpus_per_worker * MILLI)


def _save(job: Job, status: dict, *, scaled_at: datetime | None = None) -> None:
    fields = {"autoscale_status": status}
    if scaled_at is not None:
        fields["autoscale_scaled_at"] = scaled_at
    Job.objects.filter(pk=job.pk).update(**fields)


# ---- reading -------------------------------------------------------------------------------


def autoscale_view(job: Job) -> dict:
    """The settings and the last decision as the API and the job page show them (the reason in
    the active language)."""
    status = job.autoscale_status or None
    if status:
        status = {**status, "reason": render(status.get("reason"), fallback=""),
                  "decided_at": datetime.fromisoformat(status["decided_at"])}
    return {
        "job": job.pk,
        "enabled": bool(job.autoscale_query),
        "query": job.autoscale_query,
        "filled_query": filled_query(job) if job.autoscale_query else "",
        "target": job.autoscale_target,
        "cooldown_seconds": job.autoscale_cooldown_seconds,
        "last_scaled_at": job.autoscale_scaled_at,
        "replicas": len(job.placement),
        "min_workers": job.min_workers,
        "workers": job.workers,
        "target_workers": job.target_workers,
        "status": status,
    }


def can_change_autoscale(user: User, job: Job) -> bool:
    """The job page offers the settings form: the job's owner or an admin of its project, on an
    inference job that has not finished (the service checks again)."""
    if job.kind != JobKind.INFERENCE or job.state in TERMINAL:
        return False
    return job.submitted_by_id == user.pk or perm.can_edit_project(scope_for(user), job.project)

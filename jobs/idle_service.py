"""The idle policy run against the database (DESIGN §16; docs/scheduling.md, "Idle policy"): read
the running jobs, their policy, their exemptions and their stored GPU samples, let the pure
``jobs.idle_policy.decide`` choose, and apply its step. Run by the beat task ``jobs.idle_policy``.

Every step is a conditional update on the job's row (``idle_warned_at`` / ``idle_acted_at`` as they
were read), so two workers running at once never both warn or both act: the loser's update
matches no row and it writes nothing else."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_noop

from jobs.idle_exemptions import exempt_job_ids
from jobs.idle_models import IdlePolicy
from jobs.idle_policy import Action, Decision, JobFacts, Policy, Sample, Step, decide, idle_run_minutes
from jobs.models import Job, JobEvent, JobGpuSample, JobKind
from jobs.reasons import IDLE_PREEMPTIBLE, IDLE_STOPPED, IDLE_WARNED, event_reason, reason
from jobs.services import job_cancel_by_centre
from jobs.states import JobState
from portal.models import NotificationTopic
from portal.notifications import notify
from portal.texts import message


def as_policy(row: IdlePolicy) -> Policy:
    return Policy(
        threshold_pct=float(row.threshold_pct),
        idle_minutes=row.idle_minutes,
        grace_minutes=row.grace_minutes,
        actions={
            JobKind.DEV: Action(row.dev_action),
            JobKind.TRAINING: Action(row.training_action),
            JobKind.INFERENCE: Action(row.inference_action),
        },
    )


@dataclass(frozen=True)
class Policies:
    """The centre's policy and the overrides, per priority class and per project."""

    centre: Policy
    by_class: dict[int, Policy]
    by_project: dict[int, Policy]

    def of(self, project_id: int, priority_class_id: int) -> Policy:
        """A job's policy: its project's override, else its class's, else the centre's."""
        return self.by_project.get(project_id) or self.by_class.get(priority_class_id) or self.centre

    def all(self) -> list[Policy]:
        return [self.centre, *self.by_class.values(), *self.by_project.values()]


def policies() -> Policies:
    """The centre's policy (the model's defaults if its row is gone) and the overrides."""
    centre, by_class, by_project = None, {}, {}
    for row in IdlePolicy.objects.all():
        if row.project_id is not None:
            by_project[row.project_id] = as_policy(row)
        elif row.priority_class_id is not None:
            by_class[row.priority_class_id] = as_policy(row)
        else:
            centre = as_policy(row)
    return Policies(centre or as_policy(IdlePolicy()), by_class, by_project)


def duration(minutes: int) -> str:
    """120 → "2 h", 90 → "1 h 30 min", 45 → "45 min" (units every language of the portal reads)."""
    hours, rest = divmod(int(minutes), 60)
    if not hours:
        return f"{rest} min"
    return f"{hours} h" if not rest else f"{hours} h {rest} min"


@dataclass(frozen=True)
class _Running:
    pk: int
    name: str
    kind: str
    priority_class_id: int
    project_id: int
    submitted_by_id: int
    started_at: datetime | None
    warned_at: datetime | None
    cards: int  # GPU series a complete sample covers: one per placed card or slice


def _running_jobs() -> list[_Running]:
    rows = (
        Job.objects.filter(
            state=JobState.RUNNING, idle_acted_at__isnull=True, terminating_since__isnull=True,
            cancel_requested_at__isnull=True, expire_requested_at__isnull=True,
        )
        .exclude(kind=JobKind.EXTERNAL)
        .values_list("pk", "name", "kind", "priority_class_id", "project_id", "submitted_by_id", "started_at",
                     "idle_warned_at", "placement")
    )
    return [_Running(*row[:8], cards=sum(len(worker) for worker in row[8])) for row in rows]


def _samples(jobs: list[_Running], since: datetime) -> dict[int, list[Sample]]:
    """Per job its samples since ``since``, each with its busiest card. A sample that saw fewer GPU
    series than the job holds cards does not cover all of them: its busiest card is unknown."""
    cards = {j.pk: j.cards for j in jobs}
    out: dict[int, list[Sample]] = defaultdict(list)
    rows = JobGpuSample.objects.filter(job_id__in=list(cards), minute__gte=since).values_list(
        "job_id", "minute", "gpu_util_pct", "gpu_util_max_pct", "gpus"
    )
    for job_id, minute, mean, busiest, gpus in rows:
        if busiest is None and gpus == 1:
            busiest = mean  # one card: its mean is its busiest
        if gpus < cards[job_id]:
            busiest = None
        out[job_id].append(Sample(minute, busiest))
    return out


def _worth_a_look(jobs: list[_Running], rules: Policies, now: datetime) -> list[_Running]:
    """The jobs a decision could change: the warned ones (a warning may clear or lead to the action)
    and those whose idle run reaches now — read from the last two minutes of samples only, so the
    busy majority never has its hours of samples read."""
    recent = _samples(jobs, (now - timedelta(minutes=1)).replace(second=0, microsecond=0))
    return [
        j for j in jobs
        if j.warned_at is not None
        or idle_run_minutes(recent.get(j.pk, ()), rules.of(j.project_id, j.priority_class_id).threshold_pct,
                            now, j.started_at) > 0
    ]


def run_idle_policy(now: datetime | None = None) -> dict[str, int]:
    """One pass over the running jobs; returns how many were warned, cleared, stopped and made
    preemptible. Idempotent: a second pass at the same instant changes nothing."""
    now = now or timezone.now()
    rules = policies()
    jobs = _running_jobs()
    counts = {str(step): 0 for step in Step if step != Step.NONE}
    if not jobs:
        return counts
    jobs = _worth_a_look(jobs, rules, now)
    if not jobs:
        return counts
    longest = max(p.idle_minutes + p.grace_minutes for p in rules.all())
    samples = _samples(jobs, now - timedelta(minutes=longest + 1))
    exempt = exempt_job_ids([j.pk for j in jobs], now)
    for job in jobs:
        policy = rules.of(job.project_id, job.priority_class_id)
        facts = JobFacts(kind=job.kind, started_at=job.started_at, warned_at=job.warned_at, acted=False,
                         exempt=job.pk in exempt, samples=tuple(samples.get(job.pk, ())))
        decision = decide(policy, facts, now)
        if decision.step != Step.NONE and _APPLY[decision.step](job, policy, decision, now):
            counts[str(decision.step)] += 1
    return counts


# --- the steps: each True when it happened (False: another worker, or the job, moved first) ---


def _reason(msgid: str, policy: Policy, decision: Decision):
    return reason(msgid, threshold=_pct(policy.threshold_pct), minutes=duration(decision.idle_minutes))


def _pct(value: float) -> str:
    return f"{value:g}"


def _event(job: _Running, kind: str, why, now: datetime, **data) -> None:
    JobEvent.objects.create(job_id=job.pk, kind=kind, from_state=JobState.RUNNING, to_state=JobState.RUNNING,
                            **event_reason(why), occurred_at=now, data=data)


_WARNINGS = {
    Action.STOP: gettext_noop(
        "Job %(name)s (#%(id)s) has used less than %(threshold)s%% of its GPUs for %(minutes)s. The idle "
        "policy stops it in %(grace)s unless its GPUs are used again or an exemption is approved."
    ),
    Action.PREEMPTIBLE: gettext_noop(
        "Job %(name)s (#%(id)s) has used less than %(threshold)s%% of its GPUs for %(minutes)s. The idle "
        "policy makes it preemptible in %(grace)s unless its GPUs are used again or an exemption is approved."
    ),
    Action.WARN: gettext_noop(
        "Job %(name)s (#%(id)s) has used less than %(threshold)s%% of its GPUs for %(minutes)s. Please stop "
        "it if it is not needed: idle cards are still billed."
    ),
}
_ACTED = {
    Step.STOP: gettext_noop(
        "Job %(name)s (#%(id)s) was stopped by the idle policy: GPU utilisation under %(threshold)s%% for "
        "%(minutes)s."
    ),
    Step.PREEMPTIBLE: gettext_noop(
        "Job %(name)s (#%(id)s) was made preemptible by the idle policy: GPU utilisation under "
        "%(threshold)s%% for %(minutes)s. Any waiting job may now take its GPUs."
    ),
}


def _notify(job: _Running, msgid: str, policy: Policy, decision: Decision) -> None:
    from portal.models import Project, User

    notify(
        recipients=User.objects.filter(pk=job.submitted_by_id),
        text=message(msgid, name=job.name, id=job.pk, threshold=_pct(policy.threshold_pct),
                     minutes=duration(decision.idle_minutes), grace=duration(policy.grace_minutes)),
        link=reverse("job-detail", args=[job.pk]),
        topic=NotificationTopic.OTHER,
        project=Project.objects.filter(pk=job.project_id).first(),  # the project's webhooks get it too
    )


def _warn(job: _Running, policy: Policy, decision: Decision, now: datetime) -> bool:
    with transaction.atomic():
        won = Job.objects.filter(
            pk=job.pk, state=JobState.RUNNING, idle_warned_at__isnull=True, idle_acted_at__isnull=True
        ).update(idle_warned_at=now, idle_since=Coalesce(F("idle_since"), now))
        if not won:
            return False
        action = policy.action_for(job.kind)
        _event(job, "idle_warned", _reason(IDLE_WARNED, policy, decision), now, action=str(action),
               grace_minutes=policy.grace_minutes)
        _notify(job, _WARNINGS[action], policy, decision)
    return True


def _clear(job: _Running, policy: Policy, decision: Decision, now: datetime) -> bool:
    """Busy again (or its metrics stopped, or it was exempted) after a warning: the warning no
    longer stands, so a later idle spell is warned again before anything is done."""
    return bool(Job.objects.filter(pk=job.pk, idle_warned_at=job.warned_at, idle_acted_at__isnull=True)
                .update(idle_warned_at=None, idle_since=None))


def _claim(job: _Running, now: datetime, **fields) -> bool:
    return bool(Job.objects.filter(
        pk=job.pk, state=JobState.RUNNING, idle_warned_at=job.warned_at, idle_acted_at__isnull=True
    ).update(idle_acted_at=now, **fields))


def _stop(job: _Running, policy: Policy, decision: Decision, now: datetime) -> bool:
    why = _reason(IDLE_STOPPED, policy, decision)
    try:
        with transaction.atomic():
            if not _claim(job, now):
                return False
            _event(job, "idle_stopped", why, now)
            job_cancel_by_centre(Job.objects.get(pk=job.pk), why)
            _notify(job, _ACTED[Step.STOP], policy, decision)
    except ValidationError:
        return False  # it ended meanwhile: nothing of the claim is kept
    return True


def _preemptible(job: _Running, policy: Policy, decision: Decision, now: datetime) -> bool:
    with transaction.atomic():
        if not _claim(job, now, idle_preemptible_at=now):
            return False
        _event(job, "idle_preemptible", _reason(IDLE_PREEMPTIBLE, policy, decision), now)
        _notify(job, _ACTED[Step.PREEMPTIBLE], policy, decision)
    return True


_APPLY = {Step.WARN: _warn, Step.CLEAR: _clear, Step.STOP: _stop, Step.PREEMPTIBLE: _preemptible}

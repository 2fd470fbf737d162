"""Job writes: submission, cancellation, scaling, priority classes.

State changes go through ``jobs.transitions.job_transition`` (re-exported here): a conditional
UPDATE from the states the transition table allows, plus an event row in the same transaction.
Background work (stopping a job, a scheduling cycle) is enqueued by task name after commit."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs import environment, flavor_choice, reasons, submission, workflows
from jobs.approvals import job_approval_open, job_approval_withdraw
from jobs.models import (
    Job,
    JobArray,
    JobEvent,
    JobKind,
    PriorityClass,
)
from jobs.reasons import event_reason
from jobs.scheduler.footprint import Request
from jobs.states import HOLDING, TERMINAL, JobState
from jobs.transitions import job_transition, request_cycle
from portal import permissions as perm
from portal.enqueue import enqueue
from portal.models import Project, User
from portal.selectors import scope_for
from portal.texts import Message, message
from quotas.models import Flavor

__all__ = ["job_transition"]  # re-exported: the transition primitive lives in jobs.transitions

MAX_WORKERS = submission.MAX_WORKERS
MAX_RUNTIME = submission.MAX_RUNTIME


def job_submit_check(
    *,
    actor: User,
    project: Project,
    kind: str,
    flavor: Flavor,
    priority_class: PriorityClass,
    image: str,
    command: str = "",
    workers: int = 1,
    gpus_per_worker: int = 1,
    gpu_milli: int | None = None,
    min_workers: int | None = None,
    max_runtime_seconds: int | None = None,
    mounts: list[str] | None = None,
    env: list[dict] | None = None,
    expose_port: int | None = None,
    autoscale: dict | None = None,
    cpu_millicores: int | None = None,
    memory_mib: int | None = None,
    local_disk_gib: int | None = None,
    min_cuda_version: str = "",
    max_retries: int = 0,
) -> tuple[dict, int | None, bool]:
    """Every check of ``job_submit`` that does not depend on the jobs live at that moment (the
    dev-job limit): what a saved template must pass too. Returns the checked working environment
    and autoscaling settings (Job fields), the job's maximum runtime and whether its priority
    class needs approval."""
    sub = submission.gather(
        actor=actor,
        project=project,
        kind=kind,
        flavors=(flavor,),
        priority_class=priority_class,
        shape=submission.Shape(workers, gpus_per_worker, gpu_milli, min_workers),
        max_runtime_seconds=max_runtime_seconds,
        request=Request(cpu_millicores, memory_mib, local_disk_gib),
        min_cuda_version=min_cuda_version,
    )
    checked = submission.check(
        sub, image=image, command=command, mounts=mounts, env=env, expose_port=expose_port,
        autoscale=autoscale,
    )
    submission.check_retries(kind, max_retries)
    return checked.job_fields, checked.runtime_seconds, checked.class_needs_approval


def job_submit(
    *,
    actor: User,
    project: Project,
    name: str,
    kind: str,
    flavor: Flavor | Sequence[Flavor],
    priority_class: PriorityClass,
    image: str,
    command: str = "",
    workers: int = 1,
    gpus_per_worker: int = 1,
    gpu_milli: int | None = None,
    min_workers: int | None = None,
    max_runtime_seconds: int | None = None,
    checkpointing: bool = False,
    sim_duration_seconds: int | None = None,
    mounts: list[str] | None = None,
    env: list[dict] | None = None,
    expose_port: int | None = None,
    framework: str = "",
    min_operator_coverage: Decimal | None = None,
    autoscale: dict | None = None,
    cpu_millicores: int | None = None,
    memory_mib: int | None = None,
    local_disk_gib: int | None = None,
    min_cuda_version: str = "",
    max_retries: int = 0,
    array: str | None = None,
    dependencies=None,
) -> Job:
    """``flavor``: one flavor, or the acceptable flavors in order of preference (DESIGN §14);
    the job is checked against each, and runs on the first the scheduler can place.
    ``autoscale``: an inference job's autoscaling from load, ``{"query", "target",
    "cooldown_seconds"}`` (docs/scheduling.md "Autoscaling"), set with the job.
    ``cpu_millicores``, ``memory_mib``, ``local_disk_gib``: what each worker asks of its node
    besides its GPUs (None: its GPUs' share, docs/resources.md); ``min_cuda_version``: "12.4";
    ``max_retries``: how often a failed run is retried (DESIGN §17, ``jobs.retries``).

    ``array``: "0-99%10" submits one task per index (DESIGN §17; the first task is returned, its
    ``array`` the whole); ``dependencies``: ``[{"condition": "after_ok", "job": 12}, …]`` or the
    text ``after_ok:12`` (``jobs.workflows``), on every task.

    One way down (``jobs.submission``): gather what the submission needs to know once, check it,
    decide the approval from it, create."""
    choices = flavor_choice.acceptable(flavor, framework=framework, min_coverage=min_operator_coverage)
    sub = submission.gather(
        actor=actor,
        project=project,
        kind=kind,
        flavors=choices,
        priority_class=priority_class,
        shape=submission.Shape(workers, gpus_per_worker, gpu_milli, min_workers),
        max_runtime_seconds=max_runtime_seconds,
        request=Request(cpu_millicores, memory_mib, local_disk_gib),
        min_cuda_version=min_cuda_version,
    )
    checked = submission.check(
        sub, image=image, command=command, mounts=mounts, env=env, expose_port=expose_port,
        autoscale=autoscale,
    )
    submission.check_retries(kind, max_retries)
    spec = workflows.parse_array(array) if array not in (None, "") else None
    if spec is not None and kind != JobKind.TRAINING:
        raise ValidationError({"array": [_("Only training jobs come in arrays.")]})
    depends = workflows.check_dependencies(actor, workflows.parse_dependencies(dependencies))
    if kind == JobKind.DEV:
        _check_dev_limit(actor)
    # DESIGN §6: a job over its department's policy waits in pending_approval for a decision.
    # The reasons (messages, rendered for each reader) are stored with the approval request.
    decision = submission.approval(sub, class_needs_approval=checked.class_needs_approval)
    state = JobState.PENDING_APPROVAL if decision.needed else JobState.QUEUED
    now = timezone.now()
    fields = dict(
        project=project, actor=actor, name=name, kind=kind, choices=choices, framework=framework,
        min_operator_coverage=min_operator_coverage, priority_class=priority_class, image=image,
        command=command, shape=sub.shape.fields(), checked=checked, checkpointing=checkpointing,
        sim_duration_seconds=sim_duration_seconds, state=state, now=now, decision=decision,
        depends=depends, max_retries=max_retries,
    )
    if spec is None:
        job = _create(**fields)
    else:
        with transaction.atomic():  # all the tasks or none
            whole = workflows.array_create(actor=actor, project=project, name=name, spec=spec, at=now)
            tasks = [_create(**fields, array=whole, index=index) for index in spec.indices]
        job = tasks[0]
    if not decision.needed:
        request_cycle()
    return job


def _create(
    *, project, actor, name, kind, choices, framework, min_operator_coverage, priority_class, image,
    command, shape, checked, checkpointing, sim_duration_seconds, state, now, decision, depends,
    max_retries=0, array=None, index=None,
) -> Job:
    """One job (or task of an array) of a checked submission, its event and its approval request."""
    job = Job(
        name=name,
        project=project,
        submitted_by=actor,
        kind=kind,
        flavor=choices[0],
        flavor_choices=[f.pk for f in choices] if len(choices) > 1 else [],
        framework=framework.strip(),
        min_operator_coverage=min_operator_coverage,
        priority_class=priority_class,
        image=image,
        command=command,
        **shape,
        max_runtime_seconds=checked.runtime_seconds,
        checkpointing=checkpointing,
        max_retries=max_retries,
        sim_duration_seconds=_sim_duration(kind, sim_duration_seconds, checked.runtime_seconds),
        state=state,
        state_changed_at=now,
        submitted_at=now,
        array=array,
        array_index=index,
        **checked.job_fields,
    )
    job.full_clean(validate_constraints=False)
    job.save()
    # The checkpoint directory is named by the job id, known only now (every run of the job, a
    # requeue after preemption included, finds its checkpoints there).
    job.checkpoint = environment.checkpoint_for(project, job.pk)
    if job.checkpoint is not None:
        Job.objects.filter(pk=job.pk).update(checkpoint=job.checkpoint)
    JobEvent.objects.create(
        job=job, from_state="", to_state=state, reason="submitted", actor=actor, occurred_at=now
    )
    workflows.dependencies_create(job, depends)
    if decision.needed:  # the scheduler ignores it until approved
        job_approval_open(job=job, actor=actor, decision=decision)
    return job


def _sim_duration(kind: str, given: int | None, runtime: int | None) -> int | None:
    """The demo's simulated duration. A dev box stays open until its owner stops it or its
    lifetime ends, so a dev job given none runs for its lifetime — the simulator's default (600
    simulated s, ten real seconds at the demo's speed) had it gone before anyone clicked "Open"."""
    if given is None and kind == JobKind.DEV and settings.GPUPOOL["DEMO"]:
        return runtime
    return given


def _check_dev_limit(actor: User) -> None:
    """At most DEV_JOBS_PER_USER live dev jobs per user. The user row is locked so two
    submissions at the same moment cannot both slip under the limit."""
    User.objects.select_for_update().filter(pk=actor.pk).first()
    limit = settings.GPUPOOL["DEV_JOBS_PER_USER"]
    live = (
        Job.objects.filter(submitted_by=actor, kind=JobKind.DEV)
        .exclude(state__in=[s.value for s in TERMINAL])
        .count()
    )
    if live >= limit:
        raise ValidationError(
            {"kind": [_("You already have %(n)d development jobs; stop one first.") % {"n": live}]}
        )


def job_cancel(*, actor: User, job: Job) -> Job:
    """Cancel a job. A job already on the cluster is asked to stop; it becomes ``cancelled`` when
    the backend confirms, so its GPUs are not handed out while it still runs."""
    scope = scope_for(actor)
    perm.require(job.submitted_by_id == actor.pk or perm.can_edit_project(scope, job.project))
    if job.kind == JobKind.EXTERNAL:
        # The portal did not start it and has no right to stop it: its owner uses scancel/kubectl.
        raise ValidationError(_("An external job is stopped on its cluster (scancel, kubectl), not here."))
    return _cancel(job, actor, "cancelled by user")


# --- arrays and dependencies (DESIGN §17; their rules: jobs.workflows) -----------------------


def array_cancel(*, actor: User, array: JobArray) -> int:
    """Cancel every task not yet finished (one on the cluster is asked to stop, as ``job_cancel``
    does); returns how many were cancelled or asked to stop. Finished tasks stay as they are."""
    scope = scope_for(actor)
    perm.require(array.submitted_by_id == actor.pk or perm.can_edit_project(scope, array.project))
    if array.backend_id:
        raise ValidationError(_("A native array is cancelled on its cluster (scancel), not here."))
    done = 0
    live = array.tasks.exclude(state__in=[s.value for s in TERMINAL]).filter(cancel_requested_at__isnull=True)
    for job in live.order_by("array_index"):
        try:
            _cancel(job, actor, "array cancelled by user")
        except ValidationError:
            continue  # it finished meanwhile
        done += 1
    return done


def cancel_unmet_dependents() -> int:
    """Cancel every waiting job with a dependency that can no longer be met, with that reason
    (its event row, no actor); repeated until none is left, since a cancelled job may be
    another's ``after_ok``. Idempotent; run before each scheduling cycle."""
    cancelled = 0
    while True:
        progress = 0
        for job_id, parent_id, condition, state in workflows.unmet_never_rows():
            job = Job.objects.filter(pk=job_id, state__in=workflows.WAITING).first()
            if job is None:
                continue
            why = message(reasons.DEPENDENCY_NEVER_MET, job=parent_id, condition=condition, state=state)
            try:
                _cancel(job, None, why)
            except ValidationError:
                continue  # it moved on meanwhile
            progress += 1
        cancelled += progress
        if not progress:
            return cancelled


def _cancel(job: Job, actor: User | None, reason: str | Message) -> Job:
    """``reason``: English text or a message of ``jobs.reasons``; a job on the cluster keeps it on
    its ``cancel_requested`` event and its final transition (``jobs.clusters.dispatch``)."""
    for _attempt in range(3):  # the scheduler may move the job between our read and our update
        if job.state in HOLDING and job.dispatched_at is not None:
            return _request_stop(job, actor, reason)
        was_waiting = job.state == JobState.PENDING_APPROVAL
        if job_transition(job, JobState.CANCELLED, reason=reason, actor=actor, finished_at=timezone.now()):
            if was_waiting:
                job_approval_withdraw(job=job, actor=actor)
            return job
        job.refresh_from_db()
        if job.state in TERMINAL:
            break
    raise ValidationError(_("A %(state)s job cannot be cancelled.") % {"state": job.state})


def job_cancel_by_centre(job: Job, reason: str | Message) -> Job:
    """The centre cancels a job (no user acts: the idle policy), with ``reason`` on its events.
    ValidationError when it can no longer be cancelled (it ended meanwhile)."""
    return _cancel(job, None, reason)


def stop_jobs_of_deactivated_user(user_id: int) -> int:
    """The centre stops a deprovisioned user's jobs (GPUPOOL_DEPROVISION_JOBS = "stop", DESIGN
    §12): every one of their portal jobs not yet ended is cancelled, as the platform. Idempotent."""
    stopped = 0
    live = (
        Job.objects.filter(submitted_by_id=user_id)
        .exclude(kind=JobKind.EXTERNAL)
        .exclude(state__in=[s.value for s in TERMINAL])
        .filter(stop_requested_at__isnull=True)
    )
    for job in live:
        try:
            _cancel(job, None, "owner deactivated in the directory")
            stopped += 1
        except ValidationError:
            continue  # ended meanwhile
    return stopped


def _request_stop(job: Job, actor: User | None, reason: str | Message = "cancelled by user") -> Job:
    now = timezone.now()
    # One transaction: the row stays locked until the event is in, so a status sync moving the
    # job on (admitted → running) logs its transition after this note, not before it.
    with transaction.atomic():
        if Job.objects.filter(pk=job.pk, state=job.state, cancel_requested_at__isnull=True).update(
            cancel_requested_at=now
        ):
            JobEvent.objects.create(
                job=job,
                kind="cancel_requested",
                from_state=job.state,
                to_state=job.state,
                **event_reason(reason),
                actor=actor,
                occurred_at=now,
            )
            enqueue("jobs.stop_job", job.pk)
    job.refresh_from_db()
    return job


# --- priority classes (DESIGN §4: configurable) ------------------------------------------


# Who may use a class (issue 18 item 5); omitted, a new class lets everybody use it for any kind.
USAGE_RULE_FIELDS = ("allowed_kinds", "min_role", "approval_below_role")


def priority_class_create(
    *,
    actor: User,
    name: str,
    value: int,
    preemptible: bool = True,
    grace_seconds: int = 30,
    description: str = "",
    min_runtime_seconds: int = 0,
    **usage_rules,
) -> PriorityClass:
    perm.require(scope_for(actor).platform_admin)
    usage_rules = _usage_rules(usage_rules)
    pc = PriorityClass(
        name=name,
        value=value,
        preemptible=preemptible,
        grace_seconds=grace_seconds,
        min_runtime_seconds=min_runtime_seconds,
        description=description,
        **usage_rules,
    )
    pc.full_clean()
    pc.save()
    return pc


def priority_class_update(
    *,
    actor: User,
    priority_class: PriorityClass,
    value: int,
    preemptible: bool,
    grace_seconds: int,
    description: str = "",
    min_runtime_seconds: int | None = None,
    **usage_rules,
) -> PriorityClass:
    """Change a class's value, preemption policy or who may use it. The name stays: jobs and API
    clients refer to it. The next cycle orders the queue by the new value (the engine's
    configuration changed). New usage rules bind new submissions; jobs already submitted keep
    their class."""
    perm.require(scope_for(actor).platform_admin)
    usage_rules = _usage_rules(usage_rules)
    pc = PriorityClass.objects.get(pk=priority_class.pk)
    pc.value, pc.preemptible, pc.grace_seconds = value, preemptible, grace_seconds
    pc.description = description
    if min_runtime_seconds is not None:  # None: left as it is
        pc.min_runtime_seconds = min_runtime_seconds
    for field, rule in usage_rules.items():
        setattr(pc, field, rule)
    pc.full_clean()
    pc.save(update_fields=["value", "preemptible", "grace_seconds", "min_runtime_seconds", "description",
                           *usage_rules])
    request_cycle()
    return pc


def _usage_rules(usage_rules: dict) -> dict:
    unknown = set(usage_rules) - set(USAGE_RULE_FIELDS)
    if unknown:
        raise ValidationError({name: [_("Unknown field.")] for name in sorted(unknown)})
    if usage_rules.get("allowed_kinds") is not None:
        usage_rules = {**usage_rules, "allowed_kinds": sorted(set(usage_rules["allowed_kinds"]))}
    return usage_rules


# --- elastic scaling (DESIGN §4: inference "scaled between min and max") ------------------


def job_scale(*, actor: User, job: Job, replicas: int) -> Job:
    """Set a running elastic job's target between ``min_workers`` and ``workers``. Down: the
    surplus workers go at once (the most recently added first), their GPUs and quota are free
    for the next cycle and the backend is told; up: the grow pass adds workers as room allows."""
    from jobs.resize import scale_down, set_target, why_not_scalable

    scope = scope_for(actor)
    perm.require(job.submitted_by_id == actor.pk or perm.can_edit_project(scope, job.project))
    with transaction.atomic():
        job = Job.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=job.pk)
        reason = why_not_scalable(job)
        if reason:
            raise ValidationError(reason)
        if not job.min_workers <= replicas <= job.workers:
            raise ValidationError(
                {"replicas": [_("Between %(lo)d and %(hi)d.") % {"lo": job.min_workers, "hi": job.workers}]}
            )
        if replicas < len(job.placement):
            scale_down(job, replicas, actor=actor, at=timezone.now())
        elif replicas != (job.target_workers or job.workers):
            set_target(job, replicas, actor=actor, at=timezone.now())
        request_cycle()  # freed GPUs, or a new target for the grow pass
    job.refresh_from_db()
    return job

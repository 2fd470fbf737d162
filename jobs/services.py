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

from portal import permissions as perm
from portal.enqueue import enqueue
from portal.models import Project, User
from portal.selectors import scope_for
from quotas.models import Flavor

from . import autoscale as autoscaling
from . import environment, flavor_choice, rules
from .approvals import approval_reasons, job_approval_open, job_approval_withdraw
from .models import (
    COMMAND_MAX_LENGTH,
    SUBMITTABLE_KINDS,
    Job,
    JobEvent,
    JobKind,
    PriorityClass,
    image_validator,
)
from .states import HOLDING, TERMINAL, JobState
from .transitions import job_transition, request_cycle

__all__ = ["job_transition"]  # re-exported: the transition primitive lives in jobs.transitions

MAX_WORKERS = 4096
MAX_RUNTIME = 90 * 86400


def _can_submit(actor: User, project: Project) -> bool:
    scope = scope_for(actor)
    return project.pk in scope.member_projects or perm.can_manage_projects_of(scope, project.department_id)


def _validate_shape(*, kind, flavor: Flavor, workers, gpus_per_worker, gpu_milli, min_workers) -> None:
    errors: dict[str, list[str]] = {}
    if kind not in dict(SUBMITTABLE_KINDS):
        errors["kind"] = [_("Not a kind of job the portal submits.")]
    if not 1 <= workers <= MAX_WORKERS:
        errors["workers"] = [_("Between 1 and %(n)d workers.") % {"n": MAX_WORKERS}]
    if min_workers is not None and not 1 <= min_workers <= workers:
        errors["min_workers"] = [_("Between 1 and the number of workers.")]
    if gpu_milli is not None:
        if not flavor.shareable:
            errors["gpu_milli"] = [_("%(f)s is not shareable: ask for whole devices.") % {"f": flavor}]
        elif not 1 <= gpu_milli < 1000:
            errors["gpu_milli"] = [_("A shared request is 1–999 thousandths of one device.")]
        elif workers != 1 or gpus_per_worker != 1:
            errors["gpu_milli"] = [_("A shared request is one worker with one device.")]
    if gpus_per_worker < 1:
        errors["gpus_per_worker"] = [_("At least one device per worker.")]
    if kind == JobKind.DEV and (workers != 1 or gpus_per_worker != 1):
        errors["kind"] = [_("A development job uses one device or slice.")]
    if errors:
        raise ValidationError(errors)


def _validate_text(*, image: str, command: str) -> None:
    """What full_clean does not check: the image grammar and the command's length (a TextField's
    max_length binds only forms). Refused, never truncated. The command is free text: `;`, quotes
    and `$(…)` are valid and stored verbatim; backends pass it to a shell only as one quoted word."""
    errors: dict[str, list[str]] = {}
    try:
        image_validator(image)
    except ValidationError as exc:
        errors["image"] = exc.messages
    if len(command) > COMMAND_MAX_LENGTH:
        errors["command"] = [_("At most %(n)d characters.") % {"n": COMMAND_MAX_LENGTH}]
    if errors:
        raise ValidationError(errors)


def _check_rules(
    *, actor, project, kind, flavor, priority_class, shape: dict, max_runtime_seconds
) -> tuple[int | None, bool]:
    """The rules of ``jobs.rules``, every refusal at once (the form shows them side by side).
    Returns the job's maximum runtime and whether its priority class needs approval."""
    runtime, class_needs_approval = _all_errors(
        lambda: rules.job_runtime(kind, max_runtime_seconds),
        lambda: rules.priority_class_check(
            actor=actor, project=project, kind=kind, priority_class=priority_class
        ),
        errors=rules.never_runs_errors(viewer=actor, project=project, flavor=flavor, **shape),
    )
    return runtime, class_needs_approval


def _working_environment(project, kind, *, image, mounts, env, expose_port) -> dict:
    """DESIGN §13, checked before anything is written: the image's registry, the mounts (the
    project's storages only), the env vars and the exposed port (dev jobs). Every error at once."""
    result: dict = {"expose_port": expose_port}
    _all_errors(
        lambda: environment.check_image(image),
        lambda: result.update(mounts=environment.clean_mounts(project, mounts)),
        lambda: result.update(env=environment.clean_env(env)),
        lambda: _check_expose_port(kind, expose_port),
    )
    return result


def _check_expose_port(kind, expose_port) -> None:
    """Only a development job exposes a port, and a valid one."""
    if expose_port is None:
        return
    if kind != JobKind.DEV:
        raise ValidationError({"expose_port": [_("Only development jobs expose a port.")]})
    if not isinstance(expose_port, int) or isinstance(expose_port, bool) or not 1 <= expose_port <= 65535:
        raise ValidationError({"expose_port": [_("A port between 1 and 65535.")]})


def _shape_and_autoscale(
    *, kind, flavor, workers, gpus_per_worker, gpu_milli, min_workers, autoscale
) -> dict:
    """The shape's checks and the autoscaling settings' (``jobs.autoscale.clean_submitted``, the
    rules of the job page's form), every error at once: both are about the replicas. Returns the
    ``Job.autoscale_*`` fields ({} when the job does not scale from load)."""
    _shape, fields = _all_errors(
        lambda: _validate_shape(
            kind=kind, flavor=flavor, workers=workers, gpus_per_worker=gpus_per_worker, gpu_milli=gpu_milli,
            min_workers=min_workers,
        ),
        lambda: autoscaling.clean_submitted(
            kind=kind, min_workers=min_workers, workers=workers, autoscale=autoscale
        ),
    )
    return fields


def _all_errors(*checks, errors: dict[str, list[str]] | None = None) -> list:
    """Runs every check, merges the ValidationErrors they raise (into ``errors``: those found
    before) and raises them once, so the form shows every refusal side by side. Returns each
    check's result."""
    errors = {} if errors is None else errors
    results = []
    for check in checks:
        try:
            results.append(check())
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                errors.setdefault(field, []).extend(messages)
            results.append(None)
    if errors:
        raise ValidationError(errors)
    return results


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
) -> tuple[dict, int | None, bool]:
    """Every check of ``job_submit`` that does not depend on the jobs live at that moment (the
    dev-job limit): what a saved template must pass too. Returns the checked working environment
    and autoscaling settings (Job fields), the job's maximum runtime and whether its priority
    class needs approval."""
    perm.require(actor.is_active and _can_submit(actor, project))  # a deactivated user submits nothing
    _validate_text(image=image, command=command)
    job_fields = _working_environment(
        project, kind, image=image, mounts=mounts, env=env, expose_port=expose_port
    )
    if not flavor.active:
        raise ValidationError({"flavor": [_("%(f)s is not available for new jobs.") % {"f": flavor}]})
    job_fields |= _shape_and_autoscale(
        kind=kind,
        flavor=flavor,
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        gpu_milli=gpu_milli,
        min_workers=min_workers,
        autoscale=autoscale,
    )
    if max_runtime_seconds is not None and not 60 <= max_runtime_seconds <= MAX_RUNTIME:
        raise ValidationError({"max_runtime_seconds": [_("Between 60 s and 90 days.")]})
    max_runtime_seconds, class_needs_approval = _check_rules(
        actor=actor,
        project=project,
        kind=kind,
        flavor=flavor,
        priority_class=priority_class,
        shape={
            "workers": workers,
            "gpus_per_worker": gpus_per_worker,
            "gpu_milli": gpu_milli,
            "min_workers": min_workers,
        },
        max_runtime_seconds=max_runtime_seconds,
    )
    return job_fields, max_runtime_seconds, class_needs_approval


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
) -> Job:
    """``flavor``: one flavor, or the acceptable flavors in order of preference (DESIGN §14);
    the job is checked against each, and runs on the first the scheduler can place.
    ``autoscale``: an inference job's autoscaling from load, ``{"query", "target",
    "cooldown_seconds"}`` (docs/scheduling.md "Autoscaling"), set with the job."""
    choices = flavor_choice.acceptable(flavor, framework=framework, min_coverage=min_operator_coverage)
    checks = [
        job_submit_check(
            actor=actor,
            project=project,
            kind=kind,
            flavor=f,
            priority_class=priority_class,
            image=image,
            command=command,
            workers=workers,
            gpus_per_worker=gpus_per_worker,
            gpu_milli=gpu_milli,
            min_workers=min_workers,
            max_runtime_seconds=max_runtime_seconds,
            mounts=mounts,
            env=env,
            expose_port=expose_port,
            autoscale=autoscale,
        )
        for f in choices
    ]
    job_fields, max_runtime_seconds, class_needs_approval = checks[0]
    if kind == JobKind.DEV:
        _check_dev_limit(actor)
    # DESIGN §6: a job over its department's policy waits in pending_approval for a decision.
    # The reasons (messages, rendered for each reader) are stored with the approval request.
    # A job that may run on several flavors needs what any of them would need.
    reasons = [rules.priority_class_reason(priority_class)] if class_needs_approval else []
    for f in choices:
        for reason in approval_reasons(
            project, kind, f, workers, gpus_per_worker, gpu_milli, max_runtime_seconds
        ):
            if reason not in reasons:
                reasons.append(reason)
    needs_approval = bool(reasons)
    state = JobState.PENDING_APPROVAL if needs_approval else JobState.QUEUED
    now = timezone.now()
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
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        gpu_milli=gpu_milli,
        min_workers=min_workers,
        max_runtime_seconds=max_runtime_seconds,
        checkpointing=checkpointing,
        sim_duration_seconds=sim_duration_seconds,
        state=state,
        state_changed_at=now,
        submitted_at=now,
        **job_fields,
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
    if needs_approval:
        job_approval_open(job=job, actor=actor, reasons=reasons)  # the scheduler ignores it until approved
    else:
        request_cycle()
    return job


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


def _cancel(job: Job, actor: User | None, reason: str) -> Job:
    for _attempt in range(3):  # the scheduler may move the job between our read and our update
        if job.state in HOLDING and job.dispatched_at is not None:
            return _request_stop(job, actor)
        was_waiting = job.state == JobState.PENDING_APPROVAL
        if job_transition(job, JobState.CANCELLED, reason=reason, actor=actor, finished_at=timezone.now()):
            if was_waiting:
                job_approval_withdraw(job=job, actor=actor)
            return job
        job.refresh_from_db()
        if job.state in TERMINAL:
            break
    raise ValidationError(_("A %(state)s job cannot be cancelled.") % {"state": job.state})


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


def _request_stop(job: Job, actor: User | None) -> Job:
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
                reason="cancelled by user",
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
    **usage_rules,
) -> PriorityClass:
    perm.require(scope_for(actor).platform_admin)
    usage_rules = _usage_rules(usage_rules)
    pc = PriorityClass(
        name=name,
        value=value,
        preemptible=preemptible,
        grace_seconds=grace_seconds,
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
    for field, rule in usage_rules.items():
        setattr(pc, field, rule)
    pc.full_clean()
    pc.save(update_fields=["value", "preemptible", "grace_seconds", "description", *usage_rules])
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
    from .resize import scale_down, set_target, why_not_scalable

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


def external_source_map(*, actor: User, source, project: Project):
    """Map an unmapped Slurm account / Kubernetes namespace to a project (platform admins): its
    observed jobs become external jobs of the project; the meter's next run bills their history
    (``jobs.external.map_source``). Answers the import's ``Outcome``."""
    from .external import map_source

    perm.require(scope_for(actor).platform_admin)
    if source.project_id is not None:
        raise ValidationError(
            _("%(name)s is already mapped to project %(project)s.")
            % {"name": source.name, "project": source.project.code}
        )
    if not project.active:
        raise ValidationError({"project": [_("Project %(code)s is not active.") % {"code": project.code}]})
    if not PriorityClass.objects.exists():
        raise ValidationError(_("External jobs are ranked by a priority class: create one first."))
    try:
        return map_source(source=source, project=project, actor=actor)
    except ValueError as exc:  # mapped by someone else since it was read (map_source locks the row)
        raise ValidationError(_("%(name)s is already mapped.") % {"name": source.name}) from exc

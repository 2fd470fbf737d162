"""Job approvals (DESIGN §6): the department policies, why a job needs approval, and the
``job`` kind of the generic approval engine (``portal.approvals``).

``approval_reasons`` is the one decision, used by ``job_submit`` and by the submission form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import ROUND_CEILING, Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from jobs.models import ApprovalPolicy, Job
from jobs.requests import DIMENSION_WORDS, quantity
from jobs.rules import (
    class_needs_platform,
    default_runtime,
    never_runs_errors,
    priority_class_reasons,
    usage_rank,
)
from jobs.scheduler.footprint import Request, Share
from jobs.selectors import job_request_facts
from jobs.states import JobState
from jobs.transitions import job_transition
from portal import permissions as perm
from portal.approvals import (
    ApprovalKindHandler,
    StepSpec,
    approval_request_close,
    approval_request_create,
    register_kind,
)
from portal.models import ApprovalKind, ApprovalRequest, Department, Project, Role, User
from portal.selectors import department_ancestors, scope_for, visible_departments
from portal.texts import Message, message
from quotas.models import Flavor

# Budgets come with billing (DESIGN §3.9). Billing registers callables here, each
# ``check(project, cards) -> Message | None`` returning a reason (``portal.texts.message``) when
# the project (or a department above it) is over budget (billing registers one). Over budget
# asks for approval unless the policy that applies switches ``over_budget`` off.
budget_checks: list[Callable[[Project, Decimal], Message | None]] = []


# --- policies -----------------------------------------------------------------------------


def policy_for_department(department_id: int) -> ApprovalPolicy | None:
    """The policy of the nearest department up the tree (the department itself first)."""
    path = department_ancestors(department_id)
    policies = {p.department_id: p for p in ApprovalPolicy.objects.filter(department_id__in=path)}
    for dept_id in path:
        if dept_id in policies:
            return policies[dept_id]
    return None


def policy_for_project(project: Project) -> ApprovalPolicy | None:
    return policy_for_department(project.department_id)


def visible_approval_policies(user: User) -> QuerySet[ApprovalPolicy]:
    """Policies of the departments the user sees and of the departments above them: a member
    must be able to read the rule that applies to their project."""
    scope = scope_for(user)
    qs = ApprovalPolicy.objects.select_related("department").prefetch_related("flavors")
    if scope.sees_everything:
        return qs
    ids: set[int] = set()
    for dept_id in visible_departments(user).values_list("id", flat=True):
        ids.update(department_ancestors(dept_id))
    return qs.filter(department_id__in=ids)


POLICY_FIELDS = (
    "max_gpus",
    "max_runtime_hours",
    "premium_flavors",
    "platform_gpus",
    "over_budget",
    "step_timeout_hours",
)


def approval_policy_set(*, actor: User, department: Department, flavors=None, **fields) -> ApprovalPolicy:
    """Create or change the policy of ``department``. Like the department itself, its policy
    belongs to whoever administers the parent (platform admins for top-level departments), so a
    department admin cannot loosen the rule that makes its own jobs ask."""
    perm.require(perm.can_edit_department(scope_for(actor), department))
    unknown = set(fields) - set(POLICY_FIELDS)
    if unknown:
        raise ValidationError({name: [_("Unknown field.")] for name in sorted(unknown)})
    policy = ApprovalPolicy.objects.filter(department=department).first() or ApprovalPolicy(
        department=department
    )
    for name, value in fields.items():
        setattr(policy, name, value)
    policy.updated_by = actor
    policy.full_clean(validate_constraints=False)
    if (
        policy.platform_gpus is not None
        and policy.max_gpus is not None
        and policy.platform_gpus < policy.max_gpus
    ):
        raise ValidationError(
            {
                "platform_gpus": [
                    _("Cannot be below the GPUs allowed without approval (%(n)d).") % {"n": policy.max_gpus}
                ]
            }
        )
    policy.save()
    if flavors is not None:
        policy.flavors.set(flavors)
    return policy


def approval_policy_delete(*, actor: User, policy: ApprovalPolicy) -> None:
    perm.require(perm.can_edit_department(scope_for(actor), policy.department))
    policy.delete()


# --- the decision -------------------------------------------------------------------------


def job_cards(flavor: Flavor, workers, gpus_per_worker, gpu_milli) -> Decimal:
    """Whole-card equivalents of a job: count × card_fraction (× gpu_milli/1000 if shared),
    numerator first and divided last, so seven 1/7 slices are exactly one card."""
    count = _int(workers) * _int(gpus_per_worker) * flavor.fraction_numerator
    milli = _int(gpu_milli) if gpu_milli else 1000
    cards = Decimal(count * milli) / Decimal(flavor.fraction_denominator * 1000)
    return cards.quantize(Decimal("0.001"))


def _int(value, default: int = 1) -> int:
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return default


def _fmt(value: Decimal) -> str:
    return f"{value.normalize():f}"


def _hours(seconds: int) -> str:
    hours = Decimal(seconds) / Decimal(3600)
    return _fmt(hours.quantize(Decimal("0.1")))


def approval_reasons(
    project: Project,
    kind: str,
    flavor: Flavor,
    workers: int | None,
    gpus_per_worker: int | None,
    gpu_milli: int | None,
    max_runtime_seconds: int | None,
) -> list[Message]:
    """Why a job of this shape in ``project`` needs approval (empty: it does not), one
    message per reason (``portal.texts``: stored with the request, rendered in each reader's
    language). Tolerates unvalidated input. A submission decides through
    ``jobs.submission.approval``, from what it gathered once."""
    runtime = max_runtime_seconds
    if runtime is None:
        runtime = default_runtime(kind)  # what job_submit gives such a job
    cards = job_cards(flavor, workers, gpus_per_worker, gpu_milli)
    return policy_reasons(policy_for_project(project), project, kind, flavor, cards, runtime)


def policy_reasons(
    policy: ApprovalPolicy | None,
    project: Project,
    kind: str,
    flavor: Flavor,
    cards: Decimal,
    runtime_seconds: int | None,
) -> list[Message]:
    """The department policy's reasons and the budget's, for a job of ``cards`` whole-card
    equivalents on ``flavor`` that may run ``runtime_seconds`` (None: unbounded)."""
    # A spent budget holds new jobs for approval everywhere (issue 6); only a policy that
    # explicitly turns ``over_budget`` off lets them through.
    budget = [] if policy is not None and not policy.over_budget else _budget_reasons(project, cards)
    if policy is None:
        return budget
    where = policy.department.name
    reasons = []
    if policy.max_gpus is not None and cards > policy.max_gpus:
        reasons.append(
            message(
                gettext_noop(
                    "%(n)s GPUs is more than the %(max)d a job may use in %(where)s without approval."
                ),
                n=_fmt(cards),
                max=policy.max_gpus,
                where=where,
            )
        )
    runtime = runtime_seconds
    if policy.max_runtime_hours is not None:
        if runtime is None:
            reasons.append(
                message(
                    gettext_noop(
                        "No maximum runtime is set; jobs in %(where)s that may run longer than %(max)d h "
                        "need approval."
                    ),
                    where=where,
                    max=policy.max_runtime_hours,
                )
            )
        elif _int(runtime, 0) > policy.max_runtime_hours * 3600:
            reasons.append(
                message(
                    gettext_noop(
                        "A maximum runtime of %(h)s h is longer than the %(max)d h allowed in %(where)s "
                        "without approval."
                    ),
                    h=_hours(_int(runtime, 0)),
                    max=policy.max_runtime_hours,
                    where=where,
                )
            )
    if policy.premium_flavors and flavor.premium:
        reasons.append(message(gettext_noop("%(flavor)s is a premium flavor."), flavor=flavor.name))
    elif flavor.pk and policy.flavors.filter(pk=flavor.pk).exists():
        reasons.append(
            message(gettext_noop("%(flavor)s needs approval in %(where)s."), flavor=flavor.name, where=where)
        )
    return reasons + budget


def request_ratio_reasons(policy: ApprovalPolicy | None, shape, request, share) -> list[Message]:
    """DESIGN §15: a job asking more CPU, memory or disk per card than the policy's
    ``max_request_ratio`` × a card's share needs approval, one reason per such dimension. A figure
    left to its default is the share itself and never does. ``shape``: workers, GPUs per worker,
    shared thousandths (``jobs.submission.Shape``); tolerates unvalidated figures."""
    if policy is None or policy.max_request_ratio is None:
        return []
    ratio = policy.max_request_ratio
    cards = Decimal(shape.gpu_milli) / 1000 if shape.gpu_milli else Decimal(_int(shape.gpus_per_worker))
    reasons = []
    for dim, word in DIMENSION_WORDS.items():
        asked, per = request.get(dim), share.get(dim)
        if not isinstance(asked, int) or isinstance(asked, bool) or not per or not cards:
            continue
        times = Decimal(asked) / (per * cards)
        if times > ratio:
            reasons.append(message(
                gettext_noop(
                    "Asks %(times)s× a card's share of %(what)s per card (%(share)s); more than %(max)s× "
                    "needs approval in %(where)s."
                ),
                what=message(word), times=_fmt(times.quantize(Decimal("0.01"), rounding=ROUND_CEILING)),
                share=quantity(dim, per), max=_fmt(ratio), where=policy.department.name,
            ))
    return reasons


def _budget_reasons(project: Project, cards: Decimal) -> list[Message]:
    return [r for r in (check(project, cards) for check in budget_checks) if r]


def job_budget_hold(*, job_id: int) -> bool:
    """A queued job nobody approved, of a tenant whose budget is spent (the scheduler holds it):
    send it to approval with the budget's reason, as a new submission would be (DESIGN §3.9), so
    an approver can let it run — a hold without a request would wait until the month ends.
    Requeued jobs (preempted, lost) are held the same way. False, changing nothing, when the job
    moved on, was approved meanwhile, or its budget no longer holds it (raised since)."""
    job = (
        Job.objects.select_related("project", "flavor", "submitted_by")
        .filter(pk=job_id, state=JobState.QUEUED, approved=False)
        .first()
    )
    if job is None:
        return False
    cards = job_cards(job.flavor, job.workers, job.gpus_per_worker, job.gpu_milli)
    reasons = _budget_reasons(job.project, cards)  # messages, rendered for each reader
    if not reasons:
        return False
    with transaction.atomic():
        held = job_transition(
            job, JobState.PENDING_APPROVAL, reason="over budget", data={"reasons": reasons}
        )
        if not held:
            return False
        job_approval_open(
            job=job, actor=job.submitted_by, decision=job_approval_decide(job, job.submitted_by, reasons)
        )
    return True


def _needs_platform(policy: ApprovalPolicy | None, cards: Decimal) -> bool:
    return policy is not None and policy.platform_gpus is not None and cards > policy.platform_gpus


# --- the ``job`` approval kind ------------------------------------------------------------


@dataclass(frozen=True)
class Approval:
    """The decision on one job (DESIGN §6): why it waits for approval (empty: it does not),
    whether a platform admin decides after the department admin, and what the request shows and
    how long each step may take (from the policy that applies)."""

    reasons: list[Message]
    platform_step: bool
    cards: Decimal  # whole-card equivalents on the job's flavor
    step_timeout_hours: int

    @property
    def needed(self) -> bool:
        return bool(self.reasons)


def step_timeout_hours(policy: ApprovalPolicy | None) -> int:
    return policy.step_timeout_hours if policy else 48


def job_approval_decide(job: Job, actor: User, reasons: list[Message] | None = None) -> Approval:
    """The decision for a job that exists (a submission decides through
    ``jobs.submission.approval`` instead, from what it gathered). ``reasons``: given by a caller
    that knows why (the budget hold)."""
    project = job.project
    policy = policy_for_project(project)
    cards = job_cards(job.flavor, job.workers, job.gpus_per_worker, job.gpu_milli)
    rank = usage_rank(actor, project)
    if reasons is None:
        reasons = priority_class_reasons(rank, job.kind, job.priority_class) + approval_reasons(
            project,
            job.kind,
            job.flavor,
            job.workers,
            job.gpus_per_worker,
            job.gpu_milli,
            job.max_runtime_seconds,
        ) + _job_request_reasons(policy, job)
    platform_step = _needs_platform(policy, cards) or class_needs_platform(job.priority_class, rank)
    return Approval(reasons, platform_step, cards, step_timeout_hours(policy))


def _job_request_reasons(policy: ApprovalPolicy | None, job: Job) -> list[Message]:
    """The ratio reasons of a job that exists, at the share it was submitted with."""
    request = Request(job.cpu_millicores, job.memory_mib, job.local_disk_gib)
    share = Share(**{k: v for k, v in (job.unit_share or {}).items() if k in DIMENSION_WORDS})
    return request_ratio_reasons(policy, job, request, share)


def job_approval_open(*, job: Job, actor: User, decision: Approval | None = None) -> ApprovalRequest:
    """Open the approval request of a job just submitted in ``pending_approval``: the
    department admin of its project's department decides, then a platform admin when the job
    is above the policy's platform threshold or its priority class is one only platform admins
    may use without approval. ``decision``: when the caller has made it already (a submission
    decides once, from what it gathered); otherwise it is made here."""
    project = job.project
    if decision is None:
        decision = job_approval_decide(job, actor)
    cards, reasons = decision.cards, decision.reasons
    # Stored as messages, read by other people later, each in their own language.
    summary = message(
        gettext_noop("Job %(name)s in %(project)s: %(cards)s × %(flavor)s"),
        name=job.name,
        project=project.code,
        cards=_fmt(cards),
        flavor=job.flavor.name,
    )
    timeout = timedelta(hours=decision.step_timeout_hours)
    steps = [StepSpec(Role.DEPARTMENT_ADMIN, project.department_id, timeout=timeout)]
    if decision.platform_step:
        steps.append(StepSpec(Role.PLATFORM_ADMIN, None, timeout=timeout))
    return approval_request_create(
        requester=actor,
        kind=ApprovalKind.JOB,
        department=project.department,
        project=project,
        subject_id=job.pk,
        payload={
            "job": job.pk,
            "name": job.name,
            "flavor": job.flavor.name,
            "kind": job.kind,
            "workers": job.workers,
            "gpus_per_worker": job.gpus_per_worker,
            "gpu_milli": job.gpu_milli,
            "cards": _fmt(cards),
            "max_runtime_seconds": job.max_runtime_seconds,
            "reasons": reasons,
        },
        summary=summary,
        steps=steps,
    )


def job_approval_withdraw(*, job: Job, actor: User | None) -> None:
    """The job left ``pending_approval`` by itself (cancelled): close its pending request."""
    request = ApprovalRequest.objects.filter(
        kind=ApprovalKind.JOB, subject_id=job.pk, state="pending"
    ).first()
    if request is not None:
        approval_request_close(
            request=request, outcome="cancelled", actor=actor, comment=_("The job was cancelled.")
        )


def _job_of(request: ApprovalRequest) -> Job:
    return Job.objects.get(pk=request.subject_id)


def _apply(request: ApprovalRequest, actor: User) -> None:
    job = _job_of(request)
    if job.state == JobState.PENDING_APPROVAL:
        _refuse_if_never_runs(job, actor)
    if job.state != JobState.PENDING_APPROVAL or not job_transition(
        job, JobState.QUEUED, reason="approved", actor=actor, data={"approval": request.pk}, approved=True
    ):
        raise ValidationError(
            _("The job is no longer waiting for approval (it is %(state)s).") % {"state": job.state}
        )


def _refuse_if_never_runs(job: Job, actor: User) -> None:
    """Inventory or quotas may have shrunk since the job was submitted: approving a job that
    could never start would only queue it for ever (issue 18 item 4). Reject it instead."""
    errors = never_runs_errors(
        viewer=actor,
        project=job.project,
        flavor=job.flavor,
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
        gpu_milli=job.gpu_milli,
        min_workers=job.min_workers,
    )
    if errors:
        messages = [m for field_messages in errors.values() for m in field_messages]
        raise ValidationError(
            _("%(why)s Reject the request instead.") % {"why": " ".join(messages)}
        )


_CLOSE_TARGET = {
    "rejected": JobState.REJECTED,
    "expired": JobState.EXPIRED,
    "cancelled": JobState.CANCELLED,
}


def _close(request: ApprovalRequest, outcome: str, actor: User | None, comment: str) -> None:
    job = _job_of(request)
    if job.state != JobState.PENDING_APPROVAL:
        return  # it already left (e.g. cancelled by its owner, which closed this request)
    job_transition(
        job,
        _CLOSE_TARGET[outcome],
        reason=f"approval {outcome}",
        actor=actor,
        data={"approval": request.pk, "comment": comment[:500]},
        finished_at=timezone.now(),
    )


def with_approval_request(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Annotate each job with the id of its latest approval request (``approval_request_pk``)."""
    latest = ApprovalRequest.objects.filter(kind=ApprovalKind.JOB, subject_id=OuterRef("pk")).order_by("-id")
    return jobs.annotate(approval_request_pk=Subquery(latest.values("pk")[:1]))


def approval_request_of(job: Job) -> int | None:
    if hasattr(job, "approval_request_pk"):
        return job.approval_request_pk
    return (
        ApprovalRequest.objects.filter(kind=ApprovalKind.JOB, subject_id=job.pk)
        .order_by("-id")
        .values_list("pk", flat=True)
        .first()
    )


def _facts(request: ApprovalRequest, viewer: User) -> dict | None:
    """What the approver weighs the request against, now: the flavor's capacity, the quotas
    and usage on the project's path, and whether the job could ever run."""
    job = Job.objects.select_related("project", "flavor").filter(pk=request.subject_id).first()
    return job_request_facts(job, viewer) if job is not None else None


def register() -> None:
    register_kind(ApprovalKindHandler(kind=ApprovalKind.JOB, apply=_apply, close=_close, facts=_facts))

"""One way down for a submission (issue 31 item 5).

``gather`` reads once what every check and the approval need to know — the shape, its whole-card
equivalents on each acceptable flavor, the runtime, the submitter's rank in the project, the
department policy that applies — into a plain value, a :class:`Submission`. ``check`` runs every
rule of a submission on it (``job_submit`` and a saved template alike), and ``approval`` decides
from it whether the job waits for approval, why, and whether a platform admin decides too. Only
then does ``jobs.services.job_submit`` create the job.

Before this, one submission read the policy, counted its cards and ranked its submitter two or
three times on the way (``jobs.rules`` six times, ``jobs.approvals`` four); the whole-machine
requests (CPU, memory, disk) join the shape here, once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from jobs import environment, requests, rules
from jobs.approvals import (
    Approval,
    job_cards,
    policy_for_project,
    policy_reasons,
    request_ratio_reasons,
    step_timeout_hours,
)
from jobs.models import (
    COMMAND_MAX_LENGTH,
    SUBMITTABLE_KINDS,
    ApprovalPolicy,
    JobKind,
    PriorityClass,
    image_validator,
)
from jobs.retries import retry_policy
from jobs.scheduler.footprint import DIMENSIONS, NodeSize, Request, Share
from jobs.scheduling import autoscale as autoscaling
from portal import permissions as perm
from portal.models import Project, User
from portal.selectors import scope_for
from portal.texts import Message
from quotas.models import Flavor

MAX_WORKERS = 4096
MAX_RUNTIME = 90 * 86400


@dataclass(frozen=True)
class Shape:
    """How many devices the job asks for, and how: ``min_workers`` (elastic jobs) is what it
    starts with; ``gpu_milli`` a shared request's thousandths of one device."""

    workers: int
    gpus_per_worker: int
    gpu_milli: int | None = None
    min_workers: int | None = None

    def fields(self) -> dict:
        return {
            "workers": self.workers,
            "gpus_per_worker": self.gpus_per_worker,
            "gpu_milli": self.gpu_milli,
            "min_workers": self.min_workers,
        }


@dataclass(frozen=True)
class Submission:
    """What a submission needs to know, read once. ``flavors``: the acceptable flavors in order
    of preference (DESIGN §14), the first being the one the job is recorded with; ``cards``: the
    shape's whole-card equivalents on each, in the same order."""

    actor: User
    project: Project
    kind: str
    flavors: tuple[Flavor, ...]
    priority_class: PriorityClass | None  # None only in the form's summary, before one is chosen
    shape: Shape
    max_runtime_seconds: int | None  # as asked (None: the kind's default)
    may_submit: bool  # a member of the project, or an admin above it
    rank: int  # the submitter's rank in the project (jobs.models.USAGE_ROLE_RANK)
    policy: ApprovalPolicy | None  # the department policy that applies (None: none)
    cards: tuple[Decimal, ...]
    # What each worker asks besides its GPUs (DESIGN §15; None: its GPUs' share), the lowest CUDA
    # version it needs (""), and each acceptable flavor's nodes and share per unit, in order.
    request: Request = field(default_factory=Request)
    min_cuda_version: str = ""
    sizes: tuple[tuple[NodeSize, ...], ...] = ()
    shares: tuple[Share, ...] = ()

    @property
    def runtime_seconds(self) -> int | None:
        """The maximum runtime the job gets when nothing refuses it (``rules.job_runtime``)."""
        if self.max_runtime_seconds is None:
            return rules.default_runtime(self.kind)
        return self.max_runtime_seconds


def gather(
    *,
    actor: User,
    project: Project,
    kind: str,
    flavors: tuple[Flavor, ...] | list[Flavor],
    priority_class: PriorityClass | None,
    shape: Shape,
    max_runtime_seconds: int | None = None,
    request: Request | None = None,
    min_cuda_version: str = "",
) -> Submission:
    """Read what the checks and the decision need. Tolerates unvalidated input (the form's live
    summary gathers before the shape is checked): nothing here refuses."""
    flavors = tuple(flavors)
    sizes = tuple(tuple(requests.node_sizes(flavor)) for flavor in flavors)
    return Submission(
        actor=actor,
        project=project,
        kind=kind,
        flavors=flavors,
        priority_class=priority_class,
        shape=shape,
        max_runtime_seconds=max_runtime_seconds,
        may_submit=may_submit(actor, project),
        rank=rules.usage_rank(actor, project),
        policy=policy_for_project(project),
        cards=tuple(
            job_cards(flavor, shape.workers, shape.gpus_per_worker, shape.gpu_milli) for flavor in flavors
        ),
        request=request or Request(),
        min_cuda_version=min_cuda_version,
        sizes=sizes,
        shares=tuple(requests.flavor_share(f, list(s)) for f, s in zip(flavors, sizes, strict=True)),
    )


def may_submit(actor: User, project: Project) -> bool:
    """Members of the project submit to it, and the admins above it (the form offers these)."""
    scope = scope_for(actor)
    return project.pk in scope.member_projects or perm.can_manage_projects_of(scope, project.department_id)


# --- the checks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checked:
    """What the checks hand to the job's creation: its working environment and autoscaling
    fields, its maximum runtime, and whether its priority class asks for approval."""

    job_fields: dict
    runtime_seconds: int | None
    class_needs_approval: bool


def check(
    sub: Submission,
    *,
    image: str,
    command: str = "",
    mounts: list[str] | None = None,
    env: list[dict] | None = None,
    expose_port: int | None = None,
    autoscale: dict | None = None,
) -> Checked:
    """Every rule of a submission that does not depend on the jobs live at that moment (the
    dev-job limit), on each acceptable flavor in order: the first flavor that breaks a rule
    raises, every refusal of a stage at once (the form shows them side by side)."""
    perm.require(sub.actor.is_active and sub.may_submit)  # a deactivated user submits nothing
    checked = None
    for flavor, sizes, share in zip(sub.flavors, sub.sizes, sub.shares, strict=True):
        _validate_text(image=image, command=command)
        job_fields = _working_environment(
            sub.project, sub.kind, image=image, mounts=mounts, env=env, expose_port=expose_port
        )
        if not flavor.active:
            raise ValidationError({"flavor": [_("%(f)s is not available for new jobs.") % {"f": flavor}]})
        job_fields |= _shape_and_autoscale(sub, flavor, autoscale, sizes, share)
        runtime = sub.max_runtime_seconds
        if runtime is not None and not 60 <= runtime <= MAX_RUNTIME:
            raise ValidationError({"max_runtime_seconds": [_("Between 60 s and 90 days.")]})
        runtime, class_needs_approval = all_errors(
            lambda: rules.job_runtime(sub.kind, sub.max_runtime_seconds),
            lambda: rules.priority_class_check(
                rank=sub.rank, project=sub.project, kind=sub.kind, priority_class=sub.priority_class
            ),
            errors=rules.never_runs_errors(
                viewer=sub.actor, project=sub.project, flavor=flavor, **sub.shape.fields()
            ),
        )
        checked = checked or Checked(job_fields, runtime, class_needs_approval)
    return checked


def check_retries(kind: str, max_retries: int) -> None:
    """DESIGN §17: a training job may ask to be retried after a failed run, up to the centre's
    maximum (``RetryPolicy.max_retries_limit``). An inference service's replicas restart anyway
    and a development job is a person's session: no retries for them."""
    if max_retries == 0:
        return
    limit = retry_policy().max_retries_limit
    if kind != JobKind.TRAINING:
        raise ValidationError({"max_retries": [_("Only training jobs are retried.")]})
    if not 0 <= max_retries <= limit:
        raise ValidationError({"max_retries": [
            _("Between 0 and %(limit)s (the centre's maximum).") % {"limit": limit}]})


def _validate_shape(kind, flavor: Flavor, shape: Shape) -> None:
    workers, gpus_per_worker, gpu_milli, min_workers = (
        shape.workers,
        shape.gpus_per_worker,
        shape.gpu_milli,
        shape.min_workers,
    )
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


def _working_environment(project, kind, *, image, mounts, env, expose_port) -> dict:
    """DESIGN §13, checked before anything is written: the image's registry, the mounts (the
    project's storages only), the env vars and the exposed port (dev jobs). Every error at once."""
    result: dict = {"expose_port": expose_port}
    all_errors(
        lambda: environment.check_image(image),
        lambda: result.update(mounts=environment.clean_mounts(project, mounts)),
        lambda: result.update(env=environment.clean_env(env, project=project)),
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


def _shape_and_autoscale(sub: Submission, flavor: Flavor, autoscale, sizes, share: Share) -> dict:
    """The shape's checks, the whole-machine request's and the autoscaling settings'
    (``autoscale.clean_submitted``, the rules of the job page's form), every error at once.
    Returns the ``Job.autoscale_*`` fields ({} when the job does not scale from load) and the
    request's."""
    _shape, _request, fields = all_errors(
        lambda: _validate_shape(sub.kind, flavor, sub.shape),
        lambda: _validate_request(sub, flavor, list(sizes), share),
        lambda: autoscaling.clean_submitted(
            kind=sub.kind, min_workers=sub.shape.min_workers, workers=sub.shape.workers, autoscale=autoscale
        ),
    )
    return (fields or {}) | request_fields(sub, share)


def request_fields(sub: Submission, share: Share) -> dict:
    """The ``Job`` fields of the request: what each worker asked (None: the share) and the share
    per unit it was submitted with (``Job.unit_share``: the defaults, and what a card's price
    includes)."""
    return {
        **{dim: sub.request.get(dim) for dim in DIMENSIONS},
        "unit_share": {dim: share.get(dim) for dim in DIMENSIONS if share.get(dim) is not None},
        "min_cuda_version": sub.min_cuda_version,
    }


def _validate_request(sub: Submission, flavor: Flavor, sizes: list[NodeSize], share: Share) -> None:
    """DESIGN §15: each figure a whole number from 1 up to what one worker can be given — the
    flavor's biggest node at the share, or one unit's share for a shared worker. Refused, never
    clamped; every error at once, each on its field, naming the limit."""
    errors: dict[str, list[str]] = {}
    limit = requests.per_worker_limit(flavor, sizes)
    shared = sub.shape.gpu_milli is not None
    for dim in DIMENSIONS:
        asked = sub.request.get(dim)
        if asked is None:
            continue
        problem = _figure_error(asked) or _over_limit(flavor, dim, asked, limit, share, shared)
        if problem:
            errors[dim] = [problem]
    version = sub.min_cuda_version
    if version and not (isinstance(version, str) and requests.CUDA_VERSION.fullmatch(version)):
        errors["min_cuda_version"] = [_("A CUDA version such as 12.4.")]
    if errors:
        raise ValidationError(errors)


def _figure_error(asked) -> str | None:
    if not isinstance(asked, int) or isinstance(asked, bool):
        return _("A whole number.")
    if asked < 1:
        return _("At least 1: leave it empty for the default share.")
    if asked > requests.ABSURD:
        return _("At most %(n)s.") % {"n": f"{requests.ABSURD:,}"}
    return None


def _over_limit(
    flavor: Flavor, dim: str, asked: int, limit: Request, share: Share, shared: bool
) -> str | None:
    most = share.get(dim) if shared else limit.get(dim)
    if most is None or asked <= most:
        return None
    if shared:
        return _("A shared worker may ask at most one %(f)s unit's share: %(most)s.") % {
            "f": flavor.name, "most": requests.quantity_text(dim, most)}
    node = requests.biggest_node(flavor)
    return _(
        "More than any node of %(f)s can give one worker: at most %(most)s (its biggest node, %(node)s, "
        "has %(units)d units at %(share)s each)."
    ) % {
        "f": flavor.name,
        "most": requests.quantity_text(dim, most),
        "node": node.name if node else "—",
        "units": node.gpu_count if node else 0,
        "share": requests.quantity_text(dim, share.get(dim)),
    }


def all_errors(*checks, errors: dict[str, list[str]] | None = None) -> list:
    """Runs every check, merges the ValidationErrors they raise (into ``errors``: those found
    before) and raises them once, so the form shows every refusal side by side. Returns each
    check's result."""
    errors = {} if errors is None else errors
    results = []
    for one in checks:
        try:
            results.append(one())
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                errors.setdefault(field, []).extend(messages)
            results.append(None)
    if errors:
        raise ValidationError(errors)
    return results


# --- the decision ----------------------------------------------------------------------------


def approval(sub: Submission, *, class_needs_approval: bool) -> Approval:
    """DESIGN §6, from what was gathered: the priority class's reason (``check`` said the class
    asks for approval at the submitter's rank), then each acceptable flavor's policy and budget
    reasons — a job that may run on several flavors needs what any of them would need."""
    first = [rules.priority_class_reason(sub.priority_class)] if class_needs_approval else []
    policy = sub.policy
    over_platform = (
        policy is not None and policy.platform_gpus is not None and sub.cards[0] > policy.platform_gpus
    )
    platform_step = over_platform or rules.class_needs_platform(sub.priority_class, sub.rank)
    return Approval(
        _with_flavor_reasons(sub, first), platform_step, sub.cards[0], step_timeout_hours(policy)
    )


def _with_flavor_reasons(sub: Submission, reasons: list[Message]) -> list[Message]:
    shares = sub.shares or tuple(Share() for _f in sub.flavors)
    for flavor, cards, share in zip(sub.flavors, sub.cards, shares, strict=True):
        found = policy_reasons(sub.policy, sub.project, sub.kind, flavor, cards, sub.runtime_seconds)
        found += request_ratio_reasons(sub.policy, sub.shape, sub.request, share)
        for reason in found:
            if reason not in reasons:
                reasons.append(reason)
    return reasons


def summary_reasons(sub: Submission) -> list[Message]:
    """The approval the form's summary announces before the job is checked (no class chosen yet,
    perhaps): like ``approval``, but a priority class the submitter may not use is left to the
    check's error, not given as a reason."""
    first = rules.priority_class_reasons(sub.rank, sub.kind, sub.priority_class) if sub.priority_class else []
    return _with_flavor_reasons(sub, first)

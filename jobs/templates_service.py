"""Submission templates (DESIGN §13, issue 22 item 6): a saved submission body under a name, the
owner's own or shared with the project. Saving checks the values as a submission is checked
(``services.job_submit_check``); submitting from a template goes through ``job_submit`` again, so
a storage removed or a rule changed since is refused then, with the reason.

``values`` is the API's submission body (``name`` optional; ``project`` is the template's own):
flavor and priority by name, mounts by storage name, env as ``{name, value}`` / ``{name, secret,
key}`` — what a script would POST to ``/api/v1/jobs/``."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils.translation import gettext as _

from jobs import selectors, services, workflows
from jobs.models import Job, JobTemplate, PriorityClass, name_validator
from portal import permissions as perm
from portal.models import Project, User
from portal.selectors import scope_for
from quotas.models import Flavor

NAME_MAX = 80
_INT, _OPT_INT, _STR, _BOOL, _LIST, _OPT_DICT = "int", "int?", "str", "bool", "list", "dict?"
# The submission body's fields a template holds, with their JSON types.
VALUE_TYPES = {
    "name": _STR,
    "kind": _STR,
    "flavor": _STR,
    "priority": _STR,
    "image": _STR,
    "command": _STR,
    "workers": _INT,
    "gpus_per_worker": _INT,
    "gpu_milli": _OPT_INT,
    "min_workers": _OPT_INT,
    "max_runtime_seconds": _OPT_INT,
    "checkpointing": _BOOL,
    "max_retries": _INT,  # DESIGN §17; at most the centre's maximum
    "mounts": _LIST,
    "env": _LIST,
    "expose_port": _OPT_INT,
    "cpu_millicores": _OPT_INT,  # DESIGN §15, per worker; null: the GPUs' share
    "memory_mib": _OPT_INT,
    "local_disk_gib": _OPT_INT,
    "min_cuda_version": _STR,
    "autoscale": _OPT_DICT,  # {"query", "target", "cooldown_seconds"}: checked by jobs.scheduling.autoscale
    # DESIGN §17: an array spec ("0-99%10"; empty: one job). Dependencies name jobs, which change
    # from one submission to the next: they are given with each submission, never kept in a template.
    "array": _STR,
}
REQUIRED = ("kind", "flavor", "priority", "image")
_STR_MAX = 20_000  # above the command's limit: a longer string is refused before any other check


# ---- selectors -----------------------------------------------------------------------------


def visible_templates(user: User) -> QuerySet[JobTemplate]:
    """The user's own templates and the shared ones of projects they may submit to. Another
    user's private template is never visible (404 everywhere), not even to an admin."""
    if not user.is_authenticated:
        return JobTemplate.objects.none()
    projects = selectors.submittable_projects(user).values("id")
    return (
        JobTemplate.objects.filter(Q(owner=user) | Q(shared=True, project_id__in=projects))
        .select_related("project", "owner")
        .order_by("project__code", "name", "id")
    )


def can_change(user: User, template: JobTemplate) -> bool:
    """The owner changes their template; a shared one also whoever administers its project."""
    if template.owner_id == user.pk:
        return True
    return template.shared and perm.can_edit_project(scope_for(user), template.project)


# ---- values --------------------------------------------------------------------------------


def _type_ok(value, kind: str) -> bool:
    if kind == _OPT_INT and value is None:
        return True
    if kind in (_INT, _OPT_INT):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _STR:
        return isinstance(value, str) and len(value) <= _STR_MAX
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _OPT_DICT:
        return value is None or isinstance(value, dict)
    return isinstance(value, list)


def clean_values(project: Project, values) -> dict:
    """``values`` with every key known and of its JSON type (``project`` may name the template's
    own project only); the rules are checked by ``submit_kwargs`` + ``job_submit_check``."""
    if not isinstance(values, dict):
        raise ValidationError({"values": [_("An object: the submission body.")]})
    errors: dict[str, list[str]] = {}
    cleaned = {}
    for key, value in values.items():
        if key == "project":
            if value != project.pk:
                errors.setdefault("project", []).append(_("The template's own project."))
            continue
        kind = VALUE_TYPES.get(key)
        if kind is None:
            errors.setdefault("values", []).append(_("Unknown field %(name)s.") % {"name": str(key)[:40]})
        elif not _type_ok(value, kind):
            errors.setdefault(key, []).append(_("Not a valid value for this field."))
        else:
            cleaned[key] = value
    for key in REQUIRED:
        if key not in values:
            errors.setdefault(key, []).append(_("This field is required."))
    if errors:
        raise ValidationError(errors)
    return cleaned


def submit_kwargs(project: Project, values: dict) -> dict:
    """Clean ``values`` as keyword arguments of ``job_submit`` (without ``name`` and ``actor``):
    the flavor and priority class found by name, the defaults of the API filled in."""
    kwargs = {k: v for k, v in values.items() if k not in ("name", "flavor", "priority")}
    errors: dict[str, list[str]] = {}
    kwargs["flavor"] = Flavor.objects.filter(name=values["flavor"]).first()
    if kwargs["flavor"] is None:
        errors["flavor"] = [_("No flavor of this name.")]
    kwargs["priority_class"] = PriorityClass.objects.filter(name=values["priority"]).first()
    if kwargs["priority_class"] is None:
        errors["priority"] = [_("No priority class of this name.")]
    if errors:
        raise ValidationError(errors)
    kwargs["project"] = project
    return kwargs


def _check(actor: User, project: Project, values) -> dict:
    """The values, cleaned and passed through every check of a submission."""
    values = clean_values(project, values)
    if "name" in values:
        try:
            name_validator(values["name"])
        except ValidationError as exc:
            raise ValidationError({"name": exc.messages}) from exc
    kwargs = submit_kwargs(project, values)
    kwargs.pop("checkpointing", None)
    array = kwargs.pop("array", "")
    try:
        if array:
            workflows.parse_array(array)
        services.job_submit_check(actor=actor, **kwargs)
    except ValidationError as exc:
        raise _renamed(exc) from exc
    return {"project": project.pk, **values}


def _renamed(exc: ValidationError) -> ValidationError:
    if not hasattr(exc, "error_dict"):
        return exc
    return ValidationError({"priority" if f == "priority_class" else f: e for f, e in exc.error_dict.items()})


def job_values(job: Job) -> tuple[dict, list[str]]:
    """A job's submission as template values, and the names of the storages it mounted that its
    project no longer has (left out)."""
    names = [m["name"] for m in job.mounts or ()]
    active = set(job.project.storages.filter(active=True, name__in=names).values_list("name", flat=True))
    values = {
        "name": job.name,
        "kind": job.kind,
        "flavor": job.flavor.name,
        "priority": job.priority_class.name,
        "image": job.image,
        "command": job.command,
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
        "gpu_milli": job.gpu_milli,
        "min_workers": job.min_workers,
        "max_runtime_seconds": job.max_runtime_seconds,
        "checkpointing": job.checkpointing,
        "max_retries": job.max_retries,
        "mounts": [n for n in names if n in active],
        "env": list(job.env or ()),
        "expose_port": job.expose_port,
        "cpu_millicores": job.cpu_millicores,
        "memory_mib": job.memory_mib,
        "local_disk_gib": job.local_disk_gib,
        "min_cuda_version": job.min_cuda_version,
    }
    if job.autoscale_query:
        values["autoscale"] = autoscale_values(job)
    if job.array_id is not None and not job.array.backend_id:
        values["array"] = job.array.spec
    return values, [n for n in names if n not in active]


def autoscale_values(job: Job) -> dict | None:
    """A job's autoscaling as a submission's ``autoscale`` (None: it does not scale from load)."""
    if not job.autoscale_query:
        return None
    return {
        "query": job.autoscale_query,
        "target": format(job.autoscale_target.normalize(), "f"),  # "10", not "10.000" or "1E+1"
        "cooldown_seconds": job.autoscale_cooldown_seconds,
    }


# ---- writes --------------------------------------------------------------------------------


def _clean_name(name) -> str:
    name = name.strip() if isinstance(name, str) else ""
    if not name or len(name) > NAME_MAX or any(ord(c) < 32 for c in name):
        raise ValidationError({"name": [_("A name of 1–%(n)d characters.") % {"n": NAME_MAX}]})
    return name


def _require_share(actor: User, project: Project, shared: bool) -> None:
    if shared and not perm.can_edit_project(scope_for(actor), project):
        raise ValidationError({"shared": [_("Only the project's administrators share templates with it.")]})


def _saved(template: JobTemplate) -> JobTemplate:
    try:
        with transaction.atomic():
            template.save()
    except IntegrityError:
        raise ValidationError(
            {"name": [_("You already have a template of this name in this project.")]}
        ) from None
    return template


def template_save(*, actor: User, project: Project, name: str, values, shared: bool = False) -> JobTemplate:
    """A new template of ``actor`` in ``project``: they must be able to submit there, and only
    the project's administrators share one with it."""
    name = _clean_name(name)
    values = _check(actor, project, values)  # refuses (403) whoever cannot submit to the project
    _require_share(actor, project, shared)
    return _saved(JobTemplate(name=name, project=project, owner=actor, shared=bool(shared), values=values))


def template_update(
    *, actor: User, template: JobTemplate, name: str | None = None, values=None, shared: bool | None = None
) -> JobTemplate:
    perm.require(can_change(actor, template))
    if name is not None:
        template.name = _clean_name(name)
    if shared is not None:
        _require_share(actor, template.project, shared)
        template.shared = bool(shared)
    if values is not None:
        template.values = _check(actor, template.project, values)
    return _saved(template)


def template_delete(*, actor: User, template: JobTemplate) -> None:
    perm.require(can_change(actor, template))
    template.delete()


def template_submit(*, actor: User, template: JobTemplate, overrides: dict | None = None) -> Job:
    """A job from the template, ``overrides`` (any of its fields, e.g. ``name``) laid over its
    values; ``job_submit`` checks everything again (a storage removed since is refused)."""
    values = clean_values(template.project, {**template.values, **(overrides or {})})
    if not values.get("name"):
        raise ValidationError({"name": [_("Name the job (the template has no job name).")]})
    kwargs = submit_kwargs(template.project, values)
    try:
        return services.job_submit(actor=actor, name=values["name"], **kwargs)
    except ValidationError as exc:
        raise _renamed(exc) from exc


def storage_rows(project: Project) -> QuerySet:
    """The project's active storages, as its users see them."""
    return project.storages.filter(active=True).order_by("name")


def secret_rows(project: Project) -> QuerySet:
    """The Secrets the project declares (names and notes: the portal holds no value)."""
    return project.secrets.filter(active=True).order_by("name")

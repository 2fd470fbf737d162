"""Pages of submission templates (issue 22 item 6): the list, saving one from the submission form
or from a job, and filling the form from one (``/jobs/new/?template=<id>``)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from jobs import environment, selectors
from jobs import templates_service as templates
from jobs.forms import JobForm
from jobs.models import JobKind, PriorityClass
from portal.selectors import get_visible
from quotas.models import Flavor

# Fields of the values that the form takes as they are.
_PLAIN = (
    "name",
    "array",
    "kind",
    "workers",
    "gpus_per_worker",
    "min_workers",
    "gpu_milli",
    "image",
    "command",
    "max_runtime_seconds",
    "checkpointing",
    "max_retries",
    "expose_port",
    "cpu_millicores",
    "memory_mib",
    "local_disk_gib",
    "min_cuda_version",
)


def mount_initial(request, project, names) -> list[int]:
    """The project's active storages of those names, for the form; one removed since is left
    out, and the page says so."""
    names = [n for n in names if isinstance(n, str)]
    found = dict(project.storages.filter(active=True, name__in=names).values_list("name", "pk"))
    missing = [n for n in names if n not in found]
    if missing:
        messages.warning(
            request,
            _("Left out: %(names)s — no longer a storage of project %(project)s.")
            % {"names": ", ".join(missing), "project": project.code},
        )
    return [found[n] for n in names if n in found]


def template_initial(request) -> dict:
    """``?template=<id>`` fills the form from a template the user may use."""
    template = _chosen_template(request)
    if template is None:
        return {}
    values = template.values
    initial = {k: values[k] for k in _PLAIN if k in values}
    initial["project"] = template.project_id
    flavor = Flavor.objects.filter(name=values.get("flavor")).first()
    priority = PriorityClass.objects.filter(name=values.get("priority")).first()
    initial["flavor"] = flavor.pk if flavor else None
    initial["priority_class"] = priority.pk if priority else None
    initial["mounts"] = mount_initial(request, template.project, values.get("mounts") or [])
    env = [e for e in values.get("env") or [] if isinstance(e, dict)]
    initial["env_text"] = environment.env_lines(env, secrets=False)
    initial["secret_env_text"] = environment.env_lines(env, secrets=True)
    return initial | autoscale_initial(values)


def autoscale_initial(values: dict) -> dict:
    """The form's autoscaling fields from template values' ``autoscale`` (none: left empty)."""
    autoscale = values.get("autoscale")
    if not isinstance(autoscale, dict):
        return {}
    return {
        "autoscale_query": autoscale.get("query", ""),
        "autoscale_target": autoscale.get("target", ""),
        "autoscale_cooldown_seconds": autoscale.get("cooldown_seconds"),
    }


def _chosen_template(request):
    raw = request.GET.get("template", "")
    if not raw.isdigit():
        return None
    return templates.visible_templates(request.user).filter(pk=int(raw)).first()


def picker_context(request) -> dict:
    """The "start from a template" picker of the submission form."""
    chosen = _chosen_template(request)
    return {
        "job_templates": list(templates.visible_templates(request.user)),
        "chosen_template": chosen.pk if chosen else None,
        "template_name": request.POST.get("template_name", ""),
        "template_shared": bool(request.POST.get("template_shared")),
    }


def form_values(form: JobForm) -> dict:
    """A valid submission form as template values (the API's submission body)."""
    data = form.submit_kwargs()
    values = {k: data[k] for k in _PLAIN if k in data}
    values.update(
        flavor=form.cleaned_data["flavor"].name,  # a template names one flavor (alternatives: per job)
        priority=data["priority_class"].name,
        mounts=data["mounts"],
        env=data["env"],
    )
    if data["autoscale"] is not None:
        values["autoscale"] = data["autoscale"]
    return values


def save_from_form(request, form: JobForm):
    """The form's "Save as template" button: a redirect to the form filled from the new template,
    or None (the errors are on the form)."""
    if not form.is_valid():
        return None
    try:
        template = templates.template_save(
            actor=request.user,
            project=form.cleaned_data["project"],
            name=request.POST.get("template_name", ""),
            values=form_values(form),
            shared=bool(request.POST.get("template_shared")),
        )
    except ValidationError as exc:
        _template_errors(form, exc)
        return None
    except PermissionDenied as exc:
        form.add_error("project", str(exc))
        return None
    messages.success(request, _("Template %(name)s was saved.") % {"name": template.name})
    return redirect(f"{reverse('job-new')}?template={template.pk}")


def _template_errors(form: JobForm, exc: ValidationError) -> None:
    """The template's own fields (its name, sharing) above the form; the values' on their fields."""
    if not hasattr(exc, "error_dict"):
        form.add_error(None, exc)
        return
    for field, errors in exc.message_dict.items():
        if field in ("name", "shared", "values"):
            for error in errors:
                form.add_error(None, _("Template: %(error)s") % {"error": error})
        else:
            form.add_service_error(
                ValidationError({"priority_class" if field == "priority" else field: errors})
            )


@login_required
def template_list(request):
    rows = [(t, templates.can_change(request.user, t)) for t in templates.visible_templates(request.user)]
    return render(request, "jobs/templates.html", {"rows": rows})


@login_required
@require_POST
def template_delete(request, pk: int):
    template = get_visible(templates.visible_templates(request.user), pk=pk)
    templates.template_delete(actor=request.user, template=template)
    messages.success(request, _("Template %(name)s was deleted.") % {"name": template.name})
    return redirect("job-template-list")


@login_required
def template_from_job(request, pk: int):
    """The job page's "Save as template": the job's submission under a name."""
    job = get_visible(selectors.visible_jobs(request.user), pk=pk)
    if job.kind == JobKind.EXTERNAL:
        raise PermissionDenied  # not a portal submission: nothing of it is a template
    values, left_out = templates.job_values(job)
    error = None
    if request.method == "POST":
        try:
            template = templates.template_save(
                actor=request.user,
                project=job.project,
                name=request.POST.get("template_name", ""),
                values=values,
                shared=bool(request.POST.get("template_shared")),
            )
        except ValidationError as exc:
            error = " ".join(exc.messages)
        else:
            messages.success(request, _("Template %(name)s was saved.") % {"name": template.name})
            return redirect("job-template-list")
    context = {
        "job": job,
        "left_out": left_out,
        "error": error,
        "template_name": request.POST.get("template_name", job.name),
        "template_shared": bool(request.POST.get("template_shared")),
    }
    return render(request, "jobs/template_from_job.html", context)

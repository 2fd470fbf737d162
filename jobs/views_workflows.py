"""Pages of arrays (DESIGN §17): one array with its tasks' states, and cancel all."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from jobs import selectors, services, workflows
from jobs.models import DependencyCondition, Job
from portal.selectors import get_visible


@login_required
def array_detail(request, pk: int):
    array = get_visible(selectors.visible_arrays(request.user), pk=pk)
    tasks = list(selectors.array_tasks(array))
    return render(
        request,
        "jobs/array_detail.html",
        {
            "array": array,
            "tasks": tasks,
            "states": sorted(workflows.array_states(array).items()),
            "can_cancel": selectors.can_cancel_array(request.user, array, tasks),
        },
    )


@login_required
@require_POST
def array_cancel(request, pk: int):
    array = get_visible(selectors.visible_arrays(request.user), pk=pk)
    try:
        done = services.array_cancel(actor=request.user, array=array)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, _("%(n)d tasks of %(name)s were cancelled or asked to stop.")
                         % {"n": done, "name": array.name})
    return redirect("array-detail", pk=array.pk)


def job_workflow_context(job: Job, user) -> dict:
    """The job page's array and dependencies: each job it waits for, with its state only when the
    reader may see that job (a number alone otherwise)."""
    deps = list(selectors.job_dependencies(job))
    seen = set(selectors.visible_jobs(user).filter(pk__in=[d.depends_on_id for d in deps])
               .values_list("pk", flat=True))
    labels = dict(DependencyCondition.choices)
    return {
        "array": job.array if job.array_id else None,
        "dependencies": [
            {"job": d.depends_on_id, "condition": labels[d.condition], "visible": d.depends_on_id in seen,
             "state": d.depends_on.state if d.depends_on_id in seen else None,
             "met": d.depends_on_id in seen and workflows.met(d.condition, d.depends_on.state)}
            for d in deps
        ],
    }

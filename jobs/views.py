"""Pages of jobs: the list, the queue, a job, the submission form, priority classes; and the
quota tree. Views validate input with forms and call selectors and services only."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from jobs import (
    charts,
    environment,
    estimates,
    requests,
    rules,
    selectors,
    services,
    submission,
    templates_service,
    views_templates,
)
from jobs.approvals import approval_request_of
from jobs.forms import (
    ALL_STATES,
    QUEUE_STATES,
    AutoscaleForm,
    IdleExemptionForm,
    JobFilterForm,
    JobForm,
    PriorityClassForm,
)
from jobs.hooks import job_page_context
from jobs.idle_exemptions import idle_exemption_request_create
from jobs.models import Job, JobKind, PriorityClass, backend_name
from jobs.quota_tree import quota_borrowers, quota_grid
from jobs.requests import queued_request
from jobs.scheduler.footprint import Request
from jobs.scheduling import autoscale, explaining, start_estimates
from jobs.scheduling.cycle import explain_backoffs, explain_job
from jobs.states import JobState
from jobs.views_workflows import job_workflow_context
from portal.approvals.selectors import visible_approval_requests
from portal.db import one_snapshot
from portal.selectors import get_visible, scope_for
from quotas.models import Flavor
from quotas.selectors import default_flavor_id

LIST_PAGE_SIZE = 25
QUEUE_PAGE_SIZE = 50
QUEUE_REFRESH_SECONDS = 5
ALL_FLAVORS = "all"  # the quota tree's choice for every flavor at once


@login_required
def quota_tree(request):
    """The quota tree of one flavor, or of all at once (rows = nodes, columns = flavors), with
    usage split into in-quota, on-loan and lent per visible node (``jobs.quota_tree``)."""
    flavors = list(Flavor.objects.filter(active=True))
    wanted = request.GET.get("flavor")
    show_all = wanted == ALL_FLAVORS
    chosen = next((f for f in flavors if f.name == wanted), None)
    if chosen is None and not show_all:
        default = default_flavor_id(request.user)
        chosen = next((f for f in flavors if f.pk == default), flavors[0] if flavors else None)
    columns = flavors if show_all else [chosen] if chosen else []
    grid = quota_grid(request.user, columns)
    scope = scope_for(request.user)
    if show_all:  # only the flavors in which the viewer sees some quota
        held = [i for i in range(len(columns)) if any(r.cells[i] for r in grid["rows"])]
        columns = [columns[i] for i in held]
        grid["rows"] = [replace(r, cells=[r.cells[i] for i in held]) for r in grid["rows"]]
    return render(
        request,
        "quotas/tree.html",
        {
            "flavors": flavors,
            "flavor": chosen,
            "show_all": show_all,
            "all_value": ALL_FLAVORS,
            "columns": columns,
            "rows": grid["rows"],
            "capacity": grid["capacity"].get(chosen.pk, 0) if chosen else 0,
            "can_edit_fair": scope.platform_admin,
            "can_see_fair_report": scope.sees_everything or bool(scope.admin_departments),
        },
    )


@login_required
def quota_borrowers_view(request, pk: int):
    """Who borrows a quota node's idle quota (an htmx fragment of the quota tree, or a page of its
    own without JavaScript). A node the viewer does not see is a 404."""
    found = quota_borrowers(request.user, pk)
    if found is None:
        raise Http404
    fragment = request.headers.get("HX-Request")
    template = "quotas/borrowers_fragment.html" if fragment else "quotas/borrowers.html"
    return render(request, template, {"flavor": found["node"].flavor, **found})


# --- list and queue -----------------------------------------------------------------------


@login_required
def job_list(request):
    form = JobFilterForm(request.GET, user=request.user, states=ALL_STATES)
    jobs = selectors.filter_jobs(selectors.visible_jobs(request.user), request.user, form.filters())
    jobs = jobs.select_related("cluster")  # external jobs name their cluster
    page = Paginator(jobs.order_by("-submitted_at", "-id"), LIST_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "jobs/list.html", {"form": form, "page": page})


def _queue_context(request) -> dict:
    """The rows of one queue page. A fixed number of queries whatever the queue's length for
    the first pages: the order comes from the cycle's cached ranking checked against the
    database in batches, then only the page is loaded; explanations come from the cache the
    scheduling cycle fills (one round trip)."""
    form = JobFilterForm(request.GET, user=request.user, states=QUEUE_STATES)
    visible = selectors.visible_jobs(request.user)
    ranking = selectors.queue_ranking()
    filtered = selectors.filter_jobs(visible, request.user, form.filters())
    order = selectors.queue_order(filtered, ranking.ranked)
    page = Paginator(order, QUEUE_PAGE_SIZE).get_page(request.GET.get("page"))
    jobs = selectors.jobs_by_ids(visible.select_related("cluster"), list(page.object_list))
    positions = order.positions()
    # External jobs wait in their cluster's queue, not the engine's: their row shows the cluster's reason.
    queued = [job.pk for job in jobs if job.state == JobState.QUEUED and job.kind != JobKind.EXTERNAL]
    explanations = selectors.cached_explanations(queued)
    # Jobs waiting out a retry backoff are not in the engine's queue: their answer, from one query.
    explanations |= explain_backoffs([job for job in jobs if job.kind != JobKind.EXTERNAL], timezone.now())
    readable = explaining.for_reader(list(explanations.values()), request.user)
    explanations = dict(zip(explanations, readable, strict=True))
    starts = start_estimates.cached_start_estimates(jobs)  # one cache read, filled by the beat task
    rows = [
        {
            "job": job,
            "position": positions.get(job.pk) if job.state == JobState.QUEUED else None,
            "explain": explanations.get(job.pk),
            "start": starts.get(job.pk),
        }
        for job in jobs
    ]
    return {
        "form": form,
        "page": page,
        "rows": rows,
        "now": timezone.now(),
        "positions_at": ranking.at,
        "refresh_seconds": QUEUE_REFRESH_SECONDS,
    }


@login_required
def job_queue(request):
    return render(request, "jobs/queue.html", _queue_context(request))


@login_required
def job_queue_table(request):
    """The queue table alone: what the page's htmx poll swaps in every few seconds."""
    return render(request, "jobs/_queue_table.html", _queue_context(request))


# --- one job ------------------------------------------------------------------------------


@login_required
def job_detail(request, pk: int):
    # The job, why it waits, where it runs and its history from one snapshot: read one after
    # another, a commit in between (the scheduler admitting it) made the header say "queued"
    # above a timeline ending in "admitted" (issue 32 item 7).
    with one_snapshot():
        job = get_visible(selectors.visible_jobs(request.user).select_related("cluster"), pk=pk)
        explain = None
        if job.state == JobState.QUEUED:
            explain = explaining.readable(_readable(explain_job(job)), request.user)
        events = list(selectors.job_events(job))
        placement = selectors.job_placement(job)
        approval_pk = approval_request_of(job)
        approval = None
        if approval_pk:
            approval = visible_approval_requests(request.user).filter(pk=approval_pk).first()
    samples = list(selectors.job_gpu_samples(job))
    return render(
        request,
        "jobs/detail.html",
        {
            "job": job,
            "approval": approval,
            "explain": explain,
            "start": start_estimates.with_reservation(start_estimates.start_estimate(job), explain, job.pk),
            "placement": placement,
            "events": events,
            "samples": len(samples),
            "chart": charts.utilisation(samples) if samples else None,
            "can_cancel": selectors.can_cancel(request.user, job),
            # Who may cancel a live job may ask that the idle policy leave it alone.
            "idle_exemption_form": IdleExemptionForm() if selectors.can_cancel(request.user, job) else None,
            "backend": _backend_info(job),
            "external": job.kind == JobKind.EXTERNAL,
            **_autoscale_context(request.user, job),
            "cost": estimates.job_cost(job, timezone.now()),
            "asks": _job_asks(job),
            **job_page_context(job, request.user),
            **job_workflow_context(job, request.user),
        },
    )


def _job_asks(job) -> list[dict]:
    """What each worker asks besides its GPUs (DESIGN §15): its own figures, and its GPUs' share at
    submission for those it left empty (marked). An external job shows only what it reported."""
    effective = requests.effective_request(job) if job.kind != JobKind.EXTERNAL else None
    asks = []
    for dim in requests.DIMENSIONS:
        own = getattr(job, dim)
        value = own if own is not None else (effective.get(dim) if effective else None)
        if value is not None:
            what = _(requests.DIMENSION_WORDS[dim])
            asks.append({"what": what, "value": requests.quantity_text(dim, value), "default": own is None})
    return asks


def _autoscale_context(user, job) -> dict:
    if job.kind != JobKind.INFERENCE:
        return {"autoscale": None}
    shown = autoscale.autoscale_view(job)
    form = None
    if autoscale.can_change_autoscale(user, job):
        form = AutoscaleForm(initial={"query": shown["query"], "target": shown["target"],
                                      "cooldown_seconds": shown["cooldown_seconds"]})
    return {"autoscale": shown, "autoscale_form": form}


@login_required
@require_POST
def job_autoscale(request, pk: int):
    """The job page's autoscaling form (docs/scheduling.md "Autoscaling")."""
    job = get_visible(selectors.visible_jobs(request.user), pk=pk)
    form = AutoscaleForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(m for errors in form.errors.values() for m in errors))
        return redirect("job-detail", pk=job.pk)
    try:
        job = autoscale.job_autoscale_set(
            actor=request.user, job=job, query=form.cleaned_data["query"], target=form.cleaned_data["target"],
            cooldown_seconds=form.cleaned_data["cooldown_seconds"],
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        if job.autoscale_query:
            messages.success(request, _("Autoscaling of %(name)s is on.") % {"name": job.name})
        else:
            messages.success(request, _("Autoscaling of %(name)s is off.") % {"name": job.name})
    return redirect("job-detail", pk=job.pk)


def _readable(explain: dict) -> dict:
    """The explain answer with its reservation time as a datetime, shown in the site zone."""
    reservation = explain.get("reservation")
    if reservation and isinstance(reservation.get("earliest_start"), str):
        start = datetime.fromisoformat(reservation["earliest_start"])
        explain = {**explain, "reservation": {**reservation, "earliest_start": start}}
    return explain


def _backend_info(job) -> dict:
    """Where to find the job on its cluster: the page names the backend object (``gp-<id>``)
    and links the cluster's own log viewer too when its configuration has a ``log_url``
    template such as ``https://grafana.example/explore?job={name}`` (the Log panel shows the
    log itself, read from the backend)."""
    # An external job is known on its cluster by the backend's id alone (sbatch, kubectl named it).
    name = job.backend_id if job.kind == JobKind.EXTERNAL else backend_name(job.pk)
    info = {"name": name, "backend_id": job.backend_id, "cluster": job.cluster, "log_url": ""}
    template = (job.cluster.config or {}).get("log_url", "") if job.cluster else ""
    if isinstance(template, str) and template.startswith(("https://", "http://")):
        # A malformed template in the cluster configuration shows no link rather than failing.
        with contextlib.suppress(KeyError, IndexError, ValueError):
            info["log_url"] = template.format(name=name, backend_id=job.backend_id, job=job.pk)
    return info


@login_required
@require_POST
def job_idle_exemption(request, pk: int):
    """The job page's "ask for an exemption from the idle policy" (docs/scheduling.md, "Idle policy")."""
    job = get_visible(selectors.visible_jobs(request.user), pk=pk)
    form = IdleExemptionForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(m for errors in form.errors.values() for m in errors))
        return redirect("job-detail", pk=job.pk)
    try:
        approval = idle_exemption_request_create(
            actor=request.user, job=job, until=form.cleaned_data["until"], reason=form.cleaned_data["reason"]
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("job-detail", pk=job.pk)
    messages.success(
        request, _("Your exemption request for %(name)s waits for approval.") % {"name": job.name}
    )
    return redirect("approval-detail", pk=approval.pk)


@login_required
@require_POST
def job_cancel(request, pk: int):
    job = get_visible(selectors.visible_jobs(request.user), pk=pk)
    try:
        job = services.job_cancel(actor=request.user, job=job)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        if job.state == JobState.CANCELLED:
            messages.success(request, _("Job %(name)s was cancelled.") % {"name": job.name})
        else:
            messages.success(request, _("Job %(name)s was asked to stop.") % {"name": job.name})
    return redirect("job-detail", pk=job.pk)


# --- submission ---------------------------------------------------------------------------


def _copy_initial(request) -> dict:
    """``?copy=<id>`` pre-fills the form from a job the user can see."""
    try:
        source = selectors.visible_jobs(request.user).get(pk=int(request.GET["copy"]))
    except (KeyError, ValueError, TypeError, Job.DoesNotExist):
        return {}
    if source.kind == JobKind.EXTERNAL:
        return {}  # not a portal submission: nothing of it fits the form
    fields = [
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
        "cpu_millicores",
        "memory_mib",
        "local_disk_gib",
        "min_cuda_version",
    ]
    initial = {name: getattr(source, name) for name in fields}
    initial.update(name=source.name, project=source.project_id, flavor=source.flavor_id)
    initial["priority_class"] = source.priority_class_id
    initial["expose_port"] = source.expose_port
    # The storages of the same names the project still has (one removed since is left out, with a note).
    names = [m["name"] for m in source.mounts or ()]
    initial["mounts"] = views_templates.mount_initial(request, source.project, names)
    initial["env_text"] = environment.env_lines(source.env or (), secrets=False)
    initial["secret_env_text"] = environment.env_lines(source.env or (), secrets=True)
    initial |= views_templates.autoscale_initial({"autoscale": templates_service.autoscale_values(source)})
    if source.array_id is not None:  # a copy of a task is a copy of its array (DESIGN §17)
        initial["array"] = source.array.spec
    return initial


def _summary(form: JobForm) -> dict | None:
    """What the request amounts to: devices, whole-card equivalents, card-hours over its
    maximum runtime, and the approval it will need. Money appears once rates exist."""
    data = getattr(form, "cleaned_data", {})
    flavor, workers, per_worker = data.get("flavor"), data.get("workers"), data.get("gpus_per_worker")
    if not (flavor and workers and per_worker):
        return None
    milli = data.get("gpu_milli") if flavor.shareable else None
    devices = selectors.job_devices(workers, per_worker, milli)
    runtime = data.get("max_runtime_seconds")
    if runtime is None and data.get("kind"):
        runtime = rules.default_runtime(data["kind"])
    card_hours = None
    if runtime:
        card_hours = selectors.card_hours_estimate(
            flavor=flavor,
            workers=workers,
            gpus_per_worker=per_worker,
            gpu_milli=milli,
            runtime_seconds=runtime,
        )
    project, kind, priority_class = data.get("project"), data.get("kind"), data.get("priority_class")
    cards, now = devices * flavor.fraction_numerator / flavor.fraction_denominator, timezone.now()
    # The price of one hour needs no runtime: without a maximum runtime the total is unbounded,
    # but the rate is known — "no rate" is said only when the flavor truly has none.
    hourly = estimates.cost_estimate(flavor, cards, now)
    approvals = None  # not known yet (no project chosen); [] : no approval needed.
    if project and kind:
        sub = submission.gather(
            actor=form.user,
            project=project,
            kind=kind,
            flavors=(flavor,),
            priority_class=priority_class,
            shape=submission.Shape(workers, per_worker, milli, data.get("min_workers")),
            max_runtime_seconds=data.get("max_runtime_seconds"),
            request=_asked(data),
        )
        approvals = submission.summary_reasons(sub)
    return {
        "flavor": flavor,
        "devices": devices,
        "cards": cards,
        "runtime": runtime,
        "card_hours": card_hours,
        "cost": estimates.cost_estimate(flavor, card_hours, now) if card_hours and hourly else None,
        "cost_per_hour": hourly,
        "approvals": approvals,
        "stranded": _stranded(flavor, data, workers, per_worker, milli),
    }


def _asked(data: dict) -> Request:
    """The CPU, memory and disk each worker asks in the form (None: its GPUs' share)."""
    return Request(*(data.get(dim) for dim in requests.DIMENSIONS))


def _stranded(flavor, data: dict, workers: int, per_worker: int, milli: int | None) -> dict | None:
    """"This strands N GPUs" (DESIGN §15): a request beyond the GPUs' share takes GPUs of the node
    it does not use. None when it strands none."""
    share = requests.flavor_share(flavor)
    count, dim = requests.stranded_units(share, _asked(data), workers=workers, units=per_worker, milli=milli)
    if not count:
        return None
    return {
        "count": count,
        "text": _(
            "This strands %(n)s GPUs: each worker's %(what)s is more than its GPUs' share (%(per)s per "
            "GPU of %(f)s), so it takes GPUs it does not use and nobody else can use them either."
        ) % {
            "n": f"{count.normalize():f}",
            "what": _(requests.DIMENSION_WORDS[dim]),
            "per": requests.quantity_text(dim, share.get(dim)),
            "f": flavor.name,
        },
    }


class _DryRun(Exception):
    pass


def _dry_run(user, kwargs: dict) -> ValidationError | None:
    """Run ``job_submit`` in a transaction that is always rolled back: live validation shows
    exactly the service's errors and writes nothing (after-commit hooks are discarded too)."""
    try:
        with transaction.atomic():
            services.job_submit(actor=user, **kwargs)
            raise _DryRun
    except _DryRun:
        return None
    except ValidationError as exc:
        return exc


def _form_context(form: JobForm) -> dict:
    summary = _summary(form)
    form.mark_invalid()
    return {"form": form, "summary": summary}


@login_required
def job_new(request):
    form = JobForm(request.POST if request.method == "POST" else None, user=request.user)
    if request.method != "POST":
        form.initial.update(_copy_initial(request))
        form.initial.update(views_templates.template_initial(request))
        form.offer_choices()
    elif "save_template" in request.POST:
        saved = views_templates.save_from_form(request, form)
        if saved is not None:
            return saved
    elif form.is_valid():
        try:
            with transaction.atomic():
                job = services.job_submit(actor=request.user, **form.submit_kwargs())
        except ValidationError as exc:
            form.add_service_error(exc)
        except PermissionDenied as exc:
            form.add_error("project", str(exc))
        else:
            if job.array_id is not None:
                messages.success(request, _("Array %(name)s of %(n)d tasks was submitted.")
                                 % {"name": job.name, "n": job.array.size})
                return redirect("array-detail", pk=job.array_id)
            messages.success(request, _("Job %(name)s was submitted.") % {"name": job.name})
            return redirect("job-detail", pk=job.pk)
    return render(
        request, "jobs/new.html", {**_form_context(form), **views_templates.picker_context(request)}
    )


# Free-text fields that no rule reads: while they are still empty, live validation checks the
# rest of the request with a stand-in, so a wrong shape is reported before the image is typed.
_STAND_INS = {"name": "draft", "image": "draft"}


@login_required
@require_POST
def job_new_validate(request):
    """The form fragment with its errors and summary, for htmx on every change."""
    data = request.POST.copy()
    form = JobForm(data, user=request.user)
    form.replace_unusable_class()
    form.drop_foreign_mounts()
    form.is_valid()
    data = data.copy()
    stand_in = {k for k in _STAND_INS if not data.get(k)}
    for key in stand_in:
        data[key] = _STAND_INS[key]
    probe = JobForm(data, user=request.user)
    if probe.is_valid():
        try:
            error = _dry_run(request.user, probe.submit_kwargs())
        except PermissionDenied as exc:
            form.add_error("project", str(exc))
        else:
            if error is not None:
                form.add_service_error(error, skip=stand_in)
    form.hide_untouched()
    # The class list depends on the kind and the project: its options are swapped in out of band
    # (the select itself stays, with its focus).
    form.fields["priority_class"].widget.attrs["hx-swap-oob"] = "innerHTML"
    context = _form_context(form)
    # The storage list follows the project (issue 32 item 4); it is swapped in only when the project
    # changed, so ticking a box never replaces the boxes (nor takes the keyboard focus from them).
    context["swap_mounts"] = request.POST.get("mounts_for", "") != form.mounts_for
    if context["summary"] is not None and not form.errors:
        context["summary"]["start"] = _start_if_submitted(form, context["summary"])
    return render(request, "jobs/_job_form_feedback.html", context)


def _start_if_submitted(form: JobForm, summary: dict) -> start_estimates.StartEstimate | None:
    """When the job would start if submitted now (issue 24): the queue's forecast with it added.
    Only in live feedback (not on every page load), and only once the request is complete."""
    data = form.cleaned_data
    project, priority_class = data.get("project"), data.get("priority_class")
    if not (project and priority_class and data.get("kind")):
        return None
    flavor = summary["flavor"]
    gpu_milli = data.get("gpu_milli") if flavor.shareable else None
    # What each worker asks besides its GPUs: a start on a node whose free GPUs it would strand
    # (not the CPU, memory or disk it asks) is no start (docs/resources.md).
    asked = Request(data.get("cpu_millicores"), data.get("memory_mib"), data.get("local_disk_gib"))
    return start_estimates.start_estimate_new(
        project_id=project.pk, flavor=flavor.name, workers=data["workers"],
        min_workers=data.get("min_workers"), gpus_per_worker=data["gpus_per_worker"],
        gpu_milli=gpu_milli, priority=priority_class.value, preemptible=priority_class.preemptible,
        max_runtime_seconds=summary["runtime"], needs_approval=bool(summary["approvals"]),
        request=queued_request(flavor, asked, units=data["gpus_per_worker"], milli=gpu_milli),
    )


# --- priority classes ---------------------------------------------------------------------


@login_required
def priority_class_list(request):
    return render(
        request,
        "jobs/priority_classes.html",
        {"classes": PriorityClass.objects.all(), "can_edit": scope_for(request.user).platform_admin},
    )


@login_required
def priority_class_edit(request, pk: int | None = None):
    if not scope_for(request.user).platform_admin:
        raise PermissionDenied
    instance = get_object_or_404(PriorityClass, pk=pk) if pk is not None else None
    form = PriorityClassForm(request.POST or None, instance=instance)
    if request.method == "POST" and form.is_valid():
        data = {k: v for k, v in form.cleaned_data.items() if k != "name"}
        name = form.cleaned_data["name"]
        try:
            if instance is None:
                pc = services.priority_class_create(actor=request.user, name=name, **data)
            else:
                pc = services.priority_class_update(actor=request.user, priority_class=instance, **data)
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, _("Priority class %(name)s was saved.") % {"name": pc.name})
            return redirect("priority-class-list")
    return render(request, "jobs/priority_class_form.html", {"form": form, "instance": instance})

"""Presentation of jobs in templates: state badges, explain reasons, sizes and durations."""

from __future__ import annotations

from decimal import Decimal

from django import template
from django.template.defaultfilters import date as date_filter
from django.template.defaultfilters import floatformat, timesince_filter
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.timezone import localtime
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from jobs.models import STATE_LABELS, JobKind
from jobs.scheduling.start_estimates import UNKNOWN_LABELS
from jobs.selectors import job_devices

register = template.Library()

# Job events that are not state changes (JobEvent.kind), as the timeline names them.
EVENT_KIND_LABELS = {
    "reservation": _("Reservation"),
    "preemption_signal": _("Preemption signalled"),
    "placement": _("Placement"),
    "dispatched": _("Sent to the cluster"),
    "scaled": _("Scaled"),
    "scale_target": _("Target changed"),
    "on_loan": _("In quota / on loan"),
    "idle_flagged": _("Flagged as idle"),
    "idle_warned": _("Warned: GPUs idle"),
    "idle_stopped": _("Stopped by the idle policy"),
    "idle_preemptible": _("Made preemptible by the idle policy"),
    "expire_requested": _("Stop at the runtime limit"),
    "cancel_requested": _("Cancel requested"),
}

# The explain reasons of jobs.scheduler.engine.model.REASONS, plus what explain_job answers itself.
REASON_LABELS = {
    "budget": _("Over budget: held for approval"),
    "quota": _("Not in quota, and borrowing is off"),
    "borrow_limit": _("Borrow limit reached"),
    "lend_limit": _("Idle quota of others is not lent"),
    "capacity": _("Not enough healthy capacity"),
    "placement": _("No node set fits (resource fragmentation)"),
    "resources": _("GPUs free, but not the CPU, memory or disk to feed them"),
    "cuda": _("Room only on nodes below its CUDA version"),
    "reservation": _("Would delay a reserved job (backfill)"),
    "reclaimed": _("Reclaimed by an in-quota job; retried next cycle"),
    "invalid": _("Can never run: no node of the flavor is big enough"),
    "fifo": _("Waits behind an earlier job of its project (FIFO)"),
    "min_runtime": _("The jobs it may preempt have not run their minimum runtime yet"),
    "admissible": _("Admitted at the next cycle"),
    "external": _("Waiting in its cluster's own queue"),
    "backoff": _("Waits out its backoff before it runs again"),
    "dependency": _("Waits for another job (dependency)"),
    "array_cap": _("Its array's cap on running tasks is reached"),
    "power": _("GPUs free, but only in racks at their power cap"),
}

NUMBER_LABELS = {
    "usage": _("usage"),
    "request": _("request"),
    "quota": _("quota"),
    "borrow_limit": _("borrow limit"),
    "held_back": _("held back by lend limits"),
    "capacity": _("capacity"),
    "in_quota_usage": _("in-quota usage"),
    "per_worker": _("per worker"),
    "workers": _("workers"),
    "largest_node": _("largest node"),
    "largest_free_node": _("largest free node"),
    "largest_cluster": _("largest cluster"),
    "nodes_with_gpus": _("nodes with the GPUs free"),
    "nodes_below": _("nodes below its CUDA version"),
    "largest_free_cluster": _("largest free room in one cluster"),
    "min_runtime_s": _("minimum runtime (s)"),
    "exempt_for_s": _("preemptible in (s)"),
    "cap": _("tasks running at once, at most"),
    "running_tasks": _("tasks holding GPUs"),
    "racks_at_cap": _("racks at their cap"),
}


@register.filter
def start_unknown_label(reason: str) -> str:
    return UNKNOWN_LABELS.get(reason, reason)


@register.simple_tag
def start_estimate(estimate):
    """An estimated start (jobs.scheduling.start_estimates.StartEstimate) in the site zone, or "unknown"
    with the reason; nothing for a job that is not waiting."""
    if estimate is None:
        return ""
    if estimate.estimated_start is None:
        return format_html('<span class="start-unknown">{}</span> <small class="muted">{}</small>',
                           gettext("unknown"), start_unknown_label(estimate.unknown_reason))
    at = localtime(estimate.estimated_start)
    if estimate.reserved:
        title = gettext("The scheduler holds a reservation for this job: it starts then at the latest")
    else:
        title = gettext("Estimated from the running jobs' maximum runtimes; earlier if they end sooner")
    return format_html('<time class="start" datetime="{}" title="{}">{}</time>', at.isoformat(), title,
                       date_filter(at, "Y-m-d H:i"))


@register.simple_tag
def state_badge(state: str):
    return format_html('<mark class="badge state-{}">{}</mark>', state, STATE_LABELS.get(state, state))


@register.filter
def state_label(state: str) -> str:
    return STATE_LABELS.get(state, state)


@register.filter
def event_kind(kind: str) -> str:
    return EVENT_KIND_LABELS.get(kind, kind)


@register.filter
def reason_label(reason: str) -> str:
    return REASON_LABELS.get(reason, reason)


@register.filter
def number_label(key: str) -> str:
    return NUMBER_LABELS.get(key, key)


@register.simple_tag
def external_badge(job):
    """"External · Slurm job 1234 · user alice" for a job submitted to its cluster directly
    (DESIGN §11), with the cluster's name as its title; nothing for a portal job."""
    if job.kind != JobKind.EXTERNAL:
        return ""
    cluster = job.cluster
    text = gettext("External · %(backend)s job %(id)s · user %(user)s") % {
        "backend": cluster.get_kind_display() if cluster else "?",
        "id": job.backend_id or "?",
        "user": job.external_user or "?",
    }
    title = gettext("Submitted to cluster %(cluster)s directly, not through the portal") % {
        "cluster": cluster.name if cluster else "?"}
    return format_html(' <mark class="badge external" title="{}">{}</mark>', title, text)


def _submitted_by(job):
    """Who submitted it: the portal user, or for an external job its backend user and cluster."""
    if job.kind != JobKind.EXTERNAL:
        return job.submitted_by
    cluster = job.cluster.name if job.cluster else "?"
    return format_html('{} <small class="muted">@{}</small>', job.external_user or "?", cluster)


@register.filter
def devices(job) -> str:
    """Devices of the flavor the job asks for: 16, or 0.25 for a shared request."""
    value = job_devices(job.workers, job.gpus_per_worker, job.gpu_milli)
    return f"{value.normalize():f}" if isinstance(value, Decimal) else str(value)


@register.filter
def duration(seconds) -> str:
    """A length of time in seconds as days, hours and minutes."""
    if seconds is None or seconds == "":
        return "—"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = []
    if days:
        parts.append(ngettext("%(n)d day", "%(n)d days", days) % {"n": days})
    if hours:
        parts.append(ngettext("%(n)d hour", "%(n)d hours", hours) % {"n": hours})
    if minutes or not parts:
        parts.append(ngettext("%(n)d minute", "%(n)d minutes", minutes) % {"n": minutes})
    return " ".join(parts)


@register.simple_tag(takes_context=True)
def queue_row(context, row: dict):
    """One row of the queue table, cell for cell the markup the template had: the 50 rows of a
    page through the template engine were ~25 ms of the queue page, the costliest page of the
    load run (bench/load.py); tests/pages/test_queue_row.py holds the template it replaces."""
    job, user = row["job"], context.get("user")
    url = reverse("job-detail", args=[job.pk])
    mine = (format_html(' <small class="muted">({})</small>', gettext("mine"))
            if user is not None and job.submitted_by_id == user.pk else "")
    since = job.started_at if job.state == "running" and job.started_at else job.submitted_at
    return format_html(
        '<tr>\n      <td class="num">{}</td>\n'
        '      <td><a href="{}">{}</a> <small class="muted">#{}</small>{}{}</td>\n'
        "      <td><code>{}</code></td>\n"
        "      <td>{}</td>\n"
        '      <td class="num">{}</td>\n'
        '      <td>{} <small class="muted">{}</small></td>\n'
        "      <td>{}</td>\n"
        '      <td class="why">{}</td>\n'
        '      <td class="start">{}</td>\n'
        "      <td>{}</td>\n"
        "    </tr>",
        row["position"] or "—", url, job.name, job.pk, mine, external_badge(job), job.project.code,
        job.flavor.name, devices(job), job.priority_class.name, job.priority_class.value,
        state_badge(job.state), _why(job, row["explain"], url), start_estimate(row.get("start")),
        timesince_filter(since, context.get("now")),
    )


def _why(job, explain: dict | None, url: str):
    if job.state == "queued" and job.kind == JobKind.EXTERNAL:
        # Not in the engine's queue: the reason is the cluster's own (Slurm's Reason).
        return format_html('{}<small class="backend-reason">{}</small>',
                           reason_label("external"), job.message or "—")
    if job.state == "queued":
        if not explain:
            return format_html('<a href="{}">{}</a>', url, gettext("see the job"))
        if explain.get("reason") == "backoff":  # its sentence holds the instant (DESIGN §17)
            return format_html('{}<small class="backoff">{}</small>', reason_label("backoff"),
                               explain.get("text", ""))
        numbers = explain.get("numbers")
        small = format_html("<small>{}</small>", format_html_join(
            " · ", "{} {}", ((number_label(k), floatformat(v, "-3")) for k, v in numbers.items())
        )) if numbers else ""
        return format_html('<span title="{}">{}</span>{}', explain.get("text", ""),
                           reason_label(explain.get("reason", "")), small)
    if job.state == "pending_approval":
        return gettext("Waiting for approval")
    if job.state == "admitted":
        return gettext("Starting on the cluster")
    return ""


@register.simple_tag
def job_list_row(job):
    """One row of the job list, cell for cell the markup the template had (as ``queue_row``;
    tests/pages/test_queue_row.py holds the template it replaces)."""
    url = reverse("job-detail", args=[job.pk])
    submitted = localtime(job.submitted_at)  # as the template showed it: in the active zone
    return format_html(
        "<tr>\n"
        '      <td class="num"><a href="{}">{}</a></td>\n'
        '      <td><a href="{}">{}</a>{}</td>\n'
        "      <td><code>{}</code></td>\n"
        "      <td>{}</td>\n"
        "      <td>{}</td>\n"
        '      <td class="num">{}</td>\n'
        "      <td>{}</td>\n"
        "      <td>{}</td>\n"
        '      <td><time datetime="{}">{}</time></td>\n'
        "      <td>{}</td>\n"
        "    </tr>",
        url, job.pk, url, job.name, external_badge(job), job.project.code, job.get_kind_display(),
        job.flavor.name, devices(job), job.priority_class.name, state_badge(job.state),
        date_filter(submitted, "c"), date_filter(submitted, "Y-m-d H:i"), _submitted_by(job),
    )

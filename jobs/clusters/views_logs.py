"""Pages of a job's working environment (DESIGN §13): its live log and the whole log as a file,
and a running dev job's exposed port — opened through the portal, and checked for ingress-nginx.

Every view finds the job through ``selectors.visible_jobs``: another tenant's job is a 404 like
its page (the ingress check alone answers 403, see ``job_access_auth``)."""

from __future__ import annotations

import urllib.error
import urllib.request

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from jobs import environment, selectors
from jobs.clusters import logs
from jobs.clusters.backends.registry import is_simulated
from jobs.models import JobKind, backend_name
from jobs.states import HOLDING, TERMINAL, JobState
from portal.selectors import get_visible

LOG_REFRESH_SECONDS = 2  # the log panel while the job holds GPUs (admitted, running, terminating)
LOG_WAIT_REFRESH_SECONDS = 10  # while it waits (queued, pending approval): it starts on its own


def _log_refresh(job) -> int | None:
    """Seconds between the log panel's polls, or None once the job is terminal (its final tail)."""
    if job.state in TERMINAL or job.kind == JobKind.EXTERNAL:  # an external job's log is not read
        return None
    return LOG_REFRESH_SECONDS if job.state in HOLDING else LOG_WAIT_REFRESH_SECONDS


def detail_context(job, user) -> dict:
    """The job page's Log, Environment and Access panels."""
    return {
        **_log_context(job),
        "workenv": _environment_info(job),
        "access": logs.job_access(job, user),
        "simulated": _simulated(job),
    }


def _simulated(job) -> bool:
    return job.cluster is not None and is_simulated(job.cluster.kind, job.cluster.config or {})


def _log_context(job) -> dict:
    tail = logs.job_log_tail(job, max_bytes=settings.GPUPOOL["LOG_TAIL_BYTES"])
    return {"log": tail, "log_refresh": _log_refresh(job)}


def _environment_info(job) -> dict:
    """What the job's environment holds, for the page: mounts, variables (a secret only by
    name: the portal never has its value), the checkpoint directory and the pull secret."""
    return {
        "mounts": job.mounts or [],
        "env": job.env or [],
        "checkpoint_dir": environment.checkpoint_dir(job.checkpoint),
        "pull_secret": job.project.image_pull_secret,
    }


@login_required
def job_log(request, pk: int):
    """The log panel alone: what the job page's htmx poll swaps in."""
    job = get_visible(selectors.visible_jobs(request.user).select_related("cluster"), pk=pk)
    return render(request, "jobs/_log.html", {"job": job, **_log_context(job)})


@login_required
def job_log_download(request, pk: int):
    """The whole log as a file, streamed from the backend piece by piece (never all in memory).
    No log: back to the job page, which says why."""
    job = get_visible(selectors.visible_jobs(request.user).select_related("cluster"), pk=pk)
    try:
        chunks = logs.job_log_stream(job)
    except logs.LogUnavailable as exc:
        messages.error(request, str(exc))
        return redirect("job-detail", pk=job.pk)
    return log_file_response(chunks, job.pk)


def log_file_response(chunks, job_id: int) -> StreamingHttpResponse:
    response = StreamingHttpResponse(chunks, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{backend_name(job_id)}.log"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


# The simulator's dev page, fetched for the browser: a small page, so a tight bound on time and
# size keeps a slow or runaway answer from holding a web worker.
PROXY_TIMEOUT = 5  # seconds
PROXY_MAX_BYTES = 1024 * 1024
PROXY_TYPES = ("text/html", "text/plain")
# The fetched page runs sandboxed (an opaque origin: no access to the portal's cookies or pages).
PROXY_POLICY = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:"


@login_required
@require_GET
def job_open(request, pk: int):
    """A running dev job's exposed port. A Kubernetes ingress (or any cluster's URL) is a
    redirect there — the ingress checks the session itself (job_access_auth). The simulator
    serves its page on its own address, which the browser may not reach: the portal fetches it
    (GET only, bounded). A tunnel command, or nothing exposed: back to the job page."""
    job = get_visible(selectors.visible_jobs(request.user).select_related("cluster"), pk=pk)
    access = logs.job_access(job, request.user)
    if access is None:
        messages.info(request, _("This job exposes nothing now: only a running dev job with a port does."))
        return redirect("job-detail", pk=job.pk)
    if not access.url:  # a tunnel (Slurm), or the cluster did not answer: the job page says which
        messages.info(request, access.note or _("Reach this job with the command on its page."))
        return redirect("job-detail", pk=job.pk)
    if not _simulated(job):
        return redirect(access.url)
    try:
        return _proxied(access.url)
    except _ProxyRefused as exc:
        messages.error(request, _("The job's port did not answer: %(reason)s") % {"reason": exc})
        return redirect("job-detail", pk=job.pk)


class _ProxyRefused(Exception):
    pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not an address to fetch next: the portal fetches only the URL
    its backend named (a redirect elsewhere would make it a proxy to anywhere)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


# Straight to the backend's address (no HTTP_PROXY from the environment), without redirects.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect)


def _proxied(url: str) -> HttpResponse:
    # The URL is the backend's (Access.url), never the request's: nothing here fetches what a user typed.
    request = urllib.request.Request(url, method="GET")  # noqa: S310 - a backend's http(s) URL
    try:
        with _OPENER.open(request, timeout=PROXY_TIMEOUT) as upstream:
            content_type = upstream.headers.get("Content-Type", "")
            body = upstream.read(PROXY_MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise _ProxyRefused(f"HTTP {exc.code}") from exc
    except (OSError, ValueError) as exc:  # refused, reset, timed out, a malformed URL
        raise _ProxyRefused(str(exc)[:200]) from exc
    if content_type.split(";")[0].strip().lower() not in PROXY_TYPES:
        raise _ProxyRefused(_("not a page (%(type)s)") % {"type": content_type[:60] or "?"})
    if len(body) > PROXY_MAX_BYTES:
        raise _ProxyRefused(_("more than %(n)d KiB") % {"n": PROXY_MAX_BYTES // 1024})
    response = HttpResponse(body, content_type=content_type)
    response["Content-Security-Policy"] = PROXY_POLICY
    response["X-Content-Type-Options"] = "nosniff"
    return response


@csrf_exempt  # nginx asks with the proxied request's method (a notebook's POST too); it writes nothing
@never_cache
def job_access_auth(request, pk: int):
    """ingress-nginx's external authentication (``nginx.ingress.kubernetes.io/auth-url``) of a
    dev job's ingress: nginx sends each request's cookies here first and lets it through on 200.

    200: the session's user owns the job (logs.owns) and it is a running dev job with a port; 401: not
    signed in (nginx sends the browser to ``auth-signin``); 403: anything else, including a job
    the user may not see or that does not exist. Not 404 as the portal's pages answer another
    tenant's object: nginx treats any status but 2xx, 401 and 403 as an error of the auth
    service and answers 500, so a 404 would turn "not yours" into a server error.

    nginx sends the browser's cookies of the dev job's host: the portal's session cookie reaches
    this endpoint when the ingress hosts share its domain (SESSION_COOKIE_DOMAIN)."""
    if not request.user.is_authenticated:
        return HttpResponse(status=401)
    job = selectors.visible_jobs(request.user).filter(pk=pk).first()
    allowed = (
        job is not None
        and logs.owns(request.user, job)
        and job.kind == JobKind.DEV
        and bool(job.expose_port)
        and job.state == JobState.RUNNING
    )
    return HttpResponse(status=200 if allowed else 403)

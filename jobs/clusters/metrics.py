"""GPU metrics: poll Prometheus (DCGM exporter series) for running jobs, store per-minute
samples (the idle policy, ``jobs.idle_service``, reads them); and the portal's own metrics in
Prometheus text format.

Metering is allocation-based (billing reads job events), so nothing here affects cost: a
Prometheus outage only leaves gaps in utilisation, and gaps are never stored as zeros.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from jobs.models import Job, JobEvent, backend_name
from jobs.states import HOLDING, JobState
from quotas.models import ClusterKind
from quotas.queues import JOBS_NAMESPACE

log = logging.getLogger(__name__)


def prometheus():
    """The client for the centre's Prometheus (GPU metrics, node health, measured power)."""
    from prometheus_api_client import PrometheusConnect

    return PrometheusConnect(url=settings.GPUPOOL["PROMETHEUS_URL"], disable_ssl=True)


# On Kubernetes the exporters label a series with the pod using the card (DCGM-exporter's pod
# mapping: ``namespace``, ``pod``; Ascend npu-exporter's ``pod_name`` becomes ``pod`` through
# deploy/prometheus/kubernetes-dcgm.yml). A job's pods are ``gp-<id>`` (a dev Pod) or
# ``gp-<id>-<suffix>`` (Job, Deployment and Volcano pods): the job is the pod name's prefix.
_POD_SELECTOR = '{{__name__=~"{names}",pod=~"gp-[0-9]+(-.+)?"}}'
_UTIL_NAMES = "DCGM_FI_DEV_GPU_UTIL|npu_chip_info_utilization"
_MEMORY_NAMES = "DCGM_FI_DEV_FB_USED|npu_chip_info_hbm_used_memory"  # MiB (npu-exporter: MB)
_OWNER = 'label_replace({inner}, "gp_job", "$1", "pod", "(gp-[0-9]+)(-.+)?")'
_POD_QUERIES = (
    "avg by (namespace, gp_job) ("
    + _OWNER.format(inner="avg_over_time(" + _POD_SELECTOR.format(names=_UTIL_NAMES) + "[1m])")
    + ")",
    "sum by (namespace, gp_job) ("
    + _OWNER.format(inner="avg_over_time(" + _POD_SELECTOR.format(names=_MEMORY_NAMES) + "[1m])")
    + ")",
    "count by (namespace, gp_job) (" + _OWNER.format(inner=_POD_SELECTOR.format(names=_UTIL_NAMES)) + ")",
    # The busiest card's minute: the idle policy needs every card under its threshold, not the mean.
    "max by (namespace, gp_job) ("
    + _OWNER.format(inner="avg_over_time(" + _POD_SELECTOR.format(names=_UTIL_NAMES) + "[1m])")
    + ")",
)


def _per_pod_owner(query: str) -> dict[tuple[str, str], float]:
    result = prometheus().custom_query(query)
    return {
        (r["metric"].get("namespace", ""), r["metric"].get("gp_job", "")): float(r["value"][1])
        for r in result
    }


def _kubernetes_jobs(running: list[tuple[int, str | None, dict | None]]) -> dict[tuple[str, str], int]:
    """(namespace, backend name) -> job id, for running jobs on Kubernetes clusters: a pod in any
    other namespace is not the portal's, whatever its name."""
    return {
        ((config or {}).get("namespace") or JOBS_NAMESPACE, backend_name(pk)): pk
        for pk, kind, config in running
        if kind == ClusterKind.KUBERNETES
    }


def _per_job(query: str) -> dict[str, float]:
    label = settings.GPUPOOL["METRICS_JOB_LABEL"]
    result = prometheus().custom_query(query.format(label=label, selector=f'{{{label}=~"gp-[0-9]+"}}'))
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in result}


# Per job (the label named by METRICS_JOB_LABEL): mean utilisation, framebuffer used, GPU series.
_QUERIES = (
    "avg by ({label}) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{selector}[1m]))",
    "sum by ({label}) (avg_over_time(DCGM_FI_DEV_FB_USED{selector}[1m]))",
    "count by ({label}) (DCGM_FI_DEV_GPU_UTIL{selector})",
    "max by ({label}) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{selector}[1m]))",
)
# The minute's samples of every job in one statement: the triggers that keep the hourly sums
# (jobs.sample_hours) run once per statement — a statement per job paid them per job (0.35 ms a
# row, twice that for an overwrite). One row per job, so no key is upserted twice.
_UPSERT_SAMPLES = """
    INSERT INTO jobs_jobgpusample (job_id, minute, gpu_util_pct, fb_used_mib, gpus, gpu_util_max_pct)
    SELECT s.job_id, %(minute)s, s.util, s.fb, s.gpus, s.busiest
    FROM unnest(%(jobs)s::bigint[], %(util)s::float8[], %(fb)s::float8[], %(gpus)s::int[],
                %(busiest)s::float8[])
         AS s(job_id, util, fb, gpus, busiest)
    ON CONFLICT (job_id, minute) DO UPDATE
    SET gpu_util_pct = EXCLUDED.gpu_util_pct, fb_used_mib = EXCLUDED.fb_used_mib, gpus = EXCLUDED.gpus,
        gpu_util_max_pct = EXCLUDED.gpu_util_max_pct
"""


def poll_gpu_metrics(now: datetime | None = None) -> int:
    """One sample per running job for the current minute (re-running the same minute
    overwrites it, so a retried task never double counts)."""
    jobs = list(
        Job.objects.filter(state=JobState.RUNNING).values_list("pk", "cluster__kind", "cluster__config")
    )
    running = {backend_name(pk): pk for pk, _kind, _config in jobs}
    if not running:
        return 0
    samples: dict[int, tuple[float, float, int, float | None]] = {}
    util, memory, count, busiest = (_per_job(query) for query in _QUERIES)
    for name, value in util.items():
        if name in running:
            samples[running[name]] = (
                value, memory.get(name, 0.0), int(count.get(name, 0)), busiest.get(name)
            )
    pods = _kubernetes_jobs(jobs)
    if pods:
        util_of, memory_of, count_of, busiest_of = (_per_pod_owner(query) for query in _POD_QUERIES)
        for key, value in util_of.items():
            # The job-id label wins where both exist: one sample per job, never a sum of two.
            if key in pods and pods[key] not in samples:
                samples[pods[key]] = (
                    value, memory_of.get(key, 0.0), int(count_of.get(key, 0)), busiest_of.get(key)
                )
    if samples:
        minute = (now or timezone.now()).replace(second=0, microsecond=0)
        upsert_samples(minute, samples)
    return len(samples)


def upsert_samples(minute: datetime, samples: dict[int, tuple]) -> None:
    """Each job's sample of ``minute`` (utilisation %, framebuffer MiB, GPU series and optionally the
    busiest card's utilisation %), written or overwritten, in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(_UPSERT_SAMPLES, {
            "minute": minute,
            "jobs": list(samples),
            "util": [s[0] for s in samples.values()],
            "fb": [s[1] for s in samples.values()],
            "gpus": [s[2] for s in samples.values()],
            "busiest": [s[3] if len(s) > 3 else None for s in samples.values()],
        })


# --- the portal's own /metrics ------------------------------------------------------------


def _line(name: str, value: float, **labels) -> str:
    if not labels:
        return f"{name} {value}"
    text = ",".join(
        f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in sorted(labels.items())
    )
    return f"{name}{{{text}}} {value}"


def portal_metrics() -> str:
    lines = ["# HELP gpupool_jobs Jobs by state.", "# TYPE gpupool_jobs gauge"]
    for row in Job.objects.values("state").annotate(n=Count("id")).order_by("state"):
        lines.append(_line("gpupool_jobs", row["n"], state=row["state"]))
    lines += [
        "# HELP gpupool_queue_length Queued jobs by priority class.",
        "# TYPE gpupool_queue_length gauge",
    ]
    for row in (
        Job.objects.filter(state=JobState.QUEUED)
        .values("priority_class__name")
        .annotate(n=Count("id"))
        .order_by("priority_class__name")
    ):
        lines.append(_line("gpupool_queue_length", row["n"], priority=row["priority_class__name"]))
    lines += [
        "# HELP gpupool_admissions_total Admissions recorded.",
        "# TYPE gpupool_admissions_total counter",
        _line("gpupool_admissions_total", JobEvent.objects.filter(to_state=JobState.ADMITTED).count()),
    ]
    lines += [
        "# HELP gpupool_gpus_in_use Devices held by admitted or running jobs.",
        "# TYPE gpupool_gpus_in_use gauge",
    ]
    usage: dict[tuple[str, str], float] = {}
    for dept, flavor, placement in Job.objects.filter(state__in=list(HOLDING)).values_list(
        "project__department__code", "flavor__name", "placement"
    ):
        milli = sum(m for worker in placement for _n, _g, m in worker)
        usage[(dept, flavor)] = usage.get((dept, flavor), 0) + milli / 1000
    for (dept, flavor), value in sorted(usage.items()):
        lines.append(_line("gpupool_gpus_in_use", value, department=dept, flavor=flavor))
    lines += _quota_lines() + _cycle_lines()
    lines += [
        "# HELP gpupool_idle_jobs Running jobs flagged idle.",
        "# TYPE gpupool_idle_jobs gauge",
        _line(
            "gpupool_idle_jobs", Job.objects.filter(state=JobState.RUNNING, idle_since__isnull=False).count()
        ),
    ]
    in_use: dict[str, float] = {}  # per flavor name, from the per-department sums above
    for (_dept, flavor), value in usage.items():
        in_use[flavor] = in_use.get(flavor, 0.0) + value
    return "\n".join(lines + _idle_gpu_lines(in_use)) + "\n"


def _idle_gpu_lines(in_use: dict[str, float]) -> list[str]:
    """The kinds of idle cards a pool loses: unallocated ones on ready nodes (while jobs may queue
    for quota), of them the stranded ones (no CPU, memory or disk left on their node to feed
    them: ``jobs.stranding``), and allocated ones whose jobs the utilisation poll flagged idle.
    ``in_use``: devices held per flavor name."""
    from jobs.stranding import stranded_by_flavor
    from quotas.models import Flavor
    from quotas.selectors import capacity_by_flavor

    names = dict(Flavor.objects.values_list("id", "name"))
    capacity = capacity_by_flavor()
    lines = [
        "# HELP gpupool_gpus_capacity Devices on ready nodes of active clusters.",
        "# TYPE gpupool_gpus_capacity gauge",
        *(_line("gpupool_gpus_capacity", float(c), flavor=names[f]) for f, c in sorted(capacity.items())),
        "# HELP gpupool_gpus_unallocated Devices on ready nodes that no job holds.",
        "# TYPE gpupool_gpus_unallocated gauge",
    ]
    for f, c in sorted(capacity.items()):
        # A node that went down under running jobs can leave more held than ready: not below 0.
        free = max(float(c) - in_use.get(names[f], 0.0), 0.0)
        lines.append(_line("gpupool_gpus_unallocated", free, flavor=names[f]))
    lines += [
        "# HELP gpupool_gpus_stranded Unallocated devices on ready nodes that the node's free CPU, memory "
        "or local disk cannot feed at its share (no job can use them now).",
        "# TYPE gpupool_gpus_stranded gauge",
    ]
    stranded = stranded_by_flavor()
    for f, _c in sorted(capacity.items()):
        lines.append(_line("gpupool_gpus_stranded", float(stranded.get(f, 0)), flavor=names[f]))
    lines += [
        "# HELP gpupool_gpus_idle_allocated Devices held by running jobs flagged idle.",
        "# TYPE gpupool_gpus_idle_allocated gauge",
    ]
    idle: dict[str, float] = {}
    for flavor, placement in Job.objects.filter(state=JobState.RUNNING, idle_since__isnull=False).values_list(
        "flavor__name", "placement"
    ):
        idle[flavor] = idle.get(flavor, 0.0) + sum(m for worker in placement for _n, _g, m in worker) / 1000
    for flavor in sorted(set(idle) | {names[f] for f in capacity}):  # 0 too: the series always exists
        lines.append(_line("gpupool_gpus_idle_allocated", idle.get(flavor, 0.0), flavor=flavor))
    return lines


def _quota_lines() -> list[str]:
    from quotas.models import QuotaNode

    lines = [
        "# HELP gpupool_quota Nominal quota of each department (devices of the flavor).",
        "# TYPE gpupool_quota gauge",
    ]
    rows = QuotaNode.objects.filter(department__isnull=False).values_list(
        "department__code", "flavor__name", "quota"
    )
    for dept, flavor, quota in rows.order_by("department__code", "flavor__name"):
        lines.append(_line("gpupool_quota", float(quota), department=dept, flavor=flavor))
    return lines


def _cycle_lines() -> list[str]:
    from django.core.cache import cache

    from jobs.scheduling.cache_keys import LAST_CYCLE_KEY

    last = cache.get(LAST_CYCLE_KEY)
    if not last:
        return []
    seconds = (last["decide_ms"] + last["apply_ms"]) / 1000
    return [
        "# HELP gpupool_cycle_seconds Duration of the last scheduling cycle.",
        "# TYPE gpupool_cycle_seconds gauge",
        _line("gpupool_cycle_seconds", round(seconds, 4)),
    ]

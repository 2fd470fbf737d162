"""GPU metrics on Kubernetes (issue 23 item 6): a real Prometheus, configured with the scrape
jobs shipped in deploy/prometheus/kubernetes-dcgm.yml (their relabelling and honor_labels; the
pod discovery swapped for a static target, as this Prometheus has no cluster to discover),
scrapes exporter-format series carrying pod labels — DCGM-exporter's ``namespace``/``pod``, its
``--use-old-namespace`` spelling, and the Ascend npu-exporter's ``pod_name`` — and the portal's
utilisation samples land on the jobs owning those pods, in the cluster's namespace only."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from jobs.clusters import dispatch
from jobs.clusters.backends import base
from jobs.clusters.dispatch import apply_status
from jobs.clusters.metrics import poll_gpu_metrics
from jobs.models import JobGpuSample, backend_name
from jobs.scheduling.cycle import schedule_once
from quotas.models import Cluster, Node
from tests import factories as fx
from tests.backends import k8s_standin

pytestmark = [pytest.mark.django_db, pytest.mark.prometheus, pytest.mark.kubernetes]

k8s_api = k8s_standin.k8s_api

SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "kubernetes-dcgm.yml"


class Exporter:
    """A static /metrics page, as an exporter serves it."""

    def __init__(self, text: str):
        body = text.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def shipped_scrapes(targets: dict[str, str]) -> list[dict]:
    """The shipped scrape jobs, each scraping its static target every second instead of the pods
    Kubernetes would discover; honor_labels and metric_relabel_configs as shipped."""
    scrapes = yaml.safe_load(SHIPPED.read_text())["scrape_configs"]
    for scrape in scrapes:
        assert scrape["honor_labels"] is True and scrape["metric_relabel_configs"]
        scrape.pop("kubernetes_sd_configs")
        scrape.pop("relabel_configs")  # they select discovered pods: nothing to select here
        scrape["scrape_interval"] = "1s"
        scrape["static_configs"] = [{"targets": [targets[scrape["job_name"]]]}]
    return scrapes


def _running_jobs(k8s_api, count: int):
    """Jobs dispatched through the backend to the stand-in API server (namespace team-gpu), then
    running."""
    f = fx.flavor()
    cluster = Cluster.objects.create(
        name="k8s-metrics",
        kind="kubernetes",
        config={"host": k8s_api.url, "namespace": "team-gpu", "token": "t"},
    )
    Node.objects.create(cluster=cluster, name="gpu-a", flavor=f, gpu_count=8, zone="z", spine="s", leaf="l")
    dept = fx.department("K")
    project = fx.project("k1", dept)
    fx.quota(f, dept, 8)
    fx.quota(f, project, 8)
    # The first: two workers of one card (two pods); the others one card each; the second a
    # Deployment.
    kinds = {1: "inference"}
    jobs = [
        fx.submit(project, f, gpus=1, workers=2 if i == 0 else 1, name=f"j{i}", kind=kinds.get(i, "training"))
        for i in range(count)
    ]
    assert schedule_once().admitted == count
    for job in jobs:
        assert dispatch.dispatch_job(job.pk) == "dispatched"
        job.refresh_from_db()
        assert job.cluster_id == cluster.pk
        assert apply_status(job, base.JobStatus(backend_name(job.pk), base.RUNNING)) == "running"
    return jobs


def _dcgm(gpu: int, value: float, fb: float, **pod: str) -> str:
    labels = ",".join(
        [f'gpu="{gpu}"', f'UUID="GPU-{gpu:04d}"', 'modelName="NVIDIA A100-SXM4-80GB"']
        + [f'{k}="{v}"' for k, v in pod.items()]
    )
    return f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {value}\nDCGM_FI_DEV_FB_USED{{{labels}}} {fb}\n"


@pytest.fixture
def exporters():
    started = []

    def start(text):
        exporter = Exporter(text)
        started.append(exporter)
        return exporter

    yield start
    for exporter in started:
        exporter.stop()


def test_pod_labelled_series_land_on_the_jobs_owning_the_pods(k8s_api, prometheus_for, exporters):
    training, inference, old_style, ascend, elsewhere = _running_jobs(k8s_api, 5)
    t, i, o, a, e = (backend_name(j.pk) for j in (training, inference, old_style, ascend, elsewhere))
    ns = "team-gpu"
    dcgm = (
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        # An Indexed Job's two pods (<job>-<index>-<random>).
        + _dcgm(0, 80, 1000, namespace=ns, pod=f"{t}-0-abcde", container="main")
        + _dcgm(1, 60, 3000, namespace=ns, pod=f"{t}-1-fghij", container="main")
        # A Deployment's pod (<job>-<replicaset hash>-<random>).
        + _dcgm(2, 35, 2048, namespace=ns, pod=f"{i}-7d9f8c6b5-x2x7q", container="main")
        # An exporter run with --use-old-namespace: the shipped relabelling renames its labels.
        + _dcgm(3, 20, 512, pod_namespace=ns, pod_name=o, container_name="main")
        # A pod of the same name in another namespace is not the portal's job.
        + _dcgm(4, 99, 9999, namespace="someone-else", pod=e, container="main")
        # A name that only starts like a job's ("gp-<id>0"), and an idle card with no pod.
        + _dcgm(5, 99, 9999, namespace=ns, pod=f"{e}0", container="main")
        + _dcgm(6, 0, 0, namespace="", pod="", container="")
    )
    npu = (
        "# TYPE npu_chip_info_utilization gauge\n# TYPE npu_chip_info_hbm_used_memory gauge\n"
        f'npu_chip_info_utilization{{id="0",model_name="910B3",namespace="{ns}",pod_name="{a}",'
        f'container_name="main",vdie_id="V0"}} 45\n'
        f'npu_chip_info_hbm_used_memory{{id="0",model_name="910B3",namespace="{ns}",pod_name="{a}",'
        f'container_name="main",vdie_id="V0"}} 20000\n'
    )
    gpu_exporter, npu_exporter = exporters(dcgm), exporters(npu)
    scrapes = shipped_scrapes({"dcgm-exporter": gpu_exporter.target, "npu-exporter": npu_exporter.target})
    prom = prometheus_for([], scrapes)
    prom.wait_for_scrapes(2, job="dcgm-exporter")
    prom.wait_for_scrapes(2, job="npu-exporter")
    # The relabelling kept the pod labels (and gave the old spelling today's names).
    [renamed] = prom.query(f'DCGM_FI_DEV_GPU_UTIL{{pod="{o}"}}')
    assert renamed["metric"]["namespace"] == ns and "pod_name" not in renamed["metric"]
    [npu_series] = prom.query("npu_chip_info_utilization")
    assert (npu_series["metric"]["pod"], npu_series["metric"]["container"]) == (a, "main")

    now = timezone.now()
    with override_settings(GPUPOOL={**settings.GPUPOOL, "PROMETHEUS_URL": prom.url}):
        assert poll_gpu_metrics(now) == 4
        assert poll_gpu_metrics(now) == 4  # the same minute again overwrites
    samples = {
        s.job_id: (s.gpu_util_pct, s.fb_used_mib, s.gpus)
        for s in JobGpuSample.objects.filter(minute=now.replace(second=0, microsecond=0))
    }
    assert samples == {
        training.pk: (70.0, 4000.0, 2),  # mean of its two pods' cards, memory summed
        inference.pk: (35.0, 2048.0, 1),
        old_style.pk: (20.0, 512.0, 1),
        ascend.pk: (45.0, 20000.0, 1),
    }
    assert elsewhere.pk not in samples

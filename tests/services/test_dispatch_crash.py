"""A worker SIGKILLed in the middle of a dispatch (after the backend created the job, before the
portal recorded it): after a restart there is exactly one backend job per portal job."""

import http.server
import json
import signal
import subprocess
import threading
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from jobs.clusters.backends.base import NodeInfo
from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from quotas.models import Cluster, Node
from tests import factories as fx
from tests.celery_procs import start_worker
from tests.waiting import TIMEOUT, wait_until

ROOT = Path(__file__).resolve().parents[2]


class SlowProxy(http.server.ThreadingHTTPServer):
    """Forwards to the simulator but holds the answer to ``POST /jobs`` until ``release`` is set:
    the job exists in the backend while the worker still waits for the reply — the window a crash
    must survive. Held until released, not for a while: however slow the machine, the kill lands
    inside the window."""

    def __init__(self, target: str):
        self.target, self.posts, self.release = target, 0, threading.Event()
        super().__init__(("127.0.0.1", 0), _Forward)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(http.server.BaseHTTPRequestHandler):
    def _forward(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        request = urllib.request.Request(
            self.server.target + self.path,
            data=body,
            method=self.command,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, payload = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, payload = error.code, error.read()
        if self.command == "POST" and self.path.startswith("/jobs"):
            self.server.posts += 1
            self.server.release.wait(TIMEOUT)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the client was killed while we held the answer

    do_GET = do_POST = do_PUT = do_DELETE = _forward

    def log_message(self, *args):
        pass


def _worker(queue: str) -> subprocess.Popen:
    return start_worker(queue, output=subprocess.DEVNULL)


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_a_dispatch_killed_mid_call_never_creates_a_second_backend_job(simserver):
    from jobs.clusters.tasks import dispatch_job

    proxy = SlowProxy(simserver.url)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    f = fx.flavor()
    cluster = Cluster.objects.create(name="sim-crash", kind="simulator", config={"url": proxy.url})
    nodes = [
        Node.objects.create(
            cluster=cluster, name=f"c-{i}", flavor=f, gpu_count=8, zone="z", spine="s", leaf="l"
        )
        for i in range(2)
    ]
    simserver.backend().set_inventory([NodeInfo(n.name, f.name, 8, "ready", "z", "s", "l") for n in nodes])
    dept = fx.department("D")
    project = fx.project("p", dept)
    fx.quota(f, dept, 16)
    fx.quota(f, project, 16)
    jobs = [fx.submit(project, f, gpus=4, sim_duration_seconds=10**6, name=f"j{i}") for i in range(3)]
    assert schedule_once().admitted == 3
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    worker = _worker(queue)
    try:
        for job in jobs:
            dispatch_job.apply_async(args=[job.pk], queue=queue)
        # The first submit is in flight: the backend has the job, the worker waits for the answer.
        wait_until(lambda: proxy.posts >= 1, "the first submit to reach the backend")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
        proxy.release.set()  # answers from now on come at once (the held one to a dead worker)
    # The crash came between the two: the backend has a job the portal did not record.
    assert len(_sim_jobs(simserver)) > Job.objects.filter(dispatched_at__isnull=False).count()
    # Time passes: the dead worker's claims expire (120 s); beat's backend_work fans out again.
    Job.objects.filter(dispatched_at__isnull=True).update(
        dispatch_claimed_at=Job.objects.get(pk=jobs[0].pk).submitted_at - timedelta(minutes=5)
    )
    worker = _worker(queue)
    try:
        for job in jobs:
            dispatch_job.apply_async(args=[job.pk], queue=queue)
        wait_until(
            lambda: Job.objects.filter(dispatched_at__isnull=False).count() == 3, "all three dispatched"
        )
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        proxy.shutdown()
    assert sorted(_sim_jobs(simserver)) == sorted(f"gp-{job.pk}" for job in jobs)  # one backend job each


def _sim_jobs(simserver) -> dict:
    with urllib.request.urlopen(simserver.url + "/jobs") as response:
        return json.load(response)["jobs"]

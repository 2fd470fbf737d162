"""Fixtures for the documentation tests: the scripts under scripts/ and docs/examples/ loaded
as modules, and a live portal with a real simulated cluster behind it."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path

import pytest

from jobs.clusters import dispatch
from jobs.clusters.backends.base import NodeInfo
from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from jobs.states import JobState
from quotas.models import Cluster, Node
from tests import factories as fx

ROOT = Path(__file__).resolve().parents[2]


def load_script(relative: str):
    """Import a script by path (scripts/ is not a package)."""
    path = ROOT / relative
    name = "h7_" + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def cli():
    return load_script("scripts/gpupool_cli.py")


@pytest.fixture
def portal(world, live_server):
    """The conftest world behind a live server, with the priority class the examples use."""
    fx.priority("training", 100)
    return world, live_server.url


class ClusterDriver:
    """Runs what Celery beat and the worker run — scheduling cycles, dispatch, status sync — in
    a thread, so a job submitted over HTTP really runs on the simulated cluster."""

    def __init__(self, cluster: Cluster):
        self.cluster, self.stop, self.errors = cluster, threading.Event(), []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        from django.db import connection

        try:
            while not self.stop.is_set():
                schedule_once()
                admitted = Job.objects.filter(state=JobState.ADMITTED, dispatched_at__isnull=True)
                for job_id in admitted.values_list("pk", flat=True):
                    dispatch.dispatch_job(job_id)
                dispatch.sync_cluster(self.cluster.pk)
                self.stop.wait(0.1)
        except Exception as exc:  # surfaced by the test, not lost in the thread
            self.errors.append(exc)
        finally:
            connection.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=20)
        assert not self.errors, self.errors


@pytest.fixture
def sim_cluster(portal, simserver):
    """The world's flavor F on a real simserver: 2 nodes × 8 GPUs, as the world's inventory."""
    world, _ = portal
    cluster = Cluster.objects.get(name="c1")
    cluster.config = {"url": simserver.url}
    cluster.save(update_fields=["config"])
    nodes = Node.objects.filter(cluster=cluster).order_by("name")
    simserver.backend().set_inventory(
        [NodeInfo(n.name, world.F.name, n.gpu_count, "ready", n.zone, n.spine, n.leaf) for n in nodes]
    )
    return ClusterDriver(cluster)

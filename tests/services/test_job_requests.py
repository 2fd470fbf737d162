"""jobs/requests.py: a flavor's share per unit from its nodes and profile, a worker's default and
effective request, the most one worker may ask (DESIGN §15)."""

from __future__ import annotations

import pytest

from jobs.models import Job
from jobs.requests import effective_request, flavor_share, per_worker_limit
from jobs.scheduler.footprint import Request, Share
from tests import factories

pytestmark = pytest.mark.django_db


def _sized(f, gpus, cpu, mem, disk=None):
    node = factories.nodes(f, 1, gpus)[0]
    node.cpu_millicores, node.memory_mib, node.local_disk_gib = cpu, mem, disk
    node.save()


def test_the_share_is_the_smallest_nodes_per_unit_and_a_profile_never_promises_more():
    f = factories.flavor("H100")
    _sized(f, 8, 96_000, 1_048_576, 3_500)
    _sized(f, 4, 32_000, 262_144)
    assert flavor_share(f) == Share(8_000, 65_536, 437)
    f.cpu_millicores_per_unit, f.memory_mib_per_unit = 4_000, 100_000
    assert flavor_share(f) == Share(4_000, 65_536, 437)
    assert per_worker_limit(f) == Request(32_000, 524_288, 3_496)


def test_a_flavor_whose_nodes_report_nothing_has_no_share():
    f = factories.flavor("T4")
    factories.nodes(f, 2, 4)
    assert flavor_share(f) == Share() and not flavor_share(f).known


def test_a_worker_asks_its_own_figures_and_its_units_share_for_the_rest():
    f = factories.flavor("H100", shareable=True)
    _sized(f, 8, 96_000, 1_048_576)
    job = Job(flavor=f, gpus_per_worker=2, cpu_millicores=30_000)
    assert effective_request(job) == Request(30_000, 262_144, None)
    shared = Job(flavor=f, gpus_per_worker=1, gpu_milli=250)
    assert effective_request(shared) == Request(3_000, 32_768, None)
    # The share the job was submitted with wins over today's inventory.
    kept = Job(flavor=f, gpus_per_worker=1, unit_share={"cpu_millicores": 10_000, "memory_mib": 1_024})
    assert effective_request(kept) == Request(10_000, 1_024, None)

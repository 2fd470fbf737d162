"""CPU-only work (DESIGN §15, docs/resources.md "CPU-only work"): a flavor of kind ``cpu`` counts
cores as its units, so quotas admit and borrow in cores by the same rules as cards; the inventory
sync reads a GPU-less node as the cpu flavor's (the rule for which one, when there are several)."""

import pytest

from jobs.clusters.backends.base import CPU_HINT, NodeInfo
from jobs.clusters.inventory import _flavor_for
from jobs.scheduling.cycle import schedule_once
from jobs.states import JobState
from quotas.models import Flavor, FlavorKind
from tests import factories as fx

pytestmark = pytest.mark.django_db


def cpu_flavor(name="cpu-epyc", **kw) -> Flavor:
    return Flavor.objects.create(name=name, vendor="other", model="EPYC", memory_mib=0,
                                 k8s_resource_name="cpu", kind=FlavorKind.CPU, **kw)


@pytest.fixture
def cpu_pool():
    """One CPU node of 128 cores, 512 GiB; department D with 128 cores, projects p (32, may
    borrow 32 more) and q (96, idle)."""
    f = cpu_flavor()
    [node] = fx.nodes(f, 1, gpus=128)
    node.cpu_millicores, node.memory_mib = 128_000, 524_288
    node.save()
    dept = fx.department("D")
    p, q = fx.project("p", dept), fx.project("q", dept)
    fx.quota(f, dept, 128)
    fx.quota(f, p, 32, borrow=32)
    fx.quota(f, q, 96)
    return f, p, q


def _state(job):
    job.refresh_from_db()
    return job.state


def test_a_cpu_job_is_admitted_within_its_quota_of_cores_and_waits_beyond_it(cpu_pool):
    f, p, _q = cpu_pool
    first = fx.submit(p, f, gpus=24, name="prep-1")
    schedule_once()
    assert _state(first) == JobState.ADMITTED
    # 24 + 48 = 72 cores: more than p's 32 and the 32 it may borrow.
    second = fx.submit(p, f, gpus=48, name="prep-2")
    schedule_once()
    assert _state(second) == JobState.QUEUED
    assert sum(j.gpus_per_worker for j in p.jobs.filter(state=JobState.ADMITTED)) == 24


def test_a_cpu_job_borrows_idle_cores_of_a_sibling_up_to_its_borrow_limit(cpu_pool):
    f, p, _q = cpu_pool
    borrowing = fx.submit(p, f, gpus=64, name="prep-64")  # 32 its own, 32 of q's idle cores
    schedule_once()
    assert _state(borrowing) == JobState.ADMITTED
    more = fx.submit(p, f, gpus=1, name="one-more")
    schedule_once()
    assert _state(more) == JobState.QUEUED


def _info(**labels) -> NodeInfo:
    return NodeInfo("cpu-1", CPU_HINT, 128, "ready", labels=tuple(sorted(labels.items())))


def test_a_gpu_less_node_is_the_one_active_cpu_flavors():
    gpu = fx.flavor("A100")
    cpu = cpu_flavor()
    assert _flavor_for(_info(), [gpu, cpu]) == cpu
    # Never a GPU flavor, whatever its fields say.
    assert _flavor_for(_info(), [gpu]) is None


def test_with_several_cpu_flavors_the_node_names_its_own():
    epyc, xeon = cpu_flavor("cpu-epyc"), cpu_flavor("cpu-xeon", active=True)
    assert _flavor_for(_info(), [epyc, xeon]) is None  # ambiguous: not read
    assert _flavor_for(_info(**{"flavor-cpu-xeon": ""}), [epyc, xeon]) == xeon  # a Slurm feature
    assert _flavor_for(_info(**{"gpupool.io/flavor": "cpu-epyc"}), [epyc, xeon]) == epyc  # a node label
    assert _flavor_for(_info(**{"gpupool.io/flavor": "cpu-other"}), [epyc, xeon]) is None


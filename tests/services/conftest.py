"""Fixtures for service tests that need a simulated cluster."""

import pytest

from jobs.clusters.backends.base import NodeInfo
from quotas.models import Cluster, Node
from tests import factories as fx


@pytest.fixture
def sim_pool(simserver):
    """C = 16 on 2 simulated nodes; departments A and B with q = 8, one project each."""
    f = fx.flavor()
    cluster = Cluster.objects.create(name="sim-test", kind="simulator", config={"url": simserver.url})
    nodes = [
        Node.objects.create(
            cluster=cluster, name=f"sim-{i}", flavor=f, gpu_count=8, zone="z", spine="s", leaf=f"l{i}"
        )
        for i in range(2)
    ]
    simserver.backend().set_inventory([NodeInfo(n.name, f.name, 8, "ready", "z", "s", n.leaf) for n in nodes])
    a, b = fx.department("A"), fx.department("B")
    pa, pb = fx.project("pa", a), fx.project("pb", b)
    for owner in (a, b, pa, pb):
        fx.quota(f, owner, 8)
    return f, cluster, pa, pb, simserver

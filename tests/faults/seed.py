"""The pool every fault test runs on: simulated nodes, one department and project with quota
for all of them, and a platform admin with an API token. Called in the test process, or in a
``manage.py shell`` subprocess when the database is a private one the test process does not use."""

from __future__ import annotations

import json

from jobs.clusters.backends.base import NodeInfo
from jobs.clusters.backends.simulator import SimulatorBackend
from quotas.models import Cluster, Node
from tests import factories as fx


def seed_pool(sim_url: str, *, nodes: int = 2, gpus: int = 8) -> dict:
    f = fx.flavor()
    cluster = Cluster.objects.create(name="sim-faults", kind="simulator", config={"url": sim_url})
    made = [
        Node.objects.create(cluster=cluster, name=f"fault-{i}", flavor=f, gpu_count=gpus, zone="z",
                            spine="s", leaf="l")
        for i in range(nodes)
    ]
    SimulatorBackend(sim_url).set_inventory(
        [NodeInfo(n.name, f.name, gpus, "ready", "z", "s", "l") for n in made]
    )
    dept = fx.department("D")
    project = fx.project("p", dept)
    fx.quota(f, dept, nodes * gpus)
    fx.quota(f, project, nodes * gpus)
    fx.priority()
    token = fx.api_token(fx.platform_admin(), name="fault tests")
    return {"token": token, "project": project.pk, "flavor": f.name, "cluster": cluster.pk}


def main(sim_url: str) -> None:
    """``manage.py shell -c`` entry point: the seed's ids on stdout, as JSON."""
    print(json.dumps(seed_pool(sim_url)))

"""NVL72 racks on Kubernetes through the portal (issue 36 items 3 and 4, DESIGN §18): the inventory
sync reads zone, block, rack and NVLink clique from the nodes' labels (the stand-in API server, the
official client), creates the racks, and the scheduling cycle places a 72-GPU gang in one NVLink
domain; with that rack's cap lowered below one more node's boards, the gang goes to the other."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.backends import k8s_standin

pytestmark = pytest.mark.kubernetes

k8s_api = k8s_standin.k8s_api
PER_DOMAIN, CARDS = 18, 4


def _gb200(domain: int, k: int) -> dict:
    return {
        "metadata": {"name": f"gb{domain}-{k:02d}", "labels": {
            "nvidia.com/gpu.count": str(CARDS), "topology.kubernetes.io/zone": "z1",
            "gpupool.io/block": "b0", "gpupool.io/rack": f"nvl{domain}",
            "nvidia.com/gpu.clique": f"5f0c2a9e-3d1b-4e7a-9c61-0a8b7d6e5f4c.{domain}",
        }},
        "spec": {},
        "status": {"capacity": {"nvidia.com/gpu": str(CARDS)},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_a_gang_lands_in_one_nvlink_domain_read_from_labels_and_respects_its_rack_cap(k8s_api, db):
    from jobs.clusters.inventory import sync_inventory
    from jobs.scheduling.cycle import schedule_once
    from quotas.models import Cluster, Rack
    from tests import factories as fx

    k8s_api.nodes = [_gb200(d, k) for d in range(3) for k in range(PER_DOMAIN)]
    flavor = fx.flavor("GB200")
    flavor.k8s_resource_name = "nvidia.com/gpu"
    flavor.board_watts = 1200
    flavor.save()
    cluster = Cluster.objects.create(name="gb", kind="kubernetes", config={"host": k8s_api.url})
    assert sync_inventory(cluster)["created"] == 3 * PER_DOMAIN
    node = cluster.nodes.get(name="gb1-03")
    assert (node.zone, node.spine, node.rack.name) == ("z1", "b0", "nvl1")
    assert node.leaf == "5f0c2a9e-3d1b-4e7a-9c61-0a8b7d6e5f4c.1"  # the NVLink clique is its leaf
    assert len(set(cluster.nodes.values_list("leaf", flat=True))) == 3
    racks = Rack.objects.filter(cluster=cluster)
    assert sorted(racks.values_list("name", flat=True)) == ["nvl0", "nvl1", "nvl2"]

    dept = fx.department("G")
    project = fx.project("g1", dept)
    fx.quota(flavor, dept, 216)
    fx.quota(flavor, project, 216)
    small = fx.submit(project, flavor, workers=1, gpus=4, name="small")
    assert schedule_once().admitted == 1
    small.refresh_from_db()
    taken = cluster.nodes.get(pk=small.placement[0][0][0])
    # The domain with the small job cannot host 18 whole nodes; of the two free ones, cap the
    # first so that it cannot power one more node's four boards: the gang goes to the last.
    free_racks = sorted({"nvl0", "nvl1", "nvl2"} - {taken.rack.name})
    Rack.objects.filter(cluster=cluster, name=free_racks[0]).update(power_cap_kw=Decimal("4.7"))
    Rack.objects.filter(cluster=cluster, name=free_racks[1]).update(power_cap_kw=Decimal("90"))
    gang = fx.submit(project, flavor, workers=PER_DOMAIN, gpus=CARDS, name="nvl72-gang")
    assert schedule_once().admitted == 1
    gang.refresh_from_db()
    nodes = cluster.nodes.filter(pk__in={n for worker in gang.placement for n, _g, _m in worker})
    assert nodes.count() == PER_DOMAIN
    assert set(nodes.values_list("rack__name", flat=True)) == {free_racks[1]}
    assert len(set(nodes.values_list("leaf", flat=True))) == 1

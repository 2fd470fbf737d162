"""Scheduler integration: the demo centre's quota tree rendered as Kueue and Volcano objects
(quotas.queues), validated against the CRD schemas vendored from upstream (made strict, plus the
CEL rules by hand) and compared with values worked out by hand from quotas/demo.py; then kept
in sync on the stand-in API server through the official client (jobs.native.queue_sync), and carried
by the jobs the Kubernetes backend submits.

Worked values (A100-80G, site zone Asia/Shanghai, the demo loan ad → ai of 8 active):
capacity 256 − 8 (a100-s2-l4-n4 cordoned) = 248; top level ai 120 + 8 = 128, ad 72 − 8 = 64,
svc 32, plat 8 → the pool keeps 248 − 232 = 16. ai's children want 96 + 84 = 180 > 128, so
they share 128 in proportion: 68.27 / 59.73 → 68 and 60 (largest remainder); ai-nlp's 68 over
nlp-llm 64 / nlp-asr 32: 45.33 / 22.67 → 45 and 23; ai-cv's 60 → 30 / 30; ad's 64 over 40 / 32:
35.56 / 28.44 → 36 and 28. A share below the quota turns into borrowing headroom:
nlp-llm borrowingLimit = 64 + 64 − 45 = 83, nlp-asr 32 + 8 − 23 = 17.
"""

from __future__ import annotations

import copy
import io
from dataclasses import replace
from datetime import datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import jsonschema
import kubernetes_validate
import pytest
import yaml
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.utils import timezone

from jobs.clusters.backends.kubernetes import KubernetesBackend
from jobs.native import queue_sync
from jobs.native.backends.queues import HASH_ANNOTATION, RULES
from jobs.native.tasks import sync_scheduler_queues
from portal import demo as portal_demo
from portal.models import Project, User
from portal.services import project_update
from quotas import demo as quotas_demo
from quotas import queues
from quotas.effective import Limits, LoanSpan
from quotas.models import Cluster, Loan, Node, QuotaNode
from quotas.queues import project_queue_name
from quotas.services import quota_node_update
from tests.backends import k8s_standin
from tests.backends.test_kubernetes import K8S_VERSION, make_spec
from tests.backends.test_volcano import _strict

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]

k8s_api = k8s_standin.k8s_api
SCHEMAS = Path(__file__).parent / "schemas"
VALIDATORS = {
    ("kueue.x-k8s.io/v1beta1", "ResourceFlavor"): "kueue-v1beta1-resourceflavor.yaml",
    ("kueue.x-k8s.io/v1beta1", "ClusterQueue"): "kueue-v1beta1-clusterqueue.yaml",
    ("kueue.x-k8s.io/v1alpha1", "Cohort"): "kueue-v1alpha1-cohort.yaml",
    ("kueue.x-k8s.io/v1beta1", "LocalQueue"): "kueue-v1beta1-localqueue.yaml",
    ("scheduling.volcano.sh/v1beta1", "Queue"): "volcano-scheduling-v1beta1-queue.yaml",
}
VALIDATORS = {
    key: jsonschema.Draft7Validator(_strict(yaml.safe_load((SCHEMAS / name).read_text())))
    for key, name in VALIDATORS.items()
}
SHANGHAI = ZoneInfo("Asia/Shanghai")
MANAGED = {"app.kubernetes.io/managed-by": "gpupool"}
NS_SELECTOR = {"matchLabels": {"kubernetes.io/metadata.name": "gpupool-jobs"}}
PREEMPTION = {
    "reclaimWithinCohort": "Any",
    "withinClusterQueue": "LowerPriority",
    "borrowWithinCohort": {"policy": "Never"},
}
DNS_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def at_local(hour: int) -> datetime:
    """Today at ``hour`` in the site zone: inside the demo loan (it began a day before seeding)."""
    today = timezone.now().astimezone(SHANGHAI).date()
    return datetime.combine(today, time(hour), SHANGHAI)


DAY, NIGHT = 10, 21  # the demo's svc window lends 32 instead of 16 from 20:00 to 08:00


@pytest.fixture(scope="module")
def demo_tree(django_db_setup, django_db_blocker):
    """The demo centre's quota tree as the renderer's frozen snapshot, plus the demo loan's
    span; seeded once in a transaction that is rolled back, so no other test sees it."""
    with django_db_blocker.unblock(), transaction.atomic():
        out = io.StringIO()
        portal_demo.seed(out)
        quotas_demo.seed(out)
        devices_only()
        tree = queue_sync.snapshot()
        loan = Loan.objects.get(reason__startswith="demo loan")
        span = (loan.starts_at, loan.ends_at)
        transaction.set_rollback(True)
    return tree, span


@pytest.fixture
def demo(db):
    out = io.StringIO()
    portal_demo.seed(out)
    quotas_demo.seed(out)
    devices_only()
    # The seeding asked for a queue sync on commit: drop it as its commit would have, or it
    # would stand in for every later request.
    drop_sync_requests()
    return User.objects.get(username="admin")


def devices_only() -> None:
    """The worked values are the devices': the demo nodes' CPU, memory and disk (quotas/demo.py
    MACHINES) are emptied, so the renderings are devices only — what machine figures add is
    tests/backends/test_queue_machine.py's."""
    Node.objects.update(cpu_millicores=None, memory_mib=None, local_disk_gib=None)


def drop_sync_requests() -> None:
    """What a commit does to the pending sync request (the test's transaction never commits)."""
    connection.run_on_commit[:] = [e for e in connection.run_on_commit if e[1] is not queue_sync._enqueue]


def render(tree, fmt: str, at: int | datetime = DAY, flavors: tuple[str, ...] = ()) -> dict:
    """(kind, name) → object, every object validated."""
    if flavors:
        tree = replace(tree, flavors=tuple(f for f in tree.flavors if f.name in flavors))
    objects = queues.render(tree, at_local(at) if isinstance(at, int) else at, fmt)
    for obj in objects:
        validate(obj)
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def validate(obj: dict) -> None:
    VALIDATORS[(obj["apiVersion"], obj["kind"])].validate(obj)
    meta = obj["metadata"]
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "gpupool"
    assert (
        jsonschema.Draft7Validator({"pattern": DNS_NAME}).is_valid(meta["name"]) and len(meta["name"]) <= 63
    )
    spec = obj["spec"]
    for group in spec.get("resourceGroups", []):
        # CEL: flavors must have the same number of resources as the coveredResources.
        assert all(len(f["resources"]) == len(group["coveredResources"]) for f in group["flavors"])
    limits = [r for g in spec.get("resourceGroups", []) for f in g["flavors"] for r in f["resources"]]
    if obj["kind"] == "ClusterQueue" and not spec.get("cohort"):
        assert not any("borrowingLimit" in r for r in limits)  # CEL: nil when cohort is empty
    if obj["kind"] == "Cohort" and not spec.get("parent"):
        # Webhook: borrowing and lending limits only on a cohort that has a parent.
        assert not any({"borrowingLimit", "lendingLimit"} & set(r) for r in limits)


def gpu_group(*flavors: dict) -> dict:
    return {"coveredResources": ["nvidia.com/gpu"], "flavors": list(flavors)}


def flavor(name: str, nominal, resource: str = "nvidia.com/gpu", **limits) -> dict:
    return {"name": name, "resources": [{"name": resource, "nominalQuota": nominal, **limits}]}


# -- rendering the demo centre


def test_demo_kueue_objects_are_valid_and_carry_the_hand_checked_values(demo_tree):
    objects = render(demo_tree[0], "kueue")
    kinds = sorted(k for k, _ in objects)
    assert kinds.count("ResourceFlavor") == 7 and kinds.count("Cohort") == 10
    assert kinds.count("ClusterQueue") == 9 and kinds.count("LocalQueue") == 9
    assert objects[("ResourceFlavor", "gp-a100-1g-10gb")] == {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "gp-a100-1g-10gb", "labels": MANAGED},
        "spec": {"nodeLabels": {"gpupool.io/flavor": "A100-1g.10gb"}},
    }
    # The pool: what no top-level department holds, borrowable by all (A100 16, the rest 0).
    assert objects[("Cohort", "gpupool")]["spec"] == {
        "resourceGroups": [
            {
                "coveredResources": ["cambricon.com/mlu"],
                "flavors": [flavor("gp-mlu370", 0, "cambricon.com/mlu")],
            },
            {
                "coveredResources": ["huawei.com/Ascend910"],
                "flavors": [flavor("gp-ascend-910b", 0, "huawei.com/Ascend910")],
            },
            {"coveredResources": ["hygon.com/dcu"], "flavors": [flavor("gp-dcu-z100", 0, "hygon.com/dcu")]},
            gpu_group(flavor("gp-a100-80g", 16), flavor("gp-h800", 0), flavor("gp-t4-shared", 0)),
            {
                "coveredResources": ["nvidia.com/mig-1g.10gb"],
                "flavors": [flavor("gp-a100-1g-10gb", 0, "nvidia.com/mig-1g.10gb")],
            },
        ]
    }
    # svc by day: lend limit 16 of 32 → 16 lendable; no borrow limit; children hold it all.
    svc = objects[("Cohort", "gpd-svc")]
    assert svc["metadata"] == {"name": "gpd-svc", "labels": {**MANAGED, "gpupool.io/owner": "svc"}}
    assert svc["spec"] == {
        "parent": "gpupool",
        # A100 32 + H800 24 + 112 MIG slices of 1/7 card + T4 16, all of throughput 1 in the demo.
        "fairSharing": {"weight": 32 + 24 + 16 + 16},
        "resourceGroups": [
            gpu_group(
                flavor("gp-a100-80g", 0, lendingLimit=16), flavor("gp-h800", 0), flavor("gp-t4-shared", 0)
            ),
            {
                "coveredResources": ["nvidia.com/mig-1g.10gb"],
                "flavors": [flavor("gp-a100-1g-10gb", 0, "nvidia.com/mig-1g.10gb")],
            },
        ],
    }
    # plat never borrows (borrow limit 0).
    assert objects[("Cohort", "gpd-plat")]["spec"]["resourceGroups"][-1] == gpu_group(
        flavor("gp-a100-80g", 0, borrowingLimit=0)
    )
    # ai-nlp: share 68 of quota 96, lend limit 32 → never-lent 64 → 68 − 64 = 4 lendable.
    # Weights (fair sharing): the effective quota in normalised cards, A100 96 + H800 32 + Ascend 32.
    assert objects[("Cohort", "gpd-ai-nlp")]["spec"] == {
        "parent": "gpd-ai",
        "fairSharing": {"weight": 160},
        "resourceGroups": [
            {
                "coveredResources": ["huawei.com/Ascend910"],
                "flavors": [flavor("gp-ascend-910b", 0, "huawei.com/Ascend910")],
            },
            gpu_group(flavor("gp-a100-80g", 0, lendingLimit=4), flavor("gp-h800", 0)),
        ],
    }
    assert objects[("ClusterQueue", "gp-nlp-llm")] == {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "gp-nlp-llm", "labels": {**MANAGED, "gpupool.io/owner": "nlp-llm"}},
        "spec": {
            "cohort": "gpd-ai-nlp",
            "namespaceSelector": NS_SELECTOR,
            "queueingStrategy": "BestEffortFIFO",
            "preemption": PREEMPTION,
            "resourceGroups": [
                gpu_group(flavor("gp-a100-80g", 45, borrowingLimit=83), flavor("gp-h800", 32))
            ],
            "fairSharing": {"weight": 64 + 32},  # its quotas, not its shares (45 + 32)
        },
    }
    assert objects[("ClusterQueue", "gp-nlp-asr")]["spec"]["resourceGroups"][-1] == gpu_group(
        flavor("gp-a100-80g", 23, borrowingLimit=17)
    )
    # svc-chat: A100 16 lending 8 (lend limit 8); H800 24; T4 shared: svc-inf 16 over 10 + 10 → 8.
    assert objects[("ClusterQueue", "gp-svc-chat")]["spec"]["resourceGroups"] == [
        gpu_group(flavor("gp-a100-80g", 16, lendingLimit=8), flavor("gp-h800", 24), flavor("gp-t4-shared", 8))
    ]
    assert objects[("ClusterQueue", "gp-ad-bev")]["spec"]["resourceGroups"][-1] == gpu_group(
        flavor("gp-a100-80g", 36)
    )
    assert objects[("LocalQueue", "gp-nlp-llm")] == {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {
            "name": "gp-nlp-llm",
            "labels": {**MANAGED, "gpupool.io/owner": "nlp-llm"},
            "namespace": "gpupool-jobs",
        },
        "spec": {"clusterQueue": "gp-nlp-llm"},
    }


def test_demo_volcano_queues_are_valid_and_carry_the_hand_checked_values(demo_tree):
    day, night = render(demo_tree[0], "volcano", DAY), render(demo_tree[0], "volcano", NIGHT)
    assert len(day) == 9 + 9
    # nlp-llm: A100 share 45 + H800 32 on nvidia.com/gpu; capability A100 64 + 64 = 128 plus
    # H800 without a borrow limit = its healthy capacity 64 − 8 (h800-s1-l2-n4 down) = 56.
    assert day[("Queue", "gp-nlp-llm")] == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "gp-nlp-llm", "labels": {**MANAGED, "gpupool.io/owner": "nlp-llm"}},
        "spec": {
            "parent": "gpd-ai-nlp",
            "weight": 64 + 32,  # normalised cards of its quotas, as the Kueue and Slurm weights
            "reclaimable": True,
            "deserved": {"nvidia.com/gpu": 77},
            "capability": {"nvidia.com/gpu": 184},
        },
    }
    assert day[("Queue", "gpd-ai-nlp")]["spec"]["parent"] == "gpd-ai"
    assert day[("Queue", "gpd-ai")]["spec"]["parent"] == "root"
    # svc-chat: deserved A100 16 + H800 24 + T4 8; guarantee = never-lent A100 16 − 8.
    chat = day[("Queue", "gp-svc-chat")]["spec"]
    assert chat["deserved"] == {"nvidia.com/gpu": 48}
    assert chat["capability"] == {"nvidia.com/gpu": 248 + 56 + 16}
    assert chat["guarantee"] == {"resource": {"nvidia.com/gpu": 8}}
    # The svc night window lends all 32: nothing is held back any more.
    assert day[("Queue", "gpd-svc")]["spec"]["guarantee"] == {"resource": {"nvidia.com/gpu": 16}}
    assert "guarantee" not in night[("Queue", "gpd-svc")]["spec"]
    # MIG slices are whole units of their own resource; plat never borrows A100 (capability 8).
    assert day[("Queue", "gp-svc-rank")]["spec"]["deserved"] == {
        "nvidia.com/gpu": 24,
        "nvidia.com/mig-1g.10gb": 112,
    }
    assert day[("Queue", "gpd-plat")]["spec"]["capability"] == {
        "cambricon.com/mlu": 64,
        "hygon.com/dcu": 32,
        "nvidia.com/gpu": 8,
    }


def test_the_loan_and_the_window_change_the_values_at_their_instants(demo_tree):
    tree, (starts, ends) = demo_tree
    a100 = ("A100-80G",)
    during = render(tree, "kueue", flavors=a100)
    after = render(tree, "kueue", ends, flavors=a100)
    before = render(tree, "kueue", starts - timedelta(microseconds=1), flavors=a100)

    def nominal(objects, name):
        return objects[("ClusterQueue", name)]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]

    # The loan shrinks ad to 64 < 40 + 32 (scaled 36 / 28); returned at ends_at, ad is 72 again.
    assert nominal(during, "gp-ad-bev") == {"name": "nvidia.com/gpu", "nominalQuota": 36}
    assert nominal(after, "gp-ad-bev") == {"name": "nvidia.com/gpu", "nominalQuota": 40}
    assert nominal(before, "gp-ad-bev") == nominal(after, "gp-ad-bev")
    # ai without the loan: 120 over 180 → ai-nlp 64 → nlp-llm 64 × 64 / 96 = 42.67 → 43 (asr 21).
    assert nominal(after, "gp-nlp-llm") == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 43,
        "borrowingLimit": 85,
    }
    # The pool keeps 248 − 232 = 16 either way: the loan moves quota, it creates none.
    assert after[("Cohort", "gpupool")] == during[("Cohort", "gpupool")]
    night = render(tree, "kueue", NIGHT, flavors=a100)
    svc = [g["flavors"][0]["resources"][0] for g in night[("Cohort", "gpd-svc")]["spec"]["resourceGroups"]]
    assert svc == [{"name": "nvidia.com/gpu", "nominalQuota": 0, "lendingLimit": 32}]
    # Volcano follows the same instants: ad-bev deserves 40 once the loan is back.
    assert render(tree, "volcano", ends, flavors=a100)[("Queue", "gp-ad-bev")]["spec"]["deserved"] == {
        "nvidia.com/gpu": 40
    }


def test_shared_quotas_render_in_milli_units_and_a_loan_below_the_lend_limit_holds_nothing_back():
    now = datetime(2026, 6, 1, 12, tzinfo=SHANGHAI)
    loan = LoanSpan(Decimal(8), now - timedelta(hours=1), now + timedelta(hours=1))
    tree = queues.TreeSnapshot(
        flavors=(queues.FlavorRef("T4", "nvidia.com/gpu", Decimal(10), shareable=True),),
        departments=(("d", None),),
        projects=(("p", "d"), ("q", "d")),
        quotas=(
            queues.QuotaRef(
                "T4", "department", "d", Limits(Decimal(10), None, Decimal(6)), loans_out=(loan,)
            ),
            queues.QuotaRef("T4", "project", "p", Limits(Decimal("2.5"))),
            queues.QuotaRef("T4", "project", "q", Limits(Decimal("1.25"), Decimal(0))),
        ),
    )
    kueue = render(tree, "kueue", now)
    # d lent 8 of 10: its share 2 is split over 2.5 + 1.25 → 1.333… / 0.666… → 1333m and 667m.
    res = {
        n: cq_spec["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
        for (k, n), cq_spec in kueue.items()
        if k == "ClusterQueue"
    }
    assert res["gp-p"] == {"name": "nvidia.com/gpu", "nominalQuota": "1333m"}
    assert res["gp-q"] == {"name": "nvidia.com/gpu", "nominalQuota": "667m", "borrowingLimit": "583m"}
    # Quota 2 is below the lend limit 6: nothing is held back, all of the share may be lent.
    cohort = kueue[("Cohort", "gpd-d")]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert cohort == {"name": "nvidia.com/gpu", "nominalQuota": 0, "lendingLimit": 2}
    assert (
        kueue[("Cohort", "gpupool")]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0][
            "nominalQuota"
        ]
        == 8
    )
    volcano = render(tree, "volcano", now)
    assert "guarantee" not in volcano[("Queue", "gpd-d")]["spec"]
    assert volcano[("Queue", "gp-q")]["spec"]["capability"] == {"nvidia.com/gpu": "1250m"}


def test_a_strict_fifo_project_renders_a_strict_fifo_cluster_queue():
    """Issue 25 item 4: the project's queueing strategy is Kueue's own (docs/scheduling.md)."""
    now = datetime(2026, 6, 1, 12, tzinfo=SHANGHAI)
    tree = queues.TreeSnapshot(
        flavors=(queues.FlavorRef("A100", "nvidia.com/gpu", Decimal(16)),),
        departments=(("d", None),),
        projects=(("p", "d"), ("q", "d")),
        quotas=(queues.QuotaRef("A100", "project", "p", Limits(Decimal(8))),
                queues.QuotaRef("A100", "project", "q", Limits(Decimal(8)))),
        strict_fifo=frozenset({"p"}),
    )
    kueue = render(tree, "kueue", now)  # validated against the vendored CRD schema
    assert kueue[("ClusterQueue", "gp-p")]["spec"]["queueingStrategy"] == "StrictFIFO"
    assert kueue[("ClusterQueue", "gp-q")]["spec"]["queueingStrategy"] == "BestEffortFIFO"


def test_render_queues_prints_yaml_and_refuses_bad_input(world):
    out = io.StringIO()
    call_command("render_queues", "--format", "kueue", "--at", "2026-06-01T10:00+08:00", stdout=out)
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.getvalue())}
    for doc in docs.values():
        validate(doc)
    # 1 flavor, the pool + A, A1, B, and a ClusterQueue + LocalQueue for pa, pa1, pb.
    assert len(docs) == 1 + 4 + 3 + 3
    assert docs[("ClusterQueue", "gp-pa1")]["spec"]["cohort"] == "gpd-a1"
    assert docs[("ClusterQueue", "gp-pa1")]["spec"]["resourceGroups"] == [
        {"coveredResources": ["nvidia.com/gpu"], "flavors": [flavor("gp-f", 4)]}
    ]
    assert docs[("Cohort", "gpd-a")]["spec"]["parent"] == "gpupool"
    with pytest.raises(CommandError, match="unknown flavor: nope"):
        call_command("render_queues", "--flavor", "nope")
    with pytest.raises(CommandError, match="UTC offset"):
        call_command("render_queues", "--at", "2026-06-01T10:00")


# -- keeping the cluster in sync


@pytest.fixture
def clusters(demo, k8s_api):
    flavors = ["A100-80G", "H800", "T4-shared"]
    for name, mode in (("kueue-c", "kueue"), ("volcano-c", "volcano")):
        Cluster.objects.create(
            name=name,
            kind="kubernetes",
            config={
                "host": k8s_api.url,
                "scheduler_integration": mode,
                "queue_flavors": flavors,
                "timeout": 5,
            },
        )
    return k8s_api


def group_and_plural(path: str) -> tuple[str, str]:
    parts = path.strip("/").split("/")  # apis, group, version, [namespaces, ns,] plural[, name]
    rest = parts[3:]
    if rest[0] == "namespaces":
        rest = rest[2:]
    return parts[1], rest[0]


def cq_resources(api, name: str) -> dict:
    cq = api.get("clusterqueues", name, namespace="")
    return {f["name"]: f["resources"][0] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]}


def test_a_quota_change_a_window_and_a_loan_reach_the_cluster_and_a_removed_project_is_pruned(
    demo, clusters, django_capture_on_commit_callbacks
):
    api = clusters
    foreign = {"metadata": {"name": "team-x"}, "spec": {"cohort": "other"}}  # not ours: never touched
    api.add("clusterqueues", foreign, namespace="")
    first = queue_sync.sync_all(now=at_local(DAY))
    assert first["kueue-c"]["created"] == 3 + 10 + 9 + 9 and first["volcano-c"]["created"] == 18
    assert cq_resources(api, "gp-nlp-llm")["gp-a100-80g"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 45,
        "borrowingLimit": 83,
    }
    assert api.get("localqueues", "gp-nlp-llm")["spec"] == {"clusterQueue": "gp-nlp-llm"}
    assert api.get("queues", "gp-nlp-llm", namespace="")["spec"]["deserved"] == {"nvidia.com/gpu": 77}
    for (_r, _ns, _n), obj in api.objects.items():
        if obj["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") == "gpupool":
            validate({k: v for k, v in obj.items() if k != "status"})
    writes = len(api.calls("POST")) + len(api.calls("PUT"))
    again = queue_sync.sync_all(now=at_local(DAY))
    assert again["kueue-c"] == {"created": 0, "replaced": 0, "unchanged": 31, "deleted": 0}
    assert len(api.calls("POST")) + len(api.calls("PUT")) == writes  # an unchanged tree writes nothing

    # A quota change through the service: the commit asks for one sync, however many rows moved.
    node = QuotaNode.objects.get(project__code="nlp-llm", flavor__name="A100-80G")
    with django_capture_on_commit_callbacks() as callbacks:
        quota_node_update(actor=demo, node=node, quota=Decimal(40))
        QuotaNode.objects.get(project__code="nlp-asr", flavor__name="A100-80G").save()
    assert [c.__name__ for c in callbacks] == ["_enqueue"]
    drop_sync_requests()
    changed = sync_scheduler_queues()  # the task the hook sends (runs the same code in the worker)
    assert changed["kueue-c"]["replaced"] >= 2 and changed["kueue-c"]["deleted"] == 0
    # ai-nlp's 68 now over 40 + 32 = 72: 37.78 / 30.22 → 38 and 30.
    assert cq_resources(api, "gp-nlp-llm")["gp-a100-80g"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 38,
        "borrowingLimit": 40 + 64 - 38,
    }
    assert cq_resources(api, "gp-nlp-asr")["gp-a100-80g"]["nominalQuota"] == 30
    assert api.get("queues", "gp-nlp-llm", namespace="")["spec"]["deserved"] == {"nvidia.com/gpu": 70}
    replaced = api.get("clusterqueues", "gp-nlp-llm", namespace="")
    assert replaced["metadata"]["annotations"][HASH_ANNOTATION]

    # Someone edits our object by hand: the next sync puts it back.
    edited = api.get("clusterqueues", "gp-nlp-llm", namespace="")
    edited["spec"]["resourceGroups"] = []
    edited["metadata"]["annotations"][HASH_ANNOTATION] = "edited"
    # (at the real now, as the task just did: only the edited object differs)
    assert queue_sync.sync_all()["kueue-c"]["replaced"] == 1
    assert cq_resources(api, "gp-nlp-llm")["gp-a100-80g"]["nominalQuota"] == 38

    # The window opens at 20:00: the beat's sync at night lends all of svc's 32.
    queue_sync.sync_all(now=at_local(NIGHT))
    svc = api.get("cohorts", "gpd-svc", namespace="")["spec"]["resourceGroups"][0]["flavors"][0]
    assert svc["resources"][0]["lendingLimit"] == 32
    # The loan returns at ends_at: ad is 72 again and ad-bev gets its whole 40.
    loan = Loan.objects.get(reason__startswith="demo loan")
    queue_sync.sync_all(now=loan.ends_at)
    assert cq_resources(api, "gp-ad-bev")["gp-a100-80g"]["nominalQuota"] == 40

    # A project taken out of service: its queues are pruned, the foreign object stays.
    with django_capture_on_commit_callbacks() as callbacks:
        project_update(actor=demo, project=Project.objects.get(code="svc-rank"), active=False)
    assert len(callbacks) == 1
    pruned = queue_sync.sync_all(now=loan.ends_at)
    assert pruned["kueue-c"]["deleted"] == 2 and pruned["volcano-c"]["deleted"] == 1
    assert api.get("clusterqueues", "gp-svc-rank", namespace="") is None
    assert api.get("localqueues", "gp-svc-rank") is None
    assert api.get("queues", "gp-svc-rank", namespace="") is None
    assert api.get("clusterqueues", "team-x", namespace="")["spec"] == {"cohort": "other"}
    deletes = [p for m, p in api.calls("DELETE")]
    assert "/apis/kueue.x-k8s.io/v1beta1/namespaces/gpupool-jobs/localqueues/gp-svc-rank" in deletes
    # Every call stayed within RULES (the RBAC deploy/ grants the portal's service account).
    used = {group_and_plural(p) for _m, p in api.calls()}
    assert used <= set(RULES), used - set(RULES)
    # An API server that fails is reported per cluster; the next sync retries.
    api.fail_with = 503
    failed = queue_sync.sync_all()
    assert set(failed) == {"kueue-c", "volcano-c"} and all("HTTP 503" in r["error"] for r in failed.values())


def test_only_real_kubernetes_clusters_in_integration_mode_are_synced(world):
    assert queue_sync.integration_clusters() == []
    Cluster.objects.create(
        name="sim-k8s", kind="kubernetes", config={"simulated": True, "scheduler_integration": "kueue"}
    )
    assert queue_sync.integration_clusters() == []
    assert sync_scheduler_queues() == {}


# -- jobs carry their queue


def test_kubernetes_jobs_carry_the_kueue_queue_label_and_flavor_selector(k8s_api):
    backend = KubernetesBackend(host=k8s_api.url, scheduler_integration="kueue")
    for kind, resource in (("training", "jobs"), ("inference", "deployments"), ("dev", "pods")):
        spec = make_spec(kind, job_id={"training": 1, "inference": 2, "dev": 3}[kind], workers=1)
        backend.submit(spec)
        obj = k8s_api.get(resource, spec.name)
        assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == project_queue_name("pa1") == "gp-pa1"
        pod = obj["spec"] if kind == "dev" else obj["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"gpupool.io/flavor": "A100"}
        kubernetes_validate.validate(copy.deepcopy(obj), K8S_VERSION, strict=True)
    plain = KubernetesBackend(host=k8s_api.url).manifest(make_spec("training"))
    assert "kueue.x-k8s.io/queue-name" not in plain["metadata"]["labels"]


def test_volcano_jobs_go_to_their_projects_leaf_queue(k8s_api):
    backend = KubernetesBackend(host=k8s_api.url, training_api="volcano", scheduler_integration="volcano")
    backend.submit(make_spec("training", job_id=7))
    assert k8s_api.get("vcjobs", "gp-7")["spec"]["queue"] == "gp-pa1"
    # Without the integration the department queue of the existing Volcano support stays.
    assert (
        KubernetesBackend(host=k8s_api.url, training_api="volcano").manifest(make_spec())["spec"]["queue"]
        == "gp-a1"
    )
    with pytest.raises(ValueError, match="scheduler_integration"):
        KubernetesBackend(host=k8s_api.url, scheduler_integration="slurm")

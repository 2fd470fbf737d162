"""YuniKorn integration: the quota tree rendered as YuniKorn's ``queues.yaml`` (quotas.yunikorn),
checked by a validator re-implemented from YuniKorn's own configuration source
(tests/backends/yunikorn_schema.py, sources cited there) and against values worked out by hand;
then written into the ConfigMap ``yunikorn-configs`` on the stand-in API server through the
official client (jobs.native.queue_sync, jobs.native.backends.yunikorn).

The hand-built centre (worked values, 2026-06-01 is a Monday; site zone Asia/Shanghai):

  flavors A100 (nvidia.com/gpu), 910B (huawei.com/Ascend910, no borrow limits anywhere),
  MIG (nvidia.com/mig-1g.10gb)
  ai        A100 q 24 b 8, + the loan of 4 from ad → 28, max 36;     910B 16
  ├ ai-nlp  A100 q 16 b 8 → max 24;                                  910B 16
  │ ├ llm   A100 q 12 b 16 → max 28, capped at ai-nlp's 24;          910B 10
  │ └ asr   A100 q 4 b 0 → max 4;                                    910B 6
  └ cv      A100 q 8 b 4 → max 12
  ad        A100 q 16 b 8, lent 4 → 12, max 20
  └ bev     A100 q 12 b 4 → max 16
  svc       A100 q 16 b 0 (a window 20:00–08:00 makes it 8);  MIG q 56 b 0
  ├ chat    A100 q 16 b 0 (at night svc's 8 is all it gets);  MIG q 28 b 0: 56 over 28 + 42 →
  └ rank                                                       MIG q 42 b 0:  22.4 / 33.6 → 22 / 34
"""

from __future__ import annotations

import copy
import io
from dataclasses import replace
from datetime import datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import kubernetes_validate
import pytest
import yaml
from django.core.management import call_command
from kubernetes import client
from kubernetes.client.rest import ApiException

from jobs.clusters.backends.kubernetes import KubernetesBackend
from jobs.native import queue_sync
from jobs.native.backends.yunikorn import RULES, YuniKornSync
from jobs.native.models import ExternalSource, ExternalSourceKind
from jobs.native.tasks import sync_scheduler_queues
from portal.models import Project
from portal.services import project_update
from quotas.effective import Limits, LoanSpan, Window
from quotas.models import Cluster, QuotaNode
from quotas.queues import FlavorRef, QuotaRef, TreeSnapshot
from quotas.services import quota_node_update
from quotas.slurm_accounts import Naming, PortalState, QuotaLimit, desired_state
from quotas.yunikorn import WEIGHT_PROPERTY, ZERO_MAX_GUARD, dump, render_yunikorn
from tests.backends import k8s_standin, test_queues
from tests.backends.test_kubernetes import K8S_VERSION, make_spec
from tests.backends.test_queues import DAY, at_local, drop_sync_requests
from tests.backends.yunikorn_schema import ConfigError, enforced_max, validate

pytestmark = pytest.mark.kubernetes

k8s_api = k8s_standin.k8s_api
demo, demo_tree = test_queues.demo, test_queues.demo_tree  # the demo centre's fixtures
SHANGHAI = ZoneInfo("Asia/Shanghai")
NOON = datetime(2026, 6, 1, 10, tzinfo=SHANGHAI)
NIGHT = datetime(2026, 6, 1, 21, tzinfo=SHANGHAI)
LOAN = LoanSpan(
    Decimal(4), datetime(2026, 6, 1, 8, tzinfo=SHANGHAI), datetime(2026, 6, 2, 8, tzinfo=SHANGHAI)
)
GPU, NPU, MIG = "nvidia.com/gpu", "huawei.com/Ascend910", "nvidia.com/mig-1g.10gb"
NAMESPACES = (
    ("nlp-llm-prod", "llm"),
    ("nlp-llm-dev", "llm"),
    ("bev", "bev"),
    ("team-x", "retired"),  # a project not in the snapshot (inactive): no queue, no rule
    ("gpupool", "chat"),  # the portal's own namespace: its pods are the portal's, never a project's
)


def q(flavor: str, kind: str, code: str, quota, borrow=None, **kw) -> QuotaRef:
    b = None if borrow is None else Decimal(borrow)
    return QuotaRef(flavor, kind, code, Limits(Decimal(quota), b), **kw)


def centre() -> TreeSnapshot:
    night = Window(frozenset(range(7)), time(20), time(8), quota=Decimal(8))
    return TreeSnapshot(
        flavors=(
            FlavorRef("A100", GPU, Decimal(64)),
            FlavorRef("910B", NPU, Decimal(32)),
            FlavorRef("MIG", MIG, Decimal(56)),
        ),
        departments=(("ai", None), ("ai-nlp", "ai"), ("ad", None), ("svc", None)),
        projects=(
            ("llm", "ai-nlp"),
            ("asr", "ai-nlp"),
            ("cv", "ai"),
            ("bev", "ad"),
            ("chat", "svc"),
            ("rank", "svc"),
        ),
        quotas=(
            q("A100", "department", "ai", 24, 8, loans_in=(LOAN,)),
            q("A100", "department", "ai-nlp", 16, 8),
            q("A100", "project", "llm", 12, 16),
            q("A100", "project", "asr", 4, 0),
            q("A100", "project", "cv", 8, 4),
            q("A100", "department", "ad", 16, 8, loans_out=(LOAN,)),
            q("A100", "project", "bev", 12, 4),
            q("A100", "department", "svc", 16, 0, windows=(night,)),
            q("A100", "project", "chat", 16, 0),
            q("910B", "department", "ai", 16),
            q("910B", "department", "ai-nlp", 16),
            q("910B", "project", "llm", 10),
            q("910B", "project", "asr", 6),
            q("MIG", "department", "svc", 56, 0),
            q("MIG", "project", "chat", 28, 0),
            q("MIG", "project", "rank", 42, 0),
        ),
        zone=SHANGHAI,
        namespace="gpupool",
    )


def queues_by_path(config: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}

    def walk(queue: dict, prefix: str) -> None:
        path = f"{prefix}.{queue['name']}" if prefix else queue["name"]
        out[path] = queue
        for child in queue.get("queues", []):
            walk(child, path)

    walk(config["partitions"][0]["queues"][0], "")
    return out


def res(guaranteed: dict, maximum: dict | None = None) -> dict:
    out = {"guaranteed": {k: str(v) for k, v in sorted(guaranteed.items())}}
    if maximum:
        out["max"] = {k: str(v) for k, v in sorted(maximum.items())}
    return out


def rendered(tree: TreeSnapshot, at: datetime, namespaces=NAMESPACES) -> dict:
    """Rendered, dumped, and read back the way YuniKorn reads it; validated on the way."""
    return validate(dump(render_yunikorn(tree, at, namespaces)))


# -- rendering


def test_the_centre_renders_to_a_valid_configuration_with_the_hand_checked_values():
    config = rendered(centre(), NOON)
    [partition] = config["partitions"]
    assert partition["name"] == "default"
    queues = queues_by_path(config)
    assert list(queues) == [
        "root",
        "root.gpd-ad",
        "root.gpd-ad.gp-bev",
        "root.gpd-ad.gp-bev.bev",
        "root.gpd-ai",
        "root.gpd-ai.gpd-ai-nlp",
        "root.gpd-ai.gpd-ai-nlp.gp-asr",
        "root.gpd-ai.gpd-ai-nlp.gp-llm",
        "root.gpd-ai.gpd-ai-nlp.gp-llm.nlp-llm-dev",
        "root.gpd-ai.gpd-ai-nlp.gp-llm.nlp-llm-prod",
        "root.gpd-ai.gp-cv",
        "root.gpd-svc",
        "root.gpd-svc.gp-chat",
        "root.gpd-svc.gp-rank",
        "root.gpupool",
    ]
    assert {k: v for k, v in queues["root"].items() if k != "queues"} == {"name": "root", "submitacl": "*"}
    expected = {
        # the loan moves 4 from ad to ai; its max is q + b = 28 + 8
        "root.gpd-ai": res({GPU: 28, NPU: 16}, {GPU: 36}),
        "root.gpd-ai.gpd-ai-nlp": res({GPU: 16, NPU: 16}, {GPU: 24}),
        "root.gpd-ai.gpd-ai-nlp.gp-llm": res({GPU: 12, NPU: 10}, {GPU: 24}),  # 12 + 16, capped at 24
        "root.gpd-ai.gpd-ai-nlp.gp-asr": res({GPU: 4, NPU: 6}, {GPU: 4}),  # borrow limit 0
        "root.gpd-ai.gp-cv": res({GPU: 8}, {GPU: 12}),
        "root.gpd-ad": res({GPU: 12}, {GPU: 20}),
        "root.gpd-ad.gp-bev": res({GPU: 12}, {GPU: 16}),
        "root.gpd-svc": res({GPU: 16, MIG: 56}, {GPU: 16, MIG: 56}),
        "root.gpd-svc.gp-chat": res({GPU: 16, MIG: 22}, {GPU: 16, MIG: 28}),  # overcommitted MIG: a share
        "root.gpd-svc.gp-rank": res({MIG: 34}, {MIG: 42}),
    }
    assert {path: queues[path].get("resources") for path in expected} == expected
    for path in expected:
        assert queues[path]["parent"] is True  # departments and projects: namespaces are the leaves
    for leaf in ("root.gpd-ad.gp-bev.bev", "root.gpd-ai.gpd-ai-nlp.gp-llm.nlp-llm-dev", "root.gpupool"):
        assert queues[leaf] == {"name": leaf.rsplit(".", 1)[1]}  # bounded by its project's max
    assert partition["placementrules"] == [
        {
            "name": "tag",
            "value": "namespace",
            "create": False,
            "parent": {"name": "fixed", "value": "root.gpd-ad.gp-bev"},
        },
        {
            "name": "tag",
            "value": "namespace",
            "create": False,
            "parent": {"name": "fixed", "value": "root.gpd-ai.gpd-ai-nlp.gp-llm"},
        },
        {"name": "tag", "value": "namespace", "create": False},  # root.gpupool: the portal's pods
    ]


def test_the_window_and_the_loan_change_the_values_at_their_instants():
    night = queues_by_path(rendered(centre(), NIGHT))
    # 20:00–08:00 svc has 8: chat's 16 is scaled to 8 and its max capped at svc's.
    assert night["root.gpd-svc"]["resources"] == res({GPU: 8, MIG: 56}, {GPU: 8, MIG: 56})
    assert night["root.gpd-svc.gp-chat"]["resources"] == res({GPU: 8, MIG: 22}, {GPU: 8, MIG: 28})
    returned = queues_by_path(rendered(centre(), LOAN.ends_at))
    assert returned["root.gpd-ai"]["resources"] == res({GPU: 24, NPU: 16}, {GPU: 32})
    assert returned["root.gpd-ad"]["resources"] == res({GPU: 16}, {GPU: 24})
    before = queues_by_path(rendered(centre(), LOAN.starts_at - timedelta(microseconds=1)))
    assert before["root.gpd-ai"] == returned["root.gpd-ai"]


def test_fractional_quotas_round_guaranteed_and_max_down():
    tree = TreeSnapshot(
        flavors=(FlavorRef("T4", GPU, Decimal(8), shareable=True),),
        departments=(("d", None),),
        projects=(("p", "d"), ("r", "d")),
        quotas=(
            q("T4", "department", "d", "4.5", "0.3"),
            q("T4", "project", "p", "2.5", "0.25"),
            q("T4", "project", "r", "1.5"),
        ),
        zone=SHANGHAI,
    )
    queues = queues_by_path(rendered(tree, NOON, ()))
    assert queues["root.gpd-d"]["resources"] == res({GPU: 4}, {GPU: 4})  # 4.5 → 4, 4.8 → 4
    assert queues["root.gpd-d.gp-p"]["resources"] == res({GPU: 2}, {GPU: 2})  # 2.5 → 2, 2.75 → 2
    assert queues["root.gpd-d.gp-r"]["resources"] == res({GPU: 1})  # no borrow limit: no max
    assert "queues" not in queues["root.gpd-d.gp-p"]  # no namespace mapped: an empty parent
    assert rendered(tree, NOON, ())["partitions"][0]["placementrules"] == [
        {"name": "tag", "value": "namespace", "create": False}
    ]


def test_item15_a_fractional_cap_is_rounded_down_as_slurm_does_and_zero_stays_zero():
    """Issue 32 item 15: YuniKorn's max rounded a fractional cap up (a queue could hold up to one
    device more than q + b) while Slurm's GrpTRES rounds down. Both now round down; a cap that
    rounds to 0 devices keeps a guard type so YuniKorn does not drop the all-zero max (which would
    leave the queue capped by its parent alone)."""
    caps = {"p": ("2.5", "0.25"), "s": ("0.5", "0"), "w": ("3", "0")}  # q + b: 2.75, 0.5, 3
    tree = TreeSnapshot(
        flavors=(FlavorRef("T4", GPU, Decimal(8), shareable=True),),
        departments=(("d", None),),
        projects=tuple((code, "d") for code in caps),
        quotas=(
            q("T4", "department", "d", "6.5", "0.3"),
            *(q("T4", "project", code, quota, borrow) for code, (quota, borrow) in caps.items()),
        ),
        zone=SHANGHAI,
    )
    config = rendered(tree, NOON, ())
    slurm = desired_state(
        PortalState(
            departments=(("d", None),),
            projects=tuple((code, "d") for code in caps),
            limits=tuple(
                QuotaLimit("project", code, "gres/gpu", Decimal(quota), Decimal(borrow))
                for code, (quota, borrow) in caps.items()
            ),
            members=(),
            classes=(),
            tres=frozenset({"gres/gpu"}),
        ),
        Naming("gp_", "root"),
    )
    for code, (quota, borrow) in caps.items():
        cap = Decimal(quota) + Decimal(borrow)
        held = enforced_max(config, f"root.gpd-d.gp-{code}")[GPU]
        assert held <= cap, f"YuniKorn lets {code} hold {held} devices over its cap {cap}"
        # Slurm holds the quota in the project's account and the borrow limit in its borrow
        # account, each rounded down: together never more than YuniKorn's q + b.
        accounts = (f"gp_{code}", f"gp_borrow.{code}")
        in_slurm = sum(slurm.accounts[name].limit_map()["gres/gpu"] for name in accounts)
        assert in_slurm <= held, code
    assert enforced_max(config, "root.gpd-d") == {GPU: 6}  # 6.8 → 6
    assert queues_by_path(config)["root.gpd-d.gp-s"]["resources"]["max"] == {GPU: "0", ZERO_MAX_GUARD: "1"}


def test_same_input_same_text_and_names_that_cannot_be_queues_are_refused():
    assert dump(render_yunikorn(centre(), NOON, NAMESPACES)) == dump(
        render_yunikorn(centre(), NOON, tuple(reversed(NAMESPACES)))
    )
    with pytest.raises(ValueError, match="not a valid YuniKorn queue name"):
        render_yunikorn(centre(), NOON, [("x" * 65, "llm")])


def test_the_demo_centre_renders_to_a_valid_configuration(demo_tree):
    tree, (starts, ends) = demo_tree
    for at in (at_local(DAY), at_local(21), ends, starts - timedelta(seconds=1)):
        queues = queues_by_path(rendered(tree, at, ()))
        assert len([p for p in queues if p.count(".") >= 1]) == 9 + 9 + 1  # + the portal's leaf
    # nlp-llm (worked values in test_queues.py): A100 share 45 + H800 32; H800 has no borrow
    # limit, so nvidia.com/gpu has no max.
    day = queues_by_path(rendered(tree, at_local(DAY), ()))
    assert day["root.gpd-ai.gpd-ai-nlp.gp-nlp-llm"]["resources"] == {"guaranteed": {GPU: "77"}}


# -- the validator can fail


def _set(path: str, **fields):
    def apply(config: dict) -> None:
        queues_by_path(config)[path].update(fields)

    return apply


def _resources(path: str, kind: str, **values):
    def apply(config: dict) -> None:
        queues_by_path(config)[path]["resources"][kind].update(
            {k.replace("_", "/"): v for k, v in values.items()}
        )

    return apply


def _rules(*rules):
    def apply(config: dict) -> None:
        config["partitions"][0]["placementrules"][:0] = list(rules)

    return apply


LLM = "root.gpd-ai.gpd-ai-nlp.gp-llm"


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (_set(LLM, name="gp llm"), "invalid queue name"),
        (_set(LLM, name="x" * 65), "invalid queue name"),
        (_set("root.gpd-ai.gpd-ai-nlp.gp-asr", name="GP-LLM"), "duplicate child name"),
        (
            _resources(LLM, "guaranteed", **{"nvidia.com_gpu": "25"}),
            "guaranteed resource .* larger than maximum",
        ),
        (
            _resources(LLM, "max", **{"nvidia.com_gpu": "30"}),
            "max resource of parent .* smaller than maximum",
        ),
        (_resources(LLM, "guaranteed", **{"nvidia.com_gpu": "13"}), "sum of guaranteed"),
        (_resources(LLM, "guaranteed", **{"nvidia.com_gpu": "1500m"}), "invalid suffix"),
        (_resources(LLM, "guaranteed", **{"nvidia.com_gpu": "1.5"}), "invalid quantity"),
        (_set("root", resources={"max": {"nvidia.com/gpu": "1"}}), "root queue must not have resource"),
        (
            _set(LLM, guarantee={"nvidia.com/gpu": "1"}),
            "field guarantee not found in type configs.QueueConfig",
        ),
        (_set(LLM, parent="yes"), "cannot decode into bool"),
        (_set(LLM, submitacl="a b c"), "multiple spaces found in ACL"),
        (_rules({"name": "namespace", "value": "x"}), "unknown rule name"),
        (_rules({"name": "tag"}), "must have a value"),
        (_rules({"name": "fixed", "value": "root.gpd-ai.nope"}), "non-existing queues and create is 'false'"),
        (_rules({"name": "fixed", "value": "root.gpd-ai"}), "not a leaf"),
        (
            _rules(
                {"name": "tag", "value": "namespace", "parent": {"name": "fixed", "value": "root.gpupool"}}
            ),
            "not a leaf",
        ),
        (_rules({"name": "tag", "value": "namespace", "filter": {"type": "maybe"}}), "filter type"),
        (lambda c: c["partitions"][0].update(name="gpu"), "only partition 'default'"),
        (lambda c: c["partitions"].append(copy.deepcopy(c["partitions"][0])), "duplicate partition name"),
        (lambda c: c["partitions"][0].update(nodesortpolicy={"type": "spread"}), "undefined policy"),
        (
            lambda c: c["partitions"][0].update(
                limits=[{"limit": "x", "users": ["a"], "maxapplications": 1}]
            ),
            "not checked here",
        ),
    ],
)
def test_the_validator_rejects_what_yunikorn_rejects(breakage, message):
    config = rendered(centre(), NOON)
    breakage(config)
    with pytest.raises(ConfigError, match=message):
        validate(yaml.safe_dump(config))


def test_the_validator_accepts_yunikorns_own_default_configuration():
    # configs.DefaultSchedulerConfig (config.go), verbatim.
    default = """
partitions:
  - name: default
    placementrules:
      - name: tag
        value: namespace
        create: true
    queues:
      - name: root
        submitacl: '*'
"""
    assert validate(default)["partitions"][0]["queues"][0]["name"] == "root"


# -- keeping the ConfigMap in sync


@pytest.fixture
def yunikorn_cluster(demo, k8s_api):
    cluster = Cluster.objects.create(
        name="yk",
        kind="kubernetes",
        config={
            "host": k8s_api.url,
            "scheduler_integration": "yunikorn",
            "queue_flavors": ["A100-80G", "H800", "T4-shared"],
            "timeout": 5,
        },
    )
    for namespace, project in (("llm-prod", "nlp-llm"), ("llm-dev", "nlp-llm"), ("chat", "svc-chat")):
        ExternalSource.objects.create(
            cluster=cluster,
            kind=ExternalSourceKind.K8S_NAMESPACE,
            name=namespace,
            project=Project.objects.get(code=project),
        )
    ExternalSource.objects.create(cluster=cluster, kind=ExternalSourceKind.K8S_NAMESPACE, name="unmapped")
    drop_sync_requests()
    return cluster


CONFIGMAP_PATH = "/api/v1/namespaces/yunikorn/configmaps/yunikorn-configs"


def stored_config(api) -> tuple[dict, dict]:
    configmap = copy.deepcopy(api.get("configmaps", "yunikorn-configs", namespace="yunikorn"))
    bare = {k: copy.deepcopy(v) for k, v in configmap.items() if k != "status"}
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        bare["metadata"].pop(key, None)
    kubernetes_validate.validate(bare, K8S_VERSION, strict=True)
    return configmap, validate(configmap["data"]["queues.yaml"])


def writes(api) -> list[tuple[str, str]]:
    return [(m, p) for m, p in api.calls() if m in ("POST", "PUT", "PATCH", "DELETE")]


@pytest.mark.django_db
def test_the_sync_writes_the_configmap_once_and_follows_a_quota_change(
    demo,
    yunikorn_cluster,
    k8s_api,
    django_capture_on_commit_callbacks,
):
    api = k8s_api
    # The operator's ConfigMap, with keys gpupool must leave alone.
    api.add(
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "yunikorn-configs"},
            "data": {
                "log.level": "-1",
                "service.schedulingInterval": "1s",
                "queues.yaml": "partitions: []\n",
            },
        },
        namespace="yunikorn",
    )
    assert queue_sync.sync_all(now=at_local(DAY)) == {"yk": {"created": 0, "updated": 1, "unchanged": 0}}
    configmap, config = stored_config(api)
    assert configmap["data"]["log.level"] == "-1" and configmap["data"]["service.schedulingInterval"] == "1s"
    assert set(configmap["data"]) == {"log.level", "service.schedulingInterval", "queues.yaml"}
    assert writes(api) == [("PATCH", CONFIGMAP_PATH)]
    queues = queues_by_path(config)
    llm = "root.gpd-ai.gpd-ai-nlp.gp-nlp-llm"
    assert queues[llm]["resources"] == {"guaranteed": {GPU: "77"}}  # A100 45 + H800 32
    assert [q["name"] for q in queues[llm]["queues"]] == ["llm-dev", "llm-prod"]
    assert [q["name"] for q in queues["root.gpd-svc.gpd-svc-inf.gp-svc-chat"]["queues"]] == ["chat"]
    rules = config["partitions"][0]["placementrules"]
    assert [r.get("parent", {}).get("value") for r in rules] == [
        llm,
        "root.gpd-svc.gpd-svc-inf.gp-svc-chat",
        None,
    ]
    assert "root.gpupool-jobs" in queues and not any(p.endswith(".unmapped") for p in queues)

    # An unchanged tree writes nothing: one read, no write.
    seen = len(api.requests)
    assert queue_sync.sync_all(now=at_local(DAY)) == {"yk": {"created": 0, "updated": 0, "unchanged": 1}}
    assert api.calls()[seen:] == [("GET", CONFIGMAP_PATH)]

    # A quota change through the service asks for a sync on commit; the task updates the key.
    node = QuotaNode.objects.get(project__code="nlp-llm", flavor__name="A100-80G")
    with django_capture_on_commit_callbacks() as callbacks:
        quota_node_update(actor=demo, node=node, quota=Decimal(40))
    assert [c.__name__ for c in callbacks] == ["_enqueue"]
    drop_sync_requests()
    assert sync_scheduler_queues()["yk"]["updated"] == 1
    configmap, config = stored_config(api)
    # ai-nlp's 68 over 40 + 32 → 38 (test_queues.py), + H800 32.
    assert queues_by_path(config)[llm]["resources"] == {"guaranteed": {GPU: "70"}}
    assert configmap["data"]["log.level"] == "-1"

    # A project taken out of service loses its queues and its namespaces' rule.
    project_update(actor=demo, project=Project.objects.get(code="svc-chat"), active=False)
    drop_sync_requests()
    queue_sync.sync_all(now=at_local(DAY))
    _, config = stored_config(api)
    assert "root.gpd-svc.gpd-svc-inf.gp-svc-chat" not in queues_by_path(config)
    assert len(config["partitions"][0]["placementrules"]) == 2
    # Every call was on the one ConfigMap (RULES: get, create, patch on configmaps).
    assert {p for _m, p in api.calls()} == {CONFIGMAP_PATH}
    assert {m for m, _p in api.calls()} <= {"GET", "PATCH"} and RULES[0][1] == "configmaps"


@pytest.mark.django_db
def test_a_missing_configmap_is_created_and_a_failing_api_is_reported(demo, yunikorn_cluster, k8s_api):
    yunikorn_cluster.config = {**yunikorn_cluster.config, "yunikorn_namespace": "yk-system"}
    yunikorn_cluster.save()
    drop_sync_requests()
    assert queue_sync.sync_all(now=at_local(DAY))["yk"]["created"] == 1
    configmap = k8s_api.get("configmaps", "yunikorn-configs", namespace="yk-system")
    assert configmap["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpupool"}
    assert configmap["data"]["queues.yaml"] == queue_sync.render_yunikorn_config(
        yunikorn_cluster, at_local(DAY)
    )
    validate(configmap["data"]["queues.yaml"])
    k8s_api.fail_with = 503
    assert "HTTP 503" in queue_sync.sync_all()["yk"]["error"]


def test_a_patch_with_a_stale_resource_version_conflicts(k8s_api):
    """What makes a concurrent writer's change and ours not overwrite each other: the stand-in
    answers a stale ``resourceVersion`` in a merge patch with 409, as the API server does."""
    backend = KubernetesBackend(host=k8s_api.url)
    sync = YuniKornSync(backend)
    assert sync.apply("a: 1\n")["created"] == 1
    stale = sync.current()["metadata"]["resourceVersion"]
    assert sync.apply("a: 2\n")["updated"] == 1
    with pytest.raises(ApiException) as caught:
        backend.core.patch_namespaced_config_map(
            "yunikorn-configs",
            "yunikorn",
            {"metadata": {"resourceVersion": stale}, "data": {"queues.yaml": "x"}},
            _content_type="application/merge-patch+json",
        )
    assert caught.value.status == 409
    assert sync.current()["data"]["queues.yaml"] == "a: 2\n"
    assert isinstance(backend.core, client.CoreV1Api)


@pytest.mark.django_db
def test_render_queues_prints_a_clusters_yunikorn_configuration(demo, yunikorn_cluster):
    out = io.StringIO()
    call_command(
        "render_queues",
        "--format",
        "yunikorn",
        "--cluster",
        "yk",
        "--at",
        "2026-06-01T10:00+08:00",
        stdout=out,
    )
    config = validate(out.getvalue())
    assert "root.gpd-ai.gpd-ai-nlp.gp-nlp-llm.llm-prod" in queues_by_path(config)


# -- the portal's own pods


def test_yunikorn_mode_pods_name_yunikorn_and_their_own_application(k8s_api):
    backend = KubernetesBackend(host=k8s_api.url, scheduler_integration="yunikorn")
    for kind, resource in (("training", "jobs"), ("inference", "deployments"), ("dev", "pods")):
        spec = make_spec(kind, job_id={"training": 1, "inference": 2, "dev": 3}[kind], workers=1)
        backend.submit(spec)
        obj = k8s_api.get(resource, spec.name)
        pod_meta, pod = (
            (obj["metadata"], obj["spec"])
            if kind == "dev"
            else (obj["spec"]["template"]["metadata"], obj["spec"]["template"]["spec"])
        )
        assert pod["schedulerName"] == "yunikorn"
        assert pod_meta["labels"]["yunikorn.apache.org/app-id"] == spec.name
        bare = copy.deepcopy(obj)
        for key in ("uid", "resourceVersion", "creationTimestamp"):
            bare["metadata"].pop(key)
        kubernetes_validate.validate(bare, K8S_VERSION, strict=True)
    plain = KubernetesBackend(host=k8s_api.url).manifest(make_spec("dev", workers=1))
    assert "schedulerName" not in plain["spec"]
    with pytest.raises(ValueError, match="training_api must be batch"):
        KubernetesBackend(host=k8s_api.url, scheduler_integration="yunikorn", training_api="volcano")


def test_the_documented_rbac_grants_exactly_what_the_sync_uses():
    """docs/backends.md ("YuniKorn") ships the Role to apply in YuniKorn's namespace: valid, and
    its verbs are the sync's RULES (the calls the tests above make: get, create, patch)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "backends.md").read_text()
    section = text[text.index("## YuniKorn") :]
    block = section[section.index("```yaml\n") + 8 :]
    role, binding = yaml.safe_load_all(block[: block.index("```")])
    for obj in (role, binding):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert granted == {(g, r, v) for g, r, verbs in RULES for v in verbs}
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_the_fair_share_weights_are_the_same_numbers_in_kueue_volcano_and_yunikorn():
    """Issue 34 item 4: a department's or project's weight is its effective quota in whole
    normalised cards (card fraction × relative throughput, summed over flavors) — the number the
    Slurm sync writes as ``Fairshare`` (quotas.queues.share_weight) — in every rendering, each
    valid against its schema."""
    tree = TreeSnapshot(
        flavors=(
            FlavorRef("A100", GPU, Decimal(64)),
            FlavorRef("H800", GPU, Decimal(16), normalised_per_unit=Decimal("2.5")),
            FlavorRef("MIG", MIG, Decimal(56), normalised_per_unit=Decimal(1) / 7),
        ),
        departments=(("d", None), ("e", None)),
        projects=(("big", "d"), ("small", "d")),
        quotas=(
            q("A100", "department", "d", 24), q("H800", "department", "d", 4),
            q("MIG", "department", "d", 14),
            q("A100", "project", "big", 16), q("A100", "project", "small", 8),
            q("H800", "project", "big", 4), q("MIG", "project", "small", 14),
        ),
        zone=SHANGHAI,
    )
    # big: 16 + 4 × 2.5 = 26; small: 8 + 14 slices of 1/7 = 10; d: 24 + 10 + 2 = 36; e holds none: 1.
    kueue = test_queues.render(tree, "kueue", NOON)
    cohorts = [kueue[("Cohort", f"gpd-{c}")]["spec"]["fairSharing"] for c in "de"]
    assert cohorts == [{"weight": 36}, {"weight": 1}]
    assert "fairSharing" not in kueue[("Cohort", "gpupool")]["spec"]
    queues = [kueue[("ClusterQueue", f"gp-{c}")]["spec"]["fairSharing"] for c in ("big", "small")]
    assert queues == [{"weight": 26}, {"weight": 10}]
    volcano = test_queues.render(tree, "volcano", NOON)
    assert [volcano[("Queue", n)]["spec"]["weight"] for n in ("gpd-d", "gp-big", "gp-small")] == [36, 26, 10]
    yunikorn = queues_by_path(rendered(tree, NOON, ()))
    paths = ("root.gpd-d", "root.gpd-d.gp-big", "root.gpd-d.gp-small")
    assert [yunikorn[p]["properties"] for p in paths] == [
        {WEIGHT_PROPERTY: "36"}, {WEIGHT_PROPERTY: "26"}, {WEIGHT_PROPERTY: "10"}
    ]
    # An admin's weight replaces the quota's cards, in every rendering alike (whole shares).
    weighted = replace(tree, weights=((("project", "small"), Decimal("40.7")),))
    kueue = test_queues.render(weighted, "kueue", NOON)
    assert kueue[("ClusterQueue", "gp-small")]["spec"]["fairSharing"] == {"weight": 40}
    volcano = test_queues.render(weighted, "volcano", NOON)
    assert volcano[("Queue", "gp-small")]["spec"]["weight"] == 40
    yunikorn = queues_by_path(rendered(weighted, NOON, ()))
    assert yunikorn["root.gpd-d.gp-small"]["properties"] == {WEIGHT_PROPERTY: "40"}

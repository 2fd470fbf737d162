"""Demo resources and quota tree: seven flavors (whole cards, a MIG slice, a shared GPU and
three domestic accelerators), three clusters, 76 nodes on a zone/spine/leaf topology, and a
quota tree with overcommit, a lend limit, a night window and an active loan.

Like every demo part (``portal.demo``) it creates only what is missing and changes nothing that
exists: a quota approved or edited in the running demo stands after a restart. Missing quota
nodes, the window and the loan are made through the services (``quota_node_set``,
``window_create``, ``loan_create``), so they pass the same validation as any edit; one that no
longer fits what users changed around it is left out with a warning."""

from datetime import time, timedelta
from decimal import Decimal
from fractions import Fraction
from functools import partial

from django.utils import timezone

from portal.demo import create_missing
from portal.models import Department, Project, User

from .models import Cluster, Flavor, Loan, LoanState, Node, NodeState, QuotaNode, QuotaWindow
from .services import loan_create, quota_node_set, window_create

FLAVORS = [
    # name, vendor, model, memory_mib, card_fraction, mig, shareable, premium, k8s, slurm gres
    (
        "A100-80G",
        "nvidia",
        "NVIDIA A100-SXM4-80GB",
        81920,
        "1",
        "",
        False,
        False,
        "nvidia.com/gpu",
        "gpu:a100",
    ),
    ("H800", "nvidia", "NVIDIA H800-SXM5-80GB", 81920, "1", "", False, True, "nvidia.com/gpu", "gpu:h800"),
    (
        "A100-1g.10gb",
        "nvidia",
        "NVIDIA A100 MIG 1g.10gb",
        9728,
        "1/7",
        "1g.10gb",
        False,
        False,
        "nvidia.com/mig-1g.10gb",
        "gpu:1g.10gb",
    ),
    (
        "T4-shared",
        "nvidia",
        "NVIDIA T4 (HAMi shared)",
        15360,
        "1",
        "",
        True,
        False,
        "nvidia.com/gpu",
        "shard",
    ),
    (
        "Ascend-910B",
        "huawei",
        "Huawei Ascend 910B",
        65536,
        "1",
        "",
        False,
        False,
        "huawei.com/Ascend910",
        "npu:910b",
    ),
    ("MLU370", "cambricon", "Cambricon MLU370-X8", 49152, "1", "", False, False, "cambricon.com/mlu", "mlu"),
    ("DCU-Z100", "hygon", "Hygon DCU Z100", 32768, "1", "", False, False, "hygon.com/dcu", "dcu"),
]

# cluster, kind, flavor, node name prefix, zone, spines, leaves per spine, nodes per leaf, gpus
NODE_GROUPS = [
    ("sim-bj", "simulator", "A100-80G", "a100", "bj-1", 2, 4, 4, 8),
    ("sim-bj", "simulator", "H800", "h800", "bj-1", 1, 2, 4, 8),
    ("sim-bj", "simulator", "A100-1g.10gb", "mig", "bj-2", 1, 1, 4, 56),  # 8 cards × 7 slices
    ("sim-bj", "simulator", "T4-shared", "t4", "bj-2", 1, 1, 4, 4),
    ("slurm-sh", "slurm", "Ascend-910B", "ascend", "sh-1", 2, 2, 4, 8),
    ("k8s-sz", "kubernetes", "MLU370", "mlu", "sz-1", 1, 2, 4, 8),
    ("k8s-sz", "kubernetes", "DCU-Z100", "dcu", "sz-1", 1, 1, 4, 8),
]
UNHEALTHY = {"h800-s1-l2-n4": NodeState.DOWN, "a100-s2-l4-n4": NodeState.CORDONED}

GIB = 1024
# Each group's whole machine (DESIGN §15), as a backend would report it: cores, memory (GiB) and
# local disk (GiB) as capacity and allocatable (what the node keeps for itself taken off), driver
# and CUDA. Realistic servers of each kind; on a created node only — an existing one keeps its own.
# flavor → (cores, usable cores, memory GiB, usable GiB, disk GiB, usable disk GiB, driver, CUDA)
MACHINES = {
    "A100-80G": (128, 126, 1024, 992, 7680, 7168, "535.104.05", "12.2"),
    "H800": (112, 110, 2048, 2016, 30720, 30208, "535.129.03", "12.2"),
    "A100-1g.10gb": (128, 126, 1024, 992, 7680, 7168, "535.104.05", "12.2"),  # 8 A100s in MIG
    "T4-shared": (48, 46, 384, 368, 3840, 3584, "535.104.05", "12.2"),
    "Ascend-910B": (192, 188, 1536, 1504, 7680, 7168, "", ""),
    "MLU370": (128, 126, 1024, 992, 7680, 7168, "", ""),
    "DCU-Z100": (128, 126, 1024, 992, 7680, 7168, "", ""),
}


def machine(flavor: str) -> dict:
    """The Node fields of ``flavor``'s demo server."""
    cores, usable, mem, usable_mem, disk, usable_disk, driver, cuda = MACHINES[flavor]
    return {
        "cpu_millicores": usable * 1000, "cpu_millicores_capacity": cores * 1000,
        "memory_mib": usable_mem * GIB, "memory_mib_capacity": mem * GIB,
        "local_disk_gib": usable_disk, "local_disk_gib_capacity": disk,
        "driver_version": driver, "cuda_version": cuda,
    }

# flavor → [(owner code, quota, borrow_limit, lend_limit, overcommit_ratio)], parents first.
QUOTAS = {
    "A100-80G": [
        ("ai", 120, None, None, "1.5"),
        ("ad", 72, None, None, "1"),
        ("svc", 32, None, 16, "1"),
        ("plat", 8, 0, None, "1"),
        ("ai-nlp", 96, None, 32, "1"),
        ("ai-cv", 84, None, None, "1"),
        ("ad-perc", 40, None, None, "1"),
        ("ad-sim", 32, None, None, "1"),
        ("svc-inf", 32, None, None, "1"),
        ("nlp-llm", 64, 64, None, "1"),
        ("nlp-asr", 32, 8, None, "1"),
        ("cv-detect", 42, None, None, "1"),
        ("cv-gen", 42, None, None, "1"),
        ("ad-bev", 40, None, None, "1"),
        ("ad-replay", 32, None, None, "1"),
        ("svc-rank", 16, None, None, "1"),
        ("svc-chat", 16, None, 8, "1"),
        ("plat-bench", 8, 0, None, "1"),
    ],
    "H800": [
        ("ai", 32, None, None, "1"),
        ("svc", 24, None, None, "1"),
        ("ai-nlp", 32, None, None, "1"),
        ("svc-inf", 24, None, None, "1"),
        ("nlp-llm", 32, None, None, "1"),
        ("svc-chat", 24, None, None, "1"),
    ],
    "A100-1g.10gb": [
        ("ai", 112, None, None, "1"),
        ("svc", 112, None, None, "1"),
        ("ai-cv", 112, None, None, "1"),
        ("svc-inf", 112, None, None, "1"),
        ("cv-detect", 56, None, None, "1"),
        ("cv-gen", 56, None, None, "1"),
        ("svc-rank", 112, None, None, "1"),
    ],
    "T4-shared": [
        ("svc", 16, None, None, "1.25"),
        ("svc-inf", 16, None, None, "1.25"),
        ("svc-chat", 10, None, None, "1"),
        ("svc-rank", 10, None, None, "1"),
    ],
    "Ascend-910B": [
        ("ad", 96, None, None, "1"),
        ("ai", 32, None, None, "1"),
        ("ad-perc", 64, None, None, "1"),
        ("ad-sim", 32, None, None, "1"),
        ("ai-nlp", 32, None, None, "1"),
        ("ad-bev", 64, None, None, "1"),
        ("ad-replay", 32, None, None, "1"),
        ("nlp-asr", 32, None, None, "1"),
    ],
    "MLU370": [
        ("plat", 32, None, None, "1"),
        ("ai", 32, None, None, "1"),
        ("ai-cv", 32, None, None, "1"),
        ("cv-gen", 32, None, None, "1"),
        ("plat-bench", 32, None, None, "1"),
    ],
    "DCU-Z100": [("plat", 32, None, None, "1"), ("plat-bench", 32, None, None, "1")],
}


def _seed_flavors() -> dict[str, Flavor]:
    flavors = {}
    for name, vendor, model, mem, fraction, mig, shareable, premium, k8s, gres in FLAVORS:
        flavors[name], _ = Flavor.objects.get_or_create(
            name=name,
            defaults={
                "vendor": vendor,
                "model": model,
                "memory_mib": mem,
                "fraction_numerator": Fraction(fraction).numerator,  # exact: "1/7", not 0.14285714
                "fraction_denominator": Fraction(fraction).denominator,
                "mig_profile": mig,
                "shareable": shareable,
                "premium": premium,
                "k8s_resource_name": k8s,
                "slurm_gres": gres,
            },
        )
    return flavors


def _seed_nodes(flavors) -> int:
    count = 0
    for cluster_name, kind, flavor, prefix, zone, spines, leaves, per_leaf, gpus in NODE_GROUPS:
        # The demo has no real Slurm or Kubernetes: the simulator serves every cluster.
        config = {} if kind == "simulator" else {"simulated": True}
        cluster, _ = Cluster.objects.get_or_create(name=cluster_name, defaults={"kind": kind, "config": config})
        for s in range(1, spines + 1):
            for leaf in range(1, leaves + 1):
                for n in range(1, per_leaf + 1):
                    name = f"{prefix}-s{s}-l{leaf}-n{n}"
                    Node.objects.get_or_create(
                        cluster=cluster,
                        name=name,
                        defaults={
                            "flavor": flavors[flavor],
                            "gpu_count": gpus,
                            "zone": zone,
                            "spine": f"{zone}-spine{s}",
                            "leaf": f"{zone}-s{s}-leaf{leaf}",
                            "state": UNHEALTHY.get(name, NodeState.READY),
                            **machine(flavor),
                        },
                    )
                    count += 1
    return count


def _owner(code):
    project = Project.objects.filter(code=code).first()
    if project is not None:
        return {"project": project}
    return {"department": Department.objects.get(code=code)}


def _seed_quotas(flavors, admin, stdout) -> int:
    """Create the quota nodes that do not exist (parents first); an existing node keeps the
    values users gave it, even where they no longer match the table."""
    made = 0
    for flavor, rows in QUOTAS.items():
        for code, quota, borrow, lend, ratio in rows:
            owner = _owner(code)
            if QuotaNode.objects.filter(flavor=flavors[flavor], **owner).exists():
                continue
            node = create_missing(
                stdout,
                f"quota of {code} on {flavor}",
                partial(
                    quota_node_set,
                    actor=admin,
                    flavor=flavors[flavor],
                    quota=Decimal(quota),
                    borrow_limit=None if borrow is None else Decimal(borrow),
                    lend_limit=None if lend is None else Decimal(lend),
                    overcommit_ratio=Decimal(ratio),
                    **owner,
                ),
            )
            made += node is not None
    return made


DEMO_WINDOW = "night lending / 夜间借出"
DEMO_LOAN = "demo loan: ad → ai for a paper deadline"


def _seed_sharing(flavors, admin, stdout) -> None:
    a100 = flavors["A100-80G"]
    svc = QuotaNode.objects.filter(flavor=a100, department__code="svc").first()
    if svc is not None and not QuotaWindow.objects.filter(quota_node=svc, name=DEMO_WINDOW).exists():
        create_missing(
            stdout,
            "night window of svc",
            lambda: window_create(
                actor=admin,
                quota_node=svc,
                name=DEMO_WINDOW,
                weekdays="0123456",
                start_time=time(20),
                end_time=time(8),
                lend_limit=Decimal(32),
            ),
        )
    lender = QuotaNode.objects.filter(flavor=a100, department__code="ad").first()
    borrower = QuotaNode.objects.filter(flavor=a100, department__code="ai").first()
    if lender and borrower and not Loan.objects.filter(reason=DEMO_LOAN).exists():
        now = timezone.now()
        create_missing(
            stdout,
            "loan ad → ai",
            lambda: loan_create(
                actor=admin,
                lender=lender,
                borrower=borrower,
                amount=Decimal(8),
                starts_at=now - timedelta(days=1),
                ends_at=now + timedelta(days=13),
                state=LoanState.ACTIVE,
                reason=DEMO_LOAN,
            ),
        )


def _seed_requests(flavors, stdout) -> None:
    """One pending quota request (the department must grow: two steps) and one pending loan
    request, made through the services so they carry their chains and notifications."""
    from portal.models import ApprovalRequest

    from .approvals import loan_request_create, quota_request_create

    a100 = flavors["A100-80G"]
    if not ApprovalRequest.objects.filter(kind="quota", requester__username="bob").exists():
        create_missing(
            stdout,
            "quota request of cv-detect",
            lambda: quota_request_create(
                actor=User.objects.get(username="bob"),
                flavor=a100,
                project=Project.objects.get(code="cv-detect"),
                quota=Decimal(48),
                reason="demo: detection sweep for the Q3 release / Q3 发布前的检测模型调参",
            ),
        )
    borrower = QuotaNode.objects.filter(flavor=a100, department__code="ad").first()
    if borrower and not ApprovalRequest.objects.filter(kind="loan", requester__username="ad-admin").exists():
        now = timezone.now()
        create_missing(
            stdout,
            "loan request of ad",
            lambda: loan_request_create(
                actor=User.objects.get(username="ad-admin"),
                borrower=borrower,
                lender=Department.objects.get(code="svc"),
                amount=Decimal(8),
                starts_at=now,
                ends_at=now + timedelta(days=7),
                reason="demo: simulation backlog / 仿真积压",
            ),
        )


def seed(stdout) -> None:
    admin = User.objects.get(username="admin")
    flavors = _seed_flavors()
    nodes = _seed_nodes(flavors)
    quotas = _seed_quotas(flavors, admin, stdout)
    _seed_sharing(flavors, admin, stdout)
    _seed_requests(flavors, stdout)
    stdout.write(
        f"resources: {len(flavors)} flavors, {Cluster.objects.count()} clusters, {nodes} nodes, "
        f"{quotas} new quota nodes"
    )

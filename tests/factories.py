"""Small builders for service tests: a pool, a tenant tree, jobs submitted through services."""

from __future__ import annotations

from decimal import Decimal

from jobs.models import PriorityClass
from jobs.services import job_submit
from portal.models import Department, Membership, Project, Role, User
from portal.tokens import api_token_create
from quotas.models import Cluster, Flavor, Node, QuotaNode


def platform_admin(username="root-admin") -> User:
    user, created = User.objects.get_or_create(username=username)
    if created:
        Membership.objects.create(user=user, role=Role.PLATFORM_ADMIN)
    return user


def api_token(user: User, name: str = "test") -> str:
    """A new personal API token of ``user`` (the secret, for ``Authorization: Token …``)."""
    return api_token_create(actor=user, name=name).secret


def flavor(name="A100", shareable=False) -> Flavor:
    return Flavor.objects.get_or_create(
        name=name,
        defaults={
            "vendor": "nvidia",
            "model": name,
            "memory_mib": 81920,
            "k8s_resource_name": "nvidia.com/gpu",
            "shareable": shareable,
        },
    )[0]


def nodes(f: Flavor, count: int, gpus: int = 8, *, per_leaf: int = 4, cluster="sim") -> list[Node]:
    c = Cluster.objects.get_or_create(name=cluster, defaults={"kind": "simulator"})[0]
    start = Node.objects.filter(cluster=c).count()
    return [
        Node.objects.create(
            cluster=c,
            name=f"{f.name.lower()}-{start + i}",
            flavor=f,
            gpu_count=gpus,
            zone="z1",
            spine=f"s{(start + i) // (per_leaf * 4)}",
            leaf=f"l{(start + i) // per_leaf}",
        )
        for i in range(count)
    ]


def department(code, parent=None) -> Department:
    return Department.objects.create(code=code, name=code, parent=parent)


def project(code, dept) -> Project:
    return Project.objects.create(code=code, name=code, department=dept)


def quota(f: Flavor, owner, q, *, borrow=None, lend=None, ratio="1") -> QuotaNode:
    field = "project" if isinstance(owner, Project) else "department"
    return QuotaNode.objects.create(
        flavor=f,
        quota=Decimal(q),
        borrow_limit=None if borrow is None else Decimal(borrow),
        lend_limit=None if lend is None else Decimal(lend),
        overcommit_ratio=Decimal(ratio),
        **{field: owner},
    )


def priority(name="training", value=100, preemptible=True) -> PriorityClass:
    return PriorityClass.objects.get_or_create(
        name=name, defaults={"value": value, "preemptible": preemptible, "grace_seconds": 30}
    )[0]


def single_project_pool(node_count: int = 1, gpus: int = 8) -> tuple[Flavor, Project]:
    """One flavor on ``node_count`` nodes, department D and its project p, each with a quota
    of every GPU: the smallest world in which jobs are admitted and wait."""
    f = flavor()
    nodes(f, node_count, gpus)
    dept = department("D")
    proj = project("p", dept)
    quota(f, dept, node_count * gpus)
    quota(f, proj, node_count * gpus)
    return f, proj


def submit(proj: Project, f: Flavor, *, workers=1, gpus=8, name="job", prio=None, kind="training", **kw):
    return job_submit(
        actor=platform_admin(),
        project=proj,
        name=name,
        kind=kind,
        flavor=f,
        priority_class=prio or priority(),
        image="pytorch:2.3",
        workers=workers,
        gpus_per_worker=gpus,
        max_runtime_seconds=3600,
        **kw,
    )

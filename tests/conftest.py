"""Shared fixtures: a small tenant tree with one user per persona, on real PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from portal.models import Department, Membership, Project, Role, User
from quotas.models import Cluster, Flavor, Node, QuotaNode


@dataclass
class World:
    """Departments A (with sub-department A1) and B; projects pa (in A), pa1 (in A1), pb (in B).
    Flavor ``F`` has 2 nodes × 8 GPUs (C = 16); quota A 8 (A1 4, pa 4; pa1 4), B 8 (pb 8)."""

    A: Department
    A1: Department
    B: Department
    pa: Project
    pa1: Project
    pb: Project
    F: Flavor
    users: dict[str, User]
    quota: dict[str, QuotaNode]


PERSONAS = {
    # name: [(role, scope name)]
    "platform": [(Role.PLATFORM_ADMIN, None)],
    "auditor": [(Role.AUDITOR, None)],
    "a_admin": [(Role.DEPARTMENT_ADMIN, "A")],
    "b_admin": [(Role.DEPARTMENT_ADMIN, "B")],
    "a_finance": [(Role.FINANCE, "A")],
    "b_finance": [(Role.FINANCE, "B")],
    "pa1_admin": [(Role.PROJECT_ADMIN, "pa1")],
    "pa1_member": [(Role.MEMBER, "pa1")],
    "pb_member": [(Role.MEMBER, "pb")],
    "outsider": [],
}


def _quota(flavor, owner, quota, **kw):
    field = "project" if isinstance(owner, Project) else "department"
    return QuotaNode.objects.create(flavor=flavor, quota=Decimal(quota), **{field: owner}, **kw)


def pytest_collection_modifyitems(config, items):
    """Browser tests run last: Playwright's session needs Django's async guard relaxed for the
    rest of the run (tests/browser/conftest.py), and no other test should run without it."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture
def world(db) -> World:
    A = Department.objects.create(code="A", name="Dept A")
    A1 = Department.objects.create(code="A1", name="Dept A1", parent=A)
    B = Department.objects.create(code="B", name="Dept B")
    pa = Project.objects.create(code="pa", name="Project a", department=A)
    pa1 = Project.objects.create(code="pa1", name="Project a1", department=A1)
    pb = Project.objects.create(code="pb", name="Project b", department=B)
    F = Flavor.objects.create(
        name="F", vendor="nvidia", model="Test GPU", memory_mib=1024, k8s_resource_name="nvidia.com/gpu"
    )
    cluster = Cluster.objects.create(name="c1", kind="simulator")
    for i in range(2):
        Node.objects.create(
            cluster=cluster, name=f"n{i}", flavor=F, gpu_count=8, zone="z", spine="s", leaf=f"l{i}"
        )
    scopes = {"A": A, "A1": A1, "B": B, "pa": pa, "pa1": pa1, "pb": pb}
    users = {}
    for name, roles in PERSONAS.items():
        user = User.objects.create_user(username=name, password="pw-" + name)
        for role, scope in roles:
            target = scopes.get(scope)
            kind = "project" if isinstance(target, Project) else "department"
            Membership.objects.create(user=user, role=role, **({kind: target} if target else {}))
        users[name] = user
    quota = {
        "A": _quota(F, A, 8),
        "A1": _quota(F, A1, 4),
        "pa": _quota(F, pa, 4),
        "pa1": _quota(F, pa1, 4),
        "B": _quota(F, B, 8),
        "pb": _quota(F, pb, 8),
    }
    return World(A, A1, B, pa, pa1, pb, F, users, quota)


@pytest.fixture
def api():
    """``api(user)`` → an APIClient that authenticates with the user's real API token."""

    def make(user: User | None) -> APIClient:
        client = APIClient(HTTP_ACCEPT_LANGUAGE="en")  # messages asserted below are English
        if user is not None:
            token, _ = Token.objects.get_or_create(user=user)
            client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return make


@pytest.fixture(autouse=True)
def _cold_scheduler():
    """Each test starts with no warm scheduling engine left over from another test's data."""
    from jobs.warm import warm_engine

    warm_engine().invalidate()
    yield
    warm_engine().invalidate()


# A real simulated-cluster server per test that asks for it (tests/simserver.py).
from tests.prometheus import prometheus_for  # noqa: E402, F401
from tests.simserver import simserver  # noqa: E402, F401

"""Shared fixtures: a small tenant tree with one user per persona, on real PostgreSQL."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from portal.models import Department, Membership, Project, Role, User
from portal.tokens import api_token_create
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


def pytest_addoption(parser):
    parser.addoption(
        "--shuffle",
        type=int,
        metavar="SEED",
        help="run the modules, and the tests in each module, in an order drawn from SEED: a test "
        "that passes only after another one fails here (docs/operations.md)",
    )


def pytest_report_header(config):
    seed = config.getoption("shuffle")
    return None if seed is None else f"test order shuffled with --shuffle {seed}"


def pytest_collection_modifyitems(config, items):
    """Browser tests run last: Playwright's session needs Django's async guard relaxed for the
    rest of the run (tests/browser/conftest.py), and no other test should run without it.
    With ``--shuffle SEED``, the order inside those limits and pytest-django's (database tests
    before transactional ones before the rest) is drawn at random."""
    seed = config.getoption("shuffle")
    if seed is not None:
        _shuffle(items, random.Random(seed))
    items.sort(key=lambda item: (item.get_closest_marker("browser") is not None, _django_group(item, seed)))


def _shuffle(items: list, rng: random.Random) -> None:
    """Modules in a random order, and a random order inside each: module fixtures (a Slurm
    cluster, a soak run) still start once per module."""
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    order = list(modules.values())
    rng.shuffle(order)
    for tests in order:
        rng.shuffle(tests)
    items[:] = [item for tests in order for item in tests]


def _django_group(item, seed) -> int:
    """pytest-django's own order (its plugin sorts before this hook): plain database tests, then
    transactional ones (they empty the tables after themselves), then tests without a database."""
    if seed is None:
        return 0  # already in that order
    from pytest_django.plugin import validate_django_db

    marker = item.get_closest_marker("django_db")
    fixtures = item.fixturenames
    transaction, reset_sequences, *_ = validate_django_db(marker) if marker else (False, False)
    if transaction or reset_sequences or "transactional_db" in fixtures or "live_server" in fixtures:
        return 1
    return 0 if marker or "db" in fixtures else 2


@pytest.fixture
def world(db) -> World:
    return build_world()


def shared_rows(django_db_blocker, build):
    """For a module fixture (``yield from shared_rows(django_db_blocker, build)``): the rows
    ``build()`` writes, written once for the module's tests instead of once per test. They are
    written in a transaction that stays open while the module runs and is rolled back after it;
    each test runs in a savepoint inside it (pytest-django's ``db``), so a test finds the rows as
    built and what it writes is gone before the next test. Tests get ``copy.deepcopy`` of what
    ``build`` returned: an instance one test changes in memory is not the next test's. Built in
    the site language and zone, as the autouse ``_no_leftovers`` leaves every test."""
    from django.conf import settings
    from django.db import transaction
    from django.utils import timezone, translation

    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer._from_testcase = True  # as Django's TestCase marks its class-wide transaction
        outer.__enter__()
        try:
            with translation.override(settings.LANGUAGE_CODE):
                timezone.deactivate()
                built = build()
        except BaseException:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)
            raise
    try:
        yield built
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


def shared_scene(build):
    """Two fixtures for a module whose tests share one world (:func:`shared_rows`): bind them as
    ``_scene, scene = shared_scene(build)``. ``_scene`` writes ``build()``'s rows once for the
    module; ``scene`` gives each test a ``copy.deepcopy`` of what ``build`` returned."""

    @pytest.fixture(scope="module")
    def _scene(django_db_setup, django_db_blocker):
        yield from shared_rows(django_db_blocker, build)

    @pytest.fixture
    def scene(_scene, db):
        return copy.deepcopy(_scene)

    return _scene, scene


def build_world() -> World:
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
            client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_create(actor=user, name='test').secret}")
        return client

    return make


@pytest.fixture(autouse=True)
def _no_leftovers():
    """Each test starts as if it were the first: the site language, the site zone and an empty
    cache. Django's test client runs the request in the test's thread, so LocaleMiddleware's
    ``activate()`` of the request's language stays active after the response; the cache is Redis,
    which outlives a test's rolled-back transaction. Neither may carry one test's state into the
    next (issue 18, item 18: tests pass in any order)."""
    from django.conf import settings
    from django.utils import timezone, translation

    translation.activate(settings.LANGUAGE_CODE)
    timezone.deactivate()
    _clear_cache()
    yield
    translation.deactivate()  # back to settings.LANGUAGE_CODE, whatever the test set
    timezone.deactivate()
    _clear_cache()


@pytest.fixture
def english():
    """For tests that match English messages outside a request (services, commands): the active
    language is the site's (zh-hans) unless a test says otherwise, here."""
    from django.utils import translation

    with translation.override("en"):
        yield


def _clear_cache() -> None:
    """Only the cache's own keys: the Celery broker shares the Redis database (REDIS_URL)."""
    from django.core.cache import cache

    client = cache._cache.get_client(write=True)  # redis-py's client; Django has no "delete by prefix"
    keys = list(client.scan_iter(match=cache.make_key("*"), count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(autouse=True)
def _cold_scheduler():
    """Each test starts with no warm scheduling engine left over from another test's data."""
    from jobs.scheduling.warm import warm_engine

    warm_engine().invalidate()
    yield
    warm_engine().invalidate()


# A real simulated-cluster server per test that asks for it (tests/simserver.py); a stopped
# clock (tests/clock.py); the public traces, skipped locally and failed under CI (tests/traces.py).
from tests.clock import pinned_now  # noqa: E402, F401
from tests.prometheus import prometheus_for  # noqa: E402, F401
from tests.simserver import fast_simserver, simserver  # noqa: E402, F401
from tests.traces import openb  # noqa: E402, F401

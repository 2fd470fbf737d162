"""The engine's configuration read in one statement (jobs/scheduling/config.py, issue 32 item 24)
is the configuration the ORM reads give — nodes, tree, effective limits, classes, queueing,
settings, budget exemptions — and a reader that keeps it between cycles follows every change."""

from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

import pytest

from jobs.models import ApprovalPolicy, PriorityClass
from jobs.rule_models import Packing, SchedulerSettings
from jobs.scheduler.engine.model import Node as CoreNode
from jobs.scheduler.engine.model import PriorityClass as CorePriorityClass
from jobs.scheduling import config as cfg
from jobs.scheduling.config import ConfigReader, read_config
from portal.models import Department, Project, Queueing
from quotas.admission import Limits, TreeNode
from quotas.models import Cluster, Flavor, Loan, LoanState, Node, NodeState, QuotaNode, QuotaWindow
from quotas.selectors import effective_limits_map
from tests import factories as fx

pytestmark = pytest.mark.django_db
MONDAY_NOON = datetime(2026, 11, 30, 12, tzinfo=UTC)  # a Monday


@pytest.fixture
def world():
    f, g = fx.flavor("A100"), fx.flavor("H800")
    fx.nodes(f, 3)
    fx.nodes(g, 2, cluster="other")
    Node.objects.filter(name="a100-1").update(state=NodeState.CORDONED)
    off = Cluster.objects.create(name="off", kind="simulator", active=False)
    Node.objects.create(cluster=off, name="x-0", flavor=f, gpu_count=8, zone="z", spine="s", leaf="l")
    Flavor.objects.create(name="old", vendor="nvidia", model="old", memory_mib=1, k8s_resource_name="x",
                          active=False)
    top = fx.department("top")
    ai, cv = fx.department("ai", top), fx.department("cv")
    p1, p2, p3 = fx.project("p1", ai), fx.project("p2", ai), fx.project("p3", cv)
    Project.objects.filter(pk=p1.pk).update(queueing=Queueing.STRICT_FIFO)
    Project.objects.filter(pk=p2.pk).update(aging_bound_seconds=600)
    fx.quota(f, top, 24)
    lender = fx.quota(f, ai, 16, lend=8)
    borrower = fx.quota(f, cv, 8, borrow=4)
    fx.quota(f, p1, 8)
    fx.quota(g, p3, "2.5")
    QuotaWindow.objects.create(quota_node=lender, name="day", weekdays="01234", start_time=time(9),
                               end_time=time(17), quota=Decimal(4))
    QuotaWindow.objects.create(quota_node=borrower, name="off", weekdays="0", start_time=time(9),
                               end_time=time(17), quota=Decimal(1), active=False)
    for state, hours in ((LoanState.ACTIVE, 1), (LoanState.PENDING, 1), (LoanState.RETURNED, 1),
                         (LoanState.ACTIVE, 48)):
        Loan.objects.create(lender=lender, borrower=borrower, amount=Decimal(2), state=state,
                            starts_at=MONDAY_NOON + timedelta(hours=hours - 2),
                            ends_at=MONDAY_NOON + timedelta(hours=hours))
    fx.priority("low", 10)
    fx.priority("high", 500, preemptible=False)
    ApprovalPolicy.objects.create(department=ai, over_budget=False)
    SchedulerSettings.objects.update_or_create(
        pk=1, defaults={"backfill": False, "packing": Packing.BEST_FIT})
    return f


def _expected_limits(now):
    """The effective limits as ``quotas.selectors.effective_limits_map`` gives them (the ORM)."""
    nodes = list(QuotaNode.objects.select_related("flavor"))
    effective = effective_limits_map(nodes, now)
    return {
        (f"p{n.project_id}" if n.project_id else f"d{n.department_id}", n.flavor.name):
            Limits(*(None if v is None else int(v * 1000) for v in
                     (effective[n.pk].quota, effective[n.pk].borrow_limit, effective[n.pk].lend_limit)))
        for n in nodes
    }


def test_the_one_statement_reads_what_the_orm_reads(world, settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "AGING_BOUND_SECONDS": 3600}
    config = read_config(MONDAY_NOON)
    assert config.nodes == tuple(
        CoreNode(f"n{n.pk}", n.flavor.name, n.gpu_count, n.zone, n.spine, n.leaf,
                 schedulable=n.state == NodeState.READY, cluster=f"c{n.cluster_id}")
        for n in Node.objects.filter(cluster__active=True).select_related("flavor")
    )
    assert len(config.nodes) == 5 and sum(not n.schedulable for n in config.nodes) == 1
    assert config.tree == tuple(
        [TreeNode(f"d{d.pk}", f"d{d.parent_id}" if d.parent_id else None, "department")
         for d in Department.objects.all()]
        + [TreeNode(f"p{p.pk}", f"d{p.department_id}", "project") for p in Project.objects.all()]
    )
    assert config.limits == _expected_limits(MONDAY_NOON)
    assert config.classes == tuple(CorePriorityClass(c.name, c.value, c.preemptible, c.grace_seconds)
                                   for c in PriorityClass.objects.order_by("id"))
    assert config.active_flavors == {"A100", "H800"}
    p1, p2 = Project.objects.get(code="p1"), Project.objects.get(code="p2")
    assert config.strict_fifo == {f"p{p1.pk}"}
    assert config.aging_bounds == ((f"p{p2.pk}", 600),)
    assert config.default_aging_bound == 3600
    assert (config.fragmentation_aware, config.backfill) == (False, False)
    assert config.over_budget == frozenset() and config.budget_exempt == frozenset()


def test_budget_exempt_projects_follow_the_nearest_policy_up_the_tree(world):
    provider = lambda now: {"d0"}  # noqa: E731 - any tenant over budget makes exemptions matter
    cfg.over_budget_providers.append(provider)
    try:
        config = read_config(MONDAY_NOON)
    finally:
        cfg.over_budget_providers.remove(provider)
    exempt = {f"p{pk}" for pk in Project.objects.filter(department__code="ai").values_list("id", flat=True)}
    assert config.over_budget == {"d0"} and config.budget_exempt == exempt


def test_a_kept_reader_follows_changes_and_time(world):
    reader = ConfigReader()
    first = reader.read(MONDAY_NOON)
    digest = reader.digest
    assert reader.read(MONDAY_NOON) == first and reader.digest == digest
    node = Node.objects.get(name="a100-0")
    Node.objects.filter(pk=node.pk).update(last_seen_at=MONDAY_NOON)  # not read: nothing changes
    assert reader.read(MONDAY_NOON) == first and reader.digest == digest
    Node.objects.filter(pk=node.pk).update(state=NodeState.DOWN)
    down = reader.read(MONDAY_NOON)
    assert down != first and down == read_config(MONDAY_NOON)
    Node.objects.filter(pk=node.pk).update(state=NodeState.READY)
    assert reader.read(MONDAY_NOON) == first
    # The rows are kept, the limits follow the clock: the window ends at 17:00, a loan at 13:00.
    for at in (MONDAY_NOON + timedelta(hours=1), MONDAY_NOON + timedelta(hours=6),
               MONDAY_NOON + timedelta(days=5)):
        assert reader.read(at).limits == _expected_limits(at), at
    assert reader.digest == digest


def test_fair_shares_are_quota_in_normalised_cards_or_an_admins_weight_and_a_kept_reader_follows(world):
    """Shares (DESIGN §16): top 24 A100 = 24; p3 2.5 H800 at throughput 2 = 5; p2 holds no quota = 0;
    an admin's weight replaces the default, and its edit is seen through the kept digest."""
    from jobs.scheduling.snapshot import build_snapshot
    from quotas.models import FairShareWeight

    Flavor.objects.filter(name="H800").update(relative_throughput=Decimal(2))
    top, p2, p3 = (Department.objects.get(code="top"), Project.objects.get(code="p2"),
                   Project.objects.get(code="p3"))
    reader = ConfigReader()
    shares = reader.read(MONDAY_NOON).fair_shares
    assert shares[f"d{top.pk}"] == 24 and shares[f"p{p3.pk}"] == 5 and shares[f"p{p2.pk}"] == 0
    assert set(shares) == {n.id for n in reader.read(MONDAY_NOON).tree}
    FairShareWeight.objects.create(project=p2, weight=Decimal("7.5"), set_at=MONDAY_NOON)
    assert reader.read(MONDAY_NOON).fair_shares[f"p{p2.pk}"] == 7.5
    snap = build_snapshot(MONDAY_NOON, reader.read(MONDAY_NOON))
    assert snap.fair_shares[f"p{p2.pk}"] == 7.5 and snap.fair_entry_s == 3600.0
    assert snap.fair_usage == {}  # nothing ran

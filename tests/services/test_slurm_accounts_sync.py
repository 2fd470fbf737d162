"""The Slurm accounts sync's portal side (jobs.native.slurm_accounts) on the real database, without Slurm:
which writes ask for a sync, what the portal state holds at an instant (windows and loans), and a
cluster whose sacctmgr fails. The sync against a real cluster: tests/backends/test_slurm_accounts.py."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.db import connection

from jobs.native import slurm_accounts
from jobs.native.slurm_accounts import portal_state, sync_all
from portal.models import Membership, Role, User
from quotas.models import Cluster, FairShareWeight, Loan, LoanState, QuotaWindow, SlurmSyncRun
from quotas.services import quota_node_update
from quotas.slurm_accounts import Naming, desired_state
from tests import factories as fx

pytestmark = pytest.mark.django_db

NOON = datetime(2026, 6, 3, 12, 0, tzinfo=ZoneInfo("Asia/Shanghai"))  # a Wednesday
TRES = "gres/gpu:a100"


@pytest.fixture
def tree():
    flavor = fx.flavor("A100-s")
    flavor.slurm_gres = "gpu:a100"
    flavor.save()
    fx.nodes(flavor, 4, 8)
    dept = fx.department("Dx")
    project = fx.project("px", dept)
    other = fx.project("py", dept)
    return {
        "flavor": flavor, "dept": dept, "project": project,
        "dept_node": fx.quota(flavor, dept, 16, borrow=0),
        "node": fx.quota(flavor, project, 4, borrow=2),
        "other_node": fx.quota(flavor, other, 8, borrow=0),
    }


def slurm_cluster(**config) -> Cluster:
    config = {"slurm_conf": "/nonexistent/slurm.conf", **config}
    return Cluster.objects.create(name="s1", kind="slurm", config=config)


def requests(callbacks) -> int:
    return sum(1 for c in callbacks if c is slurm_accounts._enqueue_slurm_accounts)


def drop_requests() -> None:
    """What a commit does to a pending request (the test's transaction never commits)."""
    pending = connection.run_on_commit
    pending[:] = [e for e in pending if e[1] is not slurm_accounts._enqueue_slurm_accounts]


def test_one_transaction_of_quota_membership_and_loan_writes_asks_for_one_sync(
    tree, django_capture_on_commit_callbacks
):
    slurm_cluster()
    user, admin = User.objects.create(username="u1"), fx.platform_admin()
    drop_requests()
    with django_capture_on_commit_callbacks() as callbacks:
        quota_node_update(actor=admin, node=tree["node"], quota=Decimal(5))
        Membership.objects.create(user=user, role=Role.MEMBER, project=tree["project"])
        Loan.objects.create(lender=tree["other_node"], borrower=tree["node"], amount=Decimal(1),
                            starts_at=NOON, ends_at=NOON + timedelta(days=1), state=LoanState.ACTIVE)
    assert requests(callbacks) == 1
    drop_requests()
    with django_capture_on_commit_callbacks() as callbacks:
        fx.priority("training")
    assert requests(callbacks) == 1


@pytest.mark.parametrize("config", [None, {"accounts_sync": False}, {"simulated": True}])
def test_without_a_synced_slurm_cluster_nothing_is_asked(tree, django_capture_on_commit_callbacks, config):
    if config is not None:
        slurm_cluster(**config)
    admin = fx.platform_admin()
    with django_capture_on_commit_callbacks() as callbacks:
        quota_node_update(actor=admin, node=tree["node"], quota=Decimal(5))
    assert requests(callbacks) == 0


def test_the_limits_are_the_effective_quota_at_the_instant_with_windows_and_loans(tree):
    cluster = slurm_cluster()
    naming = Naming("gp_", "root")
    QuotaWindow.objects.create(
        quota_node=tree["other_node"], name="day", start_time=time(9), end_time=time(18), quota=Decimal(3)
    )
    Loan.objects.create(lender=tree["other_node"], borrower=tree["node"], amount=Decimal(2),
                        starts_at=NOON - timedelta(hours=1), ends_at=NOON + timedelta(hours=1),
                        state=LoanState.ACTIVE)

    def caps(at):
        d = desired_state(portal_state(cluster, at), naming)
        owners = {name: a for name, a in d.accounts.items() if not name.startswith("gp_borrow")}
        return {name: a.limit_map()[TRES] for name, a in owners.items()}

    # px: 4 + 2 on loan (its borrow limit of 2 is its borrow account's); py: window 3 − 2 lent.
    assert caps(NOON) == {"gp_dx": 16, "gp_px": 6, "gp_py": 1}
    borrowing = desired_state(portal_state(cluster, NOON), naming).accounts
    assert borrowing["gp_borrow.px"].limit_map()[TRES] == 2
    # Evening: the window closed, the loan returned.
    assert caps(NOON + timedelta(hours=8)) == {"gp_dx": 16, "gp_px": 4, "gp_py": 8}


def test_members_of_inactive_projects_and_inactive_users_get_no_association(tree):
    cluster = slurm_cluster()
    active, gone = User.objects.create(username="ann"), User.objects.create(username="ben", is_active=False)
    for user in (active, gone):
        Membership.objects.create(user=user, role=Role.MEMBER, project=tree["project"])
    Membership.objects.create(user=User.objects.create(username="cid"), role=Role.PROJECT_ADMIN,
                              project=fx.project("old", tree["dept"]))
    tree["project"].department.projects.filter(code="old").update(active=False)
    d = desired_state(portal_state(cluster, NOON), Naming("gp_", "root"))
    assert set(d.associations) == {("gp_px", "ann"), ("gp_borrow.px", "ann")}
    assert "gp_old" not in d.accounts and "gp_borrow.old" not in d.accounts


def test_a_flavor_without_a_slurm_gres_is_noted(tree):
    cluster = slurm_cluster()
    plain = fx.flavor("MLU")
    fx.quota(plain, tree["dept"], 8)
    d = desired_state(portal_state(cluster, NOON), Naming("gp_", "root"))
    assert any("flavor MLU has no Slurm GRES" in n for n in d.notes)
    assert d.tres == {TRES}


def test_a_cluster_whose_sacctmgr_fails_is_recorded_with_the_error(tree):
    cluster = slurm_cluster()
    [run] = sync_all()
    assert run.cluster == cluster and run.error and "slurm.conf" in run.error
    assert SlurmSyncRun.objects.get().finished_at is not None


# -- the same policy for native users (issue 34 item 4)


def test_shares_are_whole_normalised_cards_of_the_effective_quota_summed_over_gpu_flavors(tree):
    cluster = slurm_cluster()
    fast = fx.flavor("H800-s")
    fast.slurm_gres, fast.relative_throughput = "gpu:h800", Decimal("2.5")
    fast.save()
    fx.nodes(fast, 1, 8)
    fx.quota(fast, tree["project"], 3, borrow=0)  # 7.5 normalised cards
    shares = {(k, c): n for k, c, n in portal_state(cluster, NOON).shares}
    assert shares == {("department", "Dx"): 16, ("project", "px"): 4 + 7, ("project", "py"): 8}
    d = desired_state(portal_state(cluster, NOON), Naming("gp_", "root"))
    assert d.accounts["gp_px"].fairshare == 11


def test_over_budget_tenants_block_their_accounts(tree):
    from jobs.scheduling import config

    cluster = slurm_cluster()
    config.over_budget_providers.append(lambda _now: [f"p{tree['project'].pk}", f"d{tree['dept'].pk}"])
    try:
        state = portal_state(cluster, NOON)
    finally:
        config.over_budget_providers.pop()
    assert state.blocked == {("project", "px"), ("department", "Dx")}
    assert portal_state(cluster, NOON).blocked == frozenset()


def test_a_budget_written_asks_for_a_sync(tree, django_capture_on_commit_callbacks):
    from billing.models import Budget

    slurm_cluster()
    with django_capture_on_commit_callbacks() as callbacks:
        Budget.objects.create(project=tree["project"], card_hours=Decimal(10))
    assert requests(callbacks) == 1


def test_per_user_caps_the_dev_class_max_wall_and_minimum_runtimes_come_from_the_portal(tree, settings):
    from jobs.models import PriorityClass

    cluster = slurm_cluster()
    tree["project"].user_gpu_cap, tree["project"].user_running_jobs_cap = 8, 3
    tree["project"].save()
    PriorityClass.objects.filter(pk=fx.priority("training", 100).pk).update(min_runtime_seconds=600)
    dev = fx.priority("interactive", 50)
    PriorityClass.objects.filter(pk=dev.pk).update(allowed_kinds=["dev"], min_runtime_seconds=60)
    runtimes = {**settings.GPUPOOL["MAX_RUNTIME_HOURS"], "dev": 12}
    settings.GPUPOOL = {**settings.GPUPOOL, "MAX_RUNTIME_HOURS": runtimes}
    state = portal_state(cluster, NOON)
    assert state.user_caps == (("px", 8, 3),)
    walls = {c.name: (c.max_wall_minutes, c.min_runtime_seconds) for c in state.classes}
    assert walls == {"training": (None, 600), "interactive": (12 * 60, 60)}
    assert state.preempt_exempt_seconds == 600  # the borrow QOS: the default class's minimum


def test_an_admins_fair_share_weight_replaces_the_default_shares_in_slurm(tree):
    cluster = slurm_cluster()
    FairShareWeight.objects.create(project=tree["project"], weight=Decimal("40.5"), set_at=NOON)
    shares = {(k, c): n for k, c, n in portal_state(cluster, NOON).shares}
    assert shares[("project", "px")] == 40  # whole shares: Slurm's Fairshare is an integer
    assert shares[("department", "Dx")] == 16  # the others keep their quota's
    d = desired_state(portal_state(cluster, NOON), Naming("gp_", "root"))
    assert d.accounts["gp_px"].fairshare == 40

"""Native Slurm users under the portal's sharing policy (issue 34 item 4, docs/backends.md "Native
Slurm users: accounts and limits"), against a real cluster from deploy/slurm/start.sh: one node of 4
fake A100s, slurmdbd on MariaDB, ``PreemptType=preempt/qos``. Two Unix users made with ``useradd``
for this module: a lender whose project owns the 4 GPUs, and a borrower whose project owns none
and may borrow 4. Their jobs are submitted with ``runuser … sbatch``, as on a login node.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.test_slurm import _sh, slurm_cluster
from tests.waiting import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]

TAG = secrets.token_hex(3)
PREFIX = f"gpq{TAG}_"
LENDER = f"gpl{TAG}"
BORROWER = f"gpr{TAG}"
EXEMPT_SECONDS = 60  # the minimum runtime before a borrowing job may be preempted


@pytest.fixture(scope="module")
def site() -> Iterator:
    with slurm_cluster(1, 4, prefix="gp-slurm-pol-") as cluster:
        cluster.run_dir.chmod(0o755)
        work = cluster.run_dir / "userjobs"
        work.mkdir(mode=0o777, exist_ok=True)
        work.chmod(0o777)
        made = []
        try:
            for user in (LENDER, BORROWER):
                subprocess.run(["useradd", "-M", "-s", "/bin/sh", user], check=True)
                made.append(user)
            cluster.cluster_name = Path(cluster.conf).read_text().split("ClusterName=", 1)[1].split()[0]
            yield cluster
        finally:
            for user in made:
                subprocess.run(["scancel", "-u", user], env=cluster.env, check=False)
            _forget_owned(cluster)
            for user in made:
                subprocess.run(["userdel", user], check=False)


def _forget_owned(slurm) -> None:
    sacctmgr = ["sacctmgr", "-i", "-n", "-P"]
    for user in (LENDER, BORROWER):
        subprocess.run([*sacctmgr, "delete", "user", f"name={user}"], env=slurm.env, check=False)
    for _attempt in range(4):  # a parent goes once its children have
        shown = _sh(["sacctmgr", "-n", "-P", "show", "account", "format=account"], slurm.env).stdout.split()
        owned = [a for a in shown if a.startswith(PREFIX)]
        if not owned:
            break
        for account in sorted(owned, key=len, reverse=True):
            subprocess.run([*sacctmgr, "delete", "account", f"name={account}"], env=slurm.env, check=False)
    qos = _sh(["sacctmgr", "-n", "-P", "show", "qos", "format=name"], slurm.env).stdout.split()
    for name in [q for q in qos if q.startswith(PREFIX)]:
        subprocess.run([*sacctmgr, "delete", "qos", f"name={name}"], env=slurm.env, check=False)


@pytest.fixture
def world(site, settings):
    """Department L (4 A100, no borrowing) → project PL, LENDER a member; department B (none of
    its own, may borrow 4) → project PB (borrow 4), BORROWER a member."""
    from jobs.models import PriorityClass
    from portal.models import Membership, Role, User
    from quotas.models import Cluster as PortalCluster
    from tests import factories as fx

    settings.GPUPOOL = {**settings.GPUPOOL, "SLURM_ACCOUNT_PREFIX": PREFIX}
    flavor = fx.flavor("A100-slurm")
    flavor.slurm_gres = "gpu:a100"
    flavor.save()
    fx.nodes(flavor, 1, 4)
    portal_cluster = PortalCluster.objects.create(
        name="slurm-pol", kind="slurm", config={"slurm_conf": site.conf}
    )
    lender_dept, borrower_dept = fx.department(f"L{TAG}"), fx.department(f"B{TAG}")
    lender_project = fx.project(f"PL{TAG}", lender_dept)
    borrower_project = fx.project(f"PB{TAG}", borrower_dept)
    fx.quota(flavor, lender_dept, 4, borrow=0)
    fx.quota(flavor, lender_project, 4, borrow=0)
    fx.quota(flavor, borrower_dept, 0, borrow=4)
    fx.quota(flavor, borrower_project, 0, borrow=4)
    for name, project in ((LENDER, lender_project), (BORROWER, borrower_project)):
        user = User.objects.create(username=name)
        Membership.objects.create(user=user, role=Role.MEMBER, project=project)
    # The default class's minimum runtime: its QOS's and the borrow QOS's PreemptExemptTime.
    PriorityClass.objects.filter(pk=fx.priority("training", 100, True).pk).update(
        min_runtime_seconds=EXEMPT_SECONDS
    )
    yield {
        "cluster": portal_cluster, "lender_project": lender_project, "borrower_project": borrower_project,
        "lender_account": f"{PREFIX}pl{TAG}", "borrow_account": f"{PREFIX}borrow.pb{TAG}",
    }
    for user in (LENDER, BORROWER):
        subprocess.run(["scancel", "-u", user], env=site.env, check=False)
    wait_until(lambda: not _user_jobs(site), "the users' jobs to leave the queue")


def _user_jobs(site) -> list[str]:
    users = ",".join((LENDER, BORROWER))
    return _sh(["squeue", "-h", "-u", users, "-t", "PD,R,CG", "-o", "%i"], site.env).stdout.split()


def _sync(world):
    from jobs.native.slurm_accounts import sync_cluster_accounts

    run = sync_cluster_accounts(world["cluster"])
    assert not run.error, run.error
    return run


def _sbatch(site, user: str, gpus: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", user, "--", "env", f"SLURM_CONF={site.conf}", "sbatch", "--parsable",
         f"--gres=gpu:a100:{gpus}", "-o", "/dev/null", *extra, "--wrap", "sleep 3600"],
        cwd=site.run_dir / "userjobs", capture_output=True, text=True, timeout=120, check=False,
    )


def _submitted(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _squeue(site, job_id: str, fmt: str) -> str:
    return _sh(["squeue", "-h", "-j", job_id, "-o", fmt], site.env).stdout.strip()


def _job(site, job_id: str) -> dict[str, str]:
    """``scontrol -o show job``'s fields (the job's restart count lasts: Restarts=)."""
    text = _sh(["scontrol", "-o", "show", "job", job_id], site.env).stdout
    return dict(f.split("=", 1) for f in text.split() if "=" in f)


def _seconds(clock: str) -> int:
    days, _, rest = clock.rpartition("-")
    h, m, s = (["0", "0", *rest.split(":")])[-3:]
    return ((int(days or 0) * 24 + int(h)) * 60 + int(m)) * 60 + int(s)


def _show(site, *args: str) -> list[list[str]]:
    out = _sh(["sacctmgr", "-n", "-P", "show", *args], site.env).stdout
    return [line.split("|") for line in out.splitlines() if line]


def test_a_lenders_jobs_take_their_gpus_back_from_borrowers_but_spare_a_borrower_younger_than_the_minimum(
    site, world
):
    run = _sync(world)
    drift = {(c["kind"], c["name"]): c for c in run.drift}
    assert drift[("qos", f"{PREFIX}borrow")]["after"] == {
        "priority": 0, "preempt": [], "preempt_mode": "requeue", "max_wall_minutes": None,
        "preempt_exempt_seconds": EXEMPT_SECONDS,
    }
    fields = "format=preempt,preemptmode,preemptexempttime"
    [[preempt, mode, exempt]] = _show(site, "qos", f"{PREFIX}borrow", fields)
    assert (mode, exempt) == ("requeue", "00:01:00")
    [[preempt]] = _show(site, "qos", f"{PREFIX}training", "format=preempt")
    assert f"{PREFIX}borrow" in preempt.split(",")

    # The borrower runs on the lender's idle GPUs, through its borrow account.
    old = _submitted(_sbatch(site, BORROWER, 2, f"--account={world['borrow_account']}"))
    wait_until(lambda: _squeue(site, old, "%T") == "RUNNING", "the old borrowing job to run")
    assert _squeue(site, old, "%a|%q") == f"{world['borrow_account']}|{PREFIX}borrow"
    # Older than the minimum runtime: a job's run time only grows while it runs.
    wait_until(lambda: _seconds(_job(site, old)["RunTime"]) > EXEMPT_SECONDS,
               "the old job to pass the minimum", timeout=EXEMPT_SECONDS + 180)
    young = _submitted(_sbatch(site, BORROWER, 2, f"--account={world['borrow_account']}"))
    wait_until(lambda: _squeue(site, young, "%T") == "RUNNING", "the young borrowing job to run")

    # All 4 GPUs are lent. The lender's own job (its project account, QOS training by default)
    # needs 2: Slurm requeues a borrowing job for it — not the young one, which the minimum
    # protects although youngest-first preemption (start.sh) would pick it otherwise.
    mine = _submitted(_sbatch(site, LENDER, 2))
    wait_until(lambda: _squeue(site, mine, "%T") == "RUNNING", "the lender's job to run",
               about=lambda: _squeue(site, mine, "%T|%r"))
    assert _squeue(site, mine, "%a|%q") == f"{world['lender_account']}|{PREFIX}training"
    assert _job(site, old)["Restarts"] == "1"
    young_now = _job(site, young)
    assert (young_now["JobState"], young_now["Restarts"]) == ("RUNNING", "0")


def _as_user(site, user: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", user, "--", "env", f"SLURM_CONF={site.conf}", *argv],
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_spent_budget_refuses_new_native_jobs_and_holds_queued_ones_until_a_top_up(site, world):
    from jobs.scheduling import config

    _sync(world)
    account = world["lender_account"]
    running = _submitted(_sbatch(site, LENDER, 4))  # all 4 GPUs: the next one queues
    wait_until(lambda: _squeue(site, running, "%T") == "RUNNING", "the lender's first job to run")
    queued = _submitted(_sbatch(site, LENDER, 2))
    spent = {f"p{world['lender_project'].pk}"}
    config.over_budget_providers.append(lambda _now: sorted(spent))
    try:
        run = _sync(world)
        [change] = [c for c in run.drift if c["name"] == account]
        assert (change["before"]["grp_submit_jobs"], change["after"]["grp_submit_jobs"]) == (None, 0)
        assert f"scontrol hold {queued}" in run.commands
        # A new job is refused with Slurm's generic text; the reason is on the account, which the
        # user may read, and on the queued job, held with an AdminComment the user reads too.
        refused = _sbatch(site, LENDER, 1)
        assert refused.returncode != 0 and "job submit limit" in refused.stderr
        descr = _as_user(site, LENDER, "sacctmgr", "-n", "-P", "show", "account", account, "format=descr")
        # (sacctmgr lowercases a description it modifies)
        assert descr.stdout.strip() == f"gpupool project pl{TAG} - budget spent (no new jobs until a top-up)"
        assert _squeue(site, queued, "%T|%r") == "PENDING|JobHeldAdmin"
        shown = _as_user(site, LENDER, "scontrol", "show", "job", queued).stdout
        assert f"AdminComment=gpupool: the budget of account {account} is spent: held until a top-up" in shown
        assert _squeue(site, running, "%T") == "RUNNING"  # what runs keeps running
        assert f"scontrol hold {queued}" not in _sync(world).commands  # held once

        spent.clear()  # a top-up: the budget allows again
        run = _sync(world)
        assert f"scontrol release {queued}" in run.commands
        assert _squeue(site, queued, "%r") != "JobHeldAdmin"
        assert "AdminComment= " in _as_user(site, LENDER, "scontrol", "show", "job", queued).stdout + " "
        descr = _as_user(site, LENDER, "sacctmgr", "-n", "-P", "show", "account", account, "format=descr")
        assert descr.stdout.strip() == f"gpupool project pl{TAG}"
        _submitted(_sbatch(site, LENDER, 1))
    finally:
        config.over_budget_providers.pop()


def test_the_sync_never_releases_a_hold_an_operator_placed(site, world):
    _sync(world)
    running = _submitted(_sbatch(site, LENDER, 4))
    wait_until(lambda: _squeue(site, running, "%T") == "RUNNING", "the lender's first job to run")
    queued = _submitted(_sbatch(site, LENDER, 2))
    _sh(["scontrol", "hold", queued], site.env)
    run = _sync(world)
    assert f"scontrol release {queued}" not in run.commands
    assert _squeue(site, queued, "%T|%r") == "PENDING|JobHeldAdmin"


def test_a_user_over_the_per_user_caps_waits_with_slurms_reason(site, world):
    project = world["lender_project"]
    project.user_running_jobs_cap = 1
    project.save()
    run = _sync(world)
    assoc = f"{world['lender_account']}/{LENDER}"
    [change] = [c for c in run.drift if c["name"] == assoc]
    assert change["after"]["max_jobs"] == 1
    first = _submitted(_sbatch(site, LENDER, 1))
    wait_until(lambda: _squeue(site, first, "%T") == "RUNNING", "the first job to run")
    second = _submitted(_sbatch(site, LENDER, 1))
    wait_until(lambda: _squeue(site, second, "%T|%r") == "PENDING|AssocMaxJobsLimit",
               "the second job to wait for the running-jobs cap",
               about=lambda: _squeue(site, second, "%T|%r"))

    project.user_running_jobs_cap = None
    project.user_gpu_cap = 2
    project.save()
    _sync(world)
    # The first job holds 1 of the user's 2 GPUs: the second now runs, a 2-GPU third waits.
    wait_until(lambda: _squeue(site, second, "%T") == "RUNNING", "the second job to run once uncapped")
    third = _submitted(_sbatch(site, LENDER, 1))
    wait_until(lambda: _squeue(site, third, "%T|%r") == "PENDING|AssocGrpGRES",
               "the third job to wait for the GPU cap", about=lambda: _squeue(site, third, "%T|%r"))


def test_the_per_user_caps_are_counted_apart_in_the_owner_and_the_borrow_association(site, world):
    """What Slurm cannot express, held as documented (docs/backends.md, the caps' row): a per-user
    cap is a limit of each association, and a borrowing job runs in another account (and QOS)
    than a job within the quota, so a user may hold the cap in each — never more in either."""
    from quotas.models import QuotaNode

    project = world["borrower_project"]
    QuotaNode.objects.filter(department=project.department).update(quota=1, borrow_limit=3)
    QuotaNode.objects.filter(project=project).update(quota=1, borrow_limit=3)
    project.user_running_jobs_cap = 1
    project.save()
    run = _sync(world)
    caps = {c["name"]: c["after"]["max_jobs"] for c in run.drift if c["kind"] == "association"}
    own, borrow = f"{PREFIX}pb{TAG}", world["borrow_account"]
    assert caps[f"{own}/{BORROWER}"] == caps[f"{borrow}/{BORROWER}"] == 1
    mine = _submitted(_sbatch(site, BORROWER, 1))
    wait_until(lambda: _squeue(site, mine, "%T") == "RUNNING", "the job within the quota to run")
    lent = _submitted(_sbatch(site, BORROWER, 1, f"--account={borrow}"))
    wait_until(lambda: _squeue(site, lent, "%T") == "RUNNING", "the borrowing job to run beside it",
               about=lambda: _squeue(site, lent, "%T|%r"))
    more = _submitted(_sbatch(site, BORROWER, 1, f"--account={borrow}"))
    wait_until(lambda: _squeue(site, more, "%T|%r") == "PENDING|AssocMaxJobsLimit",
               "a second borrowing job to wait for the cap", about=lambda: _squeue(site, more, "%T|%r"))


def test_sshare_shows_the_trees_shares_and_the_dev_class_its_max_wall(site, world, settings):
    from jobs.models import PriorityClass
    from tests import factories as fx

    dev = fx.priority("dev", 50, True)
    PriorityClass.objects.filter(pk=dev.pk).update(allowed_kinds=["dev"])
    _sync(world)
    shown = _sh(["sshare", "-n", "-P", "-a", "-o", "account,rawshares,user"], site.env).stdout
    # sshare indents each account by its depth in the tree.
    rows = [[f.strip() for f in line.split("|")] for line in shown.splitlines()]
    shares = {account: raw for account, raw, user in rows if account.startswith(PREFIX) and not user}
    assert shares[world["lender_account"]] == "4"  # 4 whole normalised cards
    assert shares[f"{PREFIX}l{TAG}"] == "4"
    assert shares[f"{PREFIX}pb{TAG}"] == "1"  # no quota of its own: Slurm's least share
    hours = settings.GPUPOOL["MAX_RUNTIME_HOURS"]["dev"]
    [[wall]] = _show(site, "qos", f"{PREFIX}dev", "format=maxwall")
    assert wall == f"{hours // 24}-{hours % 24:02d}:00:00"
    assert not _sync(world).drift  # what Slurm shows reads back as what was written

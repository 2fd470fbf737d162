"""Native Slurm users (DESIGN §11, docs/backends.md "Native Slurm users: accounts and limits")
against a real cluster: slurmctld, slurmdbd and fake-GPU slurmd nodes started by
deploy/slurm/start.sh (AccountingStorageEnforce=associations,limits,qos), Unix users made with
``useradd`` for this module and removed at its end, their jobs submitted with ``runuser … sbatch``.

One slurmdbd database serves every test cluster on the machine, and accounts, users and QOS are
global in it: this module's prefix is random, and its teardown deletes what that prefix owns.
"""

from __future__ import annotations

import io
import secrets
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from quotas.slurm_accounts import (
    ASSOC_FORMAT,
    QOS_FORMAT,
    Naming,
    desired_state,
    parse_current,
    parse_tres,
    plan,
)
from tests.backends.test_slurm import _sh, cluster  # noqa: F401 - the module's Slurm cluster
from tests.waiting import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]

TAG = secrets.token_hex(3)
PREFIX = f"gpt{TAG}_"
MEMBER = f"gpa{TAG}"  # a project member
OUTSIDER = f"gpb{TAG}"  # a Unix user the portal gives no association
INTRUDER = f"gpc{TAG}"  # given an association by hand (drift)
STRANGER = f"site{TAG}"  # an account the site made by hand, without the prefix


@pytest.fixture(scope="module")
def site(cluster) -> Iterator:  # noqa: F811 - the fixture's name
    """The cluster as users see it from a login node: a readable run dir, Unix users, a folder
    they can write; everything the prefix owns in slurmdbd is deleted at the end."""
    cluster.run_dir.chmod(0o755)
    work = cluster.run_dir / "userjobs"
    work.mkdir(mode=0o777, exist_ok=True)
    work.chmod(0o777)
    made = []
    try:
        for user in (MEMBER, OUTSIDER, INTRUDER):
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
    for user in (MEMBER, OUTSIDER, INTRUDER):
        subprocess.run([*sacctmgr, "delete", "user", f"name={user}"], env=slurm.env, check=False)
    for _attempt in range(3):  # a parent goes once its children have
        shown = _sh(["sacctmgr", "-n", "-P", "show", "account", "format=account"], slurm.env).stdout.split()
        owned = [a for a in shown if a.startswith((PREFIX, STRANGER))]
        if not owned:
            break
        for account in sorted(owned, key=len, reverse=True):
            subprocess.run([*sacctmgr, "delete", "account", f"name={account}"], env=slurm.env, check=False)
    qos = _sh(["sacctmgr", "-n", "-P", "show", "qos", "format=name"], slurm.env).stdout.split()
    for name in [q for q in qos if q.startswith(PREFIX)]:
        subprocess.run([*sacctmgr, "delete", "qos", f"name={name}"], env=slurm.env, check=False)


@pytest.fixture
def world(site, settings):
    """The portal: department D (8 A100) → project P (quota 2, borrow 0), MEMBER a member of
    P, two priority classes, the Slurm cluster registered with the portal."""
    from jobs.native.slurm_accounts import naming
    from portal.models import Membership, Role, User
    from quotas.models import Cluster as PortalCluster
    from tests import factories as fx

    settings.GPUPOOL = {**settings.GPUPOOL, "SLURM_ACCOUNT_PREFIX": PREFIX}
    flavor = fx.flavor("A100-slurm")
    flavor.slurm_gres = "gpu:a100"
    flavor.save()
    fx.nodes(flavor, 4, 8)  # capacity for the quota tree's validation
    portal_cluster = PortalCluster.objects.create(
        name="slurm-acc", kind="slurm", config={"slurm_conf": site.conf}
    )
    dept = fx.department(f"D{TAG}")
    project = fx.project(f"P{TAG}", dept)
    fx.quota(flavor, dept, 8, borrow=0)
    node = fx.quota(flavor, project, 2, borrow=0)
    member = User.objects.create(username=MEMBER)
    Membership.objects.create(user=member, role=Role.MEMBER, project=project)
    fx.priority("training", 100, True)
    fx.priority("best-effort", 0, True)
    yield {
        "cluster": portal_cluster, "node": node, "naming": naming(),
        "project_account": f"{PREFIX}p{TAG}", "dept_account": f"{PREFIX}d{TAG}",
    }
    for user in (MEMBER, OUTSIDER, INTRUDER):
        subprocess.run(["scancel", "-u", user], env=site.env, check=False)
    wait_until(lambda: not _user_jobs(site), "the users' jobs to leave the queue")


def _user_jobs(site) -> list[str]:
    users = ",".join((MEMBER, OUTSIDER, INTRUDER))
    return _sh(["squeue", "-h", "-u", users, "-t", "PD,R,CG", "-o", "%i"], site.env).stdout.split()


def _sync(world, **kw):
    from jobs.native.slurm_accounts import sync_cluster_accounts

    run = sync_cluster_accounts(world["cluster"], **kw)
    assert not run.error, run.error
    return run


def _grptres(site, account: str) -> str:
    rows = _sh(
        ["sacctmgr", "-n", "-P", "show", "assoc", f"cluster={site.cluster_name}", f"account={account}",
         "format=user,grptres"],
        site.env,
    ).stdout.splitlines()
    return next(grp for user, grp in (r.split("|") for r in rows) if not user)


def _assocs(site) -> set[tuple[str, str]]:
    fields = ["show", "assoc", f"cluster={site.cluster_name}", "format=account,user"]
    out = _sh(["sacctmgr", "-n", "-P", *fields], site.env).stdout
    return {tuple(line.split("|")) for line in out.splitlines() if line}


def _sbatch(site, user: str, gpus: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", user, "--", "env", f"SLURM_CONF={site.conf}", "sbatch", "--parsable",
         f"--gres=gpu:a100:{gpus}", "-o", "/dev/null", *extra, "--wrap", "sleep 3600"],
        cwd=site.run_dir / "userjobs", capture_output=True, text=True, timeout=120, check=False,
    )


def _squeue(site, job_id: str, fmt: str) -> str:
    return _sh(["squeue", "-h", "-j", job_id, "-o", fmt], site.env).stdout.strip()


def test_a_mapped_user_runs_within_grptres_waits_beyond_it_and_a_stranger_is_refused(site, world):
    run = _sync(world)
    assert run.commands and not run.dry_run
    assert _grptres(site, world["project_account"]) == "gres/gpu:a100=2"

    first = _sbatch(site, MEMBER, 2)
    assert first.returncode == 0, first.stderr
    first_id = first.stdout.strip()
    # The job sleeps an hour: running is where it stays for this test.
    wait_until(lambda: _squeue(site, first_id, "%T") == "RUNNING", "the first job to run")
    assert _squeue(site, first_id, "%a|%q") == f"{world['project_account']}|{PREFIX}training"

    over = _sbatch(site, MEMBER, 1)
    assert over.returncode == 0, over.stderr
    over_id = over.stdout.strip()
    # Pending on the account's limit while the first job holds both GPUs (it holds them an hour).
    wait_until(lambda: _squeue(site, over_id, "%T|%r") == "PENDING|AssocGrpGRES",
               "the second job to wait for the account's GrpTRES",
               about=lambda: _squeue(site, over_id, "%T|%r"))

    refused = _sbatch(site, OUTSIDER, 1)
    assert refused.returncode != 0
    assert "Invalid account" in refused.stderr


def test_a_quota_changed_in_the_portal_is_the_limit_after_one_sync(site, world):
    from quotas.services import quota_node_update
    from tests import factories as fx

    _sync(world)
    assert _grptres(site, world["project_account"]) == "gres/gpu:a100=2"
    quota_node_update(actor=fx.platform_admin(), node=world["node"], quota=Decimal(5))
    run = _sync(world)
    assert _grptres(site, world["project_account"]) == "gres/gpu:a100=5"
    # Its Fairshare is its quota in whole normalised cards: it follows.
    view = {"parent": world["dept_account"], "grp_submit_jobs": None}
    assert [c for c in run.drift if c["kind"] == "account"] == [{
        "kind": "account", "name": world["project_account"], "action": "modify",
        "before": view | {"grptres": {"gres/gpu:a100": 2}, "fairshare": 2},
        "after": view | {"grptres": {"gres/gpu:a100": 5}, "fairshare": 5},
    }]
    # No borrow limit: no limit on its borrowing (its borrow account); its quota stays the limit.
    borrow_account = world["project_account"].replace(PREFIX, f"{PREFIX}borrow.")
    assert _grptres(site, borrow_account) == "gres/gpu:a100=0"
    quota_node_update(actor=fx.platform_admin(), node=world["node"], borrow_limit=None)
    _sync(world)
    assert _grptres(site, world["project_account"]) == "gres/gpu:a100=5"
    assert _grptres(site, borrow_account) == ""


def test_drift_made_by_hand_is_reported_and_repaired_and_the_sites_own_account_is_untouched(site, world):
    _sync(world)
    account, name = world["project_account"], site.cluster_name
    sacctmgr = ["sacctmgr", "-i"]
    _sh([*sacctmgr, "modify", "account", "where", f"name={account}", f"cluster={name}", "set",
         "GrpTRES=gres/gpu:a100=7"], site.env)
    _sh([*sacctmgr, "add", "user", INTRUDER, f"account={account}", f"cluster={name}"], site.env)
    _sh([*sacctmgr, "add", "account", STRANGER, f"cluster={name}", "parent=root", "GrpTRES=gres/gpu:a100=1"],
        site.env)
    _sh([*sacctmgr, "add", "user", INTRUDER, f"account={STRANGER}", f"cluster={name}"], site.env)

    run = _sync(world)
    changes = {(c["kind"], c["name"], c["action"]): c for c in run.drift}
    assert changes[("account", account, "modify")]["before"]["grptres"] == {"gres/gpu:a100": 7}
    assert changes[("account", account, "modify")]["after"]["grptres"] == {"gres/gpu:a100": 2}
    assert changes[("association", f"{account}/{INTRUDER}", "delete")]["after"] is None
    assert STRANGER not in str(run.drift) + str(run.commands)

    assert _grptres(site, account) == "gres/gpu:a100=2"
    assoc = _assocs(site)
    assert (account, INTRUDER) not in assoc
    assert {(STRANGER, ""), (STRANGER, INTRUDER)} <= assoc  # not ours: left as it was
    assert _grptres(site, STRANGER) == "gres/gpu:a100=1"
    assert not _sync(world).drift  # repaired: the next sync finds nothing


def test_dry_run_prints_the_commands_and_changes_nothing(site, world):
    from quotas.models import SlurmSyncRun
    from quotas.services import quota_node_update
    from tests import factories as fx

    _sync(world)
    quota_node_update(actor=fx.platform_admin(), node=world["node"], quota=Decimal(3))
    out = io.StringIO()
    call_command("sync_slurm", "--dry-run", "--cluster", "slurm-acc", stdout=out)
    expected = (f"sacctmgr -i modify account where name={world['project_account']} "
                f"cluster={site.cluster_name} set grptres=gres/gpu:a100=3 fairshare=3")
    assert expected in out.getvalue()
    assert _grptres(site, world["project_account"]) == "gres/gpu:a100=2"
    recorded = SlurmSyncRun.objects.filter(cluster=world["cluster"]).first()
    assert recorded.dry_run and recorded.commands == [expected.removeprefix("sacctmgr -i ")]
    with pytest.raises(CommandError, match="no active Slurm cluster"):
        call_command("sync_slurm", "--cluster", "nonexistent")


def test_the_dump_loads_into_a_fresh_cluster_as_the_desired_state(site, world, tmp_path):
    """Checked by Slurm itself: ``sacctmgr load`` into a new cluster name, read back, diffed."""
    from jobs.native.slurm_accounts import portal_state

    _sync(world)  # the QOS the file names exist (the flat file has no QOS)
    target = tmp_path / "accounts.cfg"
    call_command("sync_slurm", "--dump", str(target), "--cluster", "slurm-acc", stdout=io.StringIO())
    fresh = f"gptl{TAG}"
    try:
        loaded = subprocess.run(["sacctmgr", "-i", "load", f"file={target}", f"cluster={fresh}"],
                                env=site.env, capture_output=True, text=True, timeout=120, check=False)
        assert "Problem" not in loaded.stdout + loaded.stderr, loaded.stdout + loaded.stderr
        fields = ["show", "assoc", f"cluster={fresh}", f"format={ASSOC_FORMAT}"]
        assoc = _sh(["sacctmgr", "-n", "-P", *fields], site.env).stdout
        qos = _sh(["sacctmgr", "-n", "-P", "show", "qos", f"format={QOS_FORMAT}"], site.env).stdout
        users = _sh(["sacctmgr", "-n", "-P", "show", "user", "withassoc", "where", f"cluster={fresh}",
                     "format=user,defaultaccount,account"], site.env).stdout
        naming: Naming = world["naming"]
        desired = desired_state(portal_state(world["cluster"], timezone.now()), naming)
        current = parse_current(assoc, qos, users, naming, desired.tres)
        assert set(current.accounts) == {
            world["dept_account"], world["project_account"], f"{PREFIX}borrow", f"{PREFIX}borrow.d{TAG}",
            f"{PREFIX}borrow.p{TAG}",
        }
        assert plan(desired, current, fresh, naming).commands == []
    finally:
        subprocess.run(["sacctmgr", "-i", "delete", "cluster", fresh], env=site.env, check=False)
        _drop_cluster_tables(fresh)


def _drop_cluster_tables(name: str) -> None:
    sql = ["mariadb", "-h", "127.0.0.1", "-u", "root", "--batch", "--skip-column-names", "slurm_acct_db"]
    tables = subprocess.run(
        [*sql, "-e", "SELECT GROUP_CONCAT(CONCAT('`', table_name, '`')) FROM information_schema.tables "
         f"WHERE table_schema = 'slurm_acct_db' AND table_name LIKE '{name}\\_%'"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()
    if tables and tables != "NULL":
        subprocess.run([*sql, "-e", f"DROP TABLE {tables}"], check=False)
    subprocess.run([*sql, "-e", f"DELETE FROM cluster_table WHERE name = '{name}'"], check=False)


def test_grptres_carries_cpu_and_memory_where_the_flavor_has_figures(site, world):
    """DESIGN §15: a quota's cores and memory are its GPUs' share — here the flavor profile's
    12 cores and 124 GiB a card — beside gres/gpu, and Slurm holds a job to them."""
    from quotas.models import Flavor

    per_card = {"cpu_millicores_per_unit": 12_000, "memory_mib_per_unit": 126_976}
    Flavor.objects.filter(name="A100-slurm").update(**per_card)
    run = _sync(world)
    account = world["project_account"]
    # Two GPUs (quota 2, borrow 0): 24 cores, 248 GiB (sacctmgr shows memory in its own unit).
    shown = _grptres(site, account)
    assert "mem=248G" in shown and parse_tres(shown) == {"cpu": 24, "mem": 253_952, "gres/gpu:a100": 2}
    [change] = [c for c in run.drift if c["kind"] == "account" and c["name"] == account]
    assert change["after"]["grptres"] == {"cpu": 24, "gres/gpu:a100": 2, "mem": 253_952}
    assert not _sync(world).drift  # what Slurm shows reads back as what was written

    # One GPU but more cores than the account may hold: it waits on the cores, not the GPUs.
    greedy = _sbatch(site, MEMBER, 1, "--cpus-per-task=30", "--mem=1G")
    assert greedy.returncode == 0, greedy.stderr
    greedy_id = greedy.stdout.strip()
    wait_until(lambda: _squeue(site, greedy_id, "%T|%r") == "PENDING|AssocGrpCpuLimit",
               "the job to wait for the account's cpu limit", about=lambda: _squeue(site, greedy_id, "%T|%r"))

    # Memory changed by hand is drift, reported and repaired.
    _sh(["sacctmgr", "-i", "modify", "account", "where", f"name={account}", f"cluster={site.cluster_name}",
         "set", "GrpTRES=mem=1000G"], site.env)
    changes = {(c["kind"], c["name"]): c for c in _sync(world).drift}
    assert changes[("account", account)]["before"]["grptres"]["mem"] == 1000 * 1024
    assert parse_tres(_grptres(site, account)) == {"cpu": 24, "mem": 253_952, "gres/gpu:a100": 2}

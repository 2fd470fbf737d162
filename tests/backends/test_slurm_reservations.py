"""Maintenance windows and reservations written to a real slurmctld (issue 35 item 6, DESIGN §17,
docs/reservations.md), on a cluster from deploy/slurm/start.sh: one node of 4 fake A100s. A
maintenance the portal schedules appears in ``scontrol show reservation`` with ``Flags=MAINT``; a
native ``sbatch`` by a plain Unix user whose time limit crosses its start stays pending with
Slurm's reason for it, while one that ends before the start runs; cancelled in the portal, the
reservation leaves slurmctld at the next sync and the waiting job runs.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from tests.backends.test_slurm import _sh, slurm_cluster
from tests.waiting import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]

TAG = secrets.token_hex(3)
PREFIX = f"gpv{TAG}_"
USER = f"gpm{TAG}"
# Slurm's pending reasons for a job whose time limit would run into a maintenance reservation.
MAINTENANCE_REASONS = ("ReqNodeNotAvail", "Reserved for maintenance")


@pytest.fixture(scope="module")
def site() -> Iterator:
    with slurm_cluster(1, 4, prefix="gp-slurm-resv-") as cluster:
        cluster.run_dir.chmod(0o755)
        work = cluster.run_dir / "userjobs"
        work.mkdir(mode=0o777, exist_ok=True)
        work.chmod(0o777)
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", USER], check=True)
        try:
            cluster.node = _sh(["sinfo", "-h", "-N", "-o", "%N"], cluster.env).stdout.split()[0]
            yield cluster
        finally:
            subprocess.run(["scancel", "-u", USER], env=cluster.env, check=False)
            for name in _reservations(cluster):
                subprocess.run(["scontrol", "delete", f"ReservationName={name}"], env=cluster.env,
                               check=False)
            _forget(cluster)
            subprocess.run(["userdel", USER], check=False)


def _forget(site) -> None:
    sacctmgr = ["sacctmgr", "-i", "-n", "-P"]
    subprocess.run([*sacctmgr, "delete", "user", f"name={USER}"], env=site.env, check=False)
    for _attempt in range(4):  # a parent goes once its children have
        shown = _sh(["sacctmgr", "-n", "-P", "show", "account", "format=account"], site.env).stdout.split()
        owned = sorted((a for a in shown if a.startswith(PREFIX)), key=len, reverse=True)
        if not owned:
            break
        for account in owned:
            subprocess.run([*sacctmgr, "delete", "account", f"name={account}"], env=site.env, check=False)
    qos = _sh(["sacctmgr", "-n", "-P", "show", "qos", "format=name"], site.env).stdout.split()
    for name in [q for q in qos if q.startswith(PREFIX)]:
        subprocess.run([*sacctmgr, "delete", "qos", f"name={name}"], env=site.env, check=False)


def _reservations(site) -> dict[str, dict[str, str]]:
    text = _sh(["scontrol", "-o", "show", "reservation"], site.env).stdout
    out = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("ReservationName", "").startswith(PREFIX):
            out[fields["ReservationName"]] = fields
    return out


@pytest.fixture
def world(site, settings):
    """A project with USER as a member, its Slurm account synced; the Slurm node in the portal."""
    from jobs.models import PriorityClass
    from jobs.native.slurm_accounts import sync_cluster_accounts
    from portal.models import Membership, Role, User
    from quotas.models import Cluster, Node
    from tests import factories as fx

    settings.GPUPOOL = {**settings.GPUPOOL, "SLURM_ACCOUNT_PREFIX": PREFIX}
    flavor = fx.flavor("A100-resv")
    flavor.slurm_gres = "gpu:a100"
    flavor.save()
    cluster = Cluster.objects.create(name="slurm-resv", kind="slurm", config={"slurm_conf": site.conf})
    node = Node.objects.create(cluster=cluster, name=site.node, flavor=flavor, gpu_count=4, zone="z",
                               spine="s", leaf="l")
    dept = fx.department(f"M{TAG}")
    project = fx.project(f"PM{TAG}", dept)
    fx.quota(flavor, dept, 4, borrow=0)
    fx.quota(flavor, project, 4, borrow=0)
    user = User.objects.create(username=USER)
    Membership.objects.create(user=user, role=Role.MEMBER, project=project)
    PriorityClass.objects.get_or_create(name="training", defaults={"value": 100})
    run = sync_cluster_accounts(cluster)
    assert not run.error, run.error
    yield {"cluster": cluster, "node": node, "admin": fx.platform_admin(f"root{TAG}"), "project": project}
    subprocess.run(["scancel", "-u", USER], env=site.env, check=False)
    wait_until(lambda: not _jobs(site), "the user's jobs to leave the queue")


def _jobs(site) -> list[str]:
    return _sh(["squeue", "-h", "-u", USER, "-t", "PD,R,CG", "-o", "%i"], site.env).stdout.split()


def _sbatch(site, minutes: int) -> str:
    done = subprocess.run(
        ["runuser", "-u", USER, "--", "env", f"SLURM_CONF={site.conf}", "sbatch", "--parsable",
         "--gres=gpu:a100:1", f"--time={minutes}", "-o", "/dev/null", "--wrap", "sleep 3600"],
        cwd=Path(site.run_dir) / "userjobs", capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _squeue(site, job_id: str, fmt: str) -> str:
    return _sh(["squeue", "-h", "-j", job_id, "-o", fmt], site.env).stdout.strip()


def test_a_maintenance_appears_in_slurm_and_holds_back_a_native_job_whose_limit_crosses_it(site, world):
    from jobs.native.slurm_reservations import sync_cluster_reservations
    from jobs.reservations import maintenance_create, reservation_cancel

    now = timezone.now()
    maint = maintenance_create(actor=world["admin"], nodes=[world["node"]], reason="firmware upgrade",
                               starts_at=now + timedelta(hours=1), ends_at=now + timedelta(hours=3))
    name = f"{PREFIX}maint_{maint.pk}"
    assert sync_cluster_reservations(world["cluster"]) == [{"change": "create", "name": name}]
    shown = _reservations(site)
    assert set(shown) == {name}
    assert "MAINT" in shown[name]["Flags"].split(",") and shown[name]["Nodes"] == site.node
    assert sync_cluster_reservations(world["cluster"]) == []  # in step: no drift

    # Two hours' limit crosses the start in one hour: slurmctld keeps it off the node and says why.
    crossing = _sbatch(site, 120)
    wait_until(lambda: any(r in _squeue(site, crossing, "%r") for r in MAINTENANCE_REASONS),
               "slurmctld to give the maintenance as the crossing job's pending reason",
               about=lambda: _squeue(site, crossing, "%T|%r"))
    assert _squeue(site, crossing, "%T") == "PENDING"
    # Ten minutes end before it: that job runs on the same node (the node itself is fine).
    short = _sbatch(site, 10)
    wait_until(lambda: _squeue(site, short, "%T") == "RUNNING", "the short job to run",
               about=lambda: _squeue(site, short, "%T|%r"))
    assert _squeue(site, crossing, "%T") == "PENDING"

    # Cancelled in the portal: the next sync deletes it, and the crossing job may start.
    assert reservation_cancel(actor=world["admin"], reservation=maint)
    assert sync_cluster_reservations(world["cluster"]) == [{"change": "delete", "name": name}]
    assert _reservations(site) == {}
    wait_until(lambda: _squeue(site, crossing, "%T") == "RUNNING", "the crossing job to run once it is gone",
               about=lambda: _squeue(site, crossing, "%T|%r"))


def test_a_project_reservation_is_its_accounts_alone_and_follows_the_portal(site, world):
    """Written for the project's account with MAGNETIC: the project's native job runs in it without
    naming it; changed in the portal it is updated in place, cancelled it is deleted."""
    from jobs.native.slurm_reservations import sync_cluster_reservations
    from jobs.reservation_models import Reservation

    now = timezone.now()
    resv = Reservation.objects.create(project=world["project"], flavor=world["node"].flavor, gpus=2,
                                      starts_at=now - timedelta(minutes=1), ends_at=now + timedelta(hours=4))
    name = f"{PREFIX}resv_{resv.pk}"
    assert sync_cluster_reservations(world["cluster"]) == [{"change": "create", "name": name}]
    shown = _reservations(site)[name]
    assert shown["Accounts"] == f"{PREFIX}pm{TAG}" and "MAGNETIC" in shown["Flags"].split(",")
    assert "MAINT" not in shown["Flags"].split(",")
    assert shown["Nodes"] == site.node  # a count is written as the nodes that cover it
    assert sync_cluster_reservations(world["cluster"]) == []  # started: "now" is not drift

    mine = _sbatch(site, 30)
    wait_until(lambda: _squeue(site, mine, "%T") == "RUNNING", "the project's job to run in its reservation",
               about=lambda: _squeue(site, mine, "%T|%r"))
    assert _squeue(site, mine, "%v") == name

    Reservation.objects.filter(pk=resv.pk).update(ends_at=now + timedelta(hours=5))
    assert sync_cluster_reservations(world["cluster"]) == [{"change": "update", "name": name}]
    assert _reservations(site)[name]["EndTime"] != shown["EndTime"]
    # Cancelled while the project's job runs in it: slurmctld keeps a reservation in use, so it is
    # ended now; the job runs on.
    Reservation.objects.filter(pk=resv.pk).update(state="cancelled")
    assert sync_cluster_reservations(world["cluster"]) == [{"change": "end", "name": name}]
    assert _squeue(site, mine, "%T") == "RUNNING"
    subprocess.run(["scancel", mine], env=site.env, check=True)
    wait_until(lambda: not _jobs(site), "the project's job to leave the queue")
    sync_cluster_reservations(world["cluster"])  # gone by itself, or deleted now that it is free
    assert _reservations(site) == {}

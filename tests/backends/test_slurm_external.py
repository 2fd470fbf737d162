"""External Slurm jobs (DESIGN §11) against a real cluster: a Unix user's own ``sbatch`` jobs
become external jobs of the project their account maps to, with Slurm's Start/End, billed to the
second, placed around while they hold GPUs, listed with Slurm's reason while they wait; an
unknown account is kept for an admin to map; the portal's own jobs are never imported.

The cluster (two nodes of 8 fake A100s, started by deploy/slurm/start.sh) lives for this module;
a Unix user and its Slurm accounts are created for it and removed at the end. Each test cancels
the Slurm jobs it submitted and waits until they have ended, so tests run in any order.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum
from django.utils import timezone

from billing.meter import usage_meter
from billing.models import UsageRecord
from jobs.clusters.backends.slurm import FINISHED, _time
from jobs.clusters.inventory import sync_inventory
from jobs.models import Job, JobEvent, JobKind
from jobs.native import tasks
from jobs.native.external import map_source
from jobs.native.models import ExternalCursor, ExternalSource
from jobs.native.native_slurm import import_slurm
from jobs.scheduling.cycle import schedule_once
from jobs.states import JobState
from quotas.models import Cluster as ClusterRow
from quotas.models import Node
from tests import factories as fx
from tests.backends.test_slurm import DEPLOY, _free_port_base, _sh, _unavailable
from tests.waiting import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]
NODES = 2


@dataclass
class Site:
    """The Slurm cluster, its Unix user and accounts, and the jobs a test submitted."""

    run_dir: Path
    conf: str
    env: dict[str, str]
    user: str
    mapped: str  # account mapped to a project in each test
    stray: str  # account mapped to nothing
    workdir: Path
    submitted: list[str] = field(default_factory=list)

    def sbatch(self, *opts: str, account: str | None = None, seconds: int = 600, as_user: str | None = None,
               gpus: int = 1) -> str:
        """Submit as the Unix user (or ``as_user``), the way a user types it on a login node."""
        user = as_user or self.user
        args = ["sbatch", "--parsable", "-A", account or self.mapped, f"--gres=gpu:a100:{gpus}",
                "-o", "/dev/null", *opts, "--wrap", f"sleep {seconds}"]
        as_them = ["runuser", "-u", user, "--", "env", f"SLURM_CONF={self.conf}"]
        cmd = args if user == "root" else [*as_them, *args]
        out = subprocess.run(cmd, env=self.env, cwd=self.workdir, capture_output=True, text=True,
                             timeout=60, check=True)
        job_id = out.stdout.strip().split(";")[0]
        self.submitted.append(job_id)
        return job_id

    def sacct(self, job_id: str) -> dict[str, str]:
        fields = "State,Start,End,Eligible,AllocTRES,ReqTRES"
        out = _sh(["sacct", "-X", "-P", "-n", "-j", job_id, "-o", fields], self.env)
        line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "|||||"
        state, start, end, eligible, tres, req = line.split("|")
        return {"state": state.split()[0] if state else "", "start": start, "end": end, "eligible": eligible,
                "tres": tres, "req": req}

    def squeue(self, job_id: str) -> tuple[str, str]:
        out = _sh(["squeue", "-h", "-j", job_id, "-o", "%T|%r"], self.env, timeout=60)
        return tuple(out.stdout.strip().split("|")) if out.stdout.strip() else ("", "")

    def ended(self, job_id: str) -> dict[str, str] | None:
        """Slurm's accounting record once the job has ended and slurmdbd holds all of it, else
        None. slurmdbd may first store a job without its eligible time, which a window query
        (``sacct -S … -E …``) selects by, or without its TRES: the importer reads such a job at
        a later import (the window's overlap, or the lookup of jobs still open)."""
        rec = self.sacct(job_id)
        never_allocated = rec["tres"] == ""
        complete = rec["req"] != "" and (never_allocated or rec["eligible"] not in ("", "Unknown"))
        return rec if rec["state"] in FINISHED and rec["end"] not in ("", "Unknown") and complete else None


def _sacctmgr(env: dict[str, str], *args: str, check: bool = True) -> None:
    subprocess.run(["sacctmgr", "-i", *args], env=env, capture_output=True, text=True, timeout=60,
                   check=check)


def _cluster_name(conf: str) -> str:
    # Accounts are shared by every cluster of the slurmdbd; their associations are per cluster, and
    # one added without cluster= lands in every cluster (other tests' clusters included).
    for line in Path(conf).read_text().splitlines():
        if line.startswith("ClusterName="):
            return line.removeprefix("ClusterName=").strip()
    raise AssertionError(f"no ClusterName in {conf}")


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    run_dir = Path(tempfile.mkdtemp(prefix="gp-sx-"))
    env = {**os.environ, "SLURM_PORT_BASE": str(_free_port_base(10 + NODES + 1)),
           "SLURM_TIME_FORMAT": "%s", "TZ": "UTC"}
    args = [str(DEPLOY / "start.sh"), str(run_dir), "--nodes", str(NODES), "--gpus-per-node", "8"]
    try:
        _sh([str(DEPLOY / "install.sh")], env, timeout=900)
        out = _sh(args, env).stdout
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        subprocess.run([str(DEPLOY / "stop.sh"), str(run_dir), "--purge"], env=env, check=False)
        shutil.rmtree(run_dir, ignore_errors=True)
        _unavailable(f"no Slurm cluster: {exc}\n{getattr(exc, 'stderr', '')}")
    conf = out.strip().splitlines()[-1].removeprefix("export SLURM_CONF=")
    env["SLURM_CONF"] = conf
    # A user's clients read slurm.conf (start.sh writes it 0600 in a 0700 temp dir; slurmdbd.conf,
    # which holds the database password, stays private).
    run_dir.chmod(0o755)
    Path(conf).chmod(0o644)
    workdir = run_dir / "home"
    workdir.mkdir()
    workdir.chmod(0o1777)
    tag = uuid.uuid4().hex[:8]
    user, mapped, stray = f"gpx{tag}", f"sx{tag}", f"sxstray{tag}"
    subprocess.run(["useradd", "-M", "-d", str(workdir), "-s", "/bin/sh", user], check=True, timeout=60)
    # Associations, so the submissions work whether or not the cluster enforces them.
    cluster = f"cluster={_cluster_name(conf)}"
    for account in (mapped, stray):
        _sacctmgr(env, "add", "account", account, cluster, "Description=gpupool test", "Organization=gpupool")
        _sacctmgr(env, "add", "user", user, f"account={account}", cluster)
        _sacctmgr(env, "add", "user", "root", f"account={account}", cluster)
    try:
        yield Site(run_dir, conf, env, user, mapped, stray, workdir)
    finally:
        subprocess.run(["scancel", "-u", user], env=env, check=False, timeout=60)
        _sacctmgr(env, "delete", "user", user, check=False)
        _sacctmgr(env, "delete", "user", "root", f"account={mapped},{stray}", check=False)
        _sacctmgr(env, "delete", "account", mapped, stray, check=False)
        subprocess.run(["userdel", user], check=False, timeout=60)
        subprocess.run([str(DEPLOY / "stop.sh"), str(run_dir), "--purge"], env=env, check=False, timeout=120)
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def slurm(site) -> Iterator[Site]:
    """The site, with this test's Slurm jobs cancelled and ended when it is over."""
    site.submitted.clear()
    yield site
    if site.submitted:
        subprocess.run(["scancel", *site.submitted], env=site.env, check=False, timeout=60)
        for job_id in site.submitted:
            wait_until(lambda j=job_id: site.squeue(j)[0] in ("", *FINISHED), f"job {job_id} gone",
                       interval=0.3)


@pytest.fixture
def portal(slurm):
    """The cluster in the portal (nodes from the inventory sync), department D (24 GPUs) with
    project pe (8) fed by the mapped account and project pp (16) for portal jobs."""
    f = fx.flavor()
    f.slurm_gres = "gpu:a100"
    f.save()
    cluster = ClusterRow.objects.create(name="real", kind="slurm", config={"slurm_conf": slurm.conf})
    assert sync_inventory(cluster)["created"] == NODES
    dept = fx.department("D")
    pe, pp = fx.project("pe", dept), fx.project("pp", dept)
    fx.quota(f, dept, 24)
    fx.quota(f, pe, 8)
    fx.quota(f, pp, 16)
    fx.priority()
    ExternalSource.objects.create(cluster=cluster, kind="slurm_account", name=slurm.mapped, project=pe)
    return cluster, f, pe, pp


def test_a_direct_sbatch_job_is_recorded_once_and_billed_to_the_second(slurm, portal):
    cluster, _f, pe, _pp = portal
    job_id = slurm.sbatch("-J", "my training", gpus=3, seconds=3)
    import_slurm(cluster)  # (a) one import: it is there, whatever Slurm has done with it so far
    job = Job.objects.get(cluster=cluster, backend_id=job_id)
    assert (job.kind, job.project, job.gpus_per_worker) == (JobKind.EXTERNAL, pe, 3)
    assert job.external_user == slurm.user
    assert job.flavor.slurm_gres == "gpu:a100" and job.name == "my-training"

    done = wait_until(lambda: slurm.ended(job_id), f"job {job_id} in accounting, ended", interval=0.3)
    assert done["state"] == "COMPLETED"
    import_slurm(cluster)
    job.refresh_from_db()
    start, end = _time(done["start"]), _time(done["end"])
    assert (job.state, job.started_at, job.finished_at) == (JobState.SUCCEEDED, start, end)
    facts = job.events.filter(to_state__in=["running", "succeeded"])
    assert sorted(facts.values_list("occurred_at", "time_source")) == [(start, "slurm"), (end, "slurm")]

    usage_meter(now=end + timedelta(hours=2))  # (b) the ledger: sacct's (End − Start) × GPUs
    billed = UsageRecord.objects.filter(job=job).aggregate(s=Sum("card_seconds"))["s"]
    assert (end - start).total_seconds() >= 3 and "gres/gpu=3" in done["tres"]
    assert billed == Decimal((end - start).total_seconds() * 3)

    jobs, events = Job.objects.count(), JobEvent.objects.count()  # (f) again: nothing new
    again = import_slurm(cluster)
    assert (again.get("created", 0), again.get("changed", 0)) == (0, 0)
    assert (Job.objects.count(), JobEvent.objects.count()) == (jobs, events)
    cursor = ExternalCursor.objects.get(cluster=cluster, kind="sacct")
    assert again["window_start"] < cursor.value  # the next window starts before the cursor (overlap)


def test_portal_jobs_are_placed_around_the_gpus_a_direct_job_holds(slurm, portal):
    cluster, f, _pe, pp = portal
    node1 = Node.objects.get(cluster=cluster, name="gpu-a100-1")
    node2 = Node.objects.get(cluster=cluster, name="gpu-a100-2")
    hog = slurm.sbatch("-J", "hog", "--nodelist=gpu-a100-1", gpus=8)
    # Running for 600 s: far longer than the test, so waiting for it is not a race.
    wait_until(lambda: slurm.squeue(hog)[0] == "RUNNING", f"job {hog} running", interval=0.3)
    waiting = slurm.sbatch("-J", "behind", "--nodelist=gpu-a100-1", gpus=1)
    reason = wait_until(lambda: slurm.squeue(waiting)[1] not in ("", "None") and slurm.squeue(waiting)[1],
                        f"a reason for job {waiting}", interval=0.3)
    import_slurm(cluster)

    ext = Job.objects.get(cluster=cluster, backend_id=hog)
    assert ext.state == JobState.RUNNING
    assert sorted((n, g) for n, g, _m in ext.placement[0]) == [(node1.pk, g) for g in range(8)]
    pending = Job.objects.get(cluster=cluster, backend_id=waiting)
    assert (pending.state, pending.message) == (JobState.QUEUED, reason)

    first = fx.submit(pp, f, gpus=8, name="first")
    second = fx.submit(pp, f, gpus=8, name="second")
    schedule_once()
    first.refresh_from_db()
    second.refresh_from_db()
    placed = [j for j in (first, second) if j.state == JobState.ADMITTED]
    assert len(placed) == 1, "only node 2 is free: one portal job fits, the other waits"
    assert {n for n, _g, _m in placed[0].placement[0]} == {node2.pk}
    assert {first.state, second.state} == {JobState.ADMITTED, JobState.QUEUED}
    pending.refresh_from_db()
    ext.refresh_from_db()
    assert (pending.state, pending.admitted_at) == (JobState.QUEUED, None)  # never admitted
    assert ext.state == JobState.RUNNING and ext.terminating_since is None


def test_a_held_job_is_queued_external_with_slurms_reason_and_never_admitted(slurm, portal):
    cluster, _f, _pe, _pp = portal
    held = slurm.sbatch("-J", "held", "--hold", gpus=2)
    import_slurm(cluster)
    schedule_once()
    job = Job.objects.get(cluster=cluster, backend_id=held)
    assert (job.kind, job.state, job.message, job.admitted_at) == (JobKind.EXTERNAL, JobState.QUEUED,
                                                                  "JobHeldUser", None)
    assert job.dispatched_at is None
    subprocess.run(["scancel", held], env=slurm.env, check=True, timeout=60)
    wait_until(lambda: slurm.ended(held), f"job {held} cancelled in accounting", interval=0.3)
    import_slurm(cluster)  # gone from squeue: looked up by id in accounting
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.started_at is None


def test_an_unknown_account_is_kept_unmapped_until_an_admin_maps_it(slurm, portal):
    cluster, _f, pe, _pp = portal
    job_id = slurm.sbatch("-J", "stray", account=slurm.stray, gpus=2, seconds=2)
    done = wait_until(lambda: slurm.ended(job_id), f"job {job_id} ended", interval=0.3)
    out = import_slurm(cluster)
    assert slurm.stray in out["unmapped_sources"]
    assert not Job.objects.filter(cluster=cluster, backend_id=job_id).exists()
    source = ExternalSource.objects.get(cluster=cluster, kind="slurm_account", name=slurm.stray)
    assert source.project is None and source.observations.filter(backend_id=job_id).exists()

    map_source(source=source, project=pe, actor=fx.platform_admin())
    job = Job.objects.get(cluster=cluster, backend_id=job_id)
    start, end = _time(done["start"]), _time(done["end"])
    assert (job.project, job.state, job.started_at, job.finished_at) == (pe, JobState.SUCCEEDED, start, end)
    usage_meter(now=end + timedelta(hours=2))  # its history is metered after the mapping
    billed = UsageRecord.objects.filter(job=job).aggregate(s=Sum("card_seconds"))["s"]
    assert billed == Decimal((end - start).total_seconds() * 2)


def test_the_portals_own_jobs_are_not_imported_but_the_name_alone_proves_nothing(slurm, portal):
    cluster, f, _pe, pp = portal
    own = fx.submit(pp, f, gpus=1, name="own")  # a portal job: Slurm calls it gp-<id>
    by_portal = slurm.sbatch("-J", f"gp-{own.pk}", as_user="root", seconds=1)
    by_user = slurm.sbatch("-J", f"gp-{own.pk}", seconds=1)  # a user borrowing the name
    for job_id in (by_portal, by_user):
        wait_until(lambda j=job_id: slurm.ended(j), f"job {job_id} ended", interval=0.3)
    out = tasks.import_slurm_cluster(cluster.pk)  # the beat task's worker body
    assert out["portal_jobs"] >= 1
    assert not Job.objects.filter(cluster=cluster, backend_id=by_portal).exists()
    assert Job.objects.get(cluster=cluster, backend_id=by_user).kind == JobKind.EXTERNAL


def test_a_job_without_gpus_is_not_imported(slurm, portal):
    cluster, *_ = portal
    cpu = subprocess.run(
        ["runuser", "-u", slurm.user, "--", "env", f"SLURM_CONF={slurm.conf}", "sbatch", "--parsable",
         "-A", slurm.mapped, "-o", "/dev/null", "--wrap", "sleep 1"],
        env=slurm.env, cwd=slurm.workdir, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()
    slurm.submitted.append(cpu)
    wait_until(lambda: slurm.ended(cpu), f"job {cpu} ended", interval=0.3)
    out = import_slurm(cluster)
    assert out["not_gpu"] >= 1 and not Job.objects.filter(cluster=cluster, backend_id=cpu).exists()


def test_an_external_jobs_cpu_and_memory_are_recorded_from_slurm(slurm, portal):
    """What a direct job holds besides its GPUs is counted like a portal job's (DESIGN §15): its
    cores and memory from squeue's tres-alloc while it runs and sacct's AllocTRES once it ended;
    a job that asked no memory holds Slurm's default (DefMemPerCPU), not the node."""
    cluster, *_ = portal
    big = slurm.sbatch("-J", "big", "--cpus-per-task=6", "--mem=40G", gpus=2, seconds=2)
    plain = slurm.sbatch("-J", "plain", gpus=1, seconds=2)
    import_slurm(cluster)
    for job_id, want in ((big, (6_000, 40_960)), (plain, (1_000, 2_048))):
        job = Job.objects.get(cluster=cluster, backend_id=job_id)
        assert (job.cpu_millicores, job.memory_mib) == want
        done = wait_until(lambda j=job_id: slurm.ended(j), f"job {job_id} ended", interval=0.3)
        assert f"cpu={want[0] // 1000}" in done["tres"]
    import_slurm(cluster)
    for job_id, want in ((big, (6_000, 40_960)), (plain, (1_000, 2_048))):
        job = Job.objects.get(cluster=cluster, backend_id=job_id)
        assert job.state == JobState.SUCCEEDED and (job.cpu_millicores, job.memory_mib) == want


def test_import_refuses_a_cluster_that_is_not_real_slurm(db):
    sim = ClusterRow.objects.create(name="sim", kind="simulator")
    with pytest.raises(ValueError):
        import_slurm(sim)


def test_import_native_back_fills_from_a_given_instant(slurm, portal):
    cluster, *_ = portal
    job_id = slurm.sbatch("-J", "old", gpus=1, seconds=1)
    wait_until(lambda: slurm.ended(job_id), f"job {job_id} ended", interval=0.3)
    since = (timezone.now() - timedelta(days=40)).isoformat()
    out = io.StringIO()
    call_command("import_native", "--cluster", "real", "--since", since, stdout=out)
    assert out.getvalue().startswith("real: ") and f'"window_start": "{since}"' in out.getvalue()
    assert Job.objects.get(cluster=cluster, backend_id=job_id).state == JobState.SUCCEEDED
    with pytest.raises(CommandError, match="zone"):
        call_command("import_native", "--since", "2026-11-01T00:00")
    with pytest.raises(CommandError, match="no active real Slurm cluster"):
        call_command("import_native", "--cluster", "nope")

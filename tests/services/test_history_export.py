"""History as a trace (issue 25 item 1): which jobs a range exports and how, the cluster SPEC
(nodes, quotas, windows, loans), the recorded delays, the manifest, range checks and the command.

The range is the week up to ``END``; jobs (project paths: A/A1/pa1, A/pa, B/pb):

* j_plain — queued at +10 min, admitted +20 min, running +20 min 5 s, done +1 h;
* j_carried — queued 1 h before the range, running 30 min before it, done 30 min into it;
* j_requeued — runs 1 h, preempted, requeued, runs 1 h more (no checkpointing: its last run);
* j_running — still running at the end; j_waiting — still waiting at the end;
* j_cancelled — cancelled while waiting (never ran: counted, not exported);
* j_before / j_after — outside the range;
* three external jobs of pa1 (tests/external_world.py): waiting, running, finished.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone, translation

from jobs.models import Job, JobEvent
from jobs.whatif import history
from jobs.whatif.replay.csvtrace import read_trace
from jobs.whatif.replay.limits import world as spec_world
from jobs.whatif.replay.spec import load_spec
from quotas.models import Loan, LoanState, Node, QuotaWindow
from tests import factories as fx
from tests.external_world import external_world

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
M = timedelta(minutes=1)


class _Recorder:
    def __init__(self, world):
        self.world, self.prio, self.n = world, fx.priority(), 0

    def job(self, project, queued, *steps, gpus=2, workers=1, checkpointing=False):
        """``steps``: (state, at) after the queue entry, as the services write them."""
        self.n += 1
        job = Job.objects.create(
            name=f"h{self.n}",
            project=project,
            submitted_by=self.world.users["pa1_member"],
            kind="training",
            flavor=self.world.F,
            priority_class=self.prio,
            workers=workers,
            gpus_per_worker=gpus,
            image="img",
            state="queued",
            state_changed_at=queued,
            submitted_at=queued,
            checkpointing=checkpointing,
        )
        previous = ""
        for state, at in (("queued", queued), *steps):
            JobEvent.objects.create(job=job, from_state=previous, to_state=state, occurred_at=at)
            previous = state
        last_end = next((at for state, at in reversed(steps) if state in ("succeeded", "cancelled")), None)
        Job.objects.filter(pk=job.pk).update(state=previous, finished_at=last_end)
        return job


@pytest.fixture
def scene(world):
    fx.priority()  # external jobs are ranked by the lowest class
    ext = external_world(world)
    end = timezone.now().replace(microsecond=0) + timedelta(seconds=1)
    start = end - timedelta(days=7)
    r = _Recorder(world)
    s = start
    jobs = {
        "plain": r.job(
            world.pa1,
            s + 10 * M,
            ("admitted", s + 20 * M),
            ("running", s + 20 * M + timedelta(seconds=5)),
            ("succeeded", s + H),
        ),
        "carried": r.job(
            world.pb,
            s - H,
            ("admitted", s - 30 * M),
            ("running", s - 30 * M),
            ("succeeded", s + 30 * M),
            gpus=8,
        ),
        "requeued": r.job(
            world.pb,
            s + H,
            ("admitted", s + H),
            ("running", s + H),
            ("preempted", s + 2 * H),
            ("queued", s + 2 * H),
            ("admitted", s + 3 * H),
            ("running", s + 3 * H),
            ("succeeded", s + 4 * H),
            gpus=4,
            workers=2,
        ),
        "running": r.job(world.pa, end - H, ("admitted", end - 30 * M), ("running", end - 30 * M), gpus=1),
        "waiting": r.job(world.pa, end - 10 * M),
        "cancelled": r.job(world.pa, s + 2 * H, ("cancelled", s + 3 * H)),
        "before": r.job(
            world.pa, s - 5 * H, ("admitted", s - 5 * H), ("running", s - 5 * H), ("succeeded", s - 4 * H)
        ),
    }
    after = r.job(world.pa, end + H)  # submitted after the range end (an explicit until in the past)
    QuotaWindow.objects.create(
        quota_node=world.quota["B"], name="night", start_time="20:00", end_time="08:00", lend_limit=Decimal(8)
    )
    loans = {
        name: Loan.objects.create(lender=world.quota["A1"], borrower=world.quota["pb"],
                                  amount=Decimal(amount), starts_at=starts, ends_at=ends, state=state)
        for name, amount, starts, ends, state in (
            ("returned", 2, s + H, s + 2 * H, LoanState.RETURNED),
            ("pending", 1, s + H, s + 2 * H, LoanState.PENDING),
            ("old", 1, s - 48 * H, s - 24 * H, LoanState.RETURNED),
        )
    }
    return {"start": start, "end": end, "jobs": jobs, "after": after, "ext": ext, "loans": loans}


def _rows(export):
    return {r["job_id"]: r for r in export.trace}, {r["job_id"]: r for r in export.recorded}


def test_jobs_of_the_range_become_trace_rows(scene):
    export = history.history_export(start=scene["start"], end=scene["end"])
    trace, recorded = _rows(export)
    j, ext = scene["jobs"], scene["ext"]
    expected = {str(j[k].pk) for k in ("plain", "carried", "requeued", "running", "waiting")}
    expected |= {str(ext.pending.pk), str(ext.running.pk), str(ext.finished.pk)}
    assert set(trace) == expected  # not: cancelled while waiting, before, after
    plain = trace[str(j["plain"].pk)]
    assert plain == {
        "job_id": str(j["plain"].pk),
        "submit_time": 600.0,
        "duration": 2395.0,
        "num_gpus": 2,
        "gpu_milli": "",
        "gpu_type": "F",
        "tenant": "A/A1/pa1",
        "kind": "training",
        "priority": 100,
        "workers": 1,
        "cpu_milli": "",
        "memory_mib": "",
    }
    assert (
        recorded[str(j["plain"].pk)]["queue_delay_s"],
        recorded[str(j["plain"].pk)]["admission_delay_s"],
    ) == (605.0, 600.0)
    carried = trace[str(j["carried"].pk)]
    assert (carried["submit_time"], carried["duration"], carried["tenant"]) == (0.0, 1800.0, "B/pb")
    assert recorded[str(j["carried"].pk)]["flags"] == "carried_over"
    requeued = trace[str(j["requeued"].pk)]
    assert (requeued["submit_time"], requeued["duration"], requeued["workers"], requeued["num_gpus"]) == (
        3600.0,
        3600.0,
        2,
        4,
    )
    assert recorded[str(j["requeued"].pk)]["queue_delay_s"] == 3600.0  # its second wait
    assert trace[str(j["running"].pk)]["duration"] == 1800.0  # up to the end, flagged
    assert recorded[str(j["running"].pk)]["flags"] == "running_at_end"
    assert trace[str(j["waiting"].pk)]["duration"] == ""  # never ends
    assert recorded[str(j["waiting"].pk)]["queue_delay_s"] == ""  # censored
    assert trace[str(ext.finished.pk)]["kind"] == "external"
    assert trace[str(ext.finished.pk)]["duration"] == 3600.0
    assert trace[str(ext.finished.pk)]["num_gpus"] == 4
    m = export.manifest
    assert (m["jobs"], m["external_jobs"], m["skipped_never_ran"], m["carried_over"], m["requeued"]) == (
        8,
        3,
        1,
        1,
        1,
    )
    assert (m["running_at_end"], m["waiting_at_end"]) == (2, 2)  # a portal and an external job each


def test_a_jobs_cpu_and_memory_and_the_nodes_figures_are_exported_for_the_replay(scene):
    """What a job asked besides GPUs, and what its nodes can give, reach the what-if (issue 33
    item 7): a row without a request stays empty (its GPUs' share), as live."""
    plain = scene["jobs"]["plain"]
    Job.objects.filter(pk=plain.pk).update(cpu_millicores=48000, memory_mib=393216)
    Node.objects.filter(name="n0").update(cpu_millicores=96000, memory_mib=1015808)
    export = history.history_export(start=scene["start"], end=scene["end"])
    trace, _ = _rows(export)
    assert (trace[str(plain.pk)]["cpu_milli"], trace[str(plain.pk)]["memory_mib"]) == (48000, 393216)
    carried = trace[str(scene["jobs"]["carried"].pk)]
    assert (carried["cpu_milli"], carried["memory_mib"]) == ("", "")
    nodes = {n["name"]: n for n in export.cluster["nodes"]}
    assert (nodes["c1/n0"]["cpu_milli"], nodes["c1/n0"]["memory_mib"]) == (96000, 1015808)
    assert "cpu_milli" not in nodes["c1/n1"] and "memory_mib" not in nodes["c1/n1"]


def test_the_spec_has_the_nodes_quotas_windows_and_loans_in_force(scene):
    export = history.history_export(start=scene["start"], end=scene["end"])
    spec = export.cluster
    assert {n["name"] for n in spec["nodes"]} == {"c1/n0", "c1/n1", "hpc/h0"}
    assert spec["nodes"][0] == {
        "name": "c1/n0",
        "flavor": "F",
        "gpus_per_node": 8,
        "zone": "z",
        "spine": "s",
        "leaf": "l0",
    }
    assert spec["quotas"] == {
        "A": {"F": {"quota": 8}},
        "A/A1": {"F": {"quota": 4}},
        "A/A1/pa1": {"F": {"quota": 4}},
        "A/pa": {"F": {"quota": 4}},
        "B": {"F": {"quota": 8}},
        "B/pb": {"F": {"quota": 8}},
    }
    assert spec["windows"] == [
        {
            "tenant": "B",
            "flavor": "F",
            "name": "night",
            "weekdays": list(range(7)),
            "start": "20:00:00",
            "end": "08:00:00",
            "quota": None,
            "lend_limit": 8,
        }
    ]
    assert spec["loans"] == [
        {
            "id": scene["loans"]["returned"].pk,
            "lender": "A/A1",
            "borrower": "B/pb",
            "flavor": "F",
            "amount": 2,
            "start_s": 3600.0,
            "end_s": 7200.0,
        }
    ]
    assert spec["origin"] == scene["start"].astimezone(timezone.get_default_timezone()).isoformat()
    # what the replay builds from it: the loan moves 2 from A/A1 to B/pb for [3600, 7200)
    w = spec_world(spec, {r["tenant"] for r in export.trace}, 86400)
    assert (w.limits[("A/A1", "F")].quota, w.limits[("B/pb", "F")].quota) == (4000, 8000)
    loan_on = dict(w.changes)[3600.0]
    assert (loan_on[("A/A1", "F")].quota, loan_on[("B/pb", "F")].quota) == (2000, 10000)


def test_a_node_not_ready_at_the_start_is_left_out(scene, world):
    from quotas.models import Node, NodeEvent

    node = Node.objects.get(name="n1")
    Node.objects.filter(pk=node.pk).update(state="ready")
    NodeEvent.objects.create(
        node=node,
        action="uncordon",
        from_state="cordoned",
        to_state="ready",
        reason="fixed",
        actor=world.users["platform"],
        at=scene["start"] + H,
    )
    export = history.history_export(start=scene["start"], end=scene["end"])
    assert "c1/n1" not in {n["name"] for n in export.cluster["nodes"]}
    assert export.manifest["nodes_not_ready"] == ["c1/n1"]


def test_an_explicit_past_range_leaves_later_jobs_out(scene):
    start, end = history.history_range(since=scene["start"], until=scene["start"] + 2 * H)
    export = history.history_export(start=start, end=end)
    trace, recorded = _rows(export)
    j = scene["jobs"]
    assert set(trace) == {str(j["plain"].pk), str(j["carried"].pk), str(j["requeued"].pk)}
    # the requeued job went back to the queue at the end (+2 h): only its first wait counts
    assert recorded[str(j["requeued"].pk)]["queue_delay_s"] == 0.0
    assert trace[str(j["requeued"].pk)]["duration"] == 3600.0  # its run inside the range


def test_files_are_what_replay_reads(scene, tmp_path):
    out = tmp_path / "hist"
    call_command(
        "export_history",
        "--since",
        scene["start"].isoformat(),
        "--until",
        scene["end"].isoformat(),
        "--out",
        str(out),
        stdout=io.StringIO(),
    )
    assert sorted(p.name for p in out.iterdir()) == sorted(history.FILES)
    jobs = read_trace(out / "trace.csv")
    assert len(jobs) == 8
    nodes, quotas = load_spec(out / "cluster.json")
    assert sum(n.gpus for n in nodes) == 24 and quotas["B/pb"] == {"F": 8000}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["jobs"] == 8 and manifest["loans"] == 1 and manifest["windows"] == 1
    with open(out / "recorded.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == 8


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({}, "weeks"),
        ({"weeks": 0}, "weeks"),
        ({"weeks": 14}, "weeks"),  # 98 days > 92
        ({"weeks": 1, "since": "S"}, "weeks"),
        ({"since": "S", "until": "S-1h"}, "until"),
        ({"since": "S-100d"}, "since"),
        ({"since": "naive"}, "since"),
        ({"since": "S+1d"}, "since"),
    ],
)
def test_bad_ranges_are_refused_naming_the_field(kwargs, field):
    now = timezone.now()
    values = {
        "S": now - timedelta(days=1),
        "S-1h": now - timedelta(days=1, hours=1),
        "S-100d": now - timedelta(days=100),
        "naive": (now - timedelta(days=1)).replace(tzinfo=None),
        "S+1d": now + timedelta(days=1),
    }
    kw = {k: values.get(v, v) if isinstance(v, str) else v for k, v in kwargs.items()}
    with pytest.raises(ValidationError) as err:
        history.history_range(now=now, **kw)
    assert field in err.value.message_dict


def test_command_refuses_a_bad_range(tmp_path):
    with pytest.raises(CommandError, match="--weeks"):
        call_command("export_history", "--weeks", "0", "--out", str(tmp_path))
    with translation.override("en"), pytest.raises(CommandError, match="--since: Give an ISO date-time"):
        call_command("export_history", "--since", "yesterday", "--out", str(tmp_path))
    assert list(tmp_path.iterdir()) == []

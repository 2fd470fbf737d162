"""scripts/gpupool_cli.py end to end against a live portal: token, submit, list, status (with the
queue position and why pending), cancel, and a month's cost — every answer checked against the
database or the billing service's own numbers."""

from __future__ import annotations

import json
import sys
from datetime import date
from decimal import Decimal

import pytest

from billing.meter import usage_meter
from billing.services import statement_close_month
from jobs.models import Job
from quotas.models import Node
from tests.billing.conftest import History, local, rates

pytestmark = pytest.mark.django_db(transaction=True)


def run(cli, capsys, url, *argv, token=None):
    """Run the CLI in-process (it still talks HTTP to the live server); return (code, out, err)."""
    args = ["--url", url, *(["--token", token] if token else []), *argv]
    try:
        code = cli.main(args)
    except SystemExit as exc:  # argparse and the CLI's own refusals
        code = exc.code if isinstance(exc.code, int) else 1
        print(exc.code if isinstance(exc.code, str) else "", file=sys.stderr)
    out, err = capsys.readouterr()
    return code, out, err


def token_for(cli, capsys, url, username):
    code, out, _ = run(cli, capsys, url, "token", "-u", username, "-p", f"pw-{username}")
    assert code == 0
    return out.strip()


def test_token_submit_list_status_cancel(portal, cli, capsys):
    world, url = portal
    code, out, err = run(cli, capsys, url, "token", "-u", "pa1_member", "-p", "wrong")
    assert code == 1 and ("401" in err or "403" in err)  # the portal's refusal, printed
    key = token_for(cli, capsys, url, "pa1_member")
    assert key.startswith("gpp_")  # a personal API token (docs/identity.md "API tokens")

    code, out, _ = run(
        cli,
        capsys,
        url,
        "--json",
        "submit",
        "--project",
        "pa1",
        "--flavor",
        "F",
        "--gpus",
        "2",
        "--priority",
        "training",
        "--image",
        "img:1",
        "--name",
        "cli-job",
        "--command",
        "python train.py",
        "--max-runtime",
        "3600",
        token=key,
    )
    assert code == 0
    submitted = json.loads(out)
    job = Job.objects.get(pk=submitted["id"])
    assert (job.name, job.project, job.gpus_per_worker, job.submitted_by.username) == (
        "cli-job",
        world.pa1,
        2,
        "pa1_member",
    )
    assert job.state == submitted["state"] == "queued"

    code, out, _ = run(cli, capsys, url, "jobs", "--project", "pa1", token=key)
    assert code == 0
    assert out.splitlines()[0].split() == [
        "id",
        "name",
        "project",
        "kind",
        "flavor",
        "gpus",
        "state",
        "submitted",
    ]
    assert out.splitlines()[1].split()[:7] == [str(job.pk), "cli-job", "pa1", "training", "F", "2", "queued"]

    code, out, _ = run(cli, capsys, url, "--json", "status", str(job.pk), token=key)
    assert code == 0
    answer = json.loads(out)
    assert answer["job"]["id"] == job.pk and answer["job"]["state"] == "queued"
    assert {"position", "reason"} <= set(answer["explain"])
    code, text, _ = run(cli, capsys, url, "status", str(job.pk), token=key)
    assert f"position {answer['explain']['position']} · why pending: {answer['explain']['reason']}" in text

    code, out, _ = run(cli, capsys, url, "cancel", str(job.pk), token=key)
    assert code == 0 and out.strip() == f"job {job.pk} cli-job: cancelled"
    job.refresh_from_db()
    assert job.state == "cancelled"

    # Another tenant's job is not even there (404), and nothing changes.
    other = token_for(cli, capsys, url, "pb_member")
    code, _, err = run(cli, capsys, url, "cancel", str(job.pk), token=other)
    assert code == 1 and "404" in err


def test_submit_from_a_json_file_with_flags_overriding(portal, cli, capsys, tmp_path):
    _, url = portal
    key = token_for(cli, capsys, url, "pa1_member")
    spec = tmp_path / "job.json"
    spec.write_text(
        json.dumps(
            {
                "name": "from-file",
                "project": "pa1",
                "flavor": "F",
                "priority": "training",
                "image": "img:2",
                "gpus_per_worker": 1,
                "sim_duration_seconds": 60,
            }
        )
    )
    code, out, _ = run(cli, capsys, url, "--json", "submit", "-f", str(spec), "--gpus", "3", token=key)
    assert code == 0
    job = Job.objects.get(pk=json.loads(out)["id"])
    assert (job.name, job.gpus_per_worker, job.sim_duration_seconds, job.image) == (
        "from-file",
        3,
        60,
        "img:2",
    )

    spec.write_text(
        json.dumps(
            {"name": "x", "project": "pa1", "flavor": "F", "priority": "training", "image": "i", "gpus": 1}
        )
    )
    code, _, err = run(cli, capsys, url, "submit", "-f", str(spec), token=key)
    assert code == 1 and "unknown field(s)" in err and "gpus" in err
    code, _, err = run(
        cli,
        capsys,
        url,
        "submit",
        "--name",
        "bad",
        "--project",
        "pa1",
        "--flavor",
        "F",
        "--priority",
        "training",
        "--image",
        "i",
        "--gpu-milli",
        "500",
        token=key,
    )
    assert code == 1 and "gpu_milli" in err  # the portal's 400 names the field: F is not shareable
    assert Job.objects.filter(name="bad").count() == 0


def test_cost_of_an_open_month_then_of_the_closed_month(portal, cli, capsys):
    world, url = portal
    rates(world.F, "12", "9.6")
    history = History(world)
    # pa1 (in A1) ran 2 GPUs for 90 minutes in October: 3 card-hours × 12.00 = 36.00.
    ran = history.run(world.pa1, world.F, local(2026, 10, 5, 10), local(2026, 10, 5, 11, 30), gpus=2)
    history.run(world.pb, world.F, local(2026, 10, 5, 10), local(2026, 10, 5, 11))  # B: not A's
    usage_meter(now=local(2026, 10, 6))

    finance = token_for(cli, capsys, url, "a_finance")
    # status counts the job's card-hours from its events the way the meter does: 3 card-hours.
    code, out, _ = run(cli, capsys, url, "status", str(ran.pk), token=finance)
    assert "card-hours so far 3.000000 (standard 3.000000;" in out
    code, out, _ = run(cli, capsys, url, "cost", "--month", "2026-10", "--project", "pa1", token=finance)
    assert code == 0, out
    rows = out.splitlines()
    assert rows[1].split() == [
        "2026-10",
        "A1",
        "pa1",
        "pa1_member",  # the username, as closed statements show it
        "F",
        "standard",
        "3.000000",
        "36.00",
    ]
    assert rows[-1] == "total 36.00 (estimate, metered through 2026-10-05T23:00:00+08:00)"

    code, out, _ = run(cli, capsys, url, "--json", "cost", "--month", "2026-10", token=finance)
    assert json.loads(out)["total"] == "36.00"  # a_finance sees A and A1, not B

    statement_close_month(month=date(2026, 10, 1), now=local(2026, 11, 2))
    code, out, _ = run(cli, capsys, url, "cost", "--month", "2026-10", "--department", "A1", token=finance)
    assert code == 0
    assert out.splitlines()[1].split() == [
        "2026-10",
        "A1",
        "pa1",
        "pa1_member",
        "F",
        "standard",
        "3.000000",
        "36.00",
    ]
    assert out.splitlines()[-1] == "total 36.00 (closed statements)"
    assert Decimal("36.00") == sum(line.amount for line in world.A1.statements.get().lines.all())

    member = token_for(cli, capsys, url, "pa1_member")
    code, _, err = run(cli, capsys, url, "cost", "--month", "2026-10", token=member)
    assert code == 1 and "your roles see no costs" in err


def test_usage_table_and_json_against_the_live_portal(portal, cli, capsys):
    """``usage`` prints the explorer's rows (what GET /api/v1/usage/ answers) as a table; a member
    sees card-hours of their own project and no money; bad input is the portal's 400."""
    world, url = portal
    rates(world.F, "12", "9.6")
    history = History(world)
    history.run(world.pa1, world.F, local(2026, 10, 5, 10), local(2026, 10, 5, 11, 30), gpus=2)
    history.run(world.pb, world.F, local(2026, 10, 5, 10), local(2026, 10, 5, 11))
    usage_meter(now=local(2026, 10, 6))

    finance = token_for(cli, capsys, url, "a_finance")
    code, out, _ = run(cli, capsys, url, "usage", "--start", "2026-10-01", "--end", "2026-11-01",
                       "--group-by", "department,project", token=finance)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].split() == ["department", "project", "card_hours", "normalised", "cost", "util_%", "jobs",
                                "wait_avg_min", "wait_p95_min"]
    assert lines[1].split()[:6] == ["Dept", "A1", "(A1)", "pa1", "3.000000", "3.000000"]
    assert lines[1].split()[6] == "36.00"
    assert lines[2].split()[:3] == ["total", "3.000000", "3.000000"]  # B's hour is not A's to see
    assert lines[-1] == "2026-10-01 to 2026-11-01 (exclusive), cost in CNY"

    code, out, _ = run(cli, capsys, url, "--json", "usage", "--start", "2026-10-01", "--end", "2026-11-01",
                       token=finance)
    answer = json.loads(out)
    assert answer["group_by"] == ["project"]
    assert [(r["labels"]["project"], r["card_hours"], r["cost"]) for r in answer["rows"]] == [
        ("pa1", "3.000000", "36.00")]

    member = token_for(cli, capsys, url, "pb_member")
    code, out, _ = run(cli, capsys, url, "--json", "usage", "--start", "2026-10-01", "--end", "2026-11-01",
                       "--group-by", "user", token=member)
    answer = json.loads(out)
    assert [(r["labels"]["user"], r["card_hours"], r["cost"]) for r in answer["rows"]] == [
        ("pa1_member", "1.000000", None)]  # History submits as pa1_member; pb's hour, no money

    code, _, err = run(cli, capsys, url, "usage", "--start", "2026-13-01", token=finance)
    assert code == 1 and "400" in err and "start" in err


def test_submit_asks_cpu_memory_disk_and_cuda_and_a_bad_figure_is_the_portals_400(portal, cli, capsys):
    """Issue 33: the request's flags reach the job; one beyond every node is refused, naming the limit."""
    world, url = portal
    Node.objects.filter(flavor=world.F).update(
        cpu_millicores=96_000, memory_mib=786_432, local_disk_gib=3_500
    )
    key = token_for(cli, capsys, url, "pa1_member")
    base = ["submit", "--name", "req", "--project", "pa1", "--flavor", "F", "--priority", "training",
            "--image", "img:1", "--gpus", "2"]
    code, out, _ = run(cli, capsys, url, "--json", *base, "--cpu-millicores", "30000", "--memory-mib",
                       "200000", "--local-disk-gib", "100", "--min-cuda-version", "12.4", token=key)
    assert code == 0
    job = Job.objects.get(pk=json.loads(out)["id"])
    assert (job.cpu_millicores, job.memory_mib, job.local_disk_gib, job.min_cuda_version) == (
        30_000, 200_000, 100, "12.4")
    code, _, err = run(cli, capsys, url, *base, "--memory-mib", "786433", token=key)
    assert code == 1 and "memory_mib" in err and "768 GiB" in err
    assert Job.objects.count() == 1

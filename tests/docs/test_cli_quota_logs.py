"""scripts/gpupool_cli.py ``quota`` and ``logs`` (issue 24 item 9) against a live portal: the quota
tree with borrowed / lent per flavor (table and --json) within the user's scope, and a job's log
whole, its end, and followed until the job ends — compared with the simulator's log file."""

from __future__ import annotations

import json
import re

import pytest

from jobs.scheduling.cycle import schedule_once
from tests import factories as fx
from tests import job_runs
from tests.docs.conftest import ClusterDriver
from tests.docs.test_cli import run, token_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def borrowing(portal):
    """pa (quota 4) runs 4 in quota and 2 on loan, from its sibling A1's idle quota."""
    world, _ = portal
    fx.submit(world.pa, world.F, gpus=4, name="pa-in")
    schedule_once()
    fx.submit(world.pa, world.F, gpus=2, name="pa-loan")
    schedule_once()
    return world


def test_quota_prints_the_tree_with_borrowed_and_lent(portal, borrowing, cli, capsys):
    _, url = portal
    key = token_for(cli, capsys, url, "a_admin")
    code, out, _ = run(cli, capsys, url, "quota", "--flavor", "F", token=key)
    assert code == 0
    assert out.splitlines()[0].split() == ["flavor", "node", "kind", "quota", "used", "in_quota", "on_loan",
                                           "borrowed", "lent"]
    cells = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()[1:-1]]
    lines = {c[1]: c[2:] for c in cells}
    # kind quota used in_quota on_loan borrowed lent [over quota]
    assert lines["Project a (pa)"] == ["project", "4", "6", "4", "2", "2", "0", "over quota"]
    assert lines["Dept A1 (A1)"] == ["department", "4", "0", "0", "0", "0", "2"]
    assert lines["Dept A (A)"] == ["department", "8", "6", "4", "2", "0", "0"]
    assert "Dept B" not in out  # another department's tree is not the admin's

    code, out, _ = run(cli, capsys, url, "--json", "quota", token=key)  # every flavor with quota
    answer = json.loads(out)
    assert [f["flavor"] for f in answer["flavors"]] == ["F"]
    pa = next(n for n in answer["flavors"][0]["nodes"] if n["owner"] == "Project a (pa)")
    assert (pa["borrowed_from_outside"], pa["lent_to_outside"], pa["over_quota"]) == ("2.000", "0.000", True)

    code, _, err = run(cli, capsys, url, "quota", "--flavor", "NOPE", token=key)
    assert code == 1 and "Unknown flavor" in err


def test_logs_whole_tail_json_and_refusals(portal, cli, capsys, fast_simserver):
    world, url = portal
    job = job_runs.run(world, fast_simserver, sim_seconds=10_000, until={"succeeded"})
    whole = job_runs.log_file(fast_simserver, job).read_bytes()
    key = token_for(cli, capsys, url, "pa1_member")
    code, out, _ = run(cli, capsys, url, "logs", str(job.pk), token=key)
    assert code == 0 and out.encode() == whole

    code, out, _ = run(cli, capsys, url, "logs", str(job.pk), "--tail-bytes", "300", token=key)
    assert code == 0 and 0 < len(out.encode()) <= 300 and whole.endswith(out.encode())

    code, out, _ = run(cli, capsys, url, "--json", "logs", str(job.pk), "--tail-bytes", "300", token=key)
    body = json.loads(out)
    assert body["size"] == len(whole) and body["truncated"] is True and whole.endswith(body["text"].encode())

    code, _, err = run(cli, capsys, url, "logs", str(job.pk), "--tail-bytes", "0", token=key)
    assert code == 1 and "400" in err and "tail_bytes" in err  # the portal's refusal, in its language
    other = token_for(cli, capsys, url, "pb_member")
    code, out, err = run(cli, capsys, url, "logs", str(job.pk), token=other)
    assert code == 1 and "404" in err and out == ""

    waiting = job_runs.submit(world, name="waiting")
    code, _, err = run(cli, capsys, url, "logs", str(waiting.pk), token=key)
    assert code == 1 and "404" in err  # no log yet: the portal says why


def test_logs_follow_prints_the_whole_log_once_until_the_job_ends(portal, cli, capsys, fast_simserver):
    world, url = portal
    job = job_runs.run(world, fast_simserver, sim_seconds=20_000)  # running: the log grows
    key = token_for(cli, capsys, url, "pa1_member")
    with ClusterDriver(job_runs.cluster_on(fast_simserver)):  # syncs it to succeeded meanwhile
        code, out, _ = run(cli, capsys, url, "logs", str(job.pk), "--follow", "--interval", "0.2",
                           "--tail-bytes", "1048576", token=key)
    job.refresh_from_db()
    assert code == 0 and job.state == "succeeded"
    assert out.encode() == job_runs.log_file(fast_simserver, job).read_bytes()

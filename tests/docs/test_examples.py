"""docs/examples/ run as a user would run them — a subprocess against a live portal — while the
scheduling cycle, dispatch and status sync drive a real simulated cluster: submit → the job runs
and succeeds → the cost answer. The curl script runs when curl is installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from billing.meter import usage_meter
from billing.models import UsageRecord
from jobs.models import Job

from .conftest import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


def example_env(url: str) -> dict[str, str]:
    return {
        **os.environ,
        "GPUPOOL_URL": url,
        "GPUPOOL_USERNAME": "a_admin",  # a department admin: may submit to pa1 and sees A1's costs
        "GPUPOOL_PASSWORD": "pw-a_admin",
        "GPUPOOL_PROJECT": "pa1",
        "GPUPOOL_FLAVOR": "F",
        "GPUPOOL_POLL": "0.2",
        "GPUPOOL_WAIT": "40",
        "GPUPOOL_SIM_DURATION": "50",  # 0.5 s at the test simulator's speed
    }


def run_example(command: list[str], url: str, driver) -> subprocess.CompletedProcess:
    with driver:
        return subprocess.run(command, env=example_env(url), capture_output=True, text=True, timeout=60)


def test_the_python_example_submits_polls_until_done_and_reads_the_cost(portal, sim_cluster):
    world, url = portal
    done = run_example([sys.executable, str(ROOT / "docs/examples/submit_and_cost.py")], url, sim_cluster)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    job = Job.objects.get(pk=result["job"])
    assert (job.name, job.project, job.submitted_by.username) == ("example-finetune", world.pa1, "a_admin")
    assert result["state"] == job.state == "succeeded"
    assert result["started_at"] and result["finished_at"]
    assert list(
        job.events.filter(kind="transition").values_list("to_state", flat=True).order_by("occurred_at", "id")
    ) == ["queued", "admitted", "running", "succeeded"]
    # The example's card-hours are the meter's: meter past the job's end and compare with the ledger.
    usage_meter(now=job.finished_at + timedelta(hours=2))
    metered = UsageRecord.objects.filter(job=job).aggregate(total=Sum("card_seconds"))["total"]
    assert metered > 0
    assert Decimal(result["job_card_hours"]) == (metered / 3600).quantize(Decimal("0.000001"))
    assert result["cost_visible"] is True  # the estimate answered; nothing metered in this hour yet
    assert "running" in done.stderr  # the poll loop printed the states it saw


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_curl_example_does_the_same(portal, sim_cluster):
    world, url = portal
    done = run_example(["sh", str(ROOT / "docs/examples/submit_and_cost.sh")], url, sim_cluster)
    assert done.returncode == 0, done.stderr
    job = Job.objects.get(name="example-curl")
    assert job.state == "succeeded" and job.project == world.pa1
    assert f"job {job.pk}: succeeded" in done.stdout
    assert "metered through" in done.stdout  # a department admin sees the estimate


def test_the_python_example_as_a_member_says_the_cost_is_not_visible(portal):
    _, url = portal
    env = {
        **example_env(url),
        "GPUPOOL_USERNAME": "pa1_member",
        "GPUPOOL_PASSWORD": "pw-pa1_member",
        "GPUPOOL_WAIT": "0",
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs/examples/submit_and_cost.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["cost_visible"] is False and result["state"] == "queued"
    assert Job.objects.get(pk=result["job"]).submitted_by.username == "pa1_member"

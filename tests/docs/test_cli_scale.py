"""scripts/gpupool_cli.py ``scale`` and ``autoscale`` against a live portal with a running
inference service on the simulated cluster: table and --json answers checked against the
database, the portal's refusals printed with exit status 1."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest

from jobs.clusters import dispatch
from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from jobs.services import job_submit
from tests import factories as fx
from tests.docs.test_cli import run, token_for
from tests.waiting import settle

pytestmark = pytest.mark.django_db(transaction=True)


def _rows(out: str) -> dict[str, str]:
    """The CLI's two-column table as {key: value} (columns are 2+ spaces apart)."""
    lines = out.splitlines()[1:]
    return dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in lines)


def _running_service(world, owner, cluster):
    svc = job_submit(
        actor=owner, project=world.pa1, name="svc", kind="inference", flavor=world.F,
        priority_class=fx.priority("training", 100), image="vllm:0.6", workers=3, min_workers=1,
        gpus_per_worker=1, sim_duration_seconds=10**6,
    )
    schedule_once()
    assert dispatch.dispatch_job(svc.pk) == "dispatched"
    return settle(cluster.cluster, svc, {"running"})


def test_scale_and_autoscale_from_the_cli(portal, cli, capsys, sim_cluster):
    world, url = portal
    key = token_for(cli, capsys, url, "pa1_member")
    svc = _running_service(world, world.users["pa1_member"], sim_cluster)
    assert len(svc.placement) == 3

    code, out, err = run(cli, capsys, url, "scale", str(svc.pk), "1", token=key)
    assert code == 0, err
    svc.refresh_from_db()
    assert (len(svc.placement), svc.target_workers) == (1, 1)
    header, row = out.splitlines()
    assert header.split() == ["ID", "STATE", "REPLICAS", "TARGET", "MIN", "MAX"]
    assert row.split() == [str(svc.pk), "running", "1", "1", "1", "3"]

    code, out, err = run(cli, capsys, url, "--json", "scale", str(svc.pk), "2", token=key)
    assert code == 0 and json.loads(out)["target_workers"] == 2  # up: a target for the grow pass
    code, out, err = run(cli, capsys, url, "scale", str(svc.pk), "9", token=key)
    assert code == 1 and "400" in err and "replicas" in err

    code, out, err = run(cli, capsys, url, "autoscale", str(svc.pk), token=key)
    assert code == 0, err
    assert _rows(out)["autoscaling"] == "off"
    assert _rows(out)["replicas"] == "1 (target 2, min 1, max 3)"

    query = 'avg(gpupool_sim_requests_per_second{hpc_job="{job}"})'
    code, out, err = run(
        cli, capsys, url, "--json", "autoscale", str(svc.pk), "--query", query, "--target", "12.5", token=key
    )
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["enabled"], shown["target"], shown["cooldown_seconds"]) == (True, "12.500", 300)
    assert shown["filled_query"] == f'avg(gpupool_sim_requests_per_second{{hpc_job="gp-{svc.pk}"}})'
    svc.refresh_from_db()
    assert (svc.autoscale_query, svc.autoscale_target) == (query, Decimal("12.5"))

    code, out, err = run(cli, capsys, url, "autoscale", str(svc.pk), "--cooldown", "60", token=key)
    assert code == 0, err
    assert Job.objects.get(pk=svc.pk).autoscale_cooldown_seconds == 60  # the rest kept
    rows = _rows(out)
    assert (rows["autoscaling"], rows["cool-down"], rows["target per replica"]) == ("on", "60 s", "12.500")
    assert rows["query"] == f'avg(gpupool_sim_requests_per_second{{hpc_job="gp-{svc.pk}"}})'
    assert rows["last change"] == "-" and "why" not in rows  # no decision yet

    code, out, err = run(cli, capsys, url, "autoscale", str(svc.pk), "--target", "0", token=key)
    assert code == 1 and "400" in err and "autoscale_target" in err
    assert Job.objects.get(pk=svc.pk).autoscale_target == Decimal("12.5")  # unchanged

    training = job_submit(
        actor=world.users["pa1_member"], project=world.pa1, name="train", kind="training", flavor=world.F,
        priority_class=fx.priority("training", 100), image="img:1", workers=2, min_workers=1,
    )
    code, out, err = run(
        cli, capsys, url, "autoscale", str(training.pk), "--query", query, "--target", "1", token=key
    )
    assert code == 1 and "400" in err and "autoscale_query" in err  # only inference jobs

    code, out, err = run(cli, capsys, url, "autoscale", str(svc.pk), "--off", token=key)
    assert code == 0 and _rows(out)["autoscaling"] == "off"
    assert Job.objects.get(pk=svc.pk).autoscale_query == ""


def test_submit_an_inference_service_with_autoscaling(portal, cli, capsys, tmp_path):
    _world, url = portal
    key = token_for(cli, capsys, url, "pa1_member")
    query = 'avg(rps{job="{job}"})'
    base = ["submit", "--project", "pa1", "--flavor", "F", "--priority", "training", "--image", "vllm:0.6",
            "--kind", "inference", "--workers", "4", "--min-workers", "1", "--gpus", "1"]
    code, out, err = run(
        cli, capsys, url, "--json", *base, "--name", "svc", "--autoscale-query", query,
        "--autoscale-target", "10", "--autoscale-cooldown", "120", token=key,
    )
    assert code == 0, err
    job = Job.objects.get(pk=json.loads(out)["id"])
    assert (job.autoscale_query, job.autoscale_target, job.autoscale_cooldown_seconds) == (
        query, Decimal(10), 120
    )
    # From a file, a flag laid over the file's autoscale; the portal's refusal names the field.
    spec = tmp_path / "svc.json"
    spec.write_text(json.dumps({"autoscale": {"query": query, "target": "5"}}))
    code, out, err = run(
        cli, capsys, url, *base, "--name", "svc-2", "-f", str(spec), "--autoscale-target", "0", token=key
    )
    assert code == 1 and "400" in err and "autoscale" in err and "target" in err
    assert not Job.objects.filter(name="svc-2").exists()
    code, out, err = run(cli, capsys, url, "--json", *base, "--name", "svc-3", "-f", str(spec), token=key)
    assert code == 0, err
    assert Job.objects.get(name="svc-3").autoscale_target == Decimal(5)

"""``gpupool approvals`` against a live portal (issue 24 item 9): list my pending steps, show one
with its context, approve with a comment, and the portal's refusals — checked against the
database."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from jobs.approvals import approval_policy_set
from jobs.models import Job
from portal.models import ApprovalRequest
from tests.approval_scene import job_request, make_scene

from .test_cli import run, token_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def req(portal):
    world, _ = portal
    make_scene(world, timezone.now())
    approval_policy_set(actor=world.users["platform"], department=world.A, max_gpus=2)
    return job_request(world)


def test_list_show_and_approve_with_a_comment(portal, cli, capsys, req):
    _, url = portal
    key = token_for(cli, capsys, url, "a_admin")

    code, out, _ = run(cli, capsys, url, "approvals", "list", token=key)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["id", "kind", "requester", "project", "deadline", "summary"]
    assert lines[1].split()[:4] == [str(req.pk), "job", "pa1_member", "pa1"]
    assert lines[-1] == "(1 of 1 waiting for you)"

    code, out, _ = run(cli, capsys, url, "--json", "approvals", "list", token=key)
    assert code == 0 and [a["id"] for a in json.loads(out)["results"]] == [req.pk]

    code, out, _ = run(cli, capsys, url, "approvals", "show", str(req.pk), token=key)
    assert code == 0
    assert f"request {req.pk} job: " in out and "state: pending" in out
    assert "you may decide it" in out
    assert "F of Project a1 (pa1): quota 4.000 (effective 4.000) · in quota 2 · borrowed 1" in out
    assert "requester's own jobs there: in quota 2 · borrowed 0" in out
    assert "F free now: 10 of 16 healthy (6 held)" in out
    assert "estimated cost: 10.00 " in out and "(4.000 card-hours, up to its maximum runtime)" in out
    assert "budget Project a1 (project)" in out and "of 100.00 card-hours left" in out
    assert "budget Dept A1 (department)" in out and "992.00 of 1000.00 card-hours and 480.00 of 500.00" in out
    assert "requester's last 90 days: 1 approved, 1 rejected, 2 jobs run, 1 flagged idle" in out

    code, out, _ = run(cli, capsys, url, "--json", "approvals", "show", str(req.pk), token=key)
    assert code == 0 and json.loads(out)["context"]["capacity"]["free"] == "10"

    code, out, _ = run(
        cli, capsys, url, "approvals", "approve", str(req.pk), "-m", "fits the budget", token=key
    )
    assert code == 0 and out.strip() == f"request {req.pk}: approved"
    req.refresh_from_db()
    step = req.steps.get()
    assert (req.state, step.decided_by.username, step.comment) == ("approved", "a_admin", "fits the budget")
    assert Job.objects.get(pk=req.subject_id).state != "pending_approval"

    code, out, _ = run(cli, capsys, url, "approvals", "list", token=key)
    assert code == 0 and out.splitlines()[-1] == "(0 of 0 waiting for you)"


def test_the_requester_cannot_decide_and_others_do_not_see_it(portal, cli, capsys, req):
    _, url = portal
    own = token_for(cli, capsys, url, "pa1_member")
    code, out, _ = run(cli, capsys, url, "approvals", "show", str(req.pk), token=own)
    assert code == 0 and "context: not shown to you" in out
    code, _, err = run(cli, capsys, url, "approvals", "reject", str(req.pk), "-m", "no", token=own)
    assert code == 1 and "403" in err
    other = token_for(cli, capsys, url, "b_admin")
    code, _, err = run(cli, capsys, url, "approvals", "approve", str(req.pk), token=other)
    assert code == 1 and "404" in err
    assert ApprovalRequest.objects.get(pk=req.pk).state == "pending"


def test_reject_with_a_comment(portal, cli, capsys, req):
    _, url = portal
    key = token_for(cli, capsys, url, "a_admin")
    code, out, _ = run(
        cli, capsys, url, "--json", "approvals", "reject", str(req.pk), "-m", "too big", token=key
    )
    assert code == 0 and json.loads(out)["state"] == "rejected"
    assert ApprovalRequest.objects.get(pk=req.pk).steps.get().comment == "too big"

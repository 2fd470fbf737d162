"""The idle policy on PostgreSQL (DESIGN §16, docs/scheduling.md "Idle policy"): an idle dev job is
warned, then stopped, both on its page; a training job becomes preemptible (the scheduler's snapshot
sees it); an exempted job is left alone; a gap in the metrics is not idleness; passes repeat safely."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import translation
from django.utils.dateparse import parse_datetime

from jobs.clusters import dispatch
from jobs.clusters.backends import base
from jobs.idle_service import as_policy, policies, run_idle_policy
from jobs.models import IdleExemption, IdlePolicy, Job, JobEvent, JobGpuSample
from jobs.scheduling.config import read_config
from jobs.scheduling.cycle import schedule_once
from jobs.scheduling.snapshot import build_snapshot
from jobs.states import JobState
from jobs.tasks import idle_policy
from jobs.transitions import job_transition
from portal.models import ApprovalKind, ApprovalRequest, Notification
from tests import factories as fx
from tests.clock import set_clock

pytestmark = pytest.mark.django_db

T, GRACE = 120, 60  # the centre's defaults (the migration's row)


def _running(proj, f, *, kind, name, gpus=None, at):
    gpus = gpus or (1 if kind == "dev" else 2)  # a dev job has one card
    job = fx.submit(proj, f, gpus=gpus, name=name, kind=kind)
    schedule_once()
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    Job.objects.filter(pk=job.pk).update(dispatched_at=at, backend_id=f"gp-{job.pk}")
    job.refresh_from_db()
    assert job_transition(job, JobState.RUNNING, reason="started")
    job.refresh_from_db()
    return job


def _samples(job, start, minutes, *, busiest=1.0, mean=0.5, skip=()):
    gpus = sum(len(w) for w in job.placement)
    JobGpuSample.objects.bulk_create(
        JobGpuSample(job=job, minute=(start + timedelta(minutes=m)).replace(second=0, microsecond=0),
                     gpu_util_pct=mean, gpu_util_max_pct=busiest, fb_used_mib=10.0, gpus=gpus)
        for m in range(minutes) if m not in skip
    )


@pytest.fixture
def pool(monkeypatch, pinned_now):
    f, proj = fx.single_project_pool(node_count=2, gpus=8)
    return f, proj, pinned_now


def _events(job, kind):
    return list(JobEvent.objects.filter(job=job, kind=kind))


def test_the_centre_policy_has_its_defaults_with_or_without_its_row():
    """The migration makes the centre's row with the model's defaults; a database flushed since (a
    transactional test before this one) has none, and the policy then reads the same defaults."""
    row = IdlePolicy.objects.filter(priority_class=None).first() or IdlePolicy()
    assert (row.threshold_pct, row.idle_minutes, row.grace_minutes) == (5, T, GRACE)
    assert (row.dev_action, row.training_action, row.inference_action) == ("stop", "preemptible", "warn")
    IdlePolicy.objects.filter(priority_class=None).delete()
    rules = policies()
    assert rules.centre == as_policy(IdlePolicy()) and rules.by_class == {} and rules.by_project == {}


def test_an_idle_dev_job_is_warned_then_stopped_and_both_show_on_its_page(pool, monkeypatch):
    f, proj, now = pool
    job = _running(proj, f, kind="dev", name="notebook", at=now)
    _samples(job, now, T + GRACE + 1)

    set_clock(monkeypatch, now + timedelta(minutes=T - 2))
    assert run_idle_policy()["warn"] == 0  # T - 1 idle minutes: not idle long enough yet

    warned_at = set_clock(monkeypatch, now + timedelta(minutes=T - 1))  # samples of minutes 0 … T - 1
    assert run_idle_policy()["warn"] == 1
    job.refresh_from_db()
    assert job.idle_warned_at == warned_at and job.state == JobState.RUNNING
    [warning] = _events(job, "idle_warned")
    assert warning.reason == "warned by the idle policy: GPU utilisation under 5% for 2 h"
    note = Notification.objects.get(recipient=job.submitted_by)
    assert "1 h" in note.text and f"#{job.pk}" in note.text

    set_clock(monkeypatch, now + timedelta(minutes=T + GRACE - 2))
    assert run_idle_policy() == {"warn": 0, "clear": 0, "stop": 0, "preemptible": 0}  # grace not over

    set_clock(monkeypatch, now + timedelta(minutes=T + GRACE - 1))
    assert run_idle_policy()["stop"] == 1
    job.refresh_from_db()
    assert job.cancel_requested_at is not None and job.idle_acted_at is not None
    [stopped] = _events(job, "idle_stopped")
    assert stopped.reason == "stopped by the idle policy: GPU utilisation under 5% for 3 h"
    [request] = _events(job, "cancel_requested")
    assert request.reason == stopped.reason  # through the job's own cancel path, with the reason
    assert run_idle_policy() == {"warn": 0, "clear": 0, "stop": 0, "preemptible": 0}  # once
    # The backend confirms: the state machine ends it cancelled, with the policy's reason.
    dispatch._finish(job, base.JobStatus(name=f"gp-{job.pk}", phase=base.CANCELLED))
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert job.events.filter(to_state=JobState.CANCELLED).get().reason == stopped.reason
    assert Notification.objects.filter(recipient=job.submitted_by).count() == 2

    client = Client()
    client.force_login(job.submitted_by)
    with translation.override("en"):
        page = client.get(reverse("job-detail", args=[job.pk]), HTTP_ACCEPT_LANGUAGE="en")
    assert page.status_code == 200
    for text in ("Warned: GPUs idle", "Stopped by the idle policy", stopped.reason, warning.reason):
        assert text in page.content.decode(), text
    api = client.get(f"/api/v1/jobs/{job.pk}/events/").json()
    rows = api["results"] if isinstance(api, dict) else api
    assert {"idle_warned", "idle_stopped"} <= {e["kind"] for e in rows}


def test_an_idle_training_job_becomes_preemptible_and_the_snapshot_sees_it(pool, monkeypatch):
    f, proj, now = pool
    high = fx.priority("high", value=1000, preemptible=False)
    job = _running(proj, f, kind="training", name="train", at=now)
    Job.objects.filter(pk=job.pk).update(priority_class=high)
    _samples(job, now, T + GRACE + 1)
    at = set_clock(monkeypatch, now + timedelta(minutes=T + GRACE))
    [running] = build_snapshot(at, read_config(at)).running
    assert running.preemptible is False
    assert run_idle_policy(now + timedelta(minutes=T))["warn"] == 1
    assert run_idle_policy(at)["preemptible"] == 1
    assert run_idle_policy(at)["preemptible"] == 0
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.idle_preemptible_at == at
    [event] = _events(job, "idle_preemptible")
    assert event.reason.startswith("made preemptible by the idle policy: GPU utilisation under 5%")
    [running] = build_snapshot(at, read_config(at)).running
    assert running.preemptible is True
    client = Client()
    client.force_login(job.submitted_by)
    page = client.get(reverse("job-detail", args=[job.pk]), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "made so by the idle policy" in page and "Made preemptible by the idle policy" in page
    shown = client.get(f"/api/v1/jobs/{job.pk}/").json()  # the job's API object says when
    assert parse_datetime(shown["idle_warned_at"]) == job.idle_warned_at == now + timedelta(minutes=T)
    assert parse_datetime(shown["idle_preemptible_at"]) == at
    [listed] = client.get("/api/v1/jobs/", {"state": "running"}).json()["results"]  # the list's rows too
    assert parse_datetime(listed["idle_preemptible_at"]) == at


def test_an_exempted_job_is_left_alone_until_its_exemption_ends(pool, monkeypatch):
    f, proj, now = pool
    job = _running(proj, f, kind="dev", name="kept", at=now)
    _samples(job, now, 6 * 60)
    owner = job.submitted_by
    client = Client()
    client.force_login(owner)
    dept_admin = _department_admin(proj)  # the step goes to them (platform admins when there is none)
    until = now + timedelta(hours=4)
    body = {"kind": "idle_exemption", "job": job.pk, "until": until.isoformat(), "reason": "a demo at 3 pm"}
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(owner)
    assert api.post("/api/v1/approvals/", {**body, "until": (now - timedelta(hours=1)).isoformat()},
                     format="json").status_code == 400
    assert api.post("/api/v1/approvals/", {**body, "job": 10**9}, format="json").status_code == 400
    created = api.post("/api/v1/approvals/", body, format="json")
    assert created.status_code == 201, created.content
    request = ApprovalRequest.objects.get(kind=ApprovalKind.IDLE_EXEMPTION)
    assert request.subject_id == job.pk and not IdleExemption.objects.exists()  # not before approval
    from portal.approvals import approval_decide

    approval_decide(step_or_request=request, actor=dept_admin, approve=True)
    assert IdleExemption.objects.get(job=job).ends_at == until

    for minutes in (T, T + GRACE, 3 * 60 + 59):
        assert run_idle_policy(now + timedelta(minutes=minutes))["warn"] == 0
    job.refresh_from_db()
    assert job.idle_warned_at is None and job.state == JobState.RUNNING
    assert run_idle_policy(now + timedelta(hours=4, minutes=1))["warn"] == 1  # the exemption ended


def _department_admin(proj):
    from portal.models import Membership, Role, User

    user = User.objects.create(username="dept-admin")
    Membership.objects.create(user=user, role=Role.DEPARTMENT_ADMIN, department=proj.department)
    return user


def test_a_gap_in_the_metrics_is_not_idleness(pool):
    f, proj, now = pool
    job = _running(proj, f, kind="dev", name="gappy", at=now)
    _samples(job, now, T + 10, skip={T - 30})  # one minute missing 40 minutes ago
    assert run_idle_policy(now + timedelta(minutes=T + 9))["warn"] == 0
    assert run_idle_policy(now + timedelta(minutes=T - 31))["warn"] == 0  # too short before it too


def test_one_busy_card_keeps_a_job_from_being_idle_whatever_the_mean(pool):
    f, proj, now = pool
    job = _running(proj, f, kind="training", name="one-busy", gpus=8, at=now)
    _samples(job, now, T + 1, busiest=40.0, mean=5.0 / 8 * 4)  # mean 2.5 %, one card at 40 %
    assert run_idle_policy(now + timedelta(minutes=T))["warn"] == 0
    other = _running(proj, f, kind="training", name="series-missing", gpus=8, at=now)
    JobGpuSample.objects.bulk_create(  # idle, but only 7 of its 8 cards reported
        JobGpuSample(job=other, minute=now + timedelta(minutes=m), gpu_util_pct=0.0, gpu_util_max_pct=0.0,
                     fb_used_mib=0.0, gpus=7)
        for m in range(T + 1)
    )
    assert run_idle_policy(now + timedelta(minutes=T))["warn"] == 0


def test_a_warned_job_that_works_again_is_cleared_and_never_stopped(pool):
    f, proj, now = pool
    job = _running(proj, f, kind="dev", name="woke-up", at=now)
    _samples(job, now, T + 1)
    assert run_idle_policy(now + timedelta(minutes=T))["warn"] == 1
    _samples(job, now + timedelta(minutes=T + 1), 1, busiest=90.0, mean=90.0)
    _samples(job, now + timedelta(minutes=T + 2), GRACE + 5)
    assert run_idle_policy(now + timedelta(minutes=T + 1))["clear"] == 1
    assert run_idle_policy(now + timedelta(minutes=T + GRACE + 5))["stop"] == 0
    job.refresh_from_db()
    assert job.idle_warned_at is None and job.cancel_requested_at is None


def test_the_beat_task_twice_warns_and_acts_once(pool, monkeypatch):
    f, proj, now = pool
    job = _running(proj, f, kind="dev", name="twice", at=now)
    _samples(job, now, T + GRACE + 1)
    set_clock(monkeypatch, now + timedelta(minutes=T))
    idle_policy()
    idle_policy()
    set_clock(monkeypatch, now + timedelta(minutes=T + GRACE))
    idle_policy()
    idle_policy()
    assert len(_events(job, "idle_warned")) == 1
    assert len(_events(job, "idle_stopped")) == 1
    assert len(_events(job, "cancel_requested")) == 1
    assert Notification.objects.filter(recipient=job.submitted_by).count() == 2


def test_a_policy_for_a_priority_class_overrides_the_centre(pool):
    f, proj, now = pool
    serve = fx.priority("serve", value=500)
    job = _running(proj, f, kind="dev", name="in-serve", at=now)
    Job.objects.filter(pk=job.pk).update(priority_class=serve)
    IdlePolicy.objects.create(priority_class=serve, threshold_pct=5, idle_minutes=30, grace_minutes=0,
                              dev_action="warn")
    _samples(job, now, T + GRACE + 1)
    assert run_idle_policy(now + timedelta(minutes=30))["warn"] == 1
    assert run_idle_policy(now + timedelta(minutes=T + GRACE))["stop"] == 0  # warn only in its class


def test_admins_edit_the_policy_and_bad_values_change_nothing():
    admin_user = fx.platform_admin()
    client = Client()
    client.force_login(admin_user)
    row, _ = IdlePolicy.objects.get_or_create(priority_class=None)  # a flushed database has none
    url = reverse("admin:jobs_idlepolicy_change", args=[row.pk])
    form = {"threshold_pct": "10", "idle_minutes": "60", "grace_minutes": "30", "dev_action": "stop",
            "training_action": "preemptible", "inference_action": "warn", "priority_class": ""}
    for bad in ({"threshold_pct": "0"}, {"threshold_pct": "101"}, {"idle_minutes": "1"},
                {"grace_minutes": "-5"}, {"dev_action": "explode"}):
        page = client.post(url, {**form, **bad})
        assert page.status_code == 200 and page.context["adminform"].form.errors, bad
        row.refresh_from_db()
        assert (row.threshold_pct, row.idle_minutes, row.grace_minutes) == (5, T, GRACE)
    assert client.post(url, form).status_code == 302
    row.refresh_from_db()
    assert (row.threshold_pct, row.idle_minutes, row.grace_minutes) == (10, 60, 30)
    from portal.models import User

    client.force_login(User.objects.create(username="plain"))  # not a platform admin
    assert client.get(url).status_code in (302, 403)


def test_a_warm_engine_rebuilds_when_the_policy_makes_a_running_job_preemptible(pool, monkeypatch):
    from jobs.scheduling.warm import WarmEngine

    f, proj, now = pool
    high = fx.priority("high", value=1000, preemptible=False)
    job = _running(proj, f, kind="training", name="warm", at=now)
    Job.objects.filter(pk=job.pk).update(priority_class=high)
    _samples(job, now, T + GRACE + 1)
    warm = WarmEngine()
    warm.cycle(now + timedelta(minutes=T))
    warm.cycle(now + timedelta(minutes=T))
    assert warm.rebuilds == 1 and warm.engine.state.running[str(job.pk)].preemptible is False
    run_idle_policy(now + timedelta(minutes=T - 1))
    run_idle_policy(now + timedelta(minutes=T + GRACE))
    warm.cycle(now + timedelta(minutes=T + GRACE))
    assert warm.rebuilds == 2 and warm.engine.state.running[str(job.pk)].preemptible is True


def test_the_policy_s_events_read_in_chinese(pool):
    """Needs the catalogue made from scripts/fill_zh_hans.py (makemessages, fill, compilemessages)."""
    f, proj, now = pool
    job = _running(proj, f, kind="dev", name="zh", at=now)
    _samples(job, now, T + GRACE)
    run_idle_policy(now + timedelta(minutes=T - 1))
    run_idle_policy(now + timedelta(minutes=T + GRACE - 1))
    client = Client()
    client.force_login(job.submitted_by)
    with translation.override("zh-hans"):
        page = client.get(reverse("job-detail", args=[job.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans")
    page = page.content.decode()
    for text in ("已提醒：GPU 低利用率", "被低利用率策略停止",
                 "低利用率策略已提醒：GPU 利用率低于 5% 持续 2 h",
                 "被低利用率策略停止：GPU 利用率低于 5% 持续 3 h"):
        assert text in page, text


def test_the_job_page_asks_for_an_exemption_and_bad_input_changes_nothing(pool):
    f, proj, now = pool
    job = _running(proj, f, kind="dev", name="page-ask", at=now)
    client = Client()
    client.force_login(job.submitted_by)
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    url = reverse("job-idle-exemption", args=[job.pk])
    assert url in page
    for bad in ({"reason": ""}, {"reason": "x", "until": "not a date"},
                {"reason": "x", "until": (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")}):
        assert client.post(url, bad).status_code == 302
        assert not ApprovalRequest.objects.exists(), bad
    answer = client.post(url, {"reason": "a long evaluation", "until": ""})
    request = ApprovalRequest.objects.get(kind=ApprovalKind.IDLE_EXEMPTION, subject_id=job.pk)
    assert answer.status_code == 302 and answer.url == reverse("approval-detail", args=[request.pk])
    shown = client.get(answer.url)
    assert shown.status_code == 200 and "page-ask" in shown.content.decode()


def test_two_workers_with_the_same_read_warn_once_and_stop_once(pool):
    """Two passes that read the job before either wrote (the race of two workers): the second one's
    conditional update matches nothing, so it writes no event, no notification and no second stop."""
    from jobs import idle_service
    from jobs.idle_policy import Decision, Step

    f, proj, now = pool
    job = _running(proj, f, kind="dev", name="raced", at=now)
    policy = idle_service.policies().centre
    [read] = idle_service._running_jobs()
    assert idle_service._warn(read, policy, Decision(Step.WARN, T), now) is True
    assert idle_service._warn(read, policy, Decision(Step.WARN, T), now) is False
    [read] = idle_service._running_jobs()  # both read it warned
    later = now + timedelta(minutes=T + GRACE)
    assert idle_service._stop(read, policy, Decision(Step.STOP, T + GRACE), later) is True
    assert idle_service._stop(read, policy, Decision(Step.STOP, T + GRACE), later) is False
    assert idle_service._preemptible(read, policy, Decision(Step.PREEMPTIBLE, T + GRACE), later) is False
    assert [len(_events(job, k)) for k in ("idle_warned", "idle_stopped", "cancel_requested")] == [1, 1, 1]
    assert Notification.objects.filter(recipient=job.submitted_by).count() == 2


def test_a_projects_override_replaces_its_class_and_the_centre_for_its_jobs_only(pool, monkeypatch):
    """The job's class has an override (stop after T); its project's own (warn only, after 30 min)
    wins for its jobs; a job of another project keeps the class's."""
    f, proj, now = pool
    other = fx.project("other-idle", proj.department)
    fx.quota(f, other, 8)
    mine = _running(proj, f, kind="dev", name="mine", at=now)
    theirs = _running(other, f, kind="dev", name="theirs", at=now)
    IdlePolicy.objects.create(priority_class=mine.priority_class, idle_minutes=T, grace_minutes=GRACE,
                              dev_action="stop")
    IdlePolicy.objects.create(project=proj, idle_minutes=30, grace_minutes=GRACE, dev_action="warn")
    for job in (mine, theirs):
        _samples(job, now, T + GRACE + 1)
    assert run_idle_policy(now + timedelta(minutes=29))["warn"] == 1  # 30 idle minutes: mine only
    mine.refresh_from_db()
    assert mine.idle_warned_at == now + timedelta(minutes=29)
    assert [e.reason for e in _events(mine, "idle_warned")] == [
        "warned by the idle policy: GPU utilisation under 5% for 30 min"]
    later = now + timedelta(minutes=T + GRACE)
    assert run_idle_policy(now + timedelta(minutes=T - 1))["warn"] == 1  # theirs, at the class's T
    assert run_idle_policy(later) == {"warn": 0, "clear": 0, "stop": 1, "preemptible": 0}  # theirs
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.cancel_requested_at is None and mine.idle_acted_at is None  # warned only
    assert theirs.cancel_requested_at is not None

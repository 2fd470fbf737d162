"""Issue 36 item 2 on PostgreSQL: consolidation through the service cycle — the centre's hourly
budget read from SchedulerSettings, the moved jobs signalled with their reason (marked for the
budget), the gang admitted with the moves recorded, and explain saying "placed after moving 2 jobs"."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone, translation

from jobs.models import Job, JobEvent, RuleChangeEvent, SchedulerSettings
from jobs.rule_changes import ChangesRefused, rule_change_request_create
from jobs.scheduling.cycle import explain_job, schedule_once
from jobs.scheduling.explaining import explain_text
from jobs.scheduling.snapshot import build_snapshot
from portal.approvals import approval_decide
from portal.models import Membership, Role, User
from portal.texts import render_data
from quotas.models import Node, NodeState
from tests import factories as fx

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(settings):
    settings.LANGUAGE_CODE = "en"
    with translation.override("en"):
        yield


def _scattered(t0):
    """Three 8-GPU nodes, one 1-GPU checkpointing job of B on each (placed one node at a time),
    and A's 16-GPU gang queued: 21 GPUs free, no two whole nodes."""
    f = fx.flavor()
    nodes = fx.nodes(f, 3)
    a, b = fx.department("A"), fx.department("B")
    pa, pb = fx.project("pa", a), fx.project("pb", b)
    for owner in (a, b, pa, pb):
        fx.quota(f, owner, 16)
    small = []
    for k, node in enumerate(nodes):
        Node.objects.exclude(pk=node.pk).update(state=NodeState.CORDONED)
        Node.objects.filter(pk=node.pk).update(state=NodeState.READY)
        small.append(fx.submit(pb, f, gpus=1, name=f"b{k}", checkpointing=True))
        assert schedule_once(t0 + timedelta(seconds=k)).admitted == 1
    Node.objects.update(state=NodeState.READY)
    gang = fx.submit(pa, f, workers=2, gpus=8, name="gang")
    return gang, small


def _budget(moves: int) -> None:
    SchedulerSettings.objects.get_or_create(pk=1)
    SchedulerSettings.objects.filter(pk=1).update(consolidation_moves_per_hour=moves)


def test_the_gang_is_placed_after_moving_two_jobs_and_explain_says_so():
    _budget(4)
    t0 = timezone.now() - timedelta(hours=2)
    gang, small = _scattered(t0)
    now = t0 + timedelta(hours=1)
    report = schedule_once(now)
    assert report.admitted == 1 and report.preempted == 2
    signals = JobEvent.objects.filter(kind="preemption_signal").order_by("job_id")
    assert len(signals) == 2 and {s.job_id for s in signals} <= {j.pk for j in small}
    for s in signals:
        assert s.reason == f"moved for consolidation, to make room for job {gang.pk}"
        assert s.data["consolidate"] is True
    gang.refresh_from_db()
    assert gang.state == "admitted"
    admitted = JobEvent.objects.get(job=gang, kind="transition", to_state="admitted")
    assert sorted(admitted.data["moved"]) == sorted(s.job_id for s in signals)
    answer = explain_job(gang)
    assert answer["reason"] == "consolidated" and answer["numbers"] == {"moved": 2}
    assert explain_text(answer, None) == "Placed after moving 2 jobs out of its way (consolidation)."
    # The hourly budget counts them: a fresh snapshot sees both moves, and the policy.
    snap = build_snapshot(now + timedelta(minutes=1))
    assert snap.consolidation.max_moves_per_hour == 4 and len(snap.recent_moves) == 2
    assert build_snapshot(now + timedelta(hours=2)).recent_moves == ()


def test_no_budget_no_moves():
    _budget(0)
    t0 = timezone.now() - timedelta(hours=2)
    gang, small = _scattered(t0)
    report = schedule_once(t0 + timedelta(hours=1))
    assert report.admitted == 0 and report.preempted == 0
    assert explain_job(gang)["reason"] == "placement"
    states = Job.objects.filter(pk__in=[j.pk for j in small]).values_list("state", flat=True)
    assert set(states) == {"admitted"}


def _admins() -> tuple[User, User]:
    out = []
    for name in ("root-a", "root-b"):
        user = User.objects.create_user(username=name)
        Membership.objects.create(user=user, role=Role.PLATFORM_ADMIN)
        out.append(user)
    return out[0], out[1]


def test_the_budget_is_a_rule_change_and_the_next_configuration_sees_it():
    from jobs.scheduling.config import ConfigReader

    SchedulerSettings.objects.get_or_create(pk=1)
    asker, decider = _admins()
    reader = ConfigReader()
    now = timezone.now()
    assert reader.read(now).consolidation_moves_per_hour == 0
    for bad in (-1, 10_001, 2.5, "six", True):
        with pytest.raises(ChangesRefused):
            rule_change_request_create(actor=asker, changes=[
                {"type": "scheduler_consolidation", "consolidation_moves_per_hour": bad}])
    assert SchedulerSettings.objects.get().consolidation_moves_per_hour == 0  # nothing changed
    req = rule_change_request_create(actor=asker, changes=[
        {"type": "scheduler_consolidation", "consolidation_moves_per_hour": 6}])
    assert render_data(req.payload)["lines"] == ["Consolidation moves per hour: 0 → 6"]
    approval_decide(actor=decider, step_or_request=req, approve=True)
    assert SchedulerSettings.objects.get().consolidation_moves_per_hour == 6
    event = RuleChangeEvent.objects.get(type="scheduler_consolidation")
    assert event.old == {"consolidation_moves_per_hour": 0}
    assert reader.read(now).consolidation_moves_per_hour == 6

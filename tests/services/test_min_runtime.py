"""Issue 34 items 2 and 5 on PostgreSQL: a priority class's minimum runtime before preemption
(set and validated through the services and the edit page, read into the engine's snapshot, and
obeyed by the cycle with explain saying why), and checkpointing passed to the engine."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone, translation

from jobs.models import JobEvent, PriorityClass
from jobs.scheduling.cycle import explain_job, schedule_once
from jobs.scheduling.explaining import explain_text
from jobs.scheduling.snapshot import build_snapshot
from jobs.services import priority_class_create, priority_class_update
from tests import factories as fx

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(settings):
    settings.LANGUAGE_CODE = "en"
    with translation.override("en"):
        yield


def test_the_services_set_and_check_the_minimum_runtime():
    admin = fx.platform_admin()
    pc = priority_class_create(actor=admin, name="borrow", value=10, min_runtime_seconds=600)
    assert PriorityClass.objects.get(pk=pc.pk).min_runtime_seconds == 600
    for bad in (-1, 7 * 86400 + 1):
        with pytest.raises(ValidationError) as caught:
            priority_class_update(actor=admin, priority_class=pc, value=10, preemptible=True,
                                  grace_seconds=30, min_runtime_seconds=bad)
        assert "min_runtime_seconds" in caught.value.message_dict
        assert PriorityClass.objects.get(pk=pc.pk).min_runtime_seconds == 600  # nothing changed
    # An update that does not name it (an older caller) keeps it.
    priority_class_update(actor=admin, priority_class=pc, value=11, preemptible=True, grace_seconds=30)
    assert PriorityClass.objects.get(pk=pc.pk).min_runtime_seconds == 600


@pytest.mark.parametrize("value", ["-5", "604801", "soon"])
def test_the_edit_page_refuses_a_bad_minimum_runtime_with_a_form_error(client, value):
    pc = fx.priority()
    client.force_login(fx.platform_admin())
    form = {"name": pc.name, "value": "100", "preemptible": "on", "grace_seconds": "30",
            "min_runtime_seconds": value, "description": "", "min_role": "member"}
    response = client.post(reverse("priority-class-edit", args=[pc.pk]), form)
    assert response.status_code == 200
    assert "min_runtime_seconds" in response.context["form"].errors
    assert PriorityClass.objects.get(pk=pc.pk).min_runtime_seconds == 0
    form["min_runtime_seconds"] = "900"
    response = client.post(reverse("priority-class-edit", args=[pc.pk]), form)
    assert response.status_code == 302
    assert PriorityClass.objects.get(pk=pc.pk).min_runtime_seconds == 900


def test_a_young_borrower_is_not_reclaimed_until_its_minimum_runtime_and_explain_says_so():
    """C = 16; A and B own 8 each. B's second job runs on loan; A's job reclaims it only once it
    has run the class's minimum runtime (10 min)."""
    f = fx.flavor()
    fx.nodes(f, 2)
    a, b = fx.department("A"), fx.department("B")
    pa, pb = fx.project("pa", a), fx.project("pb", b)
    for owner in (a, b, pa, pb):
        fx.quota(f, owner, 8)
    prio = fx.priority()
    PriorityClass.objects.filter(pk=prio.pk).update(min_runtime_seconds=600)
    t0 = timezone.now()
    b1, b2 = fx.submit(pb, f, name="b1", checkpointing=True), fx.submit(pb, f, name="b2")
    assert schedule_once(t0).admitted == 2
    running = {r.id: r for r in build_snapshot(t0).running}
    assert running[str(b1.pk)].checkpointing and not running[str(b2.pk)].checkpointing
    assert {c.name: c.min_runtime_seconds for c in build_snapshot(t0).priority_classes}[prio.name] == 600
    b1.refresh_from_db(), b2.refresh_from_db()
    loaned = b1 if b1.on_loan else b2
    a1 = fx.submit(pa, f, name="a1")
    report = schedule_once(t0 + timedelta(seconds=60))
    assert report.admitted == 0 and report.preempted == 0
    answer = explain_job(a1)
    assert answer["reason"] == "min_runtime"
    assert answer["numbers"]["exempt_for_s"] == 540 and answer["numbers"]["min_runtime_s"] == 600
    assert [h["job"] for h in answer["holders"]] == [loaned.pk]
    assert explain_text(answer, None) == (
        "The jobs it may preempt have not yet run the minimum runtime of their priority class "
        "(10 minutes): the last of them it needs may be preempted in 9 minutes.")
    report = schedule_once(t0 + timedelta(seconds=601))
    assert report.admitted == 1 and report.preempted == 1
    assert JobEvent.objects.get(job=loaned, kind="preemption_signal").reason == f"reclaim for job {a1.pk}"


def test_a_higher_priority_borrower_takes_a_lower_priority_borrowers_gpus():
    """One 8-GPU node lent by idle A; E (best effort, no quota) borrows it; B's inference job
    (no quota either) takes it back for itself: borrowing within the cohort, lower priority."""
    f = fx.flavor()
    fx.nodes(f, 1)
    a, b, e = fx.department("A"), fx.department("B"), fx.department("E")
    pa, pb, pe = fx.project("pa", a), fx.project("pb", b), fx.project("pe", e)
    fx.quota(f, a, 8), fx.quota(f, pa, 8)
    for owner in (b, e, pb, pe):
        fx.quota(f, owner, 0)
    low, high = fx.priority("best-effort", 0), fx.priority("inference-online", 1000)
    e1 = fx.submit(pe, f, name="e1", prio=low)
    assert schedule_once().admitted == 1
    b1 = fx.submit(pb, f, name="b1", prio=high)
    report = schedule_once()
    assert report.admitted == 1 and report.preempted == 1
    b1.refresh_from_db()
    assert b1.state == "admitted" and b1.on_loan
    signal = JobEvent.objects.get(job=e1, kind="preemption_signal")
    assert signal.reason == f"borrowed capacity for job {b1.pk} of a higher priority"

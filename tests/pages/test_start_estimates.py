"""Estimated starts (issue 24) through the service: the beat task's forecast of the real queue,
cached once, shown on the queue page, the job page, the API (job detail and explain) and the
submission form's live feedback."""

from datetime import datetime, timedelta

import pytest
from django.utils import timezone, translation

from jobs import tasks
from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from jobs.scheduling.start_estimates import cached_start_estimates, start_estimates_refresh
from jobs.services import job_submit
from tests.start_estimate_scene import submit_training, two_running_two_waiting

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue(world, prio):
    """16 GPUs: two 8-GPU jobs with a 1 h limit run from ``now``, two wait for them."""
    now, waiting, _admitted = two_running_two_waiting(world, prio)
    return now, waiting


def test_waiting_jobs_start_when_the_running_jobs_limits_are_up(queue):
    now, waiting = queue
    found = cached_start_estimates(waiting)
    assert [found[j.pk].estimated_start for j in waiting] == [now + timedelta(hours=1)] * 2
    assert all(found[j.pk].unknown_reason is None and found[j.pk].computed_at == now for j in waiting)


def test_the_queue_page_and_the_job_page_show_the_estimate(page_client, queue):
    now, waiting = queue
    shown = timezone.localtime(now + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M")
    page = page_client("pb_member").get("/jobs/queue/")
    rows = {r["job"].pk: r for r in page.context["rows"]}
    assert rows[waiting[0].pk]["start"].estimated_start == now + timedelta(hours=1)
    html = page.content.decode()
    assert "Estimated start" in html and html.count(shown) == 2
    detail = page_client("pb_member").get(f"/jobs/{waiting[1].pk}/").content.decode()
    assert "Estimated start" in detail and shown in detail and "maximum runtime" in detail
    zh = page_client("pb_member", "zh-hans").get(f"/jobs/{waiting[1].pk}/").content.decode()
    assert "预计开始时间" in zh and shown in zh


def test_the_api_gives_the_estimate_in_explain_keeping_its_keys(api, world, queue):
    now, waiting = queue
    client = api(world.users["pb_member"])
    explain = client.get(f"/api/v1/jobs/{waiting[0].pk}/explain/").json()
    assert {"position", "reason", "message", "computed_at"} <= set(explain)  # unchanged keys
    assert explain["start_estimate"] == {
        "estimated_start": (now + timedelta(hours=1)).isoformat(), "unknown_reason": None,
        "unknown_text": "", "computed_at": now.isoformat(),
    }
    assert api(world.users["pa1_member"]).get(f"/api/v1/jobs/{waiting[0].pk}/explain/").status_code == 404


def test_unknown_says_why(api, world, prio, queue):
    _now, waiting = queue
    Job.objects.filter(pk=waiting[0].pk).update(state="pending_approval")
    (late,) = submit_training(world, prio, 1)  # submitted after the forecast
    found = cached_start_estimates([Job.objects.get(pk=waiting[0].pk), late])
    assert (found[waiting[0].pk].estimated_start, found[waiting[0].pk].unknown_reason) == (None, "approval")
    assert found[late.pk].unknown_reason == "not_computed"
    answer = api(world.users["pb_member"]).get(f"/api/v1/jobs/{late.pk}/explain/",
                                               HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert answer.json()["start_estimate"]["unknown_reason"] == "not_computed"
    assert answer.json()["start_estimate"]["unknown_text"] == "尚未估算"
    # A blocker without a limit: the next forecast cannot say.
    Job.objects.filter(state="admitted").update(max_runtime_seconds=None)
    tasks.estimate_starts()  # the beat task: no arguments, runs again safely
    tasks.estimate_starts()
    found = cached_start_estimates([late])
    assert (found[late.pk].estimated_start, found[late.pk].unknown_reason) == (None, "unlimited")


def test_the_form_estimates_the_job_before_it_is_submitted(page_client, world, prio, queue):
    now, _waiting = queue
    body = {"name": "new", "project": world.pa1.pk, "kind": "training", "flavor": world.F.pk,
            "priority_class": prio.pk, "workers": "1", "gpus_per_worker": "4", "min_workers": "",
            "gpu_milli": "", "image": "img", "command": "", "max_runtime_seconds": "600"}
    response = page_client("pa1_member").post("/jobs/new/validate/", body, HTTP_HX_REQUEST="true")
    start = response.context["summary"]["start"]
    # All 16 GPUs are taken, but one of pb's running jobs is on loan and pa1's job is within
    # pa1's quota: the engine reclaims the loan (rule 5), and the job starts once the victim's
    # grace period is over — not an hour later.
    assert start.estimated_start == start.computed_at + timedelta(seconds=prio.grace_seconds)
    assert start.computed_at >= now
    assert "Estimated start if submitted now" in response.content.decode()
    assert Job.objects.filter(name="new").count() == 0  # nothing was submitted
    with translation.override("zh-hans"):
        zh = page_client("pa1_member", "zh-hans").post("/jobs/new/validate/", body, HTTP_HX_REQUEST="true")
    assert "如果现在提交" in zh.content.decode()


def test_a_victim_of_the_forecast_is_requeued_and_waits_ahead_of_later_jobs(world, prio, queue):
    from jobs.scheduler.forecast import forecast
    from jobs.scheduling.snapshot import build_forecast_input

    now, waiting = queue  # pb runs two 8-GPU jobs (one on loan) for 1 h; two more wait for them
    running = list(Job.objects.filter(state="admitted").order_by("pk"))
    urgent = job_submit(actor=world.users["pa1_member"], project=world.pa1, name="urgent", kind="training",
                        flavor=world.F, priority_class=prio, image="img", gpus_per_worker=4,
                        max_runtime_seconds=600)
    snapshot, requeue = build_forecast_input(now)
    assert set(requeue) == {str(j.pk) for j in running}
    again = requeue[str(running[0].pk)]  # as the service would queue it again: nothing changed
    assert (again.workers, again.gpus_per_worker, again.max_runtime_seconds, again.submitted_at) == (
        1, 8, 3600, running[0].submitted_at
    )
    found = forecast(snapshot, requeue=requeue)
    # pa1's job reclaims the GPUs of pb's job on loan; that job exits after its grace period,
    # is requeued with its submission time and starts again when pa1's job ends — so the
    # later of pb's waiting jobs starts only after its hour, not in its place.
    grace, hour = timedelta(seconds=prio.grace_seconds), timedelta(hours=1)
    assert found.starts[str(urgent.pk)] == now + grace
    (victim,) = found.restarts
    assert victim in {str(j.pk) for j in running}
    assert found.restarts[victim] == now + grace + timedelta(seconds=600)
    assert found.starts[str(waiting[0].pk)] == now + hour
    assert found.starts[str(waiting[1].pk)] == now + grace + timedelta(seconds=600) + hour
    assert start_estimates_refresh(now) == 3  # what pages and the API read
    cached = cached_start_estimates(waiting)
    assert cached[waiting[1].pk].estimated_start == found.starts[str(waiting[1].pk)]


def test_the_forms_live_estimates_share_one_snapshot_for_a_while(
    page_client, world, prio, queue, monkeypatch
):
    from django.core.cache import cache

    from jobs.scheduling import start_estimates

    built = []
    real = start_estimates.build_forecast_input

    def counted(now):
        built.append(now)
        return real(now)

    monkeypatch.setattr(start_estimates, "build_forecast_input", counted)
    body = {"name": "new", "project": world.pa1.pk, "kind": "training", "flavor": world.F.pk,
            "priority_class": prio.pk, "workers": "1", "gpus_per_worker": "4", "min_workers": "",
            "gpu_milli": "", "image": "img", "command": "", "max_runtime_seconds": "600"}
    client = page_client("pa1_member")
    grace = timedelta(seconds=prio.grace_seconds)
    answers = []
    for runtime in ("600", "900"):  # the user goes on typing: one more live check
        response = client.post("/jobs/new/validate/", {**body, "max_runtime_seconds": runtime},
                               HTTP_HX_REQUEST="true")
        answers.append(response.context["summary"]["start"])
    assert len(built) == 1  # the second check reused the first one's snapshot
    assert answers[1].computed_at >= answers[0].computed_at  # shifted to the request's time
    assert [a.estimated_start - a.computed_at for a in answers] == [grace, grace]
    # Once its key is gone (it expires after FORM_SNAPSHOT_SECONDS), the next check reads afresh.
    cache.delete(start_estimates._FORM_SNAPSHOT_KEY)
    client.post("/jobs/new/validate/", body, HTTP_HX_REQUEST="true")
    assert len(built) == 2


def test_item7_a_reserved_job_shows_its_reservation_as_its_start_until_the_forecast_runs(
    page_client, api, world, prio
):
    """Right after the cycle, before the beat's forecast: the head waiting job holds a reservation
    ("earliest start …"); the page's "Estimated start" says that time, not "unknown"."""
    jobs = submit_training(world, prio, 4)
    now = timezone.now().replace(microsecond=0)
    schedule_once(now)  # two admitted for 1 h
    schedule_once(now)  # the head of the two waiting gets a reservation for when they end
    head = Job.objects.filter(pk__in=[j.pk for j in jobs], state="queued").order_by("pk").first()
    assert cached_start_estimates([head])[head.pk].unknown_reason == "not_computed"  # no forecast yet
    page = page_client("pb_member").get(f"/jobs/{head.pk}/")
    assert page.context["explain"]["reservation"]["job"] == head.pk
    reserved_at = page.context["explain"]["reservation"]["earliest_start"]
    shown = timezone.localtime(reserved_at).strftime("%Y-%m-%d %H:%M")
    html = page.content.decode()
    estimate = html[html.index('class="start-estimate"'):]
    estimate = estimate[: estimate.index("</article>")]
    assert "unknown" not in estimate and shown in estimate, estimate
    assert "GPUs are reserved for this job" in html
    # The explain API gives the same start beside the same reservation.
    answer = api(world.users["pb_member"]).get(f"/api/v1/jobs/{head.pk}/explain/").json()
    assert answer["start_estimate"]["unknown_reason"] is None
    assert datetime.fromisoformat(answer["start_estimate"]["estimated_start"]) == reserved_at
    # Once the forecast has a time of its own, that one is shown.
    assert start_estimates_refresh(now) == 2
    assert page_client("pb_member").get(f"/jobs/{head.pk}/").context["start"].reserved is False

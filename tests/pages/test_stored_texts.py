"""Texts stored for later readers — approval summaries and reasons, notifications, job event
reasons — are stored as data and shown in each reader's language (issue 18, item 13); node
states, admin names and the OpenAPI schema are translated (or, the schema, English) too."""

import re
from decimal import Decimal

import pytest
from django.core import mail
from django.urls import reverse
from django.utils import translation

from jobs.approvals import approval_reasons
from jobs.models import ApprovalPolicy, JobEvent
from jobs.scheduling.cycle import schedule_once
from portal.approvals import approval_decide
from portal.models import ApprovalRequest, Notification, User
from portal.notifications import mail_pending
from portal.texts import render_in
from quotas.approvals import quota_request_create
from tests import factories as fx

pytestmark = pytest.mark.django_db

HAN = re.compile(r"[\u4e00-\u9fff]")


def _main(response) -> str:
    """The page's content without the header (user names of the demo are bilingual)."""
    return response.content.decode().split("<main", 1)[1].split("</main>", 1)[0]


@pytest.fixture
def chinese_request(world, settings):
    """A quota request made by a member whose browser speaks Chinese, on a Chinese site."""
    settings.LANGUAGE_CODE = "zh-hans"
    User.objects.filter(username="a_admin").update(email="a@example.org")
    with translation.override("zh-hans"):
        return quota_request_create(
            actor=world.users["pa1_member"], flavor=world.F, project=world.pa1, quota=Decimal(3)
        )


def test_item13_an_approval_summary_is_shown_in_each_readers_language(
    page_client, api, world, chinese_request
):
    english = "Quota of Project a1 (pa1) for F: 4 → 3"
    req = chinese_request
    assert req.summary_message["msgid"] == "Quota of %(owner)s for %(flavor)s: %(old)s → %(new)s"
    assert HAN.search(req.summary)  # the site-language text is kept next to the data
    inbox = _main(page_client("a_admin").get("/approvals/?tab=all"))
    assert english in inbox and not HAN.search(inbox)
    detail = _main(page_client("a_admin").get(f"/approvals/{req.pk}/"))
    assert english in detail and not HAN.search(detail)
    assert req.summary in page_client("a_admin", "zh-hans").get(f"/approvals/{req.pk}/").content.decode()
    client = api(world.users["a_admin"])  # Accept-Language: en
    assert client.get(reverse("api:approval-detail", args=[req.pk])).json()["summary"] == english
    chinese = client.get(reverse("api:approval-detail", args=[req.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert chinese.json()["summary"] == req.summary


def test_item13_notifications_follow_the_reader_and_mails_the_site_language(
    page_client, api, world, chinese_request
):
    [note] = Notification.objects.filter(recipient=world.users["a_admin"])
    assert note.message["msgid"] == "%(requester)s asks for your approval: %(summary)s"
    english = "pa1_member asks for your approval: Quota of Project a1 (pa1) for F: 4 → 3"
    listed = api(world.users["a_admin"]).get(reverse("api:notification-list")).json()["results"]
    assert [n["text"] for n in listed] == [english]
    page = _main(page_client("a_admin").get("/notifications/"))
    assert english in page and not HAN.search(page)
    assert note.text in page_client("a_admin", "zh-hans").get("/notifications/").content.decode()
    # Users have no language of their own: the mail is in the site language, whoever is active.
    with translation.override("en"):
        assert mail_pending() == 1
    [sent] = mail.outbox
    assert HAN.search(sent.subject) and sent.body.startswith(render_in("zh-hans", note.message))
    # The decision reaches the requester in the reader's language too, with the comment as written.
    with translation.override("zh-hans"):
        approval_decide(actor=world.users["a_admin"], step_or_request=chinese_request, approve=False,
                        comment="太多了")
    outcome = api(world.users["pa1_member"]).get(reverse("api:notification-list")).json()["results"][0]
    assert outcome["text"] == "Rejected: Quota of Project a1 (pa1) for F: 4 → 3 — 太多了"


def test_item13_a_jobs_approval_reasons_are_rendered_per_reader(page_client, api, world, prio, settings):
    settings.LANGUAGE_CODE = "zh-hans"
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    with translation.override("zh-hans"):
        job = fx.submit(world.pa1, world.F, gpus=4, name="big", prio=prio)
    req = ApprovalRequest.objects.get(subject_id=job.pk)
    english = "4 GPUs is more than the 2 a job may use in Dept A without approval."
    assert render_in("en", req.payload["reasons"][0]) == english
    assert english in _main(page_client("a_admin").get(f"/approvals/{req.pk}/"))
    assert english in _main(page_client("pa1_member").get(f"/jobs/{job.pk}/"))
    payload = api(world.users["a_admin"]).get(reverse("api:approval-detail", args=[req.pk])).json()["payload"]
    assert payload["reasons"] == [english]
    chinese = render_in("zh-hans", approval_reasons(world.pa1, "training", world.F, 1, 4, None, 3600)[0])
    assert HAN.search(chinese) and chinese in page_client("a_admin", "zh-hans").get(
        f"/approvals/{req.pk}/"
    ).content.decode()


def test_item13_rows_written_before_keep_their_text(page_client, world, chinese_request):
    ApprovalRequest.objects.filter(pk=chinese_request.pk).update(summary="旧的摘要", summary_message=None)
    Notification.objects.filter(recipient=world.users["a_admin"]).update(text="旧的通知", message=None)
    assert "旧的摘要" in page_client("a_admin").get("/approvals/?tab=all").content.decode()
    assert "旧的通知" in page_client("a_admin").get("/notifications/").content.decode()


def test_item13_job_event_reasons_are_translated_and_stay_english_for_programs(page_client, api, world, prio):
    job = fx.submit(world.pa1, world.F, gpus=4, name="first", prio=prio)
    schedule_once()
    # A second project's in-quota job reclaims what pa1 borrowed beyond its quota of 4 cards.
    borrower = fx.submit(world.pa1, world.F, gpus=8, name="borrower", prio=prio)
    schedule_once()
    claimer = fx.submit(world.pb, world.F, gpus=8, name="claimer", prio=prio)
    schedule_once()
    signal = JobEvent.objects.get(job=borrower, kind="preemption_signal")
    assert signal.reason == f"reclaim for job {claimer.pk}"  # what programs read, unchanged
    assert signal.reason_message["params"] == {"job": claimer.pk}
    with translation.override("zh-hans"):
        assert signal.reason_text == f"被任务 #{claimer.pk} 回收"
        assert JobEvent.objects.get(job=job, to_state="queued").reason_text == "已提交"
        assert JobEvent.objects.get(job=job, to_state="admitted").reason_text == "调度器已准入"
    chinese = _main(page_client("pa1_member", "zh-hans").get(f"/jobs/{borrower.pk}/"))
    assert "已提交" in chinese and "调度器已准入" in chinese and f"被任务 #{claimer.pk} 回收" in chinese
    assert "已发出抢占信号" in chinese  # the event's kind
    assert "admitted by the scheduler" not in chinese and "reclaim for job" not in chinese
    english = _main(page_client("pa1_member").get(f"/jobs/{borrower.pk}/"))
    assert "admitted by the scheduler" in english and f"reclaim for job {claimer.pk}" in english
    events = api(world.users["pa1_member"]).get(
        reverse("api:job-events", args=[borrower.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans"
    ).json()
    by_kind = {e["kind"]: e for e in events}
    assert by_kind["preemption_signal"]["reason"] == f"reclaim for job {claimer.pk}"
    assert by_kind["preemption_signal"]["reason_text"] == f"被任务 #{claimer.pk} 回收"


def test_item13_node_states_admin_names_and_the_api_schema(page_client, world):
    world.F.nodes.filter(name="n1").update(state="cordoned")
    inventory = _main(page_client("pa1_member", "zh-hans").get("/inventory/"))
    assert "就绪" in inventory and "已隔离" in inventory
    assert ">ready<" not in inventory and ">cordoned<" not in inventory
    admin = page_client("platform", "zh-hans").get("/admin/").content.decode()
    for name in ("任务事件", "用量记录", "月结"):
        assert name in admin
    for english in ("Job events", "Usage records", "Month closes"):
        assert english not in admin
    schema = page_client("platform", "zh-hans").get("/api/schema/?format=json")
    assert schema.status_code == 200 and schema["Content-Language"] == "en"
    assert not HAN.search(schema.content.decode("utf-8"))  # titles and descriptions alike

"""Closing a month from the Statements page (issue 32 item 9): who may, the preview and the
confirm, the close in the background (the Celery task's body, run here as the worker runs it),
its progress and failure on the page that started it, and that asking again changes nothing."""

from __future__ import annotations

import re
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from billing.closing import month_close_execute, month_to_close
from billing.forms import this_month
from billing.meter import usage_meter
from billing.models import MonthClose, MonthCloseRun, Rate, Statement
from portal.models import Membership, Role, User

from .conftest import local, rates

pytestmark = pytest.mark.django_db
NOV = date(2026, 11, 1)


@pytest.fixture
def november(world, history):
    """November 2026: pa (A) 8 GPUs 2 h, pa1 (A1) 4 GPUs 1 h, pb (B) 8 GPUs 3 h, in quota, at
    12.00 per card-hour (on loan 9.60): A 192.00, A1 48.00, B 288.00. Metered as the beat meters
    (up to 1 December), which the preview reads; the close meters again, up to now."""
    rates(world.F, "12", "9.6")
    for project, day, hours, gpus in ((world.pa, 3, 2, 8), (world.pa1, 3, 1, 4), (world.pb, 5, 3, 8)):
        begin = local(2026, 11, day, 10)
        history.run(project, world.F, begin, begin + timedelta(hours=hours), gpus=gpus)
    usage_meter(now=local(2026, 12, 1, 1))


@pytest.fixture
def centre_finance(world) -> User:
    """Finance of both top-level departments: its statements cover the whole centre."""
    user = User.objects.create_user(username="finance_all", password="pw-finance_all")
    for department in (world.A, world.B):
        Membership.objects.create(user=user, role=Role.FINANCE, department=department)
    return user


def _client(user, language="en") -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(user)
    return client


def _text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def test_item9_finance_of_the_whole_centre_closes_a_month_from_the_page(
    world, november, centre_finance, django_capture_on_commit_callbacks
):
    client = _client(centre_finance)
    statements = _text(client.get("/billing/statements/"))
    assert "2026-11 has ended and is not closed." in statements
    assert 'href="/billing/close/?month=2026-11"' in statements
    preview = client.get("/billing/close/", {"month": "2026-11"})
    assert preview.status_code == 200
    rows = {row["estimate"].department.code: row["estimate"].total for row in preview.context["estimates"]}
    assert rows == {"A": Decimal("192.00"), "A1": Decimal("48.00"), "B": Decimal("288.00")}
    html = _text(preview)
    assert "528.00 CNY" in html and 'data-confirm="Close 2026-11 for every department?' in html
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        asked = client.post("/billing/close/", {"month": "2026-11", "confirm": "2026-11"})
    assert asked.status_code == 302 and asked["Location"] == "/billing/close/?month=2026-11"
    run = MonthCloseRun.objects.get()
    assert (run.state, run.requested_by, run.month, len(callbacks)) == ("queued", centre_finance, NOV, 1)
    assert not MonthClose.objects.exists()  # nothing closes in the request
    waiting = _text(client.get("/billing/close/", {"month": "2026-11"}))
    assert "Waiting for a worker…" in waiting and f'hx-get="/billing/close/runs/{run.pk}/"' in waiting
    assert month_close_execute(run.pk) == "done"  # the task's body, as the worker runs it
    progress = _text(client.get(f"/billing/close/runs/{run.pk}/"))
    assert "2026-11 is closed: 3 statements, 3 lines, 528.00 CNY in total." in progress
    assert 'hx-trigger="every 2s"' not in progress  # done: the page stops asking
    closed = {s.department.code: (s.state, s.total) for s in Statement.objects.select_related("department")}
    assert closed == {"A": ("closed", Decimal("192.00")), "A1": ("closed", Decimal("48.00")),
                      "B": ("closed", Decimal("288.00"))}
    assert MonthClose.objects.get().closed_by == centre_finance
    assert "2026-11 has ended and is not closed." not in _text(client.get("/billing/statements/"))


@pytest.mark.parametrize(
    ("persona", "may"),
    [("platform", True), ("a_finance", False), ("b_finance", False), ("a_admin", False),
     ("auditor", False), ("pa1_member", False)],
)
def test_item9_only_platform_admins_and_finance_of_the_whole_centre_may_close(world, november, persona, may):
    client = _client(world.users[persona])
    assert client.get("/billing/close/", {"month": "2026-11"}).status_code == (200 if may else 404)
    assert ("Review and close 2026-11" in _text(client.get("/billing/statements/"))) == may
    response = client.post("/billing/close/", {"month": "2026-11", "confirm": "2026-11"})
    assert response.status_code == (302 if may else 404)
    assert MonthCloseRun.objects.exists() == may and not MonthClose.objects.exists()


def test_item9_asking_again_and_running_again_change_nothing(world, november, centre_finance):
    client = _client(centre_finance)
    body = {"month": "2026-11", "confirm": "2026-11"}
    client.post("/billing/close/", body)
    client.post("/billing/close/", body)  # a second click while it waits: the same run
    run = MonthCloseRun.objects.get()
    assert month_close_execute(run.pk) == "done"
    assert month_close_execute(run.pk) == "skipped"  # the task delivered twice
    refused = client.post("/billing/close/", body)
    assert refused.status_code == 400 and "2026-11 is already closed." in _text(refused)
    assert MonthCloseRun.objects.count() == 1 and MonthClose.objects.count() == 1
    assert Statement.objects.count() == 3
    assert month_to_close() is None  # nothing left to offer


def test_item9_a_failed_close_says_why_on_the_page_and_can_be_asked_again(world, november, centre_finance):
    Rate.objects.filter(tier="standard").delete()
    client = _client(centre_finance, "zh-hans")
    preview = _text(client.get("/billing/close/", {"month": "2026-11"}))
    assert "部分用量没有单价" in preview  # the preview warns: the close will refuse
    client.post("/billing/close/", {"month": "2026-11", "confirm": "2026-11"})
    run = MonthCloseRun.objects.get()
    assert month_close_execute(run.pk) == "failed"
    run.refresh_from_db()
    assert run.language == "zh-hans" and run.error.startswith("以下各项没有适用的单价")  # the asker's words
    page = _text(client.get("/billing/close/", {"month": "2026-11"}))
    # It names the missing rates at the hour of the usage, in the site's zone as every page.
    assert "2026-11 未结账。" in page and "F/standard @ 2026-11-03 10:00" in page
    assert not MonthClose.objects.exists() and not Statement.objects.filter(state="closed").exists()
    rates(world.F, "12", "9.6", since=local(2026, 10, 1))  # the missing rate, added
    assert client.post("/billing/close/", {"month": "2026-11", "confirm": "2026-11"}).status_code == 302
    again = MonthCloseRun.objects.filter(state="queued").get()
    assert month_close_execute(again.pk) == "done"
    assert MonthClose.objects.filter(month=NOV).exists()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"month": "THIS", "confirm": "THIS"}, "THIS has not ended yet (or ended within the meter lag)."),
        ({"month": "2026-13", "confirm": "2026-13"}, "2026-13 is not a month: use YYYY-MM, e.g. 2026-11."),
        ({"month": "2026-11"}, "Confirm the close on this page"),  # not from the page's confirm
    ],
)
def test_item9_refusals_are_said_on_the_page_and_write_nothing(world, november, body, says):
    this = this_month().strftime("%Y-%m")  # the month now: it has not ended
    body = {key: value.replace("THIS", this) for key, value in body.items()}
    says = says.replace("THIS", this)
    response = _client(world.users["platform"]).post("/billing/close/", body)
    assert response.status_code == 400 and says in _text(response)
    assert not MonthCloseRun.objects.exists() and not MonthClose.objects.exists()


def test_item9_an_empty_month_closes_and_months_close_in_order(world, november):
    client = _client(world.users["platform"])
    client.post("/billing/close/", {"month": "2026-10", "confirm": "2026-10"})
    month_close_execute(MonthCloseRun.objects.get().pk)
    page = client.get("/billing/close/", {"month": "2026-09"})
    assert "2026-10 is already closed; late usage of 2026-09 is billed in the next open month." in _text(page)
    assert 'id="close-month"' not in _text(page)  # no close button where it cannot close


def test_item9_a_close_whose_worker_died_is_replaced_by_the_next_request(world, november, centre_finance):
    from django.utils import timezone

    client = _client(centre_finance)
    client.post("/billing/close/", {"month": "2026-11", "confirm": "2026-11"})
    lost = MonthCloseRun.objects.get()
    an_hour_ago = timezone.now() - timedelta(hours=1)
    MonthCloseRun.objects.filter(pk=lost.pk).update(state="running", heartbeat_at=an_hour_ago)
    assert client.post("/billing/close/", {"month": "2026-11", "confirm": "2026-11"}).status_code == 302
    lost.refresh_from_db()
    assert lost.state == "failed" and lost.error.startswith("No progress since")
    fresh = MonthCloseRun.objects.get(state="queued")
    assert month_close_execute(fresh.pk) == "done" and month_close_execute(lost.pk) == "skipped"


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_item9_a_real_worker_runs_the_close_task(world, november, centre_finance):
    """The task by its name, through the broker, in a worker process on the test database."""
    from billing.tasks import close_month
    from tests.celery_procs import private_queue, start_worker
    from tests.waiting import wait_until

    client = _client(centre_finance)
    client.post("/billing/close/", {"month": "2026-11", "confirm": "2026-11"})
    run = MonthCloseRun.objects.get()
    queue = private_queue()
    worker = start_worker(queue)
    try:
        close_month.apply_async(args=[run.pk], queue=queue)
        wait_until(lambda: MonthCloseRun.objects.get(pk=run.pk).state in ("done", "failed"),
                   "the worker to finish the close")
    finally:
        worker.terminate()
        output = worker.communicate(timeout=60)[0].decode(errors="replace")
    run.refresh_from_db()
    assert (run.state, run.error) == ("done", ""), output
    assert run.report["statements"] == 3 and run.report["total"] == "528.00"
    assert MonthClose.objects.get().closed_by == centre_finance

"""The what-if page (策略推演): who may use it, the form, and a hand-built month replayed twice.

The month (October 2026, site zone): department B (project pb, quota 8 of flavor F) is
saturated — four 8-GPU jobs of 2 h submitted together at 21:00 on the 1st; department A
(quota 8) is idle but for one 1-GPU job of 1 h at 10:00 on the 2nd. The pool is 2 × 8 GPUs.

* pooled, A lends everything: B runs two jobs at a time (one on loan) → waits 0, 0, 2 h, 2 h.
* borrowing off (static), or A's lend limit 0: one at a time → waits 0, 2, 4, 6 h.
"""

from __future__ import annotations

import json
from datetime import date, timedelta
from decimal import Decimal
from html import unescape

import pytest
from django.test import Client

from billing import whatif
from billing.models import WhatIfRun, WhatIfState
from jobs.whatif.replay.sim import simulate

from .conftest import local, rates

pytestmark = pytest.mark.django_db
OCT = date(2026, 10, 1)
HOUR = 3600.0


def _month(history, world):
    t0 = local(2026, 10, 1, 21)
    for _ in range(4):
        job = history.job(world.pb, world.F, gpus=8, submitted=t0)
        history.admit(job, t0)
        history.start(job, t0)
        history.end(job, t0 + timedelta(hours=2))
    t1 = local(2026, 10, 2, 10)
    job = history.job(world.pa, world.F, gpus=1, submitted=t1)
    history.admit(job, t1)
    history.start(job, t1)
    history.end(job, t1 + timedelta(hours=1))
    never = history.job(world.pa, world.F, gpus=1, submitted=t1)  # cancelled while queued: not replayed
    history._event(never, "transition", "queued", "cancelled", t1 + timedelta(minutes=5))


def _run(user, change, params=None) -> WhatIfRun:
    run = WhatIfRun.objects.create(created_by=user, month=OCT, change=change, params=params or {})
    assert whatif.execute(run.pk) == WhatIfState.DONE, WhatIfRun.objects.get(pk=run.pk).error
    return WhatIfRun.objects.get(pk=run.pk)


def _dept(run, department):
    return next(d for d in run.result["departments"] if d["id"] == department.pk)


def _client(user) -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(user)
    return client


# --- permission -----------------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["auditor", "a_admin", "a_finance", "pa1_member", "outsider"])
def test_only_platform_admins_see_the_what_if_pages(world, persona):
    run = WhatIfRun.objects.create(month=OCT, change="no_backfill")
    client = _client(world.users[persona])
    for url in ("/what-if/", f"/what-if/{run.pk}/", f"/what-if/{run.pk}/progress/"):
        assert client.get(url).status_code == 404, url
    assert client.post("/what-if/", {"month": "2026-10", "change": "no_backfill"}).status_code == 404
    assert WhatIfRun.objects.count() == 1
    assert "/what-if/" not in client.get("/").content.decode()


def test_anonymous_is_sent_to_log_in(world):
    response = Client().get("/what-if/")
    assert response.status_code == 302 and "login" in response["Location"]


def test_platform_admin_sees_the_page_and_the_menu_link(world):
    client = _client(world.users["platform"])
    response = client.get("/what-if/")
    assert response.status_code == 200
    assert 'href="/what-if/"' in response.content.decode()


# --- the form -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, field",
    [
        ({"month": "2026-13", "change": "no_backfill"}, "month"),
        ({"month": "2099-01", "change": "no_backfill"}, "month"),
        ({"month": "2026-10", "change": "nonsense"}, "change"),
        ({"month": "2026-10", "change": "lend", "percent": "50", "start": "20:00", "end": "08:00"},
         "department"),
        ({"month": "2026-10", "change": "lend", "department": "A", "start": "20:00", "end": "08:00"},
         "percent"),
        ({"month": "2026-10", "change": "lend", "department": "A", "percent": "150", "start": "20:00",
          "end": "08:00"}, "percent"),
        ({"month": "2026-10", "change": "lend", "department": "A", "percent": "50", "start": "25:00",
          "end": "08:00"}, "start"),
        ({"month": "2026-10", "change": "lend", "department": "A", "percent": "50", "start": "08:00",
          "end": "08:00"}, "end"),
        ({"month": "2026-10", "change": "overcommit", "department": "A", "ratio": "1.5"}, "flavor"),
        ({"month": "2026-10", "change": "overcommit", "department": "A", "flavor": "F", "ratio": "0.5"},
         "ratio"),
    ],
)
def test_bad_input_shows_form_errors_and_writes_nothing(world, data, field):
    data = dict(data)
    if data.get("department") == "A":
        data["department"] = world.A.pk
    if data.get("flavor") == "F":
        data["flavor"] = world.F.pk
    response = _client(world.users["platform"]).post("/what-if/", data)
    assert response.status_code == 200
    assert field in response.context["form"].errors, response.context["form"].errors
    assert WhatIfRun.objects.count() == 0


def test_a_valid_form_writes_a_queued_run_and_the_page_polls_it(world, django_capture_on_commit_callbacks):
    client = _client(world.users["platform"])
    data = {"month": "2026-10", "change": "lend", "department": world.A.pk, "percent": "80",
            "mode": "lend_limit", "start": "20:00", "end": "08:00"}
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post("/what-if/", data)
    run = WhatIfRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/what-if/{run.pk}/"
    assert len(callbacks) == 1  # the Celery task, queued after the commit
    assert run.state == WhatIfState.QUEUED
    assert run.params == {"department": world.A.pk, "flavor": None, "percent": "80", "mode": "lend_limit",
                          "start": "20:00", "end": "08:00"}
    page = client.get(f"/what-if/{run.pk}/").content.decode()
    assert 'hx-trigger="every 2s"' in page and f"/what-if/{run.pk}/progress/" in page
    assert "Dept A lends up to 80 % of its quota" in page


# --- the replay -----------------------------------------------------------------------------------


def test_turning_borrowing_off_increases_the_saturated_departments_delay(world, history):
    _month(history, world)
    rates(world.F, "10", "5")
    run = _run(world.users["platform"], "no_borrowing")
    b = _dept(run, world.B)
    assert b["before"]["avg_queue_delay_s"] == pytest.approx(1 * HOUR, abs=5)  # 0, 0, 2, 2 h
    assert b["after"]["avg_queue_delay_s"] == pytest.approx(3 * HOUR, abs=5)  # 0, 2, 4, 6 h
    assert b["after"]["p95_queue_delay_s"] > b["before"]["p95_queue_delay_s"]
    # 64 card-hours either way; pooled: half of it on loan (rule 1) at the on-loan rate
    assert b["before"]["card_hours"] == pytest.approx(64) and b["after"]["card_hours"] == pytest.approx(64)
    assert Decimal(b["before"]["cost"]) == Decimal("480.00")  # 32 × 10 + 32 × 5
    assert Decimal(b["after"]["cost"]) == Decimal("640.00")  # 64 × 10
    a = _dept(run, world.A)
    assert a["before"]["jobs"] == 1 and run.result["skipped_never_ran"] == 1
    assert a["before"]["avg_queue_delay_s"] == pytest.approx(0, abs=1)
    assert run.progress == 100
    assert run.result["after"]["avg_queue_delay_s"] > run.result["before"]["avg_queue_delay_s"]


def test_lending_the_idle_departments_quota_at_night_reduces_the_others_delay(world, history):
    _month(history, world)
    world.quota["A"].lend_limit = Decimal(0)  # A holds its whole quota back
    world.quota["A"].save()
    params = {"department": world.A.pk, "flavor": None, "percent": "100", "mode": "lend_limit",
              "start": "20:00", "end": "08:00"}
    run = _run(world.users["platform"], "lend", params)
    b = _dept(run, world.B)
    assert b["before"]["avg_queue_delay_s"] == pytest.approx(3 * HOUR, abs=5)
    assert b["after"]["avg_queue_delay_s"] == pytest.approx(1 * HOUR, abs=5)
    assert run.result["limit_changes"]["before"] == 0 and run.result["limit_changes"]["after"] > 0
    # the same window in the daytime changes nothing for B's night jobs
    day = _run(world.users["platform"], "lend", {**params, "start": "08:00", "end": "20:00"})
    assert _dept(day, world.B)["after"]["avg_queue_delay_s"] == pytest.approx(3 * HOUR, abs=5)


def test_results_are_the_replays_own(world, history):
    """The stored figures equal a direct call of the sim on the same inputs (nothing invented)."""
    _month(history, world)
    run = _run(world.users["platform"], "no_borrowing")
    before_in, after_in = whatif.inputs(OCT, "no_borrowing", {})
    before = simulate(before_in.jobs, before_in.nodes, options=before_in.options, world=before_in.world)
    after = simulate(after_in.jobs, after_in.nodes, options=after_in.options, world=after_in.world)
    assert after_in.options.policy == "static" and before_in.options.policy == "pooled"
    for side, result in (("before", before), ("after", after)):
        tenant = result["tenants"][f"p{world.pb.pk}"]
        b = _dept(run, world.B)[side]
        assert b["avg_queue_delay_s"] == tenant["avg_queue_delay_s"]
        assert b["p95_queue_delay_s"] == tenant["p95_queue_delay_s"]
        assert b["card_hours"] == pytest.approx(tenant["gpu_hours"])
        assert run.result["replay"][side]["preemptions"] == result["preemptions"]
    assert len(before_in.jobs) == 5


def test_overcommit_and_backfill_changes_run(world, history):
    _month(history, world)
    over = _run(world.users["platform"], "overcommit", {"department": world.A.pk, "flavor": world.F.pk,
                                                        "ratio": "2"})
    assert {d["id"] for d in over.result["departments"]} == {world.A.pk, world.B.pk}
    pair = whatif.inputs(OCT, "overcommit", {"department": world.A.pk, "flavor": world.F.pk, "ratio": "2"})
    key = (f"p{world.pa.pk}", "F")
    assert pair[0].world.limits[key].quota == 4000 and pair[1].world.limits[key].quota == 8000
    backfill = _run(world.users["platform"], "no_backfill")
    # (0 + 0 + 2 + 2 + 0) h / 5 over all five jobs
    assert backfill.result["before"]["avg_queue_delay_s"] == pytest.approx(4 * HOUR / 5, abs=5)


def test_the_task_is_idempotent(world, history):
    _month(history, world)
    run = _run(world.users["platform"], "no_backfill")
    stored = run.result
    assert whatif.execute(run.pk) == "skipped"
    assert WhatIfRun.objects.get(pk=run.pk).result == stored


def test_the_done_fragment_has_the_charts_and_stops_polling(world, history):
    _month(history, world)
    rates(world.F, "10", "5")
    run = _run(world.users["platform"], "no_borrowing")
    response = _client(world.users["platform"]).get(f"/what-if/{run.pk}/progress/")
    html = response.content.decode()
    assert response.status_code == 200 and "hx-trigger" not in html
    figures = {}
    for key in ("delay", "p95", "utilisation", "cost"):
        marker = f'id="chart-{key}" data-plotly="'
        assert marker in html, key
        raw = html.split(marker, 1)[1].split('"', 1)[0]
        figures[key] = json.loads(unescape(raw))
    delay = figures["delay"]
    assert [t["name"] for t in delay["data"]] == ["Current configuration", "With the change"]
    names = delay["data"][0]["x"]
    b = names.index("Dept B")
    assert delay["data"][0]["y"][b] == pytest.approx(60, abs=0.1)
    assert delay["data"][1]["y"][b] == pytest.approx(180, abs=0.1)
    assert figures["cost"]["data"][1]["y"][b] == 640.0
    assert "what-if-table" in html

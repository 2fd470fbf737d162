"""The approval context on the pages (issue 24 item 3): a line of key figures per request in
the inbox, the full context on the request's page, only for those who may see it; the inbox
costs the same number of queries for 2 requests as for 10."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.models import Rate
from jobs.approvals import approval_policy_set
from tests.approval_scene import job_request, make_scene

pytestmark = pytest.mark.django_db


@pytest.fixture
def req(world):
    make_scene(world, timezone.now())
    approval_policy_set(actor=world.users["platform"], department=world.A, max_gpus=2)
    return job_request(world)


def _text(response) -> str:
    assert response.status_code == 200
    return re.sub(r"\s+", " ", response.content.decode())


def test_the_inbox_shows_a_line_of_key_figures(page_client, req):
    page = _text(page_client("a_admin").get("/approvals/"))
    line = re.search(rf'<small class="muted approval-context" data-context="{req.pk}">(.*?)</small>', page)
    assert line is not None
    currency = Rate.objects.first().currency
    text = re.sub(r"<[^>]+>", "", line.group(1))
    assert text.startswith(f"F 2+1 of 4 · 10 free · ≈ 10.00 {currency} · Project a1: ")
    assert text.endswith("90 d: 1 approved, 1 rejected, 2 jobs (1 idle)")


def test_the_request_page_shows_the_full_context(page_client, req):
    page = _text(page_client("a_admin").get(f"/approvals/{req.pk}/"))
    section = page[page.index('id="approval-context"') :]
    assert "Usage and quota of F" in section
    assert re.search(
        r"<td>Project a1 \(pa1\)</td><td class=\"num\">4</td><td class=\"num\">4</td>"
        r"<td class=\"num\">2</td><td class=\"num\">1</td>",
        section,
    )
    assert (
        '<strong class="free-now">10</strong>' in section and "of 16 healthy GPUs, 6 held by jobs" in section
    )
    assert f"<strong>10.00 {Rate.objects.first().currency}</strong> · 4 card-hours" in section
    assert "4 cards for its maximum runtime of 1 h at the standard rate" in section
    assert "of 100 card-hours left" in section and "of 1000 card-hours left" in section
    assert f"<strong>480.00</strong> of 500.00 {Rate.objects.first().currency} left" in section
    assert "<dt>Requests approved / rejected</dt><dd>1 / 1</dd>" in section
    assert "<dt>Jobs run</dt><dd>2</dd>" in section and "<dt>Jobs flagged idle</dt><dd>1</dd>" in section


@pytest.mark.parametrize("persona", ["pa1_member", "pa1_admin"])
def test_the_requester_and_project_see_the_request_without_the_figures(page_client, req, persona):
    page = _text(page_client(persona).get(f"/approvals/{req.pk}/"))
    assert 'id="approval-context"' not in page
    assert "approval-context" not in _text(page_client(persona).get("/approvals/?tab=all"))


def test_the_inbox_costs_the_same_queries_for_more_requests(page_client, world, req):
    client = page_client("a_admin")
    client.get("/approvals/")  # warm what is cached per process

    def count():
        with CaptureQueriesContext(connection) as ctx:
            page = _text(client.get("/approvals/"))
        return len(ctx.captured_queries), page.count('class="muted approval-context"')

    few, shown = count()
    assert shown == 1
    # The pin (issue 24): 33 before the rates of all flavors came in one query, the providers read
    # the department tree once each and the held jobs came with their projects' departments; 31
    # since the budget's meter reads the CPU and memory a running job holds (issue 33): a job
    # stored without its share (this world's factory jobs, external jobs) takes its flavor's now —
    # the profiles and the nodes of all such flavors in two statements, however many.
    assert few == 31
    for i in range(8):
        job_request(world, gpus=3 + i % 2, name=f"more-{i}")
    many, shown = count()
    assert shown == 9 and many == few


def test_the_context_renders_in_chinese(page_client, req):
    for path in ("/approvals/", f"/approvals/{req.pk}/"):
        page = _text(page_client("a_admin", language="zh-hans").get(path))
        assert "approval-context" in page

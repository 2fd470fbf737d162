"""The advisor's Apply (issue 32 item 6): it shows every request it would file and files them
only on confirm; it offers only candidates that beat today; quotas are whole units where the
quota is; the changes carry labels in the reader's language; a history project under a
sub-department maps onto its portal project."""

import html
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from jobs.whatif.models import AdvisorEvent
from portal.models import ApprovalRequest
from quotas.models import Flavor, QuotaNode
from tests.advisor.scene import finished_search

pytestmark = pytest.mark.django_db


def _client(world, language="en"):
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(world.users["platform"])
    return client


@pytest.fixture
def room(world):
    """The pool may be overcommitted ×2: the candidate's quotas × 1.5 can be asked for."""
    Flavor.objects.filter(name="F").update(pool_overcommit_ratio=2)


def test_item6_apply_shows_every_request_first_and_files_only_on_confirm(world, room):
    _search, cand = finished_search(world.users["platform"])  # quotas × 1.5, borrowing capped at ½ quota
    client = _client(world)
    url = reverse("advisor-apply", args=[cand.pk])
    page = client.get(url)
    assert page.status_code == 200 and not ApprovalRequest.objects.exists()
    text = html.unescape(page.content.decode())
    for line in ("Quota of Project a (pa) for F: 4 → 6", "Quota of Project a1 (pa1) for F: 4 → 6",
                 "Quota of Project b (pb) for F: 8 → 12", "Quota of A/pa for F, borrow limit: no cap → 2",
                 "Quota of A1/pa1 for F, borrow limit: no cap → 2",
                 "Quota of B/pb for F, borrow limit: no cap → 4",
                 "File 3 quota request(s) and 1 rule-change request"):
        assert line in text, line
    preview = page.context["preview"]
    assert [(r["project"], r["before"], r["after"]) for r in preview["quota_requests"]] == [
        ("pa", "4", "6"), ("pa1", "4", "6"), ("pb", "8", "12")]
    # a POST without the preview's digest (an old page, a crafted form) files nothing: the preview again
    again = client.post(url)
    assert again.status_code == 200 and "File 3 quota request(s)" in html.unescape(again.content.decode())
    assert not ApprovalRequest.objects.exists()
    assert not AdvisorEvent.objects.filter(reason__startswith="applied").exists()
    done = client.post(url, {"digest": preview["digest"]})
    rule = ApprovalRequest.objects.get(kind="policy")
    assert done.status_code == 302 and done["Location"] == reverse("approval-detail", args=[rule.pk])
    assert ApprovalRequest.objects.filter(kind="quota").count() == 3
    assert len(rule.payload["changes"]) == 3


def test_item6_a_confirm_files_nothing_when_the_requests_changed_since_the_preview(world, api, room):
    _search, cand = finished_search(world.users["platform"])
    client = _client(world)
    url = reverse("advisor-apply", args=[cand.pk])
    digest = client.get(url).context["preview"]["digest"]
    QuotaNode.objects.filter(pk=world.quota["pb"].pk).update(quota=6)  # edited meanwhile: 6 → 9 now
    stale = client.post(url, {"digest": digest})
    assert stale.status_code == 409 and not ApprovalRequest.objects.exists()
    text = html.unescape(stale.content.decode())
    assert "changed since its preview" in text and "Quota of Project b (pb) for F: 6 → 9" in text
    r = api(world.users["platform"]).post(reverse("api:advisorcandidate-apply", args=[cand.pk]),
                                          {"digest": digest}, format="json")
    assert r.status_code == 409 and not ApprovalRequest.objects.exists()
    assert r.json()["digest"] == stale.context["preview"]["digest"] != digest
    fresh = api(world.users["platform"]).post(reverse("api:advisorcandidate-apply", args=[cand.pk]),
                                              {"digest": r.json()["digest"]}, format="json")
    assert fresh.status_code == 200 and len(fresh.json()["requests"]) == 3


def test_item6_the_api_previews_what_apply_would_file(world, api, room):
    _search, cand = finished_search(world.users["platform"])
    r = api(world.users["platform"]).get(reverse("api:advisorcandidate-apply", args=[cand.pk]),
                                         HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert r.status_code == 200 and not ApprovalRequest.objects.exists()
    out = r.json()
    assert [q["after"] for q in out["quota_requests"]] == ["6", "6", "12"]
    assert out["quota_requests"][0]["line"] == "Project a (pa) 的 F 配额：4 → 6"
    assert "B/pb 的 F 配额，借入上限: 不设上限 → 4" in out["rule_lines"]


def test_item6_only_candidates_that_beat_today_are_offered_and_applied(world, api):
    # best-fit packing schedules this trace exactly as today: objective 1.000, feasible, no gain
    search, cand = finished_search(world.users["platform"], changes={"packing": "best_fit"})
    assert cand.feasible and cand.objective == pytest.approx(1.0)
    client = _client(world)
    page = html.unescape(client.get(reverse("advisor-search", args=[search.pk])).content.decode())
    assert reverse("advisor-apply", args=[cand.pk]) not in page
    assert "No candidate beats today's settings yet." in page
    assert "do not beat today's settings (an objective of 0.999 or less is needed): 1." in page
    refused = client.get(reverse("advisor-apply", args=[cand.pk]), follow=True)
    assert "does not beat today's settings (objective 1.000" in html.unescape(refused.content.decode())
    r = api(world.users["platform"]).post(reverse("api:advisorcandidate-apply", args=[cand.pk]))
    assert r.status_code == 400 and "does not beat today's settings" in r.json()["detail"][0]
    assert not ApprovalRequest.objects.exists()


def test_item6_quotas_are_whole_units_unless_the_quota_already_has_a_fraction(world, api):
    """A shareable flavor takes milli-GPUs, but quota × 0.8371 is not precise to a thousandth:
    the advisor proposes 3, not 3.348 — except on a quota that already has a fraction."""
    Flavor.objects.filter(name="F").update(shareable=True)
    QuotaNode.objects.filter(pk=world.quota["pa1"].pk).update(quota=Decimal("3.5"))
    search, cand = finished_search(world.users["platform"], changes={"borrow_limit_ratio": 0.5})
    cand.params = {**search.candidates.get(number=0).params, "overcommit_ratio": 0.8371,
                   "lend_limit_ratio": 0.37}
    cand.save()
    out = api(world.users["platform"]).post(reverse("api:advisorcandidate-apply", args=[cand.pk])).json()
    quotas = {r.payload["owner_name"]: r.payload["quota"]
              for r in ApprovalRequest.objects.filter(kind="quota")}
    # pa 4 → 3 (not 3.348), pa1 3.5 → 2.929 (its fraction kept), pb 8 → 6 (not 6.696)
    assert quotas == {"Project a (pa)": "3", "Project a1 (pa1)": "2.929", "Project b (pb)": "6"}, out
    changes = ApprovalRequest.objects.get(kind="policy").payload["changes"]
    assert sorted((c["project"], c["lend_limit"]) for c in changes) == [
        ("pa", "1"), ("pa1", "1.295"), ("pb", "2")]  # 0.37 × 4 = 1.48 → 1; × 8 = 2.96 → 2


@pytest.mark.parametrize("language, labels", [
    ("en", ("Project quotas × 1.5 (overcommit ratio)", "Borrow limit: 0.5 × the project's quota",
            "Preemption grace period: 24 s", "Packing: best fit", "EASY backfill: off",
            "Queueing of project d1/p04: strict FIFO",
            "Night window 20:00–08:00, lend limit: 0.5 × the project's quota")),
    ("zh-hans", ("项目配额 × 1.5（超发比例）", "借用上限：项目配额的 0.5 倍", "抢占宽限期：24 秒",
                 "装箱策略：最佳适配", "EASY 回填：关闭", "项目 d1/p04 的排队策略：严格先进先出",
                 "夜间时段 20:00–08:00，借出上限：项目配额的 0.5 倍")),
])
def test_item6_the_changes_are_labelled_in_the_readers_language(world, room, language, labels):
    search, cand = finished_search(world.users["platform"])
    cand.params = {**cand.params, "grace_s": 24, "packing": "best_fit", "backfill": False,
                   "queueing:d1/p04": "strict_fifo", "night_lend_limit_ratio": 0.5}
    cand.save()
    client = _client(world, language)
    for url in (reverse("advisor-search", args=[search.pk]), reverse("advisor-apply", args=[cand.pk])):
        page = html.unescape(client.get(url).content.decode())
        for label in labels:
            assert label in page, (url, label)
        for key in ("grace_s", "overcommit_ratio =", "queueing:d1/p04", "best_fit", "strict_fifo"):
            assert key not in page, (url, key)


def test_item6_a_history_project_under_a_sub_department_maps_onto_its_portal_project(world, api):
    """A history scenario names a project by its tenant path, every department from the top:
    pa1 of A1 under A is ``A/A1/pa1`` — it exists, and its queueing is asked for."""
    search, cand = finished_search(world.users["platform"], changes={"borrow_limit_ratio": 0.5})
    search.projects = ["A/A1/pa1", "A/pa", "B/pb"]
    search.save()
    cand.params = {**{k: v for k, v in cand.params.items() if not k.startswith("queueing:")},
                   "queueing:A/A1/pa1": "strict_fifo", "queueing:A/pa": "best_effort",
                   "queueing:B/pb": "best_effort", "queueing:A/gone": "strict_fifo"}
    cand.save()
    out = api(world.users["platform"]).post(reverse("api:advisorcandidate-apply", args=[cand.pk])).json()
    assert out["unmapped"] == [{"change": "queueing:A/gone", "reason": "no project A/gone in this portal "
                                "(the replay's projects are the scenario's)"}]
    changes = ApprovalRequest.objects.get(pk=out["rule_change_request"]).payload["changes"]
    assert [c for c in changes if c["type"] == "project_queueing"] == [
        {"type": "project_queueing", "project": "pa1", "queueing": "strict_fifo",
         "before": {"queueing": "best_effort"}}]

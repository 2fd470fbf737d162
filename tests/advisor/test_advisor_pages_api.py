"""The advisor's pages and API: platform admins start a search (bad input is a form error / 400
that stores nothing), read progress and the best candidates with charts, in English and Chinese,
and apply a candidate as quota requests; every other persona gets 404."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from jobs.whatif.models import AdvisorEvent, AdvisorSearch
from portal.models import ApprovalRequest
from tests.advisor.scene import finished_search

pytestmark = pytest.mark.django_db

PERSONAS = ("platform", "auditor", "a_admin", "b_admin", "a_finance", "pa1_member", "pb_member", "outsider")


def _client(world, persona, language="en"):
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(world.users[persona])
    return client


def test_a_platform_admin_starts_a_search_and_bad_bounds_store_nothing(world, traces):
    client = _client(world, "platform")
    page = client.get(reverse("advisor"))
    assert page.status_code == 200 and "overcommit_ratio" in page.content.decode()
    body = {"overlay": 2, "window_s": 9600, "node_fraction": 0.13, "budget": 10, "seed": 5, "in_flight": 2,
            "p95_bound": 1.5, "p95_floor_s": 60, "bounds": json.dumps({"overcommit_ratio": [2, 1]})}
    refused = client.post(reverse("advisor"), body)
    assert refused.status_code == 200 and "bounds.overcommit_ratio" in refused.content.decode()
    assert not AdvisorSearch.objects.exists()
    body["bounds"] = json.dumps({"packing": ["best_fit"]})
    made = client.post(reverse("advisor"), body)
    search = AdvisorSearch.objects.get()
    assert made.status_code == 302 and made["Location"] == reverse("advisor-search", args=[search.pk])
    assert (search.budget, search.seed, search.bounds["packing"]) == (10, 5, ["best_fit"])
    assert search.scenario["overlay"] == 2
    assert list(AdvisorEvent.objects.filter(search=search).values_list("to_state", flat=True)) == ["queued"]


@pytest.mark.parametrize("language, words", [("en", ("Best candidates", "Apply")),
                                             ("zh-hans", ("最佳候选", "策略顾问"))])
def test_the_search_page_shows_the_best_candidates_per_department_with_charts(world, language, words):
    search, cand = finished_search(world.users["platform"])
    client = _client(world, "platform", language)
    body = client.get(reverse("advisor-search", args=[search.pk])).content.decode()
    for word in words:
        assert word in body
    assert body.count('data-plotly="') == 3  # avg and p95 per department, the objective per candidate
    assert reverse("advisor-apply", args=[cand.pk]) in body
    fragment = client.get(reverse("advisor-progress", args=[search.pk])).content.decode()
    assert "hx-trigger" not in fragment  # done: polling stops
    # reuse twice: against today's quotas (what the objective judges) and the candidate's own,
    # which its raised quotas lower (docs/advisor.md, "What reuse measures")
    today, own = (cand.result[k] for k in ("window_idle_quota_reuse_ratio_today_quotas",
                                           "window_idle_quota_reuse_ratio"))
    assert own < today
    assert f'<td class="num">{today:.3f}</td><td class="num">{own:.3f}</td>' in fragment


def _confirm(client, cand):
    """Apply as the page does: open the preview, then confirm it (its digest)."""
    preview = client.get(reverse("advisor-apply", args=[cand.pk]))
    assert preview.status_code == 200
    digest = preview.context["preview"]["digest"]
    return client.post(reverse("advisor-apply", args=[cand.pk]), {"digest": digest}, follow=True)


def test_apply_turns_the_overcommit_ratio_into_quota_requests_and_the_rest_into_a_rule_change(world):
    from quotas.models import Flavor

    Flavor.objects.filter(name="F").update(pool_overcommit_ratio=2)  # room for quotas × 1.5
    _search, cand = finished_search(world.users["platform"])  # quotas × 1.5, borrowing capped at ½ quota
    client = _client(world, "platform")
    response = _confirm(client, cand)
    requests = ApprovalRequest.objects.filter(kind="quota")
    # pa (4 → 6), pa1 (4 → 6), pb (8 → 12): one request per project quota node; departments untouched
    assert sorted(r.payload["quota"] for r in requests) == ["12", "6", "6"]
    rule = ApprovalRequest.objects.get(kind="policy")
    # the borrow limits: ½ of each quota today (the raise may be refused)
    limits = sorted((c["project"], c["borrow_limit"], c["before"]["borrow_limit"])
                    for c in rule.payload["changes"])
    assert limits == [("pa", "2", None), ("pa1", "2", None), ("pb", "4", None)]
    assert response.redirect_chain[-1][0] == reverse("approval-detail", args=[rule.pk])
    text = response.content.decode()
    assert "3 quota request(s) sent for approval." in text
    assert "Quota of B/pb for F, borrow limit: no cap → 4" in text
    again = _confirm(client, cand)  # already pending: skipped
    assert ApprovalRequest.objects.filter(kind="quota").count() == 3 and again.status_code == 200


def test_apply_maps_every_rule_onto_the_portal_and_lists_what_it_cannot(world, api):
    from jobs.models import PriorityClass

    PriorityClass.objects.create(name="normal", value=10, grace_seconds=30)
    search, cand = finished_search(world.users["platform"])
    cand.params = {**search.candidates.get(number=0).params, "borrow_limit_ratio": 0.5,
                   "lend_limit_ratio": 0.75, "night_lend_limit_ratio": 1.0, "grace_s": 60,
                   "packing": "best_fit", "queueing:d1/p04": "strict_fifo"}
    cand.save()
    r = api(world.users["platform"]).post(reverse("api:advisorcandidate-apply", args=[cand.pk]))
    assert r.status_code == 200, r.content
    out = r.json()
    assert out["requests"] == [] and out["rule_change_request"] is not None
    assert out["rule_change_request_url"] == reverse("api:approval-detail", args=[out["rule_change_request"]])
    reason = "no project d1/p04 in this portal (the replay's projects are the scenario's)"
    assert out["unmapped"] == [{"change": "queueing:d1/p04", "reason": reason}]
    changes = ApprovalRequest.objects.get(pk=out["rule_change_request"]).payload["changes"]
    by_type = {}
    for c in changes:
        by_type.setdefault(c["type"], []).append(c)
    # pa 4, pa1 4, pb 8: borrow 0.5 × quota, lend 0.75 × quota floored to whole GPUs
    assert sorted((c["project"], c["borrow_limit"], c["lend_limit"]) for c in by_type["quota_limits"]) == [
        ("pa", "2", "3"), ("pa1", "2", "3"), ("pb", "4", "6")]
    assert sorted((c["project"], c["start_hour"], c["end_hour"], c["lend_limit"])
                  for c in by_type["quota_window"]) == [
        ("pa", 20, 8, "4"), ("pa1", 20, 8, "4"), ("pb", 20, 8, "8")]
    assert [(c["priority_class"], c["grace_seconds"]) for c in by_type["priority_grace"]] == [("normal", 60)]
    assert [c["packing"] for c in by_type["scheduler_packing"]] == ["best_fit"]


def test_todays_settings_cannot_be_applied(world, api):
    search, _cand = finished_search(world.users["platform"])
    today = search.candidates.get(number=0)
    r = api(world.users["platform"]).post(reverse("api:advisorcandidate-apply", args=[today.pk]))
    assert r.status_code == 400 and not ApprovalRequest.objects.exists()


@pytest.mark.parametrize("persona", PERSONAS)
def test_only_platform_admins_see_the_advisor_pages(world, persona):
    from jobs.whatif.proposals import advisor_candidate_preview

    search, cand = finished_search(world.users["platform"])
    client = _client(world, persona)
    expected = 200 if persona == "platform" else 404
    for url in (reverse("advisor"), reverse("advisor-search", args=[search.pk]),
                reverse("advisor-progress", args=[search.pk]), reverse("advisor-apply", args=[cand.pk])):
        assert client.get(url).status_code == expected, url
    digest = advisor_candidate_preview(actor=world.users["platform"], candidate=cand)["digest"]
    status = client.post(reverse("advisor-apply", args=[cand.pk]), {"digest": digest}).status_code
    assert status == (302 if persona == "platform" else 404)
    assert ApprovalRequest.objects.exists() == (persona == "platform")


@pytest.mark.parametrize("persona", PERSONAS)
def test_only_platform_admins_use_the_advisor_api(world, api, persona, traces):
    search, cand = finished_search(world.users["platform"])
    client = api(world.users[persona])
    ok = persona == "platform"
    listed = client.get(reverse("api:advisorsearch-list"))
    assert listed.status_code == (200 if ok else 404)
    detail = client.get(reverse("api:advisorsearch-detail", args=[search.pk]))
    assert detail.status_code == (200 if ok else 404)
    if ok:
        assert [c["number"] for c in detail.json()["candidates"]] == [0, 1]
        assert detail.json()["candidates"][1]["feasible"] is True
    preview = client.get(reverse("api:advisorcandidate-apply", args=[cand.pk]))
    assert preview.status_code == (200 if ok else 404) and not ApprovalRequest.objects.exists()
    applied = client.post(reverse("api:advisorcandidate-apply", args=[cand.pk]))
    assert applied.status_code == (200 if ok else 404)
    assert ApprovalRequest.objects.exists() == ok
    made = client.post(reverse("api:advisorsearch-list"), {"seed": 1, "budget": 3}, format="json")
    assert made.status_code == (201 if ok else 404)


def test_the_api_refuses_bad_input_with_400_and_stores_nothing(world, api):
    client = api(world.users["platform"])
    bad = ({"budget": 0}, {"bounds": {"grace_s": [0, 1.5]}}, {"scenario": {"overlay": 0}}, {"scenario": [1]},
           {"scenario": {"speed": 1}})
    for extra in bad:
        body = {"seed": 1, "budget": 3, **extra}
        r = client.post(reverse("api:advisorsearch-list"), body, format="json")
        assert r.status_code == 400, (body, r.content)
    assert not AdvisorSearch.objects.exists()


def test_apply_leaves_out_an_entry_the_portal_refuses_and_asks_for_the_rest(world, api):
    """A overcommits ×2 and A1 never lends: pa never lending too would keep 12 of A's 8 out of the
    pool (A's level rule), so pa's lend limit is listed as not applied; pa1's and pb's are asked."""
    from quotas.models import QuotaNode

    QuotaNode.objects.filter(pk=world.quota["A"].pk).update(overcommit_ratio=2)
    QuotaNode.objects.filter(pk=world.quota["A1"].pk).update(lend_limit=0)
    QuotaNode.objects.filter(pk=world.quota["pa"].pk).update(quota=8)
    search, cand = finished_search(world.users["platform"])
    cand.params = {**search.candidates.get(number=0).params, "lend_limit_ratio": 0.0}
    cand.save()
    out = api(world.users["platform"]).post(reverse("api:advisorcandidate-apply", args=[cand.pk])).json()
    assert [u["change"] for u in out["unmapped"]] == ["quota_limits"]
    assert "The never-lent parts" in out["unmapped"][0]["reason"]
    changes = ApprovalRequest.objects.get(pk=out["rule_change_request"]).payload["changes"]
    assert sorted((c["project"], c["lend_limit"]) for c in changes) == [("pa1", "0"), ("pb", "0")]

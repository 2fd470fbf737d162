"""The fair-share report (DESIGN §16, like sshare): page /quotas/fair-share/, API /api/v1/fair-share/
and ``manage.py sshare`` — the same figures from one selector, every persona, and the weight form
(errors shown, nothing changed on bad input)."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from billing.fairshare_report import fair_share_report
from jobs.scheduler.engine.state import State
from jobs.scheduling.snapshot import build_snapshot
from portal.models import Project
from quotas.models import FairShareWeight, QuotaNode

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)


@pytest.fixture
def ran(world, history):
    """pb held 8 cards for the last hour; nobody else ran."""
    now = timezone.now()
    job = history.job(world.pb, world.F, gpus=8, submitted=now - 2 * HOUR)
    history.admit(job, now - HOUR, flavor=world.F)
    history.start(job, now - HOUR)
    history.end(job, now - timedelta(seconds=1))
    return world


def _nodes(body):
    return {n["code"]: n for n in body["nodes"]}


def test_the_api_ranks_the_unused_side_first_with_its_figures(ran, api):
    r = api(ran.users["platform"]).get(reverse("api:fair-share"))
    assert r.status_code == 200, r.content
    body = r.json()
    nodes = _nodes(body)
    assert body["half_life_seconds"] == 7 * 86400
    assert set(nodes) == {"A", "A1", "B", "pa", "pa1", "pb"}
    # A (8 shares, no usage) before B (8 shares, all the usage): A's projects first; A1 and pa tie
    # (4 shares each, no usage) and the project comes first, as in the engine's key (a prefix of
    # pa1's: jobs/scheduler/fairshare.py).
    assert [nodes[c]["rank"] for c in ("pa", "pa1", "pb")] == [1, 2, 3]
    factors = [nodes[c]["factor"] for c in ("pa", "pa1", "pb")]
    assert factors == [1.0, pytest.approx(2 / 3), pytest.approx(1 / 3)]
    assert nodes["A"]["rank"] is None and nodes["A"]["level_fs"] is None  # no usage: goes first
    assert nodes["pb"]["usage_card_hours"] == pytest.approx(8, rel=1e-3)
    assert nodes["B"]["usage_card_hours"] == pytest.approx(8, rel=1e-3)  # its subtree's
    assert nodes["pb"]["decayed_card_seconds"] > 0 and nodes["pa1"]["decayed_card_seconds"] == 0
    assert (nodes["A"]["shares"], nodes["A"]["shares_norm"], nodes["B"]["usage_norm"]) == (8.0, 0.5, 1.0)
    assert nodes["B"]["level_fs"] == pytest.approx(0.5)
    assert nodes["pb"]["weighted"] is False


def test_a_weight_changes_the_shares_and_the_order(ran, api):
    FairShareWeight.objects.create(department=ran.B, weight=100, set_at=timezone.now())
    nodes = _nodes(api(ran.users["platform"]).get(reverse("api:fair-share")).json())
    assert nodes["B"]["shares"] == 100 and nodes["B"]["weighted"] is True
    assert nodes["pb"]["rank"] == 3  # A still has no usage: infinite level fair share goes first


@pytest.mark.parametrize("persona, codes", [
    ("platform", {"A", "A1", "B", "pa", "pa1", "pb"}), ("auditor", {"A", "A1", "B", "pa", "pa1", "pb"}),
    ("a_admin", {"A", "A1", "pa", "pa1"}), ("b_admin", {"B", "pb"}),
    ("a_finance", None), ("pa1_member", None), ("pa1_admin", None), ("outsider", None),
])
def test_each_persona_sees_its_subtree_or_nothing(ran, api, persona, codes):
    r = api(ran.users[persona]).get(reverse("api:fair-share"))
    if codes is None:
        assert r.status_code == 403
    else:
        assert r.status_code == 200 and set(_nodes(r.json())) == codes
    page = Client()
    page.force_login(ran.users[persona])
    shown = page.get(reverse("fair-share-report"))
    assert shown.status_code == (403 if codes is None else 200)


@pytest.mark.parametrize("language, words", [("en", ("Fair share", "Level fair share", "Edit weight")),
                                             ("zh-hans", ("Project b",))])
def test_the_page_shows_the_tree_and_the_chart(ran, language, words):
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(ran.users["platform"])
    r = client.get(reverse("fair-share-report"))
    assert r.status_code == 200
    html = r.content.decode()
    for word in words:
        assert word in html, word
    assert 'id="fair-share-chart"' in html and "data-plotly" in html
    assert f'id="fair-p{ran.pb.pk}"' in html


def test_the_weight_form_sets_shows_errors_and_clears(ran):
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(ran.users["platform"])
    url = reverse("fair-share-weight", args=["project", ran.pb.pk])
    for bad in ("0", "-2", "abc", "1e9", "0.0001", "NaN"):
        r = client.post(url, {"weight": bad})
        assert r.status_code == 400, bad
        assert "The weight must be a number greater than 0" in r.content.decode()
        assert not FairShareWeight.objects.exists()
    r = client.post(url, {"weight": "2.5", "next": reverse("fair-share-report")})
    assert r.status_code == 302 and r["Location"] == reverse("fair-share-report")
    assert FairShareWeight.objects.get().weight == 2.5
    r = client.post(url, {"weight": "", "next": "https://evil.example/"})
    assert r.status_code == 302 and r["Location"] == reverse("quota-tree")  # never off-site
    assert not FairShareWeight.objects.exists()


def test_the_quota_tree_shows_each_nodes_fair_share(ran):
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(ran.users["platform"])
    html = client.get(reverse("quota-tree")).content.decode()
    assert "Fair share" in html and "factor 0.333" in html and "Edit weight" in html
    client.force_login(ran.users["a_admin"])
    html = client.get(reverse("quota-tree")).content.decode()
    assert "factor 1.000" in html and "Edit weight" not in html


def test_sshare_prints_the_same_figures(ran, api):
    out = StringIO()
    call_command("sshare", "--json", stdout=out)
    printed = _nodes(json.loads(out.getvalue()))
    served = _nodes(api(ran.users["platform"]).get(reverse("api:fair-share")).json())
    assert {c: n["rank"] for c, n in printed.items()} == {c: n["rank"] for c, n in served.items()}
    table = StringIO()
    call_command("sshare", stdout=table)
    lines = table.getvalue().splitlines()
    assert lines[0].split()[:3] == ["Account", "RawShares", "NormShares"]
    assert any(line.strip().startswith("pb") for line in lines)


def _engine_ranks(now) -> dict[str, int]:
    """Projects ranked by the scheduling cycle's own Fair Tree keys (the engine's state built from
    the snapshot the cycle reads): 1 first, equal keys share a rank."""
    state = State(build_snapshot(now))
    keys = {pid: state.fair_key(state.tree.index[pid]) for pid in state.tree.ids if pid.startswith("p")}
    return {pid: 1 + sum(1 for other in keys.values() if other < key) for pid, key in keys.items()}


def test_the_reports_ranks_and_factors_are_the_engines_on_a_tree_with_ties(world, history, api):
    # Ties everywhere: pa and the department A1 beside it have no usage (both go first among A's
    # children); pb and pb2 (8 shares each, under B) ran the very same job hours; A1's pa1 too.
    pb2 = Project.objects.create(code="pb2", name="Project b2", department=world.B)
    QuotaNode.objects.create(project=pb2, flavor=world.F, quota=8)
    now = timezone.now()
    for project in (world.pb, pb2):
        history.run(project, world.F, now - 3 * HOUR, now - 2 * HOUR, gpus=4, submitted=now - 4 * HOUR)
    engine = _engine_ranks(now)
    report = {row.tree_id: row.fair for row in fair_share_report(None, now).rows}
    projects = [pid for pid in report if pid.startswith("p")]
    assert {pid: report[pid].rank for pid in projects} == engine
    assert {pid: report[pid].factor for pid in projects} == {
        pid: (len(projects) - engine[pid] + 1) / len(projects) for pid in projects}
    nodes = _nodes(api(world.users["platform"]).get(reverse("api:fair-share")).json())  # what users read
    assert engine[f"p{world.pb.pk}"] == engine[f"p{pb2.pk}"] == 3  # the tie is one rank for both
    assert nodes["pb"]["factor"] == nodes["pb2"]["factor"] == pytest.approx(2 / 4)
    assert [nodes[c]["rank"] for c in ("pa", "pa1")] == [1, 2]

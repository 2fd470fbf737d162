"""The advisor's "history" scenario (issue 25): a search replays this portal's own recorded
history, exported when the search is created and stored with it, the candidates' policies on top
of the recorded windows, loans and limits; candidate 0 (today's settings) reproduces the recorded
queue delays (the fidelity bench's 1 s tolerance). Bad or empty ranges are 400s / form errors that
store nothing. The services run in this process (no broker): a candidate's task body is called
directly, as tests/advisor/test_search_services.py does."""


import pytest
from django.test import Client
from django.urls import reverse

from jobs.whatif.advisor import scenario as advisor_scenario
from jobs.whatif.models import AdvisorCandidate, AdvisorHistoryData, AdvisorSearch
from jobs.whatif.replay import fidelity
from jobs.whatif.services import advisor_candidate_run, advisor_search_advance, advisor_search_create

pytestmark = pytest.mark.django_db
TOLERANCE_S = 1.0  # the replay's event coalescing (tests/replay/test_history_fidelity.py)
BOUNDS = {"night_hours": [22, 6]}


def _run_all(search):
    """Every queued candidate's task body, until the search ends (what the workers do)."""
    advisor_search_advance(search.pk)
    while True:
        queued = AdvisorCandidate.objects.filter(search=search, state="queued").order_by("number").first()
        if queued is None:
            break
        advisor_candidate_run(queued.pk)
    search.refresh_from_db()
    return search


@pytest.fixture(autouse=True)
def _no_history_held():
    """What a test replays stays out of the next one (the process keeps its last history)."""
    yield
    advisor_scenario.forget_histories()


def test_a_search_over_the_portals_history_and_candidate_0_reproduces_it(recorded, tmp_path):
    scenario = {"kind": "history", "since": recorded.start.isoformat(), "until": recorded.end.isoformat()}
    search = advisor_search_create(by=None, scenario=scenario, bounds=BOUNDS, seed=5, budget=2, in_flight=2)
    assert search.scenario["kind"] == "history" and search.scenario["jobs"] == 30
    assert search.projects == ["ai/cv", "ai/nlp", "lab/x", "svc/chat"]  # the history's project paths
    files = AdvisorHistoryData.objects.get(search=search).files
    assert set(files) == {"trace.csv", "cluster.json", "recorded.csv", "manifest.json"}
    advisor_scenario.forget_histories()  # a fresh worker: it reads the export from the database
    search = _run_all(search)
    assert search.state == "done", search.error
    cands = list(search.candidates.order_by("number"))
    assert [c.state for c in cands] == ["done"] * 3
    assert "queueing:ai/nlp" in cands[1].params
    today = cands[0].result
    # candidate 0 is the history as recorded: every job within the replay's 1 s coalescing
    assert today["recorded"]["compared"] == 30
    assert today["recorded"]["max_abs_error_s"] <= TOLERANCE_S
    assert abs(today["recorded"]["avg_replayed_s"] - today["recorded"]["avg_recorded_s"]) <= TOLERANCE_S
    assert today["recorded"]["avg_recorded_s"] > 60  # there was queueing to reproduce
    # …and the same figures as the fidelity bench's replay of the same export
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    bench = fidelity.replay_export(tmp_path)
    assert today["avg_queue_delay_s"] == bench["avg_queue_delay_s"]
    assert today["preemptions"] == bench["preemptions"] == recorded.preemptions
    assert cands[0].objective == pytest.approx(1.0)
    assert all(c.objective is not None for c in cands)


def test_a_policy_changes_the_replayed_history(recorded):
    scenario = {"kind": "history", "since": recorded.start.isoformat(), "until": recorded.end.isoformat()}
    search = advisor_search_create(by=None, scenario=scenario, bounds=BOUNDS, seed=5, budget=1, in_flight=1)
    files = AdvisorHistoryData.objects.get(search=search).files
    inputs = {"policy": {"overcommit_ratio": 0.5, "lend_limit_ratio": 0.0, "grace_s": 0}, "queueing": {}}
    key = ("test", search.pk)
    today = advisor_scenario.run_history(key, lambda: files, {"policy": {}, "queueing": {}})
    changed = advisor_scenario.run_history(key, lambda: files, inputs)
    project_quota = today["projects"]["ai/nlp"]["quota_gpus"]
    assert changed["projects"]["ai/nlp"]["quota_gpus"] != project_quota
    assert changed["departments"]["ai"]["quota_gpus"] == today["departments"]["ai"]["quota_gpus"]
    assert changed["recorded"]["max_abs_error_s"] > TOLERANCE_S  # no longer what was recorded


def test_bad_or_empty_history_ranges_are_400s_and_store_nothing(world, api):
    client = api(world.users["platform"])
    bad = ({"kind": "history"}, {"kind": "history", "weeks": 0}, {"kind": "history", "weeks": 500},
           {"kind": "history", "weeks": "4"}, {"kind": "history", "since": "yesterday"},
           {"kind": "history", "since": "2026-01-01T00:00:00"}, {"kind": "history", "weeks": 2, "overlay": 3},
           {"kind": "history", "weeks": 2, "since": "2026-01-01T00:00:00+08:00"}, {"kind": "replay"})
    for scenario in bad:
        r = client.post(reverse("api:advisorsearch-list"), {"seed": 1, "budget": 2, "scenario": scenario},
                        format="json")
        assert r.status_code == 400 and "scenario" in str(r.json()), (scenario, r.content)
    empty = client.post(reverse("api:advisorsearch-list"),
                        {"seed": 1, "budget": 2, "scenario": {"kind": "history", "weeks": 1}}, format="json")
    assert empty.status_code == 400 and "no job that ran" in str(empty.json())
    assert not AdvisorSearch.objects.exists() and not AdvisorHistoryData.objects.exists()


def test_the_form_chooses_the_history_and_names_the_field_when_it_is_empty(world):
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(world.users["platform"])
    page = client.get(reverse("advisor")).content.decode()
    assert 'name="scenario_kind"' in page and "This portal&#x27;s own history" in page
    body = {"scenario_kind": "history", "history_weeks": "", "overlay": 1, "window_s": 9600,
            "node_fraction": 0.065, "budget": 3, "seed": 1, "in_flight": 2, "p95_bound": 1.5,
            "p95_floor_s": 60, "bounds": "{}"}
    missing = client.post(reverse("advisor"), body).content.decode()
    assert "Give the number of weeks of history to replay." in missing
    body["history_weeks"] = 2
    empty = client.post(reverse("advisor"), body)
    assert empty.status_code == 200 and "no job that ran" in empty.content.decode()
    assert not AdvisorSearch.objects.exists()


def test_the_search_page_names_the_history(recorded, world):
    scenario = {"kind": "history", "since": recorded.start.isoformat(), "until": recorded.end.isoformat()}
    search = advisor_search_create(by=None, scenario=scenario, bounds=BOUNDS, seed=5, budget=1, in_flight=1)
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(world.users["platform"])
    page = client.get(reverse("advisor-search", args=[search.pk])).content.decode()
    assert "this portal's history from" in page and "(30 jobs)" in page


def test_item21_a_history_scenario_in_year_1_is_a_400_and_stores_nothing(world, api):
    client = api(world.users["platform"])
    for scenario in ({"kind": "history", "since": "0001-01-01T00:00:00+08:00",
                      "until": "0001-01-02T00:00:00+08:00"},
                     {"kind": "history", "since": "0001-01-01T00:00:00+00:00",
                      "until": "0001-01-02T00:00:00+00:00"}):
        r = client.post(reverse("api:advisorsearch-list"), {"seed": 1, "budget": 2, "scenario": scenario},
                        format="json")
        assert r.status_code == 400, (scenario, r.status_code, r.content[:300])
        assert "scenario.since: Give a date from 2000-01-01 to 2100-12-31." in str(r.json()), r.content
    assert not AdvisorSearch.objects.exists() and not AdvisorHistoryData.objects.exists()

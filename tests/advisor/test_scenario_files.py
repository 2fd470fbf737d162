"""Where an advisor scenario's files come from (issue 32): a search whose trace is missing fails
with the reason instead of staying queued, and the start form disables that scenario with the
reason (item 5); a scenario names files inside the traces folder only (item 22); a history range
the export cannot represent is refused naming the field (item 21)."""

import html
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from jobs.whatif.advisor import space
from jobs.whatif.advisor.scenario import Scenario, load
from jobs.whatif.models import AdvisorSearch
from jobs.whatif.replay.paths import ENV, ROOT
from jobs.whatif.services import advisor_reap, advisor_search_advance

pytestmark = pytest.mark.django_db


def _client(world, language="en"):
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(world.users["platform"])
    return client


def _stored(world, **scenario):
    """A search as one made before its trace went missing (or before scenarios were checked)."""
    return AdvisorSearch.objects.create(created_by=world.users["platform"], scenario={**Scenario().to_json(),
                                                                                      **scenario},
                                        bounds=space.check_bounds({}), seed=1, budget=6)


@pytest.fixture
def no_traces(tmp_path, monkeypatch):
    """This machine as a clone elsewhere: GPUPOOL_TRACES_DIR names a folder without the traces."""
    monkeypatch.setenv(ENV, str(tmp_path / "nowhere"))
    return tmp_path / "nowhere"


def test_item5_a_search_whose_trace_is_missing_fails_and_its_page_says_why(world, api, no_traces):
    search = _stored(world)
    assert advisor_search_advance(search.pk) == "failed"  # it raised FileNotFoundError, every 30 s
    search.refresh_from_db()
    assert search.state == "failed" and search.finished_at is not None
    assert "cannot be read, not found: " in search.error and ENV in search.error
    assert f"{no_traces}/alibaba-gpu-v2023/csv/openb_pod_list_default.csv" in search.error
    assert not search.candidates.exists()
    advisor_reap()  # the tick leaves a failed search alone
    assert advisor_search_advance(search.pk) == "failed"
    for language, said in (("en", "The search failed: its scenario could not be loaded."),
                           ("zh-hans", "搜索失败：其场景无法加载。")):
        page = _client(world, language).get(reverse("advisor-search", args=[search.pk])).content.decode()
        assert said in page and "openb_pod_list_default.csv" in page
        assert "hx-trigger" not in page  # over: no polling "0 of 7 — queued" forever
    detail = api(world.users["platform"]).get(reverse("api:advisorsearch-detail", args=[search.pk])).json()
    assert detail["state"] == "failed" and ENV in detail["error"]


@pytest.mark.parametrize("language, reason", [
    ("en", "the Alibaba GPU 2023 trace is not on this server"),
    ("zh-hans", "本服务器上没有 Alibaba GPU 2023 轨迹"),
])
def test_item5_the_alibaba_scenario_is_disabled_with_the_reason_when_its_trace_is_missing(
        world, api, no_traces, language, reason):
    client = _client(world, language)
    page = html.unescape(client.get(reverse("advisor")).content.decode())
    assert _disabled(page, "alibaba") and not _disabled(page, "history")
    assert reason in page and ENV in page and "openb_pod_list_default.csv" in page
    body = {"scenario_kind": "alibaba", "overlay": 1, "window_s": 9600, "node_fraction": 0.065, "budget": 6,
            "seed": 1, "in_flight": 2, "p95_bound": 1.5, "p95_floor_s": 60, "bounds": "{}"}
    refused = client.post(reverse("advisor"), body)
    assert refused.status_code == 200 and reason in html.unescape(refused.content.decode())
    r = api(world.users["platform"]).post(reverse("api:advisorsearch-list"), {"seed": 1, "budget": 3},
                                          format="json", HTTP_ACCEPT_LANGUAGE=language)
    assert r.status_code == 400 and reason in r.json()["detail"][0]
    assert not AdvisorSearch.objects.exists()


def _disabled(page: str, value: str) -> bool:
    """Whether the scenario radio button of ``value`` is disabled."""
    start = page.index(f'value="{value}"')
    tag = page[page.rindex("<input", 0, start):page.index(">", start)]
    return " disabled" in tag


def test_item5_the_readme_names_gpupool_traces_dir():
    readme = (ROOT / "README.md").read_text()
    assert ENV in readme and "policy advisor" in readme.lower()


def _start(client, scenario):
    return client.post(reverse("api:advisorsearch-list"), {"seed": 1, "budget": 2, "scenario": scenario},
                       format="json")


OUTSIDE = ("/etc/passwd", "../../../../../../etc/passwd", "../outside.csv", "/etc/passwd/../hosts.csv",
           "link/out.csv", "alibaba-gpu-v2023/csv/openb_pod_list_default.txt")


def test_item22_a_scenario_names_only_csv_files_inside_the_traces_folder(world, api, traces, tmp_path):
    (tmp_path / "outside.csv").write_text("secret\n")
    (traces / "link").symlink_to(tmp_path)  # a folder inside that points out of it
    client = api(world.users["platform"])
    for pods_csv in OUTSIDE:
        r = _start(client, {"pods_csv": pods_csv})
        assert r.status_code == 400, (pods_csv, r.content)
        assert r.json()["detail"][0].startswith("scenario.pods_csv: "), r.content
    assert not AdvisorSearch.objects.exists()
    inside = ("alibaba-gpu-v2023/csv/openb_pod_list_default.csv",
              str(traces / "alibaba-gpu-v2023" / "csv" / "openb_pod_list_default.csv"))
    for pods_csv in inside:
        r = _start(client, {"pods_csv": pods_csv})
        assert r.status_code == 201, (pods_csv, r.content)


def test_item22_a_stored_scenario_naming_a_file_outside_is_never_opened(world, traces):
    with pytest.raises(ValueError, match=r"scenario\.pods_csv"):
        load(Scenario(pods_csv="/etc/passwd"))
    search = _stored(world, pods_csv="/etc/passwd")  # stored before scenarios were checked
    assert advisor_search_advance(search.pk) == "failed"
    search.refresh_from_db()
    assert search.error.startswith("scenario.pods_csv: ")
    assert Path("/etc/passwd").exists()  # the refusal is not "file not found"


@pytest.mark.parametrize("since, until", [
    ("0001-01-01T00:00:00+08:00", "0001-01-03T00:00:00+08:00"),  # before year 1 in UTC
    ("0001-01-01T07:00:00+08:00", "0001-01-08T00:00:00+08:00"),
])
def test_item21_a_history_range_in_year_1_is_a_400_naming_the_field(world, api, since, until):
    r = _start(api(world.users["platform"]), {"kind": "history", "since": since, "until": until})
    assert r.status_code == 400, r.content
    assert r.json()["detail"][0].startswith("scenario.since: ")
    assert not AdvisorSearch.objects.exists()

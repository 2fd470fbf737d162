"""Cancelling an advisor search (issue 25): the API (platform admins; 404 for anyone else, as
every advisor endpoint, before the id is looked at; 404 for an unknown id; a repeated cancel is
200 and changes nothing; a finished search is 409, unchanged), the Cancel button of the search
page, and a running candidate's result that arrives after the cancel is discarded."""

import os
import threading

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from jobs.whatif.advisor import space
from jobs.whatif.advisor.scenario import Scenario
from jobs.whatif.models import AdvisorCandidate, AdvisorEvent, AdvisorSearch
from jobs.whatif.replay.paths import ALIBABA_2023, ENV, alibaba_dir
from jobs.whatif.replay.sim import ALIBABA_NODES
from jobs.whatif.services import advisor_candidate_run, advisor_search_advance, advisor_search_create
from tests.advisor.scene import finished_search

PERSONAS = ("platform", "auditor", "a_admin", "b_admin", "a_finance", "pa1_member", "pb_member", "outsider")
PODS = alibaba_dir() / "csv" / "openb_pod_list_default.csv"


def _running(by=None, state="running"):
    return AdvisorSearch.objects.create(created_by=by, scenario=Scenario().to_json(),
                                        bounds=space.check_bounds({}), seed=1, budget=3, state=state)


def _events(search):
    return list(AdvisorEvent.objects.filter(search=search, candidate=None).values_list("to_state", "reason"))


@pytest.mark.django_db
@pytest.mark.parametrize("persona", PERSONAS)
def test_only_platform_admins_cancel_and_others_get_404(world, api, persona):
    search = _running(world.users["platform"])
    client = api(world.users[persona])
    r = client.post(reverse("api:advisorsearch-cancel", args=[search.pk]))
    unknown = client.post(reverse("api:advisorsearch-cancel", args=[search.pk + 1000]))
    search.refresh_from_db()
    if persona == "platform":
        assert r.status_code == 200 and r.json()["state"] == "cancelled" == search.state
        assert unknown.status_code == 404
    else:  # the advisor is not theirs to know of: a search and an unknown id look the same
        assert (r.status_code, unknown.status_code, search.state) == (404, 404, "running")


@pytest.mark.django_db
def test_a_repeated_cancel_is_200_unchanged_and_a_finished_search_is_409(world, api):
    client = api(world.users["platform"])
    search = _running()
    url = reverse("api:advisorsearch-cancel", args=[search.pk])
    assert client.post(url).status_code == 200
    again = client.post(url)
    assert again.status_code == 200 and again.json()["state"] == "cancelled"
    assert _events(search) == [("cancelled", "cancelled by platform")]  # one transition, one event
    done, _cand = finished_search(world.users["platform"])
    r = client.post(reverse("api:advisorsearch-cancel", args=[done.pk]))
    assert r.status_code == 409 and r.json()["state"] == "done"
    assert AdvisorSearch.objects.get(pk=done.pk).state == "done" and not _events(done)


@pytest.mark.django_db
@pytest.mark.parametrize("language, words", [("en", ("Cancel search", "Cancel this search?")),
                                             ("zh-hans", ("取消搜索", "取消这次搜索？"))])
def test_the_search_page_has_a_cancel_button_while_the_search_runs(world, language, words):
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(world.users["platform"])
    search = _running()
    url = reverse("advisor-cancel", args=[search.pk])
    page = client.get(reverse("advisor-search", args=[search.pk])).content.decode()
    assert url in page and 'name="csrfmiddlewaretoken"' in page
    for word in words:
        assert word in page
    after = client.post(url, follow=True)
    assert after.status_code == 200 and AdvisorSearch.objects.get(pk=search.pk).state == "cancelled"
    assert url not in after.content.decode()  # over: no button
    done, _cand = finished_search(world.users["platform"])
    assert reverse("advisor-cancel", args=[done.pk]) not in client.get(
        reverse("advisor-search", args=[done.pk])).content.decode()
    client.post(reverse("advisor-cancel", args=[done.pk]))
    assert AdvisorSearch.objects.get(pk=done.pk).state == "done"



@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("openb")
def test_a_result_arriving_after_the_cancel_is_discarded(tmp_path, queue, monkeypatch):
    # The candidate's replay reads its pod list from a FIFO: it is claimed (running) and then
    # blocks until this test writes the pods — after cancelling the search. Scenario files sit in
    # the traces folder: this test's, with the trace's node list linked into it.
    csv = tmp_path / ALIBABA_2023 / "csv"
    csv.mkdir(parents=True)
    (csv / ALIBABA_NODES).symlink_to(PODS.parent / ALIBABA_NODES)
    monkeypatch.setenv(ENV, str(tmp_path))
    fifo = tmp_path / "openb_pod_list_fifo.csv"
    os.mkfifo(fifo)
    search = advisor_search_create(by=None, scenario={"pods_csv": fifo.name, "start": None, "window_s": None,
                                                      "node_fraction": 0.05},
                                   bounds={}, seed=1, budget=2, in_flight=1, projects=["d0/p00"])
    advisor_search_advance(search.pk)
    base = AdvisorCandidate.objects.get(search=search, number=0)
    out = {}

    def run():
        try:
            out["state"] = advisor_candidate_run(base.pk)
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    fd = None
    while fd is None and worker.is_alive():  # the replay opens the FIFO only after its claim
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            worker.join(0.05)
    assert fd is not None, out
    assert AdvisorCandidate.objects.get(pk=base.pk).state == "running"
    from jobs.whatif.services import advisor_search_cancel

    assert advisor_search_cancel(search=search)
    os.set_blocking(fd, True)
    with open(fd, "w") as fh, open(PODS) as pods:
        fh.write("".join(next(pods) for _ in range(40)))
    worker.join()
    base.refresh_from_db()
    assert out["state"] == "failed" and base.state == "failed" and base.result is None
    assert "discarded" in base.error
    assert list(AdvisorEvent.objects.filter(candidate=base).values_list("to_state", "reason"))[-1] == \
        ("failed", "discarded: search cancelled")
    assert AdvisorSearch.objects.get(pk=search.pk).state == "cancelled"
    assert AdvisorCandidate.objects.filter(search=search).count() == 1  # nothing more drawn

"""The search's services in one process (no broker: enqueue after commit never fires inside a
test transaction): drawing, claims, the reaper, and a search whose baseline cannot be replayed."""

from datetime import timedelta

import pytest
from django.db.models import Q
from django.utils import timezone

from jobs.whatif.models import AdvisorCandidate, AdvisorEvent, AdvisorSearch
from jobs.whatif.services import (
    _move_candidate,
    advisor_candidate_run,
    advisor_reap,
    advisor_search_advance,
    advisor_search_create,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("traces")]  # an (empty) trace to start from
PROJECTS = ["d0/p00", "d1/p04"]


def _search(**scenario):
    return advisor_search_create(by=None, scenario=scenario, bounds={}, seed=3, budget=4, in_flight=2,
                                 projects=PROJECTS)


def _moves(c):
    return list(AdvisorEvent.objects.filter(candidate=c).values_list("from_state", "to_state"))


def test_advancing_draws_today_and_keeps_k_candidates_in_flight_once():
    search = _search()
    assert advisor_search_advance(search.pk) == "running"
    assert advisor_search_advance(search.pk) == "running"  # again: nothing more is drawn
    rows = list(AdvisorCandidate.objects.filter(search=search).order_by("number"))
    assert [c.number for c in rows] == [0, 1]
    assert rows[0].params["overcommit_ratio"] == 1.0 and rows[0].inputs["policy"]["backfill"] is True
    assert 0.6 <= rows[1].params["overcommit_ratio"] <= 1.5


def test_a_search_whose_baseline_cannot_be_replayed_fails_and_later_deliveries_are_skipped(traces):
    (traces / "mine").mkdir()
    (traces / "mine" / "openb_pod_list_gone.csv").write_text("")
    search = _search(pods_csv="mine/openb_pod_list_gone.csv")
    (traces / "mine" / "openb_pod_list_gone.csv").unlink()  # gone before the worker reads it
    advisor_search_advance(search.pk)
    base = AdvisorCandidate.objects.get(search=search, number=0)
    assert advisor_candidate_run(base.pk) == "failed"
    search.refresh_from_db()
    assert search.state == "failed" and "not found: " in search.error
    assert "openb_pod_list_gone.csv" in search.error
    assert advisor_candidate_run(base.pk) == "skipped"  # a second delivery of a finished candidate
    other = AdvisorCandidate.objects.get(search=search, number=1)
    assert advisor_candidate_run(other.pk) == "skipped"  # the search is over
    assert _moves(base) == [("", "queued"), ("queued", "running"), ("running", "failed")]


def test_the_reaper_requeues_a_candidate_without_heartbeat_and_its_late_finish_is_discarded(settings):
    search = _search()
    advisor_search_advance(search.pk)
    c = AdvisorCandidate.objects.get(search=search, number=1)
    old = timezone.now() - timedelta(seconds=settings.ADVISOR_STALE_SECONDS + 5)
    AdvisorCandidate.objects.filter(pk=c.pk).update(state="running", attempt=1, heartbeat_at=old)
    fresh = AdvisorCandidate.objects.get(search=search, number=0)
    AdvisorCandidate.objects.filter(pk=fresh.pk).update(state="running", attempt=1,
                                                        heartbeat_at=timezone.now())
    assert advisor_reap() == 1
    c.refresh_from_db()
    assert (c.state, c.attempt) == ("queued", 1)
    assert AdvisorCandidate.objects.get(pk=fresh.pk).state == "running"  # alive: left alone
    assert ("running", "queued") in _moves(c)
    # a new delivery claims it again (attempt 2, as advisor_candidate_run does) ...
    assert _move_candidate(c, "queued", "running", where=Q(attempt=1), attempt=2, heartbeat_at=timezone.now())
    # ... and the dead worker's replay, finishing now, stores its result the way
    # advisor_candidate_run does, guarded by its attempt 1: it must change nothing.
    assert not _move_candidate(c, "running", "done", where=Q(attempt=1), result={"stale": True},
                               finished_at=timezone.now())
    c.refresh_from_db()
    assert (c.state, c.attempt, c.result, c.finished_at) == ("running", 2, None, None)
    assert ("running", "done") not in _moves(c)
    assert AdvisorSearch.objects.get(pk=search.pk).state == "running"

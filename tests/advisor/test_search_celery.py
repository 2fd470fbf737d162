"""Advisor searches on a real Celery worker over real replays of the Alibaba 2023 trace (small
scenarios): a search finishes with every result stored; a worker SIGKILLed in the middle of a
candidate is replaced, the candidate is replayed again and the search ends with the same
candidates and results as an uninterrupted one — no finished candidate lost or run twice."""

from __future__ import annotations

import signal

import pytest

from jobs.whatif.models import AdvisorCandidate, AdvisorEvent, AdvisorSearch
from jobs.whatif.replay.paths import alibaba_dir
from jobs.whatif.services import advisor_reap, advisor_search_create
from tests.celery_procs import start_worker
from tests.waiting import wait_until

CSV = alibaba_dir() / "csv" / "openb_pod_list_default.csv"
pytestmark = [
    pytest.mark.celery_worker,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("openb"),  # skipped locally without the trace, failed under CI
]

TINY = {"overlay": 1, "window_s": 1200.0, "node_fraction": 0.05}  # 253 jobs on 64 nodes: ~1 s a replay
LONGER = {"overlay": 1, "window_s": 6000.0, "node_fraction": 0.1}  # a few seconds: room to kill it mid-run
BOUNDS = {"queueing": ["best_effort"], "night_hours": [20, 8]}
PROJECTS = ["d0/p00", "d0/p01", "d0/p02", "d0/p03", "d1/p04", "d1/p06", "d1/p07"]



def _search(scenario, budget, seed=7):
    return advisor_search_create(by=None, scenario=scenario, bounds=BOUNDS, seed=seed, budget=budget,
                                 in_flight=2, projects=PROJECTS)


def _finished(search):
    return lambda: AdvisorSearch.objects.get(pk=search.pk).state in ("done", "failed")


def _about(search):
    return lambda: str(list(AdvisorCandidate.objects.filter(search=search).values_list("number", "state")))


def _stop(proc):
    if proc.poll() is None:
        proc.terminate()
    print(proc.communicate(timeout=60)[0].decode(errors="replace"))


def _outcome(search):
    """What must not depend on crashes or workers: each candidate's params, figures and score."""
    rows = AdvisorCandidate.objects.filter(search=search).order_by("number")
    return [(c.number, c.params, {k: v for k, v in c.result.items() if k != "wall_seconds"}, c.objective,
             c.feasible) for c in rows]


def test_a_small_search_finishes_with_every_candidate_stored_and_scored(queue):
    search = _search(TINY, budget=4)
    worker = start_worker(queue)
    try:
        wait_until(_finished(search), "the search to finish", timeout=900, about=_about(search))
    finally:
        _stop(worker)
    search.refresh_from_db()
    assert search.state == "done"
    rows = list(AdvisorCandidate.objects.filter(search=search).order_by("number"))
    assert [c.number for c in rows] == [0, 1, 2, 3, 4]
    assert all(c.state == "done" and c.runs == 1 and c.result["jobs"] > 0 for c in rows)
    assert rows[0].objective == pytest.approx(1.0) and rows[0].feasible  # today against itself
    assert all(c.objective is not None and c.feasible is not None for c in rows)
    assert set(rows[0].result["departments"]) == {"d0", "d1"}
    # one event per transition: created, claimed, done — nothing run twice
    for c in rows:
        moves = list(AdvisorEvent.objects.filter(candidate=c).values_list("from_state", "to_state"))
        assert moves == [("", "queued"), ("queued", "running"), ("running", "done")], (c.number, moves)


def test_a_worker_killed_mid_candidate_loses_nothing_and_the_search_ends_as_without_the_kill(queue, settings):
    settings.ADVISOR_STALE_SECONDS = 4
    reference = _search(LONGER, budget=3, seed=11)
    worker = start_worker(queue, ADVISOR_STALE_SECONDS="4")
    try:
        wait_until(_finished(reference), "the uninterrupted search to finish", timeout=900,
                   about=_about(reference))
        search = _search(LONGER, budget=3, seed=11)
        # the durable fact: candidate 1 has been claimed (its event row); its replay takes seconds
        claimed = AdvisorEvent.objects.filter(candidate__search=search, candidate__number=1,
                                              to_state="running")
        wait_until(claimed.exists, "candidate 1 to be claimed", interval=0.01)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        done_at_kill = set(AdvisorCandidate.objects.filter(search=search, state="done")
                           .values_list("pk", flat=True))
        # nobody stamps a dead worker's candidate: the reaper (beat's tick) re-queues it
        wait_until(advisor_reap, "the reaper to re-queue the dead worker's candidate", interval=0.5)
        worker = start_worker(queue, ADVISOR_STALE_SECONDS="4")
        wait_until(_finished(search), "the search to finish after the restart", timeout=900,
                   about=_about(search))
    finally:
        _stop(worker)
    search.refresh_from_db()
    assert search.state == "done"
    rows = list(AdvisorCandidate.objects.filter(search=search))
    assert all(c.state == "done" and c.runs == 1 for c in rows)  # every result stored once
    reaped = AdvisorEvent.objects.filter(candidate__search=search, from_state="running", to_state="queued")
    assert reaped.exists()  # the kill did hit a running candidate
    for pk in done_at_kill:  # what was finished at the kill was never claimed again
        assert AdvisorEvent.objects.filter(candidate_id=pk, to_state="running").count() == 1
    assert _outcome(search) == _outcome(reference)  # seeded and reproducible, kill or not

"""A history-scenario search on a real Celery worker (issue 25): the worker — another process —
replays the export stored with the search in the database, and today's candidate reproduces the
recorded queue delays (tests/advisor/test_history_scenario.py checks the same in one process)."""

from __future__ import annotations

import pytest

from jobs.whatif.models import AdvisorCandidate, AdvisorSearch
from jobs.whatif.services import advisor_search_create
from tests.celery_procs import start_worker
from tests.waiting import wait_until

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


def test_a_worker_replays_the_stored_history_and_today_reproduces_it(queue, recorded):
    rec = recorded
    search = advisor_search_create(
        by=None, scenario={"kind": "history", "since": rec.start.isoformat(), "until": rec.end.isoformat()},
        bounds={"night_hours": [22, 6]}, seed=5, budget=2, in_flight=2)
    worker = start_worker(queue)
    try:
        wait_until(lambda: AdvisorSearch.objects.get(pk=search.pk).state in ("done", "failed"),
                   "the search to finish", timeout=600,
                   about=lambda: str(list(AdvisorCandidate.objects.filter(search=search)
                                          .values_list("number", "state", "error"))))
    finally:
        worker.terminate()
        print(worker.communicate(timeout=60)[0].decode(errors="replace"))
    search.refresh_from_db()
    assert search.state == "done", search.error
    rows = list(AdvisorCandidate.objects.filter(search=search).order_by("number"))
    assert [(c.number, c.state) for c in rows] == [(0, "done"), (1, "done"), (2, "done")]
    today = rows[0].result["recorded"]
    assert today["compared"] == 30 and today["max_abs_error_s"] <= 1.0
    assert rows[0].objective == pytest.approx(1.0)

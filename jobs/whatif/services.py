"""The policy advisor's writes (issue 25; docs/advisor.md): start a search, run one candidate,
advance a search, reap candidates whose worker died.

How a search moves: ``advisor_search_create`` stores the search and queues ``jobs.advisor_advance``.
Advancing (under the search row's lock, so two completions never draw the same number) scores
finished candidates against today's (number 0), draws new ones from the optimiser
(:mod:`jobs.whatif.advisor.study`) while fewer than ``in_flight`` are queued or running, and queues one
``jobs.advisor_candidate`` task per new candidate. Each candidate task advances its search when
it ends (in the same task), so the completions drive the search; ``jobs.advisor_tick`` (beat) reaps candidates
whose worker died (no heartbeat for ``ADVISOR_STALE_SECONDS``) and re-sends lost messages.

A finished candidate is never replayed again and never lost: the claim (queued → running) and
the finish (running, same ``attempt`` → done) are conditional updates, and a finished row is final.
"""

from __future__ import annotations

import threading
import traceback
from datetime import UTC, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs.whatif.advisor import objective, space, study
from jobs.whatif.advisor.scenario import HistoryScenario, Scenario, ScenarioUnavailable, missing_files, parse
from jobs.whatif.models import (
    CANDIDATE_MOVES,
    SEARCH_MOVES,
    AdvisorCandidate,
    AdvisorEvent,
    AdvisorHistoryData,
    AdvisorSearch,
    CandidateState,
    SearchState,
)
from portal.enqueue import enqueue

FINISHED = (CandidateState.DONE, CandidateState.FAILED)
SCENARIO_FAILED = "scenario cannot load"  # the event's reason: the page names the cause with it


def _stale() -> timedelta:
    return timedelta(seconds=settings.ADVISOR_STALE_SECONDS)


# -- transitions -------------------------------------------------------------------------------
def _move_search(search_id: int, frm: str, to: str, reason: str = "", **fields) -> bool:
    assert to in SEARCH_MOVES.get(frm, ()), (frm, to)
    with transaction.atomic():
        moved = AdvisorSearch.objects.filter(pk=search_id, state=frm).update(state=to, **fields)
        if moved:
            AdvisorEvent.objects.create(search_id=search_id, from_state=frm, to_state=to, reason=reason)
    return bool(moved)


def _move_candidate(c: AdvisorCandidate, frm: str, to: str, reason: str = "", *, where=None,
                    **fields) -> bool:
    assert to in CANDIDATE_MOVES.get(frm, ()), (frm, to)
    with transaction.atomic():
        rows = AdvisorCandidate.objects.filter(pk=c.pk, state=frm)
        if where is not None:
            rows = rows.filter(where)
        moved = rows.update(state=to, **fields)
        if moved:
            AdvisorEvent.objects.create(search_id=c.search_id, candidate_id=c.pk, from_state=frm, to_state=to,
                                        reason=reason)
    return bool(moved)


# -- start ---------------------------------------------------------------------------------------
def advisor_search_create(*, by, scenario: dict, bounds: dict, seed: int, budget: int, in_flight: int = 2,
                          p95_bound: float = 1.5, p95_floor_s: float = 60.0, projects: list[str] | None = None
                          ) -> AdvisorSearch:
    """Validate and store a search, then queue its first advance. ``projects``: the scenario's
    projects (when not given, the first advance reads them from the trace, in the worker). Bad
    input raises ValueError, storing nothing.

    A ``history`` scenario (``{"kind": "history", "weeks": N}`` or ``since`` / ``until``) is
    exported here, once (``jobs.whatif.history``), and stored with the search (:class:`AdvisorHistoryData`);
    its projects are the history's tenant paths. An empty history is refused."""
    s = parse(scenario)
    files = None
    if isinstance(s, HistoryScenario):
        s, files, projects = _export_history(s)
    elif missing_files(s):
        raise ValueError(trace_missing_text(s))
    checked = space.check_bounds(bounds)
    objective.check_rules(p95_bound, p95_floor_s)
    for name, v, low, high in (("seed", seed, 0, 2**31 - 1), ("budget", budget, 1, 2000),
                               ("in_flight", in_flight, 1, 64)):
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise ValueError(f"{name}: a whole number from {low} to {high}")
    with transaction.atomic():
        search = AdvisorSearch.objects.create(
            created_by=by, scenario=s.to_json(), bounds=checked, seed=seed, budget=budget,
            in_flight=in_flight, p95_bound=p95_bound, p95_floor_s=p95_floor_s,
            projects=sorted(projects or []))
        if files is not None:
            AdvisorHistoryData.objects.create(search=search, files=files)
        AdvisorEvent.objects.create(search=search, from_state="", to_state=SearchState.QUEUED)
        enqueue("jobs.advisor_advance", search.pk)
    return search


def trace_missing_text(s: Scenario | None = None) -> str | None:
    """Why the Alibaba scenario ``s`` (the default one when None) cannot run on this server, in the
    reader's language; None when its trace is there. The start form disables the scenario with it."""
    missing = missing_files(s or Scenario())
    if not missing:
        return None
    from jobs.whatif.replay.paths import ENV

    return _("scenario: the Alibaba GPU 2023 trace is not on this server (%(file)s is missing); set "
             "%(env)s to the traces folder that holds it (README).") % {"file": missing[0], "env": ENV}


def _export_history(s: HistoryScenario) -> tuple[HistoryScenario, dict, list[str]]:
    """The history's range exported now: (the scenario with its range and job count, the files,
    the projects). Errors name the scenario field (ValueError)."""
    from dataclasses import replace

    from django.core.exceptions import ValidationError

    from jobs.whatif import history

    try:
        start, end = history.history_range(weeks=s.weeks, since=s.since, until=s.until)
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise ValueError(f"scenario.{field}: {' '.join(messages)}") from None
    zone = timezone.get_default_timezone()
    for field, moment in (("since", start), ("until", end)):
        try:  # what the export does with it: a time near year 1 or 9999 has no UTC / site-zone form
            moment.astimezone(UTC), moment.astimezone(zone)
        except OverflowError:
            raise ValueError(_("scenario.%(field)s: %(value)s is out of range; give a date-time between the "
                               "years 2 and 9998.") % {"field": field, "value": moment.isoformat()}) from None
    export = history.history_export(start=start, end=end)
    if not export.trace:
        raise ValueError(_("scenario: the portal's history has no job that ran from %(start)s to %(end)s; "
                           "choose a longer range.") % {"start": f"{start:%Y-%m-%d %H:%M}",
                                                        "end": f"{end:%Y-%m-%d %H:%M}"})
    s = replace(s, start=start.astimezone(zone).isoformat(), end=end.astimezone(zone).isoformat(),
                jobs=len(export.trace))
    return s, history.texts(export), sorted({row["tenant"] for row in export.trace})


def advisor_search_cancel(*, search: AdvisorSearch, by=None) -> bool:
    """Stop the search: no candidate is drawn or claimed any more, and a running candidate's result
    that arrives afterwards is discarded (the candidate ends failed, "search cancelled"; see
    :func:`advisor_candidate_run`). False when the search had already finished (nothing changes)."""
    reason = f"cancelled by {by.username}"[:200] if by is not None else "cancelled"
    return any(_move_search(search.pk, frm, SearchState.CANCELLED, reason, finished_at=timezone.now())
               for frm in (SearchState.QUEUED, SearchState.RUNNING))


# -- advance ---------------------------------------------------------------------------------------
def advisor_search_advance(search_id: int) -> str:
    """Score, draw and queue (see the module docstring). Safe to run any number of times."""
    with transaction.atomic():
        search = AdvisorSearch.objects.select_for_update().get(pk=search_id)
        if search.state == SearchState.QUEUED:
            _move_search(search.pk, SearchState.QUEUED, SearchState.RUNNING)
            search.state = SearchState.RUNNING
        if search.state != SearchState.RUNNING:
            return search.state
        if not search.projects and search.scenario.get("kind", "alibaba") == "alibaba":
            from jobs.whatif.advisor.scenario import load

            try:
                search.projects = sorted({j.tenant for j in load(Scenario.from_json(search.scenario))[0]})
            except ValueError as exc:  # its trace is missing (ScenarioUnavailable) or refused: say so
                _move_search(search.pk, SearchState.RUNNING, SearchState.FAILED, SCENARIO_FAILED,
                             finished_at=timezone.now(), error=str(exc))
                return SearchState.FAILED
            AdvisorSearch.objects.filter(pk=search.pk).update(projects=search.projects)
        cands = {c.number: c for c in search.candidates.all()}
        if 0 not in cands:
            cands[0] = _new_candidate(search, 0, space.today(search.projects))
        if cands[0].state == CandidateState.FAILED:  # nothing can be scored without today's replay
            _move_search(search.pk, SearchState.RUNNING, SearchState.FAILED, "baseline failed",
                         finished_at=timezone.now(), error=cands[0].error)
            return SearchState.FAILED
        _score(search, cands)
        _draw(search, cands)
        if len(cands) == search.budget + 1 and all(c.state in FINISHED for c in cands.values()):
            _move_search(search.pk, SearchState.RUNNING, SearchState.DONE, finished_at=timezone.now())
            return SearchState.DONE
    return SearchState.RUNNING


def _rules(search: AdvisorSearch) -> objective.Rules:
    return objective.Rules(search.p95_bound, search.p95_floor_s)


def _score(search: AdvisorSearch, cands: dict[int, AdvisorCandidate]) -> None:
    base = cands[0]
    if base.state != CandidateState.DONE:
        return
    for c in cands.values():
        if c.state == CandidateState.DONE and c.objective is None:
            v = objective.evaluate(base.result, c.result, _rules(search))
            c.objective, c.feasible = v.objective, v.feasible
            c.verdict = {"terms": v.terms, "violations": list(v.violations),
                         "worst_p95_ratio": v.worst_p95_ratio}
            AdvisorCandidate.objects.filter(pk=c.pk).update(objective=c.objective, feasible=c.feasible,
                                                            verdict=c.verdict)


def _draw(search: AdvisorSearch, cands: dict[int, AdvisorCandidate]) -> None:
    dims = space.dimensions(search.bounds, search.projects)
    while len(cands) <= search.budget:
        n = len(cands)
        busy = sum(1 for c in cands.values() if c.state not in FINISHED)
        told_upto = study.history_for(n, search.in_flight)
        ready = all(cands[k].state in FINISHED and (cands[k].objective is not None
                                                    or cands[k].state == CandidateState.FAILED)
                    for k in range(told_upto))
        if busy >= search.in_flight or not ready:
            return
        told = [study.Told(k, cands[k].params, cands[k].objective, len(cands[k].verdict["violations"]))
                for k in range(told_upto) if cands[k].objective is not None]
        cands[n] = _new_candidate(search, n, study.next_params(search.seed, n, dims, told))


def _new_candidate(search: AdvisorSearch, number: int, params: dict) -> AdvisorCandidate:
    c = AdvisorCandidate.objects.create(search=search, number=number, params=params,
                                        inputs=space.replay_inputs(params, search.bounds),
                                        enqueued_at=timezone.now())
    AdvisorEvent.objects.create(search=search, candidate=c, from_state="", to_state=CandidateState.QUEUED)
    enqueue("jobs.advisor_candidate", c.pk)
    return c


# -- one candidate ---------------------------------------------------------------------------------
def advisor_candidate_run(candidate_id: int) -> str:
    """The Celery task's body: claim, replay, store, advance. A candidate that is running elsewhere
    or finished is left alone ("skipped")."""
    c = AdvisorCandidate.objects.select_related("search").filter(pk=candidate_id).first()
    if c is None or c.search.state != SearchState.RUNNING:
        return "skipped"
    attempt = c.attempt + 1
    now = timezone.now()
    if not _move_candidate(c, CandidateState.QUEUED, CandidateState.RUNNING, where=Q(attempt=c.attempt),
                           attempt=attempt, heartbeat_at=now):
        return "skipped"
    beat = _Heartbeat(c.pk, attempt)
    beat.start()
    try:
        result, error = _replay(c), ""
    except ScenarioUnavailable as exc:  # the reason, not a traceback: the page shows it
        result, error = None, str(exc)
    except Exception:  # a bad candidate fails alone; the search goes on
        result, error = None, traceback.format_exc(limit=5)[-4000:]
    finally:
        beat.stop()
    mine = Q(attempt=attempt)
    with transaction.atomic():
        # Under the search row's lock: a cancel either committed before (the result is discarded)
        # or waits until the result is stored.
        search_state = AdvisorSearch.objects.select_for_update().values_list("state", flat=True) \
            .get(pk=c.search_id)
        if search_state != SearchState.RUNNING:
            to, reason, fields = CandidateState.FAILED, f"discarded: search {search_state}", {
                "error": f"The search was {search_state} while this candidate ran: its result was "
                         "discarded."}
        elif result is not None:
            to, reason, fields = CandidateState.DONE, "", {"result": result, "runs": F("runs") + 1}
        else:
            to, reason, fields = CandidateState.FAILED, "replay failed", {"error": error}
        moved = _move_candidate(c, CandidateState.RUNNING, to, reason, where=mine, finished_at=timezone.now(),
                                **fields)
        state = to if moved else "superseded"
    # Advance here, not in a queued task: behind the queued candidates it would leave a worker
    # idle for a whole replay before the next candidate is drawn. (If it fails, the tick retries.)
    advisor_search_advance(c.search_id)
    return state


def _replay(c: AdvisorCandidate) -> dict:
    from jobs.whatif.advisor.scenario import run, run_history

    scenario = parse(c.search.scenario)
    if isinstance(scenario, HistoryScenario):  # the export stored with the search, read once per worker
        def files():
            return AdvisorHistoryData.objects.get(search_id=c.search_id).files

        return run_history(("search", c.search_id), files, c.inputs)
    return run(scenario, c.inputs)


class _Heartbeat:
    """Stamps the claimed candidate every quarter of the stale interval while the replay runs
    (in this process: a dead worker stops stamping, which is how the reaper knows)."""

    def __init__(self, candidate_id: int, attempt: int) -> None:
        self.candidate_id, self.attempt = candidate_id, attempt
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"advisor-beat-{candidate_id}")

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def _run(self) -> None:
        try:
            while not self.done.wait(settings.ADVISOR_STALE_SECONDS / 4):
                AdvisorCandidate.objects.filter(pk=self.candidate_id, state=CandidateState.RUNNING,
                                                attempt=self.attempt).update(heartbeat_at=timezone.now())
        finally:
            connection.close()  # this thread's own connection


# -- the reaper (beat) -----------------------------------------------------------------------------
def advisor_reap() -> int:
    """Candidates whose worker died go back to queued and are sent again; queued candidates whose
    message may be lost are sent again (a duplicate is skipped by the claim). Then every running
    search advances. Returns the number of candidates re-queued."""
    now = timezone.now()
    requeued = 0
    for c in AdvisorCandidate.objects.filter(state=CandidateState.RUNNING, heartbeat_at__lt=now - _stale()):
        if _move_candidate(c, CandidateState.RUNNING, CandidateState.QUEUED, "no heartbeat: worker lost",
                           where=Q(attempt=c.attempt), enqueued_at=now):
            enqueue("jobs.advisor_candidate", c.pk)
            requeued += 1
    for c in AdvisorCandidate.objects.filter(state=CandidateState.QUEUED, enqueued_at__lt=now - _stale(),
                                             search__state=SearchState.RUNNING):
        if AdvisorCandidate.objects.filter(pk=c.pk, state=CandidateState.QUEUED,
                                           enqueued_at=c.enqueued_at).update(enqueued_at=now):
            enqueue("jobs.advisor_candidate", c.pk)
    for search_id in AdvisorSearch.objects.filter(state__in=[SearchState.QUEUED, SearchState.RUNNING]) \
            .values_list("pk", flat=True):
        enqueue("jobs.advisor_advance", search_id)
    return requeued


# -- who sees them (apply, its preview: jobs.whatif.proposals) ------------------------------------
def visible_searches(user):
    """Searches replay the whole pool: platform admins see them all, nobody else any."""
    from portal.selectors import scope_for

    if scope_for(user).platform_admin:
        return AdvisorSearch.objects.all()
    return AdvisorSearch.objects.none()


def visible_candidates(user):
    return AdvisorCandidate.objects.filter(search__in=visible_searches(user))

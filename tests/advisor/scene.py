"""A finished advisor search for page and API tests: today's settings and one candidate, each a
real replay (the production engine, jobs.whatif.advisor.scenario.replay) of a small synthetic trace."""

from __future__ import annotations

from django.utils import timezone

from jobs.whatif.advisor import objective, space
from jobs.whatif.advisor.scenario import Scenario, replay
from jobs.whatif.models import AdvisorCandidate, AdvisorSearch
from jobs.whatif.replay.trace import TraceJob, TraceNode

PROJECTS = ["d0/p00", "d0/p01", "d1/p04"]


def trace() -> tuple[list[TraceJob], list[TraceNode]]:
    nodes = [TraceNode(f"n{i}", 8, "G") for i in range(2)]
    jobs = [TraceJob(f"j{i}", float(30 * i), 600.0, 1 + i % 4, tenant=PROJECTS[i % 3]) for i in range(40)]
    return jobs, nodes


# The candidate: quotas × 1.5 and borrowing capped at half a project's quota — objective 0.957 on
# this trace, better than today's (1.0), so the page offers it and apply files it.
BETTER = {"overcommit_ratio": 1.5, "borrow_limit_ratio": 0.5}


def finished_search(by=None, *, changes: dict | None = None) -> tuple[AdvisorSearch, AdvisorCandidate]:
    """``changes``: the candidate's params that differ from today's (default :data:`BETTER`)."""
    bounds = space.check_bounds({})
    search = AdvisorSearch.objects.create(created_by=by, scenario=Scenario().to_json(), bounds=bounds, seed=1,
                                          budget=1, in_flight=1, projects=PROJECTS, state="done",
                                          finished_at=timezone.now())
    jobs, nodes = trace()
    rows = []
    today = space.today(PROJECTS)
    for number, params in ((0, today), (1, {**today, **(BETTER if changes is None else changes)})):
        inputs = space.replay_inputs(params, bounds)
        rows.append(AdvisorCandidate(search=search, number=number, params=params, inputs=inputs, state="done",
                                     attempt=1, runs=1, result=replay(jobs, nodes, inputs),
                                     finished_at=timezone.now()))
    for c in rows:
        v = objective.evaluate(rows[0].result, c.result, objective.Rules(p95_bound=100.0))
        c.objective, c.feasible = v.objective, v.feasible
        c.verdict = {"terms": v.terms, "violations": list(v.violations), "worst_p95_ratio": v.worst_p95_ratio}
        c.save()
    return search, rows[1]

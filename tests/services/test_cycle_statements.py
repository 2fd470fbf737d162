"""How many SQL statements one scheduling cycle runs (issue 32 item 24): a fixed number, whatever
the size of the queue, the number of projects or of the reservations the cycle makes.

The scene: 2 nodes × 8 GPUs. Department A's project holds every GPU with a 2 × 8 job; department
B (its quota as large as the pool's: overcommit) has P strict-FIFO projects, each with k 8-GPU
jobs that are in quota but find no room. Each of B's projects' head gets a reservation (a FIFO
blocker's own one), so the cycle makes ~P of them. A warm cycle after the submissions, and the
next one (nothing changed), are counted at two sizes."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.budgets import budget_set
from jobs.scheduling.cycle import schedule_once
from portal.models import Department, Queueing
from tests import factories as fx

pytestmark = pytest.mark.django_db

# In this scene, warm or rebuilt: the transaction (here a savepoint and its release) and the
# cycle's lock; the configuration's digest — and, in a cycle where it changed, the configuration
# itself (one statement); the budgets (billing's provider: one statement while no budget is set);
# the live jobs' states and the elastic ones — or, when the engine is rebuilt, the GPU-holding
# jobs and the queue; the reservations (one statement for all of them); the in-quota/on-loan
# split. Admissions, preemptions and growths add one statement each when there are any. Before
# issue 32 item 24: 11 statements for the configuration alone, and one to three per reservation.
# A snapshot also reads the fair share's decayed usage (billing's provider: one statement, issue 34).
# Issue 35 adds five, each one statement whatever the queue: the sweep of dependencies that can no
# longer be met (before the cycle), the reservation and maintenance windows, the queues on hold, and
# the reasons of the jobs held back before the engine (waiting dependencies; capped array tasks).
BOUND = 16
# With budgets set (none spent), billing's over-budget provider reads, beyond the budgets, the
# tree, the database and meter cursor of its cached figure, the projects the budgets cover, the
# meter's state and a bound of the usage since: five more.
BOUND_WITH_BUDGETS = BOUND + 5


def _pool():
    """The pool held whole by department A; department B, where the waiting projects go."""
    f = fx.flavor()
    fx.nodes(f, 2)
    a, b = fx.department("A"), fx.department("B")
    fx.quota(f, a, 16)
    fx.quota(f, b, 16)
    holder = fx.project("a-holder", a)
    fx.quota(f, holder, 16)
    fx.submit(holder, f, workers=2, gpus=8, name="holds-all")
    assert schedule_once().admitted == 1
    return f, b


def _wait(f, b, first: int, projects: int, jobs_each: int) -> None:
    """Projects ``first`` … ``first + projects - 1`` of B, strict FIFO, each with its jobs."""
    for i in range(first, first + projects):
        project = fx.project(f"b{i}", b)
        project.queueing = Queueing.STRICT_FIFO
        project.save()
        fx.quota(f, project, 16)
        for k in range(jobs_each):
            fx.submit(project, f, gpus=8, name=f"b{i}-{k}")


def _cycles() -> list[tuple[int, int]]:
    """(statements, reservations) of the cycle that sees the new jobs, then of one where nothing
    changed."""
    counts = []
    for _ in range(2):
        with CaptureQueriesContext(connection) as ctx:
            report = schedule_once()
        assert report.admitted == 0
        counts.append((len(ctx.captured_queries), report.reservations))
    return counts


@pytest.mark.parametrize("budgets", [False, True])
def test_item24_a_cycle_runs_a_fixed_number_of_statements_whatever_the_queue(budgets):
    f, b = _pool()
    for department in Department.objects.all() if budgets else ():
        budget_set(actor=None, department=department, card_hours="100000")
    _wait(f, b, 0, projects=2, jobs_each=2)
    small = _cycles()
    _wait(f, b, 2, projects=10, jobs_each=6)  # 12 projects, 64 jobs waiting
    large = _cycles()
    # The larger queue made more reservations (new ones are written, unchanged ones only compared)…
    assert large[0][1] > small[0][1]
    # … with the same statements as the small one, and no more than the bound.
    assert [n for n, _ in large] == [n for n, _ in small], (small, large)
    assert max(n for n, _ in small + large) <= (BOUND_WITH_BUDGETS if budgets else BOUND), (small, large)

"""The reads the busiest pages make, rewritten for 100,000 jobs (bench/load.py): devices held,
summed from the placements in SQL, and the queue order, cut from ids only. Each is checked
against the plain Python rule it replaced, on jobs that exercise the corners (shared GPUs,
multi-worker gangs, an empty placement, on-loan jobs; cached positions, jobs the cycle has not
ranked yet, every live state)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs import selectors
from jobs.models import Job
from jobs.selectors import (
    QUEUE_STATES,
    _holding_usage,
    gpus_in_use_by_flavor,
    holding_usage,
    queue_order,
    quota_usage_rows,
)
from tests import factories as fx

pytestmark = pytest.mark.django_db


def _job(project, f, state, placement=(), *, on_loan=None, prio=None, age=0, name="j"):
    job = fx.submit(project, f, gpus=1, name=name, prio=prio)
    Job.objects.filter(pk=job.pk).update(
        state=state,
        placement=[list(map(list, worker)) for worker in placement],
        on_loan=on_loan,
        submitted_at=timezone.now() - timedelta(seconds=age),
    )
    return job.pk


@pytest.fixture
def tree():
    whole, shared = fx.flavor("A100"), fx.flavor("L40-shared", shareable=True)
    a = fx.department("A")
    pa, pb = fx.project("pa", a), fx.project("pb", a)
    for f in (whole, shared):
        fx.nodes(f, 1)  # a flavor without nodes takes no jobs (issue 18 item 4)
        fx.quota(f, a, 8)
        fx.quota(f, pa, 4)
        fx.quota(f, pb, 4)
    return whole, shared, pa, pb


def _reference(jobs):
    """The loop the SQL aggregate replaced: per job, sum the milli of every slot."""
    usage = {}
    rows = jobs.values_list("flavor_id", "project_id", "placement", "on_loan")
    for flavor, project, placement, on_loan in rows:
        milli = sum(m for worker in placement for _node, _gpu, m in worker)
        pair = usage.setdefault(flavor, {}).setdefault(project, [Decimal(0), Decimal(0)])
        pair[1 if on_loan else 0] += Decimal(milli) / 1000
    return {f: {p: tuple(v) for p, v in by_p.items()} for f, by_p in usage.items()}


def test_held_devices_summed_in_sql_equal_the_placements(tree):
    whole, shared, pa, pb = tree
    _job(pa, whole, "running", [[(1, 0, 1000), (1, 1, 1000)], [(2, 0, 1000), (2, 1, 1000)]], on_loan=False)
    _job(pa, whole, "admitted", [[(3, 4, 1000)]], on_loan=True)
    _job(pb, whole, "running", [], on_loan=False)  # held nothing yet: its project still appears, at 0
    _job(pa, shared, "running", [[(5, 0, 250)]], on_loan=False)
    _job(pa, shared, "running", [[(5, 0, 500)]], on_loan=None)  # not split yet: counted in quota
    _job(pb, shared, "running", [[(5, 1, 750)]], on_loan=True)
    _job(pb, whole, "queued")
    _job(pb, whole, "succeeded", [[(9, 0, 1000)]], on_loan=False)  # finished: holds nothing

    held = Job.objects.filter(state__in=["running", "admitted"])
    assert _holding_usage() == _reference(held)
    assert holding_usage()[shared.pk] == {pa.pk: (Decimal("0.75"), 0), pb.pk: (0, Decimal("0.75"))}
    assert _holding_usage(whole.pk) == {whole.pk: _reference(held)[whole.pk]}
    assert gpus_in_use_by_flavor() == {whole.pk: Decimal(5), shared.pk: Decimal("1.5")}
    assert gpus_in_use_by_flavor(holding_usage()) == gpus_in_use_by_flavor()
    rows = {(r["node"].flavor_id, r["node"].project_id): r for r in quota_usage_rows(fx.platform_admin())}
    assert (rows[whole.pk, pa.pk]["used"], rows[whole.pk, pa.pk]["borrowed"]) == (5, 1)
    assert rows[whole.pk, None]["used"] == 5  # the department's subtree
    assert (rows[shared.pk, pb.pk]["used"], rows[shared.pk, pb.pk]["borrowed"]) == (Decimal("0.75"),) * 2


def _reference_order(jobs, positions):
    """The sort the ids-only queries replaced: every live job's key, sorted in Python."""
    group = {state.value: k for k, state in enumerate(QUEUE_STATES)}
    live = jobs.filter(state__in=list(group))
    rows = live.values_list("id", "state", "priority_class__value", "submitted_at")
    never = len(positions) + 1

    def key(row):
        pk, state, priority, submitted = row
        position = positions.get(pk, never) if state == "queued" else never
        return group[state], position, -priority, submitted, pk

    return [row[0] for row in sorted(rows, key=key)]


@pytest.mark.parametrize(("few_new", "first_walk"), [(1000, 1000), (1, 1)])  # one query / many batches
def test_queue_order_ranks_by_cached_position_then_priority_then_state(
    tree, monkeypatch, few_new, first_walk
):
    monkeypatch.setattr(selectors, "FEW_NEW", few_new)  # unranked jobs ordered by id lookup / by a walk
    monkeypatch.setattr(selectors, "FIRST_WALK", first_walk)  # the ranked ids checked a batch at a time
    whole, _shared, pa, pb = tree
    low, high = fx.priority("low", 10), fx.priority("high", 500)
    q1 = _job(pa, whole, "queued", prio=low, age=50)
    q2 = _job(pb, whole, "queued", prio=high, age=40)
    q3 = _job(pa, whole, "queued", prio=low, age=30)
    new_low = _job(pa, whole, "queued", prio=low, age=5)  # arrived after the cycle: no position
    new_high_old = _job(pb, whole, "queued", prio=high, age=20)
    new_high = _job(pb, whole, "queued", prio=high, age=1)
    pending = _job(pa, whole, "pending_approval", prio=low, age=60)
    run_low = _job(pa, whole, "running", [[(1, 0, 1000)]], prio=low, age=70)
    run_high = _job(pb, whole, "running", [[(1, 1, 1000)]], prio=high, age=10)
    admitted = _job(pb, whole, "admitted", [[(1, 2, 1000)]], prio=low, age=1)
    _job(pa, whole, "succeeded", prio=high)
    gone = 10**9  # a job the cycle ranked that has left the queue since
    ranked = [q3, gone, q1, run_low, q2]  # run_low was admitted and started since the cycle

    everything = Job.objects.all()
    order = queue_order(everything, ranked)
    assert list(order) == [
        q3, q1, q2, new_high_old, new_high, new_low, pending, admitted, run_high, run_low,
    ]
    assert order.positions() == {q3: 1, q1: 3, q2: 5}  # places in the cycle's whole order
    assert list(queue_order(everything.filter(project=pb), ranked)) == [
        q2, new_high_old, new_high, admitted, run_high,
    ]
    # no cycle yet: priority, then submit time
    no_cycle = list(queue_order(everything.filter(state="queued"), []))
    assert no_cycle == [q2, new_high_old, new_high, q1, q3, new_low]
    for jobs in (everything, everything.filter(project=pa), everything.exclude(state="queued")):
        for cached in (ranked, []):
            expected = _reference_order(jobs, {pk: k for k, pk in enumerate(cached, 1)})
            assert list(queue_order(jobs, cached)) == expected
            assert len(queue_order(jobs, cached)) == len(expected)
            for lo, hi in ((0, 1), (0, 3), (2, 7), (5, 100), (len(expected) - 1, len(expected) + 5)):
                order = queue_order(jobs, cached)  # a page request slices a fresh order once
                assert order[lo:hi] == expected[lo:hi], (lo, hi)  # what the paginator asks for


def test_the_first_queue_page_checks_only_the_head_of_a_long_ranking(
    tree, monkeypatch, django_assert_max_num_queries
):
    """A page at the head of the queue costs a count and one check of the first ranked ids,
    not a read of every waiting job."""
    monkeypatch.setattr(selectors, "FIRST_WALK", 1)
    whole, _shared, pa, _pb = tree
    jobs = [_job(pa, whole, "queued", age=100 - k) for k in range(40)]
    order = queue_order(Job.objects.all(), list(reversed(jobs)))
    with django_assert_max_num_queries(3):  # queued count, others count, one batch
        assert order[0:3] == list(reversed(jobs))[:3]
    assert order._cursor == 12  # 4 ranked ids checked per row wanted

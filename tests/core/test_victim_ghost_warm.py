"""A victim signalled in a cycle keeps its GPUs in a warm engine as in a cold one, even when the
job that preempted it was reclaimed in the same cycle (its GPUs were a fresh ghost then)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from coresnap import NOW, cluster, queued, running, snapshot, tree

from jobs.scheduler.scheduler import Engine, RunningJob, schedule


def test_a_victim_whose_preemptor_was_reclaimed_keeps_its_gpus_in_the_warm_engine():
    # V (a, prio 10, 8 GPUs on loan) is preempted by P (a, prio 100, 8 GPUs, rule 6); then Q
    # (b, in quota, 2 GPUs) reclaims the fresh P. V still runs through its grace period on the
    # 6 GPUs Q did not take; the warm engine released P's fresh ghost there at the cycle's end.
    nodes = cluster(1)
    tl = tree({"a": 4, "b": 4})
    v = running("v", "a", "n000", 8, priority=10)
    p = queued("p", "a", 8, priority=100)
    q = queued("q", "b", 2, priority=10)
    engine = Engine(snapshot(nodes, tl, [v], [p, q]))
    first = engine.cycle(NOW)
    assert [(x.victim_id, x.for_job_id) for x in first.preemptions] == [("v", "p")]
    assert [a.job_id for a in first.admissions] == ["q"]
    later = NOW + timedelta(seconds=30)
    r = replace(queued("r", "b", 2, priority=10), submitted_at=later)
    engine.cancel(["p"])
    engine.submit([r])
    warm = engine.cycle(later)
    (qa,) = first.admissions
    q_run = RunningJob("q", "b", q.flavor, 10, True, NOW, None, qa.placement[0])
    v_term = replace(v, terminating=True, terminating_since=NOW)
    cold = schedule(snapshot(nodes, tl, [v_term, q_run], [r], now=later))
    assert [a.job_id for a in cold.admissions] == []  # V's 6 GPUs and Q's 2: nothing free
    assert [a.job_id for a in warm.admissions] == [a.job_id for a in cold.admissions]

"""Preemption must converge: no ping-pong between rules 5 and 6, no reservation pushed back by
preemptions behind it (the soak's livelocks and starving gangs; docs/scheduling.md,
*Preemption without loops*)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from coresnap import NOW, cluster, queued, running, snapshot, tree

from jobs.scheduler.scheduler import Engine, schedule

HOUR = 3600


def test_preempted_job_does_not_reclaim_its_higher_priority_preemptor_of_the_same_project():
    """Project a (quota 8) runs B (low priority, 8 GPUs, in quota). Its gang G (normal, 2 × 8)
    can only run on loan — it is larger than a's quota — and preempts B by rule 6. B, queued
    again, is in quota and capacity is short: before the fix it reclaimed G (rule 5, nearest =
    same project), G preempted B again, and so on every cycle. G must keep running."""
    tl = tree({"D": (16, {"a": 8, "b": 8})})
    snap = snapshot(cluster(3), tl,
                    [running("B", "a", "n000", 8, priority=10),
                     running("X", "b", "n002", 8)],  # b's own quota: nobody's victim
                    [queued("G", "a", 8, workers=2, priority=100)])
    shapes = {"G": {"workers": 2, "priority": 100}, "B": {"priority": 10}}
    eng = Engine(snap)
    now = NOW
    history = []
    for _ in range(4):
        result = eng.cycle(now)
        history.append([(p.victim_id, p.reason, p.for_job_id) for p in result.preemptions])
        victims = [p.victim_id for p in result.preemptions]
        eng.finish(victims)  # as the service does: victims exit and queue again
        eng.submit([queued(v, "a", 8, age_s=0, **shapes[v]) for v in victims])
        now += timedelta(minutes=5)
    assert history[0] == [("B", "priority", "G")]
    assert history[1:] == [[], [], []]
    explain = eng.cycle(now).explanations["B"]
    assert explain.reason == "capacity"  # it waits for G (or for X) to end


def test_same_project_lower_priority_on_loan_jobs_are_still_reclaimed():
    """The shield stops at lower priorities: a's in-quota job reclaims a's own on-loan job of a
    lower priority first (nearest in the tree, DESIGN §3 rule 5; rule 6 could take it too)."""
    tl = tree({"D": (16, {"a": 8, "b": 0})})
    run = [running("a_in", "a", "n000", 4, age_s=7200),
           running("a_loan", "a", "n001", 8, priority=50, age_s=3600),  # 4 + 8 > 8: on loan
           running("b_loan", "b", "n000", 4, first_gpu=4, priority=10, age_s=60)]
    result = schedule(snapshot(cluster(2), tl, run, [queued("a2", "a", 4)]))
    assert result.on_loan["b_loan"] is True  # lowest priority, newest: but not as near
    assert [(p.victim_id, p.reason) for p in result.preemptions] == [("a_loan", "reclaim")]


def test_a_reclaim_never_takes_its_own_projects_on_loan_job_of_equal_priority():
    """a runs 4 in quota and an 8-GPU job on loan (4 + 8 > 8), both of the reclaimer's priority.
    Taking a's own job gives nobody the quota back — a only swaps 8 running GPUs for 4 and loses
    the victim's work (issue 34: a 64-GPU gang reclaimed four times by its project's 8-GPU jobs).
    Another tenant's on-loan job is reclaimed instead; with none, a2 waits."""
    tl = tree({"D": (16, {"a": 8, "b": 0})})
    run = [running("a_in", "a", "n000", 4, age_s=7200),
           running("a_loan", "a", "n001", 8, age_s=3600),
           running("b_loan", "b", "n000", 4, first_gpu=4, priority=10, age_s=60)]
    result = schedule(snapshot(cluster(2), tl, run, [queued("a2", "a", 4)]))
    assert [(p.victim_id, p.reason) for p in result.preemptions] == [("b_loan", "reclaim")]
    assert [a.job_id for a in result.admissions] == ["a2"]

    tl = tree({"D": (16, {"a": 8, "b": 4})})
    run[2] = running("b_in", "b", "n000", 4, first_gpu=4)  # b's own quota: nobody's victim
    result = schedule(snapshot(cluster(2), tl, run, [queued("a2", "a", 4)]))
    assert result.on_loan["a_loan"] is True
    assert not result.preemptions and not result.admissions
    assert result.explanations["a2"].reason == "capacity"


@pytest.mark.parametrize(("runtime_h", "head_in_quota", "reclaims"), [
    (10, True, False),  # would hold n000 for 10 h: the gang's reservation at +2 h would slip
    (1.5, True, True),  # gone before the reservation starts: EASY lets it
    # A head on loan holds no reservation against an in-quota job: Q could reclaim it the
    # moment it started (rule 5), so waiting for it only delays the quota's owner (issue 34).
    (10, False, True),
])
def test_preemption_behind_a_reservation_does_not_take_the_reserved_gpus(runtime_h, head_in_quota, reclaims):
    """Two 8-GPU nodes. The high-priority gang H (2 × 8) waits; its reservation starts at
    +2 h on both nodes, when R1 (on loan, ends at +1 h) and R2 (b's in-quota job, ends at
    +2 h) have ended. Q, of a lower priority and in quota (a: 8), finds no room: the 4 free
    GPUs of n001 are blocked for H. Reclaiming R1 would put Q on n000 — a GPU H counts on —
    so only a Q that ends before H starts may do it, unless H itself could only run on loan."""
    h = 16 if head_in_quota else 0
    tl = tree({"D": (8, {"a": 8}), "E": (4, {"b": 4}), "Z": (h, {"h": h, "z": 0})})
    run = [running("R1", "z", "n000", 8, age_s=HOUR, runtime=2 * HOUR),
           running("R2", "b", "n001", 4, age_s=HOUR, runtime=3 * HOUR)]
    queue = [queued("H", "h", 8, workers=2, priority=500, runtime=4 * HOUR),
             queued("Q", "a", 8, priority=100, runtime=int(runtime_h * HOUR))]
    result = schedule(snapshot(cluster(2), tl, run, queue))
    res = {r.job_id: r for r in result.reservations}["H"]
    assert res.nodes == ("n000", "n001")
    assert res.earliest_start == NOW + timedelta(hours=2)
    if reclaims:
        assert [(p.victim_id, p.for_job_id) for p in result.preemptions] == [("R1", "Q")]
    else:
        assert result.preemptions == () and result.admissions == ()
        assert result.explanations["Q"].reason == "capacity"

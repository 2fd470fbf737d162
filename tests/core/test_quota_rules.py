"""DESIGN §3 quota rules, one test (or table) per rule, plus the three worked examples."""

from __future__ import annotations

import pytest
from coresnap import F, cluster, limits, queued, running, snapshot, tree

from jobs.scheduler.scheduler import schedule
from quotas.admission import Ledger, QuotaTree, TreeNode


def admitted(result) -> list[str]:
    return [a.job_id for a in result.admissions]


def victims(result) -> list[str]:
    return [p.victim_id for p in result.preemptions]


# -- worked examples, as written --------------------------------------------------------
def test_worked_example_reclaim():
    """C = 16; A and B q = 8, one project each q = 8. B runs two 8-GPU jobs (the second on
    loan). A submits 8: in-quota, capacity short -> B's on-loan job is preempted, A's runs."""
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8})})
    snap = snapshot(cluster(2), tl,
                    [running("b1", "b", "n000", 8, age_s=7200),
                     running("b2", "b", "n001", 8, age_s=3600)],
                    [queued("a1", "a", 8)])
    result = schedule(snap)
    assert victims(result) == ["b2"]
    assert result.preemptions[0].reason == "reclaim"
    assert admitted(result) == ["a1"]
    assert result.admissions[0].in_quota
    assert result.admissions[0].preempts == ("b2",)
    assert result.on_loan == {"b1": False, "a1": False}


def test_worked_example_lend_limit():
    """As above but B idle with l(B) = 4. A runs 8 in-quota, then a 4-GPU job on loan
    (8 + 4 + hold 4 <= 16); a second 4-GPU on-loan job waits (12 + 4 + 4 > 16)."""
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8}, None, 4)})
    snap = snapshot(cluster(2), tl, [running("a0", "a", "n000", 8)],
                    [queued("a1", "a", 4, age_s=50), queued("a2", "a", 4, age_s=40)])
    result = schedule(snap)
    assert admitted(result) == ["a1"]
    assert not result.admissions[0].in_quota
    why = result.explanations["a2"]
    assert why.reason == "lend_limit"
    assert dict(why.numbers) == {"usage": 12_000, "request": 4_000, "held_back": 4_000,
                                 "capacity": 16_000}


def test_worked_example_overcommit():
    """C = 8, D q = 8 (ratio 1.5), p1 and p2 q = 6. p1 runs 6. p2's 4-GPU job is not in-quota
    (D would have 10 > 8) and does not fit -> waits, may not reclaim; p2's 2-GPU job is
    in-quota (D = 8) and runs."""
    tl = tree({"D": (8, {"p1": 6, "p2": 6})})
    snap = snapshot(cluster(1), tl, [running("p1a", "p1", "n000", 6)],
                    [queued("p2a", "p2", 4, age_s=50), queued("p2b", "p2", 2, age_s=40)])
    result = schedule(snap)
    assert admitted(result) == ["p2b"]
    assert result.admissions[0].in_quota
    assert victims(result) == []
    why = result.explanations["p2a"]
    assert why.reason == "capacity"
    assert "not in quota at D" in why.message
    assert [h.job_id for h in why.holders] == ["p1a"]  # who holds D's quota it competes for


# -- rule 1: in-quota vs on-loan ---------------------------------------------------------
@pytest.mark.parametrize(("jobs", "expected"), [
    # (id, priority, age) -> on loan?  q(p) = 8, each job 4 GPUs
    ([("x", 100, 300), ("y", 100, 200), ("z", 100, 100)], {"x": False, "y": False, "z": True}),
    ([("x", 100, 300), ("y", 500, 100), ("z", 100, 200)], {"y": False, "x": False, "z": True}),
    ([("x", 50, 300), ("y", 500, 100), ("z", 500, 50)], {"y": False, "z": False, "x": True}),
])
def test_in_quota_split_follows_priority_then_start_time(jobs, expected):
    tl = tree({"D": (16, {"p": 8})})
    run = [running(j, "p", f"n{k:03d}", 4, priority=pr, age_s=age)
           for k, (j, pr, age) in enumerate(jobs)]
    result = schedule(snapshot(cluster(3), tl, run))
    assert result.on_loan == expected


def test_quota_shrink_turns_surplus_on_loan_not_killed():
    """A loan returning shrinks the quota: the surplus becomes on-loan (reclaimable)."""
    tl = tree({"D": (16, {"p": 4})})  # p used to have 8 and runs two 4-GPU jobs
    run = [running("old", "p", "n000", 4, age_s=900), running("new", "p", "n001", 4, age_s=60)]
    result = schedule(snapshot(cluster(2), tl, run))
    assert result.on_loan == {"old": False, "new": True}
    assert victims(result) == []


# -- rule 2: caps ------------------------------------------------------------------------
@pytest.mark.parametrize(("borrow", "size", "fits"), [
    (None, 8, True),  # no borrow limit: capacity is the cap
    (4, 4, True),  # q 4 + b 4 = 8 >= 4 + 4
    (4, 5, False),
    (0, 1, False),  # 0 never borrows
])
def test_borrow_limit_caps_usage(borrow, size, fits):
    tl = tree({"D": (0, {"p": (4, borrow, None), "o": 12})})
    snap = snapshot(cluster(2), tl, [running("r", "p", "n000", 4)],
                    [queued("j", "p", size)])
    result = schedule(snap)
    assert (admitted(result) == ["j"]) is fits
    if not fits:
        why = result.explanations["j"]
        assert why.reason == "borrow_limit"
        assert why.node_id == "p"


def test_root_capacity_caps_usage():
    tl = tree({"A": (16, {"a": 16})})
    snap = snapshot(cluster(1), tl, [running("r", "a", "n000", 6)], [queued("j", "a", 4)])
    result = schedule(snap)
    assert admitted(result) == []
    assert result.explanations["j"].reason == "capacity"
    assert dict(result.explanations["j"].numbers)["capacity"] == 8_000


def test_cordoned_node_is_not_capacity():
    nodes = list(cluster(2))
    nodes[1] = type(nodes[1])(**{**{f: getattr(nodes[1], f) for f in nodes[1].__slots__},
                                 "schedulable": False})
    tl = tree({"A": (16, {"a": 16})})
    result = schedule(snapshot(nodes, tl, [], [queued("j", "a", 8), queued("k", "a", 1)]))
    assert admitted(result) == ["j"]
    assert all(s[0] == "n000" for a in result.admissions for w in a.placement for s in w)


# -- rule 3: in-quota admission ------------------------------------------------------------
def test_in_quota_job_is_admitted_in_quota():
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8})})
    result = schedule(snapshot(cluster(2), tl, [], [queued("j", "a", 8)]))
    assert [(a.job_id, a.in_quota) for a in result.admissions] == [("j", True)]


# -- rule 4: lend limits -----------------------------------------------------------------
@pytest.mark.parametrize(("lend", "admits"), [
    (None, 2),  # lends all idle quota: 8 + 4 + 4 <= 16
    (4, 1),  # holds back 4
    (0, 0),  # lends nothing: 8 + 4 + 8 > 16
])
def test_lend_limit_holds_back_capacity(lend, admits):
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8}, None, lend)})
    snap = snapshot(cluster(2), tl, [running("a0", "a", "n000", 8)],
                    [queued("a1", "a", 4, age_s=50), queued("a2", "a", 4, age_s=40)])
    assert len(schedule(snap).admissions) == admits


def test_hold_back_is_the_larger_of_own_and_children_holds():
    """hold(B) = max(q − l − u_q, Σ hold(children)): a child that lends nothing keeps its
    quota held even if B itself would lend it."""
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": (6, None, 0), "c": 2})})
    snap = snapshot(cluster(2), tl, [running("a0", "a", "n000", 8)],
                    [queued("a1", "a", 2, age_s=50), queued("a2", "a", 2, age_s=40)])
    result = schedule(snap)
    assert admitted(result) == ["a1"]  # 8 + 2 + hold 6 = 16; another 2 would not fit
    assert result.explanations["a2"].reason == "lend_limit"


def test_own_department_lends_inside_itself():
    """Holds of the job's own ancestors do not bind it: a department lends freely inside."""
    tl = tree({"A": (16, {"a": 8, "b": (8, None, 0)})})
    snap = snapshot(cluster(2), tl, [running("a0", "a", "n000", 8)], [queued("a1", "a", 8)])
    assert admitted(schedule(snap)) == []  # b's hold is a sibling subtree of a: it binds
    tl = tree({"A": (16, {"a": 8, "b": 8}, None, 0), "Z": (0, {"z": 0})})
    snap = snapshot(cluster(2), tl, [running("a0", "a", "n000", 8)], [queued("a1", "a", 8)])
    assert admitted(schedule(snap)) == ["a1"]  # A lends nothing outside, but a is inside A


def test_ledger_holds_are_maintained_incrementally():
    t = QuotaTree([TreeNode("D", None, "department"), TreeNode("p", "D"), TreeNode("q", "D")])
    lims = {("D", F): limits(10, None, 2), ("p", F): limits(6, None, 1), ("q", F): limits(4)}
    ledger = Ledger(t, F, lims, 16_000)
    d, p, q = (t.index[x] for x in "Dpq")
    assert ledger.hold[p] == 5_000 and ledger.hold[q] == 0 and ledger.hold[d] == 8_000
    ledger.add(t.path(p), 3_000, True, 3_000)
    assert ledger.hold[p] == 2_000 and ledger.hold[d] == 5_000
    ledger.remove(t.path(p), 3_000, True, 3_000)
    assert ledger.hold[d] == 8_000


# -- rule 5: reclaim ---------------------------------------------------------------------
def test_reclaim_preempts_only_on_loan_jobs():
    """B's in-quota job is never a victim, even when taking it would be the only way."""
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8})})
    snap = snapshot(cluster(2), tl,
                    [running("b1", "b", "n000", 8, age_s=7200),
                     running("b2", "b", "n001", 4, age_s=3600),
                     running("b3", "b", "n001", 4, first_gpu=4, age_s=1800)],
                    [queued("a1", "a", 8)])
    result = schedule(snap)
    assert result.on_loan["b1"] is False
    assert sorted(victims(result)) == ["b2", "b3"]  # both on loan: b1 is kept


def test_reclaim_order_nearest_then_lowest_priority_then_most_recent():
    # a and a2 are in A; z in Z. All of A's jobs but a's new one are on loan.
    tl = tree({"A": (8, {"a": 4, "a2": 0}), "Z": (8, {"z": 0})})
    run = [running("z_low", "z", "n000", 4, priority=10, age_s=100),
           running("a2_hi", "a2", "n000", 4, first_gpu=4, priority=500, age_s=50),
           running("a2_lo_old", "a2", "n001", 4, priority=100, age_s=900),
           running("a2_lo_new", "a2", "n001", 4, first_gpu=4, priority=100, age_s=300)]
    result = schedule(snapshot(cluster(2), tl, run, [queued("j", "a", 4)]))
    # nearest (same department) first, then lowest priority, then most recently started
    assert victims(result) == ["a2_lo_new"]


def test_reclaim_takes_a_minimal_set():
    tl = tree({"A": (8, {"a": 8}), "B": (0, {"b": 0})})
    run = [running(f"b{k}", "b", "n000" if k < 4 else "n001", 2, first_gpu=2 * (k % 4),
                   age_s=100 * k + 1) for k in range(8)]
    result = schedule(snapshot(cluster(2), tl, run, [queued("j", "a", 4)]))
    assert admitted(result) == ["j"]
    assert len(victims(result)) == 2  # two 2-GPU jobs on one node, nothing more
    node = {s[0] for w in result.admissions[0].placement for s in w}
    assert len(node) == 1


def test_in_quota_jobs_of_other_tenants_are_never_preempted_overcommit_waits():
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8})})  # Σ q = 16 > C = 8: overcommit
    snap = snapshot(cluster(1), tl, [running("b1", "b", "n000", 8)], [queued("a1", "a", 8)])
    result = schedule(snap)
    assert victims(result) == [] and admitted(result) == []
    assert result.explanations["a1"].reason == "capacity"


# -- rule 6: priority within a project ---------------------------------------------------
@pytest.mark.parametrize(("victim_project", "victim_priority", "preemptible", "preempted"), [
    ("p", 50, True, True),
    ("p", 50, False, False),  # not preemptible
    ("p", 500, True, False),  # not lower priority
    ("o", 50, True, False),  # another project (and in-quota there)
])
def test_priority_preemption_within_project(victim_project, victim_priority, preemptible,
                                            preempted):
    tl = tree({"D": (8, {"p": 8, "o": 8})})
    run = [running("v", victim_project, "n000", 8, priority=victim_priority,
                   preemptible=preemptible)]
    result = schedule(snapshot(cluster(1), tl, run, [queued("j", "p", 8, priority=200)]))
    assert (victims(result) == ["v"]) is preempted
    if preempted:
        assert result.preemptions[0].reason == "priority"
        assert admitted(result) == ["j"]


def test_priority_preemption_ignores_the_victims_split():
    """Rule 6 applies to in-quota victims too (whatever their in-quota/on-loan state)."""
    tl = tree({"D": (8, {"p": 8})})
    run = [running("v", "p", "n000", 8, priority=50)]
    result = schedule(snapshot(cluster(1), tl, run, [queued("j", "p", 8, priority=200)]))
    assert result.on_loan.get("j") is False and victims(result) == ["v"]

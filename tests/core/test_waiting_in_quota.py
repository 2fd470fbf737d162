"""Engine.waiting_in_quota: the waiting jobs whose request fits their quota (rule 3) — what
bench/fairness.py samples to tell in-quota waits (fair share must not cause them) from
borrowers' waits (which fair share orders)."""

from jobs.scheduler.scheduler import Engine
from tests.core.coresnap import NOW, cluster, queued, running, snapshot, tree


def test_lists_in_quota_waiters_only():
    """Two 4-GPU nodes; b runs 2 GPUs in quota on each (its whole quota). a's one-worker 4-GPU
    job is in quota but no node has 4 free; a's 2 × 3-GPU job is beyond a's quota of 4; b's
    3-GPU job is beyond b's quota. None fits a node, nothing is on loan: all three wait."""
    snap = snapshot(cluster(2, per_node=4), tree({"D": (8, {"a": 4, "b": 4})}),
                    [running("B1", "b", "n000", 2), running("B3", "b", "n001", 2)],
                    [queued("A1", "a", 4, age_s=120), queued("A2", "a", 3, workers=2, age_s=60),
                     queued("B2", "b", 3, age_s=90)])
    eng = Engine(snap)
    assert eng.waiting_in_quota() == []  # no cycle yet
    result = eng.cycle(NOW)
    assert result.admissions == ()
    assert set(result.explanations) == {"A1", "A2", "B2"}
    assert eng.waiting_in_quota() == ["A1"]

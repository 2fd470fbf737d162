"""Issue 36 item 2: the replay reports the moves consolidation made and the work lost to them."""

from __future__ import annotations

import pytest

from jobs.whatif.replay import sim
from jobs.whatif.replay.trace import TraceJob, TraceNode

NODES = [TraceNode(f"n{i}", 8, "G") for i in range(3)]


def _jobs() -> list[TraceJob]:
    """Three 7-GPU jobs fill one node each for 10 s; three 1-GPU jobs take each node's last GPU
    for 10,000 s; at t = 20 a 2 × 8 gang finds 21 GPUs free but no two whole nodes."""
    jobs = [TraceJob(f"big{i}", 0.0, 10.0, 7, 1000, ("G",), "a/x") for i in range(3)]
    jobs += [TraceJob(f"small{i}", 1.0 + i, 10_000.0, 1, 1000, ("G",), "b/y") for i in range(3)]
    jobs.append(TraceJob("gang", 20.0, 100.0, 8, 1000, ("G",), "a/x", workers=2))
    return jobs


class Starts(sim.Observer):
    def __init__(self) -> None:
        self.first: dict[str, float] = {}

    def started(self, job_id: str, t: float) -> None:
        self.first.setdefault(job_id, t)


def _run(budget: int) -> tuple[dict, Starts]:
    obs = Starts()
    opts = sim.Options(checkpointing=True, grace=60.0, consolidation_moves_per_hour=budget)
    return sim.simulate(_jobs(), NODES, None, opts, observer=obs), obs


def test_moves_and_work_lost_are_reported():
    off, off_starts = _run(0)
    on, on_starts = _run(10)
    assert off["consolidation_moves"] == 0 and off["consolidation_gpu_hours_lost"] == 0
    assert off_starts.first["gang"] >= 10_000  # waits for the small jobs to end
    assert on["consolidation_moves"] == 2
    # Each moved 1-GPU job spent the 60 s grace period writing its checkpoint.
    assert on["consolidation_gpu_hours_lost"] == pytest.approx(2 * 60 / 3600)
    assert on_starts.first["gang"] == pytest.approx(20.0 + 60.0)  # once the moved jobs exited
    assert on["finished"] == on["jobs"] == 7

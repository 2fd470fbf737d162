"""``sim.Observer.released`` (issue 34 item 6, bench/fairness.py's per-job run intervals): called
when a job gives its GPUs back — a finish, or a preemption victim's exit — and a no-op by default."""

from jobs.whatif.replay import sim
from jobs.whatif.replay.trace import TraceJob, TraceNode


class Log(sim.Observer):
    def __init__(self):
        self.events = []

    def started(self, job_id, t):
        self.events.append(("start", job_id, t))

    def released(self, job_id, t, finished):
        self.events.append(("end" if finished else "out", job_id, t))


def test_finishes_and_victim_exits_are_reported_in_order():
    # p00 borrows p01's idle half (a1); b0 (p01, in quota) reclaims it at 1,800 s; a1 restarts
    # once b0 is done (60 s), from zero.
    nodes = [TraceNode("n0", 8, "G")]
    jobs = [TraceJob("a0", 0.0, 3600.0, 4, tenant="d0/p00"), TraceJob("a1", 1.0, 3600.0, 4, tenant="d0/p00"),
            TraceJob("b0", 1800.0, 60.0, 4, tenant="d0/p01")]
    quotas = {"d0/p00": {"G": 4000}, "d0/p01": {"G": 4000}}
    log = Log()
    sim.simulate(jobs, nodes, quotas, sim.Options(), observer=log)
    a1 = [e for e in log.events if e[1] == "a1"]
    assert a1 == [("start", "a1", 1.0), ("out", "a1", 1800.0), ("start", "a1", 1860.0),
                  ("end", "a1", 5460.0)]
    # a0 and a1 start together (1 s coalescing)
    assert ("end", "b0", 1860.0) in log.events and ("end", "a0", 3601.0) in log.events


def test_the_default_observer_ignores_it():
    assert sim.Observer().released("x", 1.0, True) is None

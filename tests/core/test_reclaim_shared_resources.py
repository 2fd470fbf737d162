"""Reclaim for a shared (fractional-GPU) request blocked by CPU, not GPUs (issue 34 item 6).

Replaying the Alibaba 2023 trace loaded (``bench/replay.py --repeat 1 --start 10013436 --overlay 10
--scale 100 --tenants hash:8``) crashed in ``preempt._with_units`` with ``minimal_victim_set``
returning None: a project's 0.47-GPU job, in quota, could not be placed because the node with a
free GPU fragment had no free cores; reclaim took an on-loan 0.16-GPU job holding those cores,
then ``_Paper.useful`` dropped it as freeing nothing — it looked only at the victim's GPU slot,
never at its cores for a shared request — and the minimal set of nothing is None."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from coresnap import NOW, F, queued, snapshot, tree

from jobs.scheduler.scheduler import Engine, Node, RunningJob


def _shared(jid: str, project: str, gpu: int, milli: int, cores: int, age_s: int) -> RunningJob:
    return RunningJob(jid, project, F, 100, True, NOW - timedelta(seconds=age_s), None,
                      (("n0", gpu, milli),), requests=(("n0", cores * 1000, 1024, 0),))


def test_reclaim_takes_the_borrower_whose_cores_block_a_shared_request():
    # one node, 2 GPUs, 16 cores. GPU 0 holds b's 0.5 (in quota, 1 core): 0.5 free; GPU 1 holds b's
    # 0.6 (in quota) and b's 0.16 on loan (14 cores). a's 0.47 GPU with 2 cores is in quota: it
    # fits GPU 0's fragment but no core is left. The borrower's 0.16 is the one to reclaim: its GPU
    # slot alone frees too little (0.4 < 0.47), its cores are what a's job needs.
    node = Node("n0", F, 2, "z1", "s0", "l0", cpu_millicores=16_000, memory_mib=65_536)
    snap = snapshot([node], tree({"a": 0.9, "b": 1.1}),
                    [_shared("c", "b", 0, 500, 1, 7200), _shared("d", "b", 1, 600, 1, 7000),
                     _shared("loan", "b", 1, 160, 14, 600)],
                    [replace(queued("new", "a", milli=470), cpu_millicores=2000, memory_mib=1024)])
    result = Engine(snap).cycle(NOW)
    assert [a.job_id for a in result.admissions] == ["new"]
    assert [p.victim_id for p in result.preemptions] == ["loan"]

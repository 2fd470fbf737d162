"""Fair share in the engine (DESIGN §16): order within a priority level by the Fair Tree key,
the entry charge, the reclaim tie-break, and the properties of issue 34 item 1."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import timedelta

import pytest
from coresnap import NOW, cluster, queued, running, snapshot, tree
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.scheduler.fairshare import decayed_card_seconds
from jobs.scheduler.scheduler import RunningJob, schedule

TL = tree({"a": 8, "b": 8})
SHARES = {"a": 1.0, "b": 1.0}


def admitted(result) -> list[str]:
    return [a.job_id for a in result.admissions]


def test_the_tenant_with_less_recent_usage_goes_first_though_it_submitted_later():
    queue = [queued("ja", "a", 8, age_s=900), queued("jb", "b", 8, age_s=10)]
    today = schedule(snapshot(cluster(1), TL, [], queue))
    fair = schedule(snapshot(cluster(1), TL, [], queue, fair_usage={"a": 5e5, "b": 1e3}, fair_shares=SHARES))
    assert admitted(today) == ["ja"] and admitted(fair) == ["jb"]


def test_empty_maps_mean_no_fair_share():
    queue = [queued("ja", "a", 8, age_s=900), queued("jb", "b", 8, age_s=10)]
    assert admitted(schedule(snapshot(cluster(1), TL, [], queue, fair_usage={}, fair_shares={}))) == ["ja"]


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 1e7), st.floats(0, 1e7), st.integers(1, 5), st.integers(1, 5),
       st.integers(0, 3600), st.integers(0, 3600))
def test_at_equal_priority_the_tenant_with_less_usage_per_share_goes_first(ua, ub, sa, sb, age_a, age_b):
    queue = [queued("ja", "a", 8, age_s=age_a), queued("jb", "b", 8, age_s=age_b)]
    result = schedule(snapshot(cluster(1), TL, [], queue, fair_usage={"a": ua, "b": ub},
                               fair_shares={"a": sa, "b": sb}))
    if ua / sa < ub / sb:
        assert admitted(result) == ["ja"]
    elif ub / sb < ua / sa:
        assert admitted(result) == ["jb"]
    else:  # a tie: today's order (equal dominant shares, then submit time, then id)
        assert admitted(result) == admitted(schedule(snapshot(cluster(1), TL, [], queue)))


def test_the_entry_charge_makes_a_burst_take_turns():
    # a has a little less usage than b; both queue four 2-GPU jobs for 8 free GPUs. Without the
    # charge a's whole burst would pass on its stale factor; with it, the tenants alternate.
    queue = [queued(f"a{k}", "a", 2, age_s=100) for k in range(4)] + \
            [queued(f"b{k}", "b", 2, age_s=100) for k in range(4)]
    kw = {"fair_usage": {"a": 1000.0, "b": 1001.0}, "fair_shares": SHARES}
    big = schedule(snapshot(cluster(1), tree({"a": 0, "b": 0}), [], queue, fair_entry_s=3600.0, **kw))
    none = schedule(snapshot(cluster(1), tree({"a": 0, "b": 0}), [], queue, fair_entry_s=0.0, **kw))
    assert sorted(admitted(none)) == ["a0", "a1", "a2", "a3"]
    assert sorted(admitted(big)) == ["a0", "a1", "b0", "b1"]


def history(allocations, now):
    usage = defaultdict(float)
    for project, cards, start, end in allocations:
        usage[project] += decayed_card_seconds(cards, start, end, now, 7 * 86400)
    return dict(usage)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.integers(1, 6), st.integers(60, 86400), st.integers(0, 5 * 86400),
       st.floats(0, 2e5))
def test_splitting_a_job_into_many_changes_nothing(cards, pieces, length, ago, other):
    # The same past work of project a, as one job or as ``pieces`` jobs one after another, and
    # as ``cards`` one-card jobs side by side: the same usage, the same decisions.
    now = NOW.timestamp()
    end = now - ago
    start = end - length
    step = length / pieces
    one = history([("a", cards, start, end), ("b", 1, now - 3600, None)], now)
    serial = history([("a", cards, start + k * step, start + (k + 1) * step) for k in range(pieces)]
                     + [("b", 1, now - 3600, None)], now)
    wide = history([("a", 1, start, end)] * cards + [("b", 1, now - 3600, None)], now)
    queue = [queued("ja", "a", 8, age_s=500), queued("jb", "b", 8, age_s=10)]
    results = []
    for usage in (one, serial, wide):
        assert usage["a"] == pytest.approx(one["a"], rel=1e-9)
        usage = {**usage, "b": usage["b"] + other}
        results.append(admitted(schedule(snapshot(cluster(1), TL, [], queue, fair_usage=usage,
                                                  fair_shares=SHARES))))
    assert results[0] == results[1] == results[2]


def test_reclaim_takes_the_most_over_share_borrower_first_among_equal_priorities():
    # o owns the 8 GPUs and wants 4 back; a and b borrow 4 each at the same priority. b started
    # earlier (today's order would take the newest, a's); b is further over its share.
    tl = tree({"o": 8, "a": 0, "b": 0})
    run = [running("ra", "a", "n000", 4, age_s=100), running("rb", "b", "n000", 4, first_gpu=4, age_s=900)]
    queue = [queued("jo", "o", 4)]
    today = schedule(snapshot(cluster(1), tl, run, queue))
    fair = schedule(snapshot(cluster(1), tl, run, queue, fair_usage={"a": 1e3, "b": 1e6},
                             fair_shares={"o": 8, "a": 1, "b": 1}))
    assert [p.victim_id for p in today.preemptions] == ["ra"]
    assert [p.victim_id for p in fair.preemptions] == ["rb"]


def simulate(shares: dict[str, float], *, hours: int, gpus: int = 16, half_life_s: float = 86400.0,
             runtime_s: int = 3600, step_s: int = 600) -> dict[str, float]:
    """Borrowers a and b, each with a deep backlog of 1-GPU jobs, share an idle pool owned by
    o (no demand), cycle by cycle; jobs end after ``runtime_s``. Usage is every allocation since
    the start, decayed (decayed_card_seconds). Returns GPU-seconds per tenant after a warm-up
    of a quarter of the run."""
    tl = tree({"o": gpus, "a": 0, "b": 0})
    nodes = cluster(gpus // 8)
    allocations: list[tuple[str, float, float | None]] = []  # project, start, end
    live: dict[str, RunningJob] = {}
    t0 = NOW.timestamp()
    seq = 0
    waiting = {}
    for p in ("a", "b"):
        for _ in range(gpus * 2):
            seq += 1
            waiting[f"j{seq:06d}"] = replace(queued(f"j{seq:06d}", p, 1, runtime=runtime_s), submitted_at=NOW)
    gpu_s: dict[str, float] = defaultdict(float)
    warm_up = hours * 3600 / 4
    for k in range(hours * 3600 // step_s):
        now_dt = NOW + timedelta(seconds=k * step_s)
        now = now_dt.timestamp()
        for jid in [j for j, r in live.items() if r.started_at.timestamp() + runtime_s <= now]:
            del live[jid]
        usage: dict[str, float] = defaultdict(float)
        for p, start, _ in allocations:
            end = start + runtime_s
            usage[p] += decayed_card_seconds(1, start, end, now, half_life_s)
        result = schedule(snapshot(nodes, tl, list(live.values()), list(waiting.values()), now=now_dt,
                                   fair_usage=dict(usage), fair_shares=shares))
        for a in result.admissions:
            q = waiting.pop(a.job_id)
            live[a.job_id] = RunningJob(a.job_id, q.project_id, q.flavor, q.priority, True, now_dt,
                                        runtime_s, a.placement[0])
            allocations.append((q.project_id, now, None))
            seq += 1  # the backlog never runs dry
            waiting[f"j{seq:06d}"] = replace(q, id=f"j{seq:06d}", submitted_at=now_dt)
        if k * step_s >= warm_up:
            for r in live.values():
                gpu_s[r.project_id] += step_s * len(r.placement)
    assert t0 == NOW.timestamp()
    return dict(gpu_s)


def test_shares_two_to_one_divide_contested_idle_capacity_two_to_one():
    got = simulate({"o": 16, "a": 2, "b": 1}, hours=72)
    ratio = got["a"] / got["b"]
    # 16 GPUs in 1-GPU jobs of an hour: each cycle's turn goes to whoever is below its share,
    # so the split follows shares to within a job or two per hour (±10 % allowed).
    assert ratio == pytest.approx(2.0, rel=0.10), ratio


def test_without_fair_share_the_split_is_not_by_shares():
    # The check above can fail: today's order (equal dominant shares, then submit time) does not
    # split by shares at all.
    got = simulate({}, hours=72)
    assert got["a"] / got["b"] != pytest.approx(2.0, rel=0.10)

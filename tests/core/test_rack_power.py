"""Rack power caps in the pure engine (issue 36 item 3, DESIGN §18): a rack at its cap receives no
further job although GPUs are free; the headroom left is given unit by unit; measured power
replaces the estimate; lowering a cap stops new placements there and stops nothing running."""

from __future__ import annotations

import random

from coresnap import cluster, queued, running, snapshot, tree

from jobs.scheduler.scheduler import NodePower, schedule

TL = tree({"D": (64, {"p": 32, "q": 32})})
IDLE, BOARD = 2000, 700  # W: a node besides its boards, one busy A100 board


def _power(nodes, rack_of, measured=None):
    measured = measured or {}
    return {n.id: NodePower(rack_of(n.id), IDLE, BOARD, measured.get(n.id)) for n in nodes}


def _placed(result) -> dict[str, set[str]]:
    return {a.job_id: {node for worker in a.placement for node, _, _ in worker} for a in result.admissions}


def _one_rack(nodes, cap_w, run=(), jobs=(), measured=None):
    return snapshot(nodes, TL, run, jobs, rack_caps={"r1": cap_w},
                    node_power=_power(nodes, lambda _: "r1", measured))


def test_a_rack_at_its_cap_receives_no_further_job_although_gpus_are_free():
    nodes = cluster(2)
    busy = running("r", "p", "n000", 8)
    cap = 2 * IDLE + 8 * BOARD  # exactly what runs now
    result = schedule(_one_rack(nodes, cap, [busy], [queued("j", "q", 1)]))
    assert result.admissions == ()
    # the same jobs without the cap: n001's 8 free GPUs take it
    free = schedule(snapshot(nodes, TL, [busy], [queued("j", "q", 1)]))
    assert _placed(free) == {"j": {"n001"}}


def test_another_rack_with_power_left_takes_the_job():
    nodes = cluster(3)
    rack_of = {"n000": "r1", "n001": "r1", "n002": "r2"}.get
    snap = snapshot(nodes, TL, [running("r", "p", "n000", 8)], [queued("j", "q", 8)],
                    rack_caps={"r1": 2 * IDLE + 8 * BOARD, "r2": IDLE + 8 * BOARD},
                    node_power=_power(nodes, rack_of))
    assert _placed(schedule(snap)) == {"j": {"n002"}}


def test_the_headroom_is_given_unit_by_unit_and_never_exceeded():
    nodes = cluster(2)
    cap = 2 * IDLE + 8 * BOARD + 3 * BOARD + BOARD // 2  # power for 3 more boards, not 4
    jobs = [queued(f"j{k}", "q", 1, age_s=100 - k) for k in range(5)]
    result = schedule(_one_rack(nodes, cap, [running("r", "p", "n000", 8)], jobs))
    assert sorted(_placed(result)) == ["j0", "j1", "j2"]
    gang = schedule(_one_rack(nodes, cap, [running("r", "p", "n000", 8)], [queued("g", "q", 4)]))
    assert gang.admissions == ()  # 4 boards would be 350 W over the cap


def test_measured_power_replaces_the_estimate():
    nodes = cluster(2)
    cap = 2 * IDLE + 8 * BOARD + 2 * BOARD
    jobs = [queued(f"j{k}", "q", 1, age_s=100 - k) for k in range(3)]
    run = [running("r", "p", "n000", 8)]
    assert len(schedule(_one_rack(nodes, cap, run, jobs)).admissions) == 2
    # the running job draws less than its boards' rating: DCGM says 8 × 400 W on n000, 0 W on n001
    measured = {"n000": 8 * 400, "n001": 0}
    assert len(schedule(_one_rack(nodes, cap, run, jobs, measured)).admissions) == 3
    # and more than the rating: nothing fits
    hot = {"n000": 8 * 700 + 2 * BOARD, "n001": 0}
    assert schedule(_one_rack(nodes, cap, run, jobs, hot)).admissions == ()


def test_lowering_a_cap_stops_new_placements_and_nothing_running():
    nodes = cluster(2)
    run = [running("r", "p", "n000", 8, preemptible=True)]
    jobs = [queued("hi", "q", 8, priority=1000)]
    assert _placed(schedule(_one_rack(nodes, 2 * IDLE + 16 * BOARD, run, jobs))) == {"hi": {"n001"}}
    lowered = schedule(_one_rack(nodes, IDLE, run, jobs))  # below what runs now
    assert lowered.admissions == () and lowered.preemptions == ()


def test_a_shared_request_on_a_card_already_in_use_adds_no_board():
    nodes = cluster(1)
    run = [running("half", "p", "n000", 1, milli=500)]
    cap = IDLE + BOARD  # the one busy board
    result = schedule(_one_rack(nodes, cap, run, [queued("s", "q", 0, milli=500), queued("w", "q", 1)]))
    assert _placed(result) == {"s": {"n000"}}
    assert {slot[1] for a in result.admissions for w in a.placement for slot in w} == {0}


def test_racks_without_a_cap_and_nodes_in_none_are_not_limited():
    nodes = cluster(2)
    snap = snapshot(nodes, TL, [], [queued("g", "q", 8, workers=2)], rack_caps={"r9": 1},
                    node_power={"n000": NodePower("r1", IDLE, BOARD)})
    assert _placed(schedule(snap)) == {"g": {"n000", "n001"}}


def test_explain_says_the_power_caps_hold_the_job():
    nodes = cluster(2)
    result = schedule(_one_rack(nodes, 2 * IDLE + 8 * BOARD, [running("r", "p", "n000", 8)],
                                [queued("j", "q", 2)]))
    e = result.explanations["j"]
    assert e.reason == "power" and dict(e.numbers)["racks_at_cap"] == 1
    assert "at their cap: r1" in e.message


def test_a_preemption_frees_power_as_well_as_gpus():
    """At its cap, the rack still takes a higher-priority job when preempting a lower one frees
    both the GPUs and their boards' power; never when the victims' power would not be enough."""
    nodes = cluster(2)
    low = running("low", "p", "n000", 8, priority=10)
    at_cap = 2 * IDLE + 8 * BOARD
    result = schedule(_one_rack(nodes, at_cap, [low], [queued("hi", "p", 8, priority=1000)]))
    assert [v.victim_id for v in result.preemptions] == ["low"]
    assert len(result.admissions) == 1
    big = schedule(_one_rack(nodes, at_cap, [low], [queued("hi", "p", 8, workers=2, priority=1000)]))
    assert big.preemptions == () and big.admissions == ()  # 16 boards: over the cap even without low


def test_no_cycle_plans_a_rack_above_its_cap():
    """Random racks, caps, running and queued jobs (whole cards, shared parts and gangs): after a
    cycle every rack at or under its cap before stays under it, and a rack over it gets no unit."""
    rng = random.Random(18)
    many = tree({"D": (10_000, {"p": 5000, "q": 5000})})
    checked = 0
    for _ in range(80):
        nodes = cluster(8, per_leaf=2)
        rack_of = {n.id: f"r{k // 3}" for k, n in enumerate(nodes)}  # racks of 3, 3 and 2 nodes
        run, used = [], {}
        for n in nodes:
            k = rng.choice([0, 0, 2, 5, 8])
            if k:
                run.append(running(f"run-{n.id}", "p", n.id, k))
                used[n.id] = k
        racks = sorted(set(rack_of.values()))
        caps = {r: rng.randint(1, 3) * IDLE + rng.randint(0, 24) * BOARD for r in racks}
        jobs = [queued(f"j{k}", "q", rng.choice([1, 2, 4, 8]), workers=rng.choice([1, 1, 2, 3]),
                       age_s=1000 - k) for k in range(8)]
        jobs.append(queued("shared", "q", 0, milli=300, age_s=1))
        snap = snapshot(nodes, many, run, jobs, rack_caps=caps, node_power=_power(nodes, rack_of.get))
        result = schedule(snap)
        assert result.preemptions == ()
        new: dict[str, set] = {r: set() for r in racks}
        for a in result.admissions:
            for worker in a.placement:
                new[rack_of[worker[0][0]]].update((node, g) for node, g, _ in worker)
        for r in racks:
            members = [n.id for n in nodes if rack_of[n.id] == r]
            before = sum(IDLE + used.get(m, 0) * BOARD for m in members)
            fresh = {(node, g) for node, g in new[r] if g >= used.get(node, 0)}  # cards not busy before
            if before > caps[r]:
                assert not fresh, (r, caps[r], before)
            else:
                assert before + len(fresh) * BOARD <= caps[r], (r, caps[r], before, fresh)
            checked += bool(fresh)
    assert checked > 20  # racks did take new cards under their caps

"""Start estimates (issue 24, jobs/scheduler/forecast.py): the production engine run forward over the
running jobs' limits, in exact small worlds."""

from __future__ import annotations

from datetime import timedelta

from coresnap import NOW, cluster, limits, queued, running, snapshot, tree

from jobs.scheduler.forecast import forecast
from jobs.scheduler.scheduler import PriorityClass

TL = tree({"D": (16, {"a": 8, "b": 8})})


def test_a_job_behind_a_running_job_with_a_limit_starts_exactly_at_its_end():
    # r took the whole node an hour ago with a 3 h limit: w starts when r's limit is up.
    run = [running("r", "a", "n000", 8, age_s=3600, runtime=3 * 3600)]
    found = forecast(snapshot(cluster(1), TL, run, [queued("w", "b", 8, runtime=600)]))
    assert found.starts == {"w": NOW + timedelta(hours=2)}
    assert found.unknown == {}


def test_a_job_that_fits_now_starts_now_and_the_next_one_after_it():
    queue = [queued("first", "a", 8, age_s=120, runtime=1800), queued("second", "b", 8, age_s=60)]
    found = forecast(snapshot(cluster(1), TL, [], queue))
    assert found.starts == {"first": NOW, "second": NOW + timedelta(minutes=30)}


def test_a_short_job_backfills_and_the_head_keeps_its_reservation():
    # 4 GPUs busy for 2 h; the head needs all 8 → reserved at +2 h. A 1 h job on 4 GPUs ends
    # before that: backfilled now. A 3 h job of 4 GPUs would delay the head: after it.
    run = [running("r", "c", "n000", 4, age_s=0, runtime=7200)]
    queue = [queued("head", "a", 8, age_s=300, runtime=3600),
             queued("short", "b", 4, age_s=200, runtime=3600),
             queued("long", "b", 4, age_s=100, runtime=3 * 3600)]
    found = forecast(snapshot(cluster(1), tree({"D": (24, {"a": 8, "b": 8, "c": 8})}), run, queue))
    assert found.starts["short"] == NOW
    assert found.starts["head"] == NOW + timedelta(hours=2)
    assert found.starts["long"] == NOW + timedelta(hours=3)


def test_a_blocker_without_a_limit_makes_the_start_unknown():
    run = [running("forever", "a", "n000", 8, runtime=None)]
    found = forecast(snapshot(cluster(1), TL, run, [queued("w", "b", 8)]))
    assert found.starts == {}
    assert found.unknown == {"w": "unlimited"}


def test_a_start_past_the_horizon_is_unknown():
    run = [running("r", "a", "n000", 8, age_s=0, runtime=10 * 86400)]
    found = forecast(snapshot(cluster(1), TL, run, [queued("w", "b", 8)]), horizon_seconds=86400)
    assert found.unknown == {"w": "beyond_horizon"}


def test_a_job_held_by_a_spent_budget_is_unknown_until_approved():
    queue = [queued("held", "a", 1), queued("ok", "a", 1, approved=True)]
    found = forecast(snapshot(cluster(1), TL, [], queue, over_budget_tenants=frozenset({"a"})))
    assert found.starts == {"ok": NOW}
    assert found.unknown == {"held": "budget"}


def test_a_job_admitted_by_preemption_starts_when_its_victim_has_exited():
    classes = (PriorityClass("lo", 100, True, 300), PriorityClass("hi", 500, False, 0))
    run = [running("victim", "b", "n000", 8, priority=100, runtime=None)]
    queue = [queued("urgent", "a", 8, priority=500, runtime=600)]
    found = forecast(snapshot(cluster(1), tree({"D": (8, {"a": 8, "b": 0})}), run, queue,
                              priority_classes=classes))
    assert found.starts == {"urgent": NOW + timedelta(seconds=300)}


def test_a_hypothetical_job_is_estimated_without_changing_the_others():
    run = [running("r", "a", "n000", 8, age_s=0, runtime=3600)]
    snap = snapshot(cluster(1), TL, run, [queued("w", "b", 4, runtime=600)])
    alone = forecast(snap)
    found = forecast(snap, extra=[queued("new", "a", 4, age_s=0, runtime=600)])
    assert alone.starts == {"w": NOW + timedelta(hours=1)}
    assert found.starts == {"w": NOW + timedelta(hours=1), "new": NOW + timedelta(hours=1)}


def test_the_cycle_bound_leaves_the_rest_unknown():
    # Eight 1-GPU jobs end one minute apart; with two cycles only the first end is seen.
    run = [running(f"r{k}", "a", "n000", 1, first_gpu=k, age_s=0, runtime=60 * (k + 1)) for k in range(8)]
    queue = [queued(f"w{k}", "b", 1, age_s=100 - k) for k in range(3)]
    found = forecast(snapshot(cluster(1), TL, run, queue), max_cycles=2)
    assert found.starts == {"w0": NOW + timedelta(minutes=1)}
    assert found.unknown == {"w1": "beyond_horizon", "w2": "beyond_horizon"}


def test_ends_on_a_flavor_nobody_waits_for_cost_no_cycle_and_change_nothing():
    nodes = cluster(1) + cluster(1, flavor="H800", prefix="h")
    tl, lims = TL
    lims = {**lims, ("D", "H800"): limits(8), ("a", "H800"): limits(8)}
    run = [running(f"h{k}", "a", "h000", 1, first_gpu=k, age_s=0, runtime=60 * (k + 1), flavor="H800")
           for k in range(8)]
    run.append(running("r", "a", "n000", 8, age_s=0, runtime=3600))
    found = forecast(snapshot(nodes, (tl, lims), run, [queued("w", "b", 8)]))
    assert found.starts == {"w": NOW + timedelta(hours=1)}
    assert found.cycles == 2  # now, and when r ends: the eight H800 ends ran no cycle
    # Only H800 jobs end: nothing the A100 job waits for ever ends.
    forever = [*run[:8], running("r", "a", "n000", 8)]
    found = forecast(snapshot(nodes, (tl, lims), forever, [queued("w", "b", 8)]))
    assert found.unknown == {"w": "unlimited"}


def test_a_victim_is_requeued_as_the_service_does_and_its_restart_is_estimated():
    # urgent (hi, 10 min, in a's quota) reclaims the node from the victim (lo, on loan, 1 h
    # limit, 5 min grace). The service requeues the victim with its submission time: it starts
    # again when urgent ends, ahead of "later", which was submitted after it.
    classes = (PriorityClass("lo", 100, True, 300), PriorityClass("hi", 500, False, 0))
    run = [running("victim", "b", "n000", 8, priority=100, age_s=600, runtime=3600)]
    again = {"victim": queued("victim", "b", 8, age_s=900, runtime=3600)}
    queue = [queued("urgent", "a", 8, priority=500, runtime=600),
             queued("later", "b", 8, age_s=60, runtime=600)]
    snap = snapshot(cluster(1), tree({"D": (8, {"a": 8, "b": 0})}), run, queue, priority_classes=classes)
    found = forecast(snap, requeue=again)
    urgent_ends = NOW + timedelta(seconds=300 + 600)
    assert found.starts == {"urgent": NOW + timedelta(seconds=300), "later": urgent_ends + timedelta(hours=1)}
    assert found.restarts == {"victim": urgent_ends}
    assert found.unknown == {}
    # Told nothing of how the victim would wait again, the forecast cannot requeue it.
    dropped = forecast(snap)
    assert dropped.restarts == {} and dropped.starts["later"] == urgent_ends


def test_the_end_of_a_preempted_run_does_not_end_the_restarted_one():
    # The victim's first run (1 h limit, started 10 min ago) would end at +50 min; it is
    # preempted now and restarts at +15 min: the first run's end must not finish the second, so
    # "later" (behind it) starts when the second run reaches its limit, at +75 min.
    classes = (PriorityClass("lo", 100, True, 0), PriorityClass("hi", 500, False, 0))
    run = [running("victim", "b", "n000", 8, priority=100, age_s=600, runtime=3600)]
    again = {"victim": queued("victim", "b", 8, age_s=700, runtime=3600)}
    queue = [queued("urgent", "a", 8, priority=500, runtime=900),
             queued("later", "b", 8, age_s=60, runtime=600)]
    snap = snapshot(cluster(1), tree({"D": (8, {"a": 8, "b": 0})}), run, queue, priority_classes=classes)
    found = forecast(snap, requeue=again)
    assert found.starts["urgent"] == NOW
    assert found.restarts == {"victim": NOW + timedelta(minutes=15)}
    assert found.starts["later"] == NOW + timedelta(minutes=75)


def test_a_job_does_not_start_on_free_gpus_its_cpu_request_would_strand():
    """8 GPUs, 96 cores (12 a GPU). r holds 4 GPUs and their 48 cores for 1 h; 4 GPUs and 48
    cores are free. A 1-GPU job asking 60 cores needs five GPUs' worth of the node: it starts
    when r ends, not now; one asking 48 cores (four GPUs' worth) starts now."""
    from jobs.scheduler.scheduler import Node, QueuedJob

    node = Node("n0", "A100", 8, "z", "s0", "l0", cpu_millicores=96_000, memory_mib=1_048_576,
                local_disk_gib=4_000)
    run = [running("r", "a", "n0", 4, age_s=0, runtime=3600)]

    def start(cpu):
        job = QueuedJob("w", "b", "A100", NOW, 1, None, 1, None, 100, True, 600, False, cpu_millicores=cpu)
        return forecast(snapshot((node,), TL, run, [job])).starts["w"]

    assert start(60_000) == NOW + timedelta(hours=1)
    assert start(48_000) == NOW

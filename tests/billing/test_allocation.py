"""Events → allocation segments (pure): where GPUs are held, in which tier, with how many workers."""

from datetime import UTC, datetime, timedelta

from billing.allocation import ADMITTED, END, START, TIER, WORKERS, Mark, Segment, segments

T = datetime(2026, 11, 3, tzinfo=UTC)
M = timedelta(minutes=1)


def at(minutes):
    return T + minutes * M


def test_an_allocation_runs_from_running_to_the_transition_out_of_it():
    marks = [Mark(at(0), ADMITTED, on_loan=False, workers=2), Mark(at(5), START), Mark(at(65), END)]
    assert segments(marks, default_workers=4, until=at(1000)) == ([Segment(at(5), at(65), False, 2)], False)


def test_admitted_without_running_is_not_billed():
    marks = [Mark(at(0), ADMITTED, on_loan=True, workers=1)]
    assert segments(marks, default_workers=1, until=at(100)) == ([], False)


def test_a_running_job_is_cut_at_the_watermark_and_reported_as_holding():
    marks = [Mark(at(0), ADMITTED, on_loan=False, workers=1), Mark(at(1), START)]
    assert segments(marks, default_workers=1, until=at(60)) == ([Segment(at(1), at(60), False, 1)], True)


def test_tier_flips_and_scaling_split_the_allocation_and_no_op_flips_do_not():
    marks = [
        Mark(at(0), ADMITTED, on_loan=False, workers=4),
        Mark(at(1), START),
        Mark(at(10), TIER, on_loan=True),
        Mark(at(20), TIER, on_loan=True),  # no change: no cut
        Mark(at(30), WORKERS, workers=2),
        Mark(at(40), TIER, on_loan=False),
        Mark(at(50), END),
    ]
    found, holding = segments(marks, default_workers=4, until=at(100))
    assert found == [
        Segment(at(1), at(10), False, 4),
        Segment(at(10), at(30), True, 4),
        Segment(at(30), at(40), True, 2),
        Segment(at(40), at(50), False, 2),
    ]
    assert not holding


def test_a_flip_before_the_start_sets_the_tier_the_allocation_starts_in():
    marks = [
        Mark(at(0), ADMITTED, on_loan=False, workers=1),
        Mark(at(2), TIER, on_loan=True),
        Mark(at(3), START),
    ]
    assert segments(marks, default_workers=1, until=at(10))[0] == [Segment(at(3), at(10), True, 1)]


def test_preempted_and_requeued_jobs_have_one_allocation_per_run_and_a_fresh_tier_each_time():
    marks = [
        Mark(at(0), ADMITTED, on_loan=True, workers=1),
        Mark(at(1), START),
        Mark(at(30), END),  # preempted (after its grace period)
        Mark(at(40), ADMITTED, on_loan=False, workers=1),
        Mark(at(41), START),
        Mark(at(90), END),
    ]
    assert segments(marks, default_workers=1, until=at(100))[0] == [
        Segment(at(1), at(30), True, 1),
        Segment(at(41), at(90), False, 1),
    ]


def test_clipping_to_a_window_never_moves_a_cut():
    marks = [
        Mark(at(0), ADMITTED, on_loan=False, workers=1),
        Mark(at(1), START),
        Mark(at(30), TIER, on_loan=True),
    ]
    whole, _ = segments(marks, default_workers=1, until=at(120))
    first, _ = segments(marks, default_workers=1, until=at(60))
    second, _ = segments(marks, default_workers=1, until=at(120), since=at(60))
    assert first + second == [
        Segment(at(1), at(30), False, 1),
        Segment(at(30), at(60), True, 1),
        Segment(at(60), at(120), True, 1),
    ]
    assert sum(((s.end - s.start) for s in first + second), timedelta()) == sum(
        ((s.end - s.start) for s in whole), timedelta()
    )


def test_a_start_and_end_at_the_same_instant_bill_nothing():
    marks = [Mark(at(0), ADMITTED, on_loan=False, workers=1), Mark(at(5), START), Mark(at(5), END)]
    assert segments(marks, default_workers=1, until=at(10)) == ([], False)

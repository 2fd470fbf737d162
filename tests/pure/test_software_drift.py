"""quotas.drift: a node's driver and CUDA against its flavor's software baseline (DESIGN §15,
docs/resources.md "Software baseline")."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotas.drift import (
    CUDA,
    CUDA_VERSION,
    DRIVER,
    DRIVER_VERSION,
    NONE,
    OK,
    OLDER,
    UNREPORTED,
    baseline_for,
    drift,
)


@pytest.mark.parametrize(
    ("expected", "reported", "state"),
    [
        (("535.104.05", "12.2"), ("535.104.05", "12.2"), OK),
        # The baseline's precision: CUDA 12.4 holds for 12.4.1, driver 535 for every 535 driver.
        (("535.104.05", "12.4"), ("535.104.05", "12.4.1"), OK),
        (("535", ""), ("535.154.05", "12.2"), OK),
        # Numbers, not strings: 535.98 is older than 535.104.05, 535.129 newer.
        (("535.104.05", "12.2"), ("535.98", "12.2"), OLDER),
        (("535.104.05", "12.2"), ("535.129.03", "12.2"), DRIVER),
        (("535.104.05", "12.2"), ("535.104.05", "12.10"), CUDA),
        (("535.104.05", "12.4"), ("535.104.05", "12.2"), OLDER),
        # Older wins over a newer other part; not reported wins over a difference.
        (("535.104.05", "12.4"), ("550.54.15", "12.2"), OLDER),
        (("535.104.05", "12.4"), ("", "12.6"), UNREPORTED),
        (("535.104.05", "12.4"), ("", ""), UNREPORTED),
        (("", "12.4"), ("", "12.4"), OK),  # the driver is not part of this baseline
        (("535.104.05", "12.2"), ("535.104.05-open", "12.2"), DRIVER),  # not a version: differs
        (("", ""), ("535.104.05", "12.2"), NONE),
    ],
)
def test_a_node_is_judged_against_its_baseline(expected, reported, state):
    found = drift(*expected, *reported)
    assert found.state == state
    assert found.off == (state in (OLDER, UNREPORTED, DRIVER, CUDA))
    assert (found.expected_driver, found.expected_cuda, found.driver, found.cuda) == (*expected, *reported)


versions = st.lists(st.integers(0, 999), min_size=2, max_size=3).map(lambda p: ".".join(map(str, p)))


@given(versions, versions)
def test_older_exactly_when_the_numbers_are_lower(want, have):
    w, h = tuple(map(int, want.split("."))), tuple(map(int, have.split(".")))
    state = drift(want, "", have, "").state
    assert (state == OLDER) == (h[: len(w)] < w)
    assert (state == OK) == (h[: len(w)] == w)


def test_a_clusters_baseline_overrides_the_flavors_for_every_cluster():
    every, own = object(), object()
    known = {(1, None): every, (1, 7): own}
    assert baseline_for(known, 1, 7) is own
    assert baseline_for(known, 1, 8) is every
    assert baseline_for(known, 2, 7) is None


@pytest.mark.parametrize("text", ["535.104.05", "550.54", "535"])
def test_driver_versions_as_nvidia_smi_prints_them_are_accepted(text):
    assert DRIVER_VERSION.fullmatch(text)


@pytest.mark.parametrize("text", ["535.104.05.1", "v535", "535.", "535..1", "latest", "", "５３５"])
def test_other_driver_strings_are_refused(text):
    assert not DRIVER_VERSION.fullmatch(text)


@pytest.mark.parametrize(
    ("text", "ok"), [("12.4", True), ("12", False), ("12.4.1", False), ("cuda12", False)]
)
def test_cuda_versions_are_major_dot_minor(text, ok):
    assert bool(CUDA_VERSION.fullmatch(text)) == ok

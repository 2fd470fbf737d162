"""The software baseline (DESIGN §15): is a node's driver and CUDA what its flavor expects? Pure:
plain strings in, a :class:`Drift` out (no Django), so the node map, the API, the drift report
and the command all judge alike.

A version is compared on the baseline's own precision: a baseline of CUDA "12.4" holds for a node
reporting "12.4" or "12.4.1", a driver baseline of "535" for every 535 driver. Versions are read
as numbers ("535.104.05" is 535, 104, 5), so "535.98" is older than "535.104.05".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The shapes a baseline accepts: a driver as nvidia-smi prints it ("535.104.05", "550.54",
# "535"), CUDA as major.minor ("12.4", as jobs ask it: jobs.requests.CUDA_VERSION).
DRIVER_VERSION = re.compile(r"^[0-9]{1,4}(\.[0-9]{1,4}){0,2}$")
CUDA_VERSION = re.compile(r"^[0-9]{1,3}\.[0-9]{1,3}$")

# States, most serious first: what a node off its baseline is flagged with.
OLDER = "older"  # driver or CUDA older than the baseline
UNREPORTED = "unreported"  # the baseline names a version the node does not report
DRIVER = "driver"  # the driver differs (newer, or a string that is not a version)
CUDA = "cuda"  # the CUDA version differs (newer, or not a version)
OK = "ok"
NONE = "none"  # no baseline for the node's flavor and cluster: nothing to compare with
OFF = (OLDER, UNREPORTED, DRIVER, CUDA)


@dataclass(frozen=True, slots=True)
class Drift:
    state: str
    expected_driver: str = ""
    expected_cuda: str = ""
    driver: str = ""
    cuda: str = ""

    @property
    def off(self) -> bool:
        return self.state in OFF


def numbers(text: str) -> tuple[int, ...] | None:
    """ "535.104.05" → (535, 104, 5); not a dotted number → None."""
    parts = text.strip().split(".")
    if not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def _compare(expected: str, actual: str) -> str:
    """"same" | "older" | "differs" | "unreported" for one component the baseline names."""
    if not actual.strip():
        return "unreported"
    want, have = numbers(expected), numbers(actual)
    if want is None or have is None:
        return "same" if expected.strip() == actual.strip() else "differs"
    have = have[: len(want)]  # on the baseline's precision (see the module docstring)
    if have == want:
        return "same"
    return "older" if have < want else "differs"


def drift(expected_driver: str, expected_cuda: str, driver: str, cuda: str) -> Drift:
    """The node's state against a baseline. An empty expected version is not checked; both
    empty (or no baseline: pass "", "") is :data:`NONE`."""
    found = Drift(NONE, expected_driver, expected_cuda, driver, cuda)
    if not expected_driver and not expected_cuda:
        return found
    outcomes = {
        DRIVER: _compare(expected_driver, driver) if expected_driver else "same",
        CUDA: _compare(expected_cuda, cuda) if expected_cuda else "same",
    }
    values = set(outcomes.values())
    if "older" in values:
        state = OLDER
    elif "unreported" in values:
        state = UNREPORTED
    elif outcomes[DRIVER] == "differs":
        state = DRIVER
    elif outcomes[CUDA] == "differs":
        state = CUDA
    else:
        state = OK
    return Drift(state, expected_driver, expected_cuda, driver, cuda)


def baseline_for(baselines: dict, flavor_id: int, cluster_id: int):
    """The baseline of a node: its cluster's for its flavor, else the flavor's for every cluster
    (key ``(flavor_id, None)``); None when neither exists."""
    found = baselines.get((flavor_id, cluster_id))
    return found if found is not None else baselines.get((flavor_id, None))

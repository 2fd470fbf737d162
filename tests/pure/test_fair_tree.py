"""The report's figures from the one Fair Tree (jobs/scheduler/fairshare.py ``fair_figures``, DESIGN
§16) — level fair share among siblings, ranks level by level from the root, factor = (projects −
rank + 1) / projects — and the shares (quotas/fair_shares.py)."""

import math
from decimal import Decimal

from jobs.scheduler.fairshare import fair_figures
from quotas.admission import TreeNode
from quotas.fair_shares import shares_of

TREE = {"d1": None, "d2": None, "p1": "d1", "p2": "d1", "p3": "d2"}
NODES = [TreeNode(k, up, "project" if k[0] == "p" else "department") for k, up in TREE.items()]


def fair_tree(_parents, shares, usage):
    return fair_figures(NODES, usage, shares)


def test_shares_are_normalised_quota_unless_weighted():
    quota = [("d1", "A100", Decimal(8)), ("d1", "H800", Decimal(2)), ("p1", "A100", Decimal("0.5"))]
    shares = shares_of(TREE, quota, {"A100": Decimal(1), "H800": Decimal("2.5")}, {"p2": Decimal(3)})
    assert shares == {"d1": 13.0, "d2": 0.0, "p1": 0.5, "p2": 3.0, "p3": 0.0}


def test_no_usage_goes_first_and_ranks_follow_the_departments_first():
    shares = {"d1": 1, "d2": 1, "p1": 1, "p2": 1, "p3": 1}
    # d1 used 3 of 4 (S = 0.5/0.75), d2 1 of 4 (S = 2): d2's project first, then d1's by their own S
    fair = fair_tree(TREE, shares, {"p1": 3.0, "p3": 1.0})
    assert fair["d2"].level_fs == 2.0 and math.isclose(fair["d1"].level_fs, 0.5 / 0.75)
    assert fair["p2"].level_fs == math.inf  # no usage among its siblings
    assert [fair[p].rank for p in ("p3", "p2", "p1")] == [1, 2, 3]
    assert [fair[p].factor for p in ("p3", "p2", "p1")] == [1.0, 2 / 3, 1 / 3]
    assert fair["d1"].rank is None and fair["d1"].usage == 3.0 and fair["d1"].usage_norm == 0.75


def test_twice_the_shares_may_use_twice_as_much_for_the_same_place():
    shares = {"d1": 2, "d2": 1, "p1": 1, "p2": 1, "p3": 1}
    even = fair_tree(TREE, shares, {"p1": 2.0, "p3": 1.0})
    assert math.isclose(even["d1"].level_fs, 1.0) and math.isclose(even["d2"].level_fs, 1.0)
    more = fair_tree(TREE, shares, {"p1": 2.1, "p3": 1.0})
    assert more["p3"].rank == 1  # d1 a little over its 2:1 share: d2 goes first


def test_tied_projects_share_a_rank_and_the_next_rank_skips():
    shares = {"d1": 1, "d2": 1, "p1": 1, "p2": 1, "p3": 1}
    # d1 and d2 tie (each 2 of 4 with half the shares); then the merged children by usage per share:
    # p1 = p2 (1 each) before p3 (2). Slurm would tie all three (each LF 1 inside its department):
    # the engine's order, which the report follows, compares u/s (jobs/scheduler/fairshare.py).
    fair = fair_tree(TREE, shares, {"p1": 1.0, "p2": 1.0, "p3": 2.0})
    assert [fair[p].rank for p in ("p1", "p2", "p3")] == [1, 1, 3]
    assert [fair[p].factor for p in ("p1", "p2", "p3")] == [1.0, 1.0, 1 / 3]

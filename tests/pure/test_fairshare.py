"""Fair Tree ranks, factors and keys (jobs/scheduler/fairshare.py) on hand-worked examples that
follow Slurm's fair_tree.html rules, and the decayed usage of an allocation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.scheduler.fairshare import FairTree, decayed_card_seconds
from quotas.admission import TreeNode


def flat(*names):
    return [TreeNode(n, None, "project") for n in names]


def test_level_fair_share_orders_siblings_and_a_project_without_usage_comes_first():
    # root usage 40: a S=.25 U=.25 → LF 1; b S=.25 U=.75 → 1/3; c S=.5 U=0 → inf.
    ft = FairTree(flat("a", "b", "c"), {"a": 10, "b": 30}, {"a": 1, "b": 1, "c": 2})
    assert ft.level == {"a": pytest.approx(1.0), "b": pytest.approx(1 / 3), "c": math.inf}
    assert ft.rank == {"c": 1, "a": 2, "b": 3}
    assert ft.factor == {"c": 1.0, "a": pytest.approx(2 / 3), "b": pytest.approx(1 / 3)}
    assert sorted("abc", key=ft.key) == ["c", "a", "b"]


def test_every_project_of_the_better_department_outranks_every_project_of_the_other():
    # Fair Tree's property: A used 100 of 110 on half the shares (LF .55), B 10 (LF 5.5). a1 has
    # no usage at all, yet b1 (under B) goes first.
    tree = [TreeNode("A", None, "department"), TreeNode("B", None, "department"),
            TreeNode("a1", "A"), TreeNode("a2", "A"), TreeNode("b1", "B")]
    ft = FairTree(tree, {"a2": 100, "b1": 10}, {"A": 1, "B": 1, "a1": 1, "a2": 1, "b1": 1})
    assert ft.usage["A"] == 100 and ft.usage["B"] == 10
    assert ft.level["A"] == pytest.approx(0.5 / (100 / 110)) and ft.level["B"] == pytest.approx(5.5)
    assert ft.rank == {"b1": 1, "a1": 2, "a2": 3}  # projects only
    assert sorted(["a1", "a2", "b1"], key=ft.key) == ["b1", "a1", "a2"]


def test_tied_departments_merge_their_children_and_tied_projects_share_a_rank():
    # A and B both LF 1: merged children a2 (inf), b1 = b2 (LF 1), a1 (LF .5).
    tree = [TreeNode("A", None, "department"), TreeNode("B", None, "department"),
            TreeNode("a1", "A"), TreeNode("a2", "A"), TreeNode("b1", "B"), TreeNode("b2", "B")]
    shares = dict.fromkeys(["A", "B", "a1", "a2", "b1", "b2"], 1)
    ft = FairTree(tree, {"a1": 10, "b1": 5, "b2": 5}, shares)
    assert ft.rank == {"a2": 1, "b1": 2, "b2": 2, "a1": 4}
    assert ft.factor["b1"] == ft.factor["b2"] == 0.75 and ft.factor["a1"] == 0.25


def test_a_node_without_shares_is_last_even_without_usage():
    ft = FairTree(flat("a", "b", "z"), {"a": 50, "b": 5}, {"a": 1, "b": 1})
    assert ft.level["z"] == 0.0
    assert sorted("abz", key=ft.key) == ["b", "a", "z"]
    assert ft.rank["z"] == 3


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1000), st.integers(1, 5)),
                min_size=2, max_size=8))
def test_the_engine_key_orders_projects_as_the_fair_tree_ranks_do(spec):
    tree = [TreeNode(f"D{d}", None, "department") for d in range(3)]
    usage, shares = {}, {f"D{d}": d + 1 for d in range(3)}
    for k, (d, u, s) in enumerate(spec):
        tree.append(TreeNode(f"p{k}", f"D{d}"))
        usage[f"p{k}"], shares[f"p{k}"] = u, s
    ft = FairTree(tree, usage, shares)
    projects = [f"p{k}" for k in range(len(spec))]
    for x in projects:
        for y in projects:
            if ft.key(x) < ft.key(y):  # strictly before by key: ranked strictly before
                assert ft.rank[x] < ft.rank[y]
            elif ft.key(x) == ft.key(y):
                assert ft.rank[x] == ft.rank[y]


def test_decayed_usage_is_the_exact_integral():
    h = 3600.0
    # 2 cards for one half-life ending now: 2 × h/ln2 × (1 − 1/2)
    assert decayed_card_seconds(2, 0, 3600, 3600, h) == pytest.approx(2 * h / math.log(2) * 0.5)
    # still running (end None) = ended now; a future end counts only up to now
    assert decayed_card_seconds(1, 0, None, 100, h) == decayed_card_seconds(1, 0, 5000, 100, h)
    # no decay: plain card-seconds; nothing before start
    assert decayed_card_seconds(3, 10, 20, 1000, 0) == 30
    assert decayed_card_seconds(3, 50, None, 40, h) == 0.0
    # one half-life later, the same allocation counts half
    fresh = decayed_card_seconds(1, 0, 100, 100, h)
    assert decayed_card_seconds(1, 0, 100, 100 + h, h) == pytest.approx(fresh / 2)


@given(st.floats(0, 10**6), st.floats(0, 10**6), st.floats(1, 10**6), st.integers(1, 8))
def test_splitting_an_allocation_in_time_or_cards_changes_nothing(a, b, h, cards):
    start, end = min(a, b), max(a, b)
    mid = (start + end) / 2
    now = end + 1000
    whole = decayed_card_seconds(cards, start, end, now, h)
    split = decayed_card_seconds(cards, start, mid, now, h) + decayed_card_seconds(cards, mid, end, now, h)
    per_card = sum(decayed_card_seconds(1, start, end, now, h) for _ in range(cards))
    assert split == pytest.approx(whole, rel=1e-9, abs=1e-6)
    assert per_card == pytest.approx(whole, rel=1e-9, abs=1e-6)

"""quotas.lending: whose idle quota the on-loan jobs use (issue 24 item 6), nearest first."""

from decimal import Decimal

from quotas.lending import Level, attribute

D = Decimal


def dep(i, parent=None, q=0, lend=None):
    return Level(("department", i), ("department", parent) if parent else None, D(q), lend)


def proj(i, parent, q=0, lend=None):
    return Level(("project", i), ("department", parent), D(q), lend)


def used_of(levels, project_usage):
    """Subtree usage of every node from per-project usage."""
    by_key = {lv.key: lv for lv in levels}
    used = {}
    for key, amount in project_usage.items():
        while key in by_key:
            used[key] = used.get(key, D(0)) + D(amount)
            key = by_key[key].parent
    return used


def run(levels, usage, on_loan):
    return attribute(levels, {("project", p): D(v) for p, v in on_loan.items()},
                     used_of(levels, {("project", p): v for p, v in usage.items()}))


def test_a_project_borrows_its_siblings_idle_quota_first():
    # D (16): p1 (8) uses 12, 4 of it on loan; p2 (8) idle; E (8): p3 (8) idle.
    levels = [dep(1, q=16), proj(1, 1, 8), proj(2, 1, 8), dep(2, q=8), proj(3, 2, 8)]
    out = run(levels, {1: 12}, {1: 4})
    assert out.borrowed[("project", 1)] == 4 and out.borrowed.get(("department", 1), 0) == 0
    assert out.lent[("project", 2)] == 4 and out.lent.get(("department", 1), 0) == 0
    assert out.lent.get(("department", 2), 0) == 0
    assert dict(out.to[("project", 2)]) == {("project", 1): 4}


def test_what_siblings_cannot_cover_comes_from_the_next_level_then_the_pool():
    # D (8): p1 (8) uses 14, 6 on loan; p2 (0). E (4): p3 (4) idle. The pool covers the rest.
    levels = [dep(1, q=8), proj(1, 1, 8), proj(2, 1, 0), dep(2, q=4), proj(3, 2, 4)]
    out = run(levels, {1: 14}, {1: 6})
    assert out.borrowed[("project", 1)] == 6 and out.borrowed[("department", 1)] == 6
    assert out.lent[("department", 2)] == 4 and out.lent[("project", 3)] == 4
    assert out.from_pool[("project", 1)] == 2


def test_a_departments_unassigned_quota_covers_its_own_projects():
    # D (12) gives p1 only 8: p1's 2 on loan use D's own 4, nothing leaves D.
    levels = [dep(1, q=12), proj(1, 1, 8), dep(2, q=8), proj(2, 2, 8)]
    out = run(levels, {1: 10}, {1: 2})
    assert out.borrowed[("project", 1)] == 2 and out.borrowed.get(("department", 1), 0) == 0
    assert dict(out.to[("department", 1)]) == {("project", 1): 2}
    assert out.lent.get(("department", 2), 0) == 0


def test_a_lend_limit_caps_what_leaves_the_subtree():
    levels = [dep(1, q=8), proj(1, 1, 8), dep(2, q=8, lend=D(3)), proj(2, 2, 8)]
    out = run(levels, {1: 13}, {1: 5})
    assert out.lent[("department", 2)] == 3 and out.lent[("project", 2)] == 3
    assert out.from_pool[("project", 1)] == 2


def test_lending_inside_a_department_is_settled_before_an_outsider_reaches_it():
    # D (16): d1 (8) {a (4) uses 6: 2 on loan, b (4) idle}, d2 (8) idle. E (8): c (8) uses 12.
    levels = [dep(1, q=16), dep(11, 1, 8), proj(1, 11, 4), proj(2, 11, 4), dep(12, 1, 8),
              dep(2, q=8), proj(3, 2, 8)]
    out = run(levels, {3: 12, 1: 6}, {3: 4, 1: 2})  # the outsider is listed first
    assert dict(out.to[("project", 2)]) == {("project", 1): 2, ("project", 3): 2}
    assert out.lent[("department", 1)] == 4  # b's 2 left and d2's 2 … to c
    assert out.borrowed[("department", 2)] == 4 and out.borrowed.get(("department", 11), 0) == 0
    assert sum(out.to[("department", 1)].values()) == 4


def test_nothing_on_loan_lends_nothing():
    levels = [dep(1, q=8), proj(1, 1, 8)]
    out = run(levels, {1: 8}, {})
    assert not out.lent and not out.borrowed and not out.from_pool

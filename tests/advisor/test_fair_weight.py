"""The advisor's per-department fair-share weight (issue 34 item 6): one ``fair_weight:<department>``
dimension per department, pinned to 1 by default; bounds validated naming the dimension; a factor
reaches the replay as ``policy.fair_share_factors`` and changes what the replay does; apply names it
as not a rule change."""

import pytest
from django.urls import reverse

from jobs.whatif.advisor import space
from jobs.whatif.replay import policy, sim
from jobs.whatif.replay.trace import TraceJob, TraceNode
from tests.advisor.scene import BETTER, PROJECTS, finished_search


def test_by_default_each_department_has_a_pinned_weight_and_today_has_no_key():
    b = space.check_bounds({})
    dims = {d.name: d for d in space.dimensions(b, PROJECTS)}
    assert {n for n in dims if n.startswith("fair_weight:")} == {"fair_weight:d0", "fair_weight:d1"}
    assert all(dims[n].fixed and dims[n].choices == (1.0,) for n in ("fair_weight:d0", "fair_weight:d1"))
    assert "fair_share_factors" not in space.replay_inputs(space.today(PROJECTS), b)["policy"]
    assert space.departments(["a/b/c", "a/d", "solo"]) == ["a", "a/b"]


def test_a_bounded_weight_is_searched_and_reaches_the_replay():
    b = space.check_bounds({"fair_weight": [0.5, 1, 2]})
    dims = {d.name: d for d in space.dimensions(b, PROJECTS)}
    assert not dims["fair_weight:d1"].fixed and dims["fair_weight:d1"].choices == (0.5, 1, 2)
    params = {**space.today(PROJECTS), "fair_weight:d1": 2}
    inputs = space.replay_inputs(params, b)
    assert inputs["policy"]["fair_share_factors"] == {"d1": 2.0}
    assert policy.check(inputs["policy"])["fair_share_factors"] == {"d1": 2.0}
    assert space.changes(params, PROJECTS) == {"fair_weight:d1": 2}


@pytest.mark.parametrize("bad", [[0], [-1], [101], [None], ["2"], [True], [], [2, 2]])
def test_bad_weight_bounds_are_refused_naming_the_dimension(bad):
    with pytest.raises(ValueError, match=r"bounds\.fair_weight"):
        space.check_bounds({"fair_weight": bad})


@pytest.mark.parametrize("bad", [{"d0": 0}, {"d0": "2"}, {"d0": True}, {"d0": float("nan")}, [1]])
def test_bad_factors_are_refused_by_the_replay(bad):
    with pytest.raises(ValueError, match=r"policy\.fair_share_factors"):
        policy.check({"fair_share_factors": bad})


def _contest():
    """Two departments with one project each, equal demand-derived quotas, on one 8-GPU node: both
    keep 8 GPUs queued behind each other's, so fair share decides who goes first at each turn."""
    nodes = [TraceNode("n0", 8, "A100")]
    jobs = [TraceJob(f"{t}{i}", float(i), 600.0, 8, tenant=t) for i in range(12) for t in ("a/pa", "b/pb")]
    return jobs, nodes


def _waits(factors):
    jobs, nodes = _contest()
    pol = {"fair_half_life_s": 86400, **({"fair_share_factors": factors} if factors else {})}
    options, world = policy.world(jobs, nodes, None, pol, sim.Options())
    out = sim.simulate(jobs, nodes, options=options, world=world)
    return {t: out["tenants"][t]["avg_queue_delay_s"] for t in ("a/pa", "b/pb")}


def test_a_factor_on_a_department_serves_it_sooner_in_a_contested_pool():
    even, weighted = _waits(None), _waits({"b": 3})
    assert weighted["b/pb"] < even["b/pb"] and weighted["a/pa"] > even["a/pa"]
    with pytest.raises(ValueError, match="not a department of the replay: b/pb"):
        _waits({"b/pb": 2})


@pytest.mark.django_db
def test_apply_says_a_weight_is_set_on_the_quota_tree_page(world, api):
    _search, cand = finished_search(world.users["platform"], changes={**BETTER, "fair_weight:d1": 2.0})
    assert cand.inputs["policy"]["fair_share_factors"] == {"d1": 2.0}
    r = api(world.users["platform"]).post(reverse("api:advisorcandidate-apply", args=[cand.pk]))
    assert r.status_code in (200, 201), r.content
    assert any("quota tree page" in item["reason"] for item in r.json()["unmapped"]), r.json()

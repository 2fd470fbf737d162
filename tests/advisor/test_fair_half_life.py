"""The advisor's ``fair_half_life_s`` dimension (issue 34 item 6): bounds validated naming the
dimension, mapped onto the replay's ``policy.fair_half_life_s``, and applied as the centre's
fair-share half-life (a ``scheduler_fair_share`` rule change)."""

import pytest
from django.urls import reverse

from jobs.whatif.advisor import space
from jobs.whatif.replay import policy
from portal.models import ApprovalRequest
from tests.advisor.scene import BETTER, PROJECTS, finished_search


def test_by_default_the_half_life_is_not_searched_and_today_has_no_key():
    b = space.check_bounds({})
    dims = {d.name: d for d in space.dimensions(b, PROJECTS)}
    assert dims["fair_half_life_s"].fixed
    assert "fair_half_life_s" not in space.replay_inputs(space.today(PROJECTS), b)["policy"]


def test_a_bounded_half_life_is_searched_and_reaches_the_replay():
    b = space.check_bounds({"fair_half_life_s": [None, 86400, 604800]})
    dims = {d.name: d for d in space.dimensions(b, PROJECTS)}
    assert not dims["fair_half_life_s"].fixed and dims["fair_half_life_s"].choices == (None, 86400, 604800)
    inputs = space.replay_inputs({**space.today(PROJECTS), "fair_half_life_s": 86400}, b)
    assert inputs["policy"]["fair_half_life_s"] == 86400
    policy.check(inputs["policy"])  # the replay accepts what the space produces


@pytest.mark.parametrize("bad", [[59.5], [0], [3599], [366 * 86400], ["1d"], [True], [], [None, None]])
def test_bad_half_life_bounds_are_refused_naming_the_dimension(bad):
    with pytest.raises(ValueError, match=r"bounds\.fair_half_life_s"):
        space.check_bounds({"fair_half_life_s": bad})


@pytest.mark.django_db
def test_apply_files_the_half_life_as_a_fair_share_rule_change(world, api):
    _search, cand = finished_search(world.users["platform"],
                                    changes={**BETTER, "fair_half_life_s": 86400})
    assert cand.inputs["policy"]["fair_half_life_s"] == 86400
    r = api(world.users["platform"]).post(reverse("api:advisorcandidate-apply", args=[cand.pk]))
    assert r.status_code in (200, 201), r.content
    changes = ApprovalRequest.objects.get(kind="policy").payload["changes"]
    fair = [c for c in changes if c["type"] == "scheduler_fair_share"]
    assert [(c["before"], c["fair_share_half_life_seconds"]) for c in fair] == [
        ({"fair_share_half_life_seconds": 604800}, 86400)]

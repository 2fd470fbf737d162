"""Bad input answers 400 with field messages and writes nothing (never a 500, never
silent clamping)."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.models import Department, Project
from quotas.models import Loan, QuotaNode, QuotaWindow


def _snapshot():
    return (
        list(
            QuotaNode.objects.order_by("id").values_list(
                "id", "quota", "borrow_limit", "lend_limit", "overcommit_ratio"
            )
        ),
        list(Department.objects.order_by("id").values_list("id", "code", "parent_id")),
        list(Project.objects.order_by("id").values_list("id", "code", "department_id")),
        Loan.objects.count(),
        QuotaWindow.objects.count(),
    )


@pytest.fixture
def platform(world, api):
    return api(world.users["platform"])


def _assert_refused(response, field, before):
    assert response.status_code == 400, response.content
    body = response.json()
    assert field in body, body
    messages = body[field] if isinstance(body[field], list) else [body[field]]
    assert all(isinstance(m, str) and m for m in messages)
    assert _snapshot() == before


def test_overcommit_violation_on_new_child_is_refused(world, platform):
    before = _snapshot()
    response = platform.post(
        reverse("api:project-list"), {"code": "px", "name": "x", "department": world.A1.pk}, format="json"
    )
    assert response.status_code == 201
    before = _snapshot()
    px = response.json()["id"]
    response = platform.post(
        reverse("api:quotanode-list"), {"flavor": "F", "project": px, "quota": "1"}, format="json"
    )
    _assert_refused(response, "quota", before)
    assert "overcommit ratio" in response.json()["quota"][0]


def test_overcommit_ratio_lets_children_exceed_the_parent(world, platform):
    node = world.quota["A1"]
    assert (
        platform.patch(
            reverse("api:quotanode-detail", args=[node.pk]), {"overcommit_ratio": "1.5"}, format="json"
        ).status_code
        == 200
    )
    px = platform.post(
        reverse("api:project-list"), {"code": "px", "name": "x", "department": world.A1.pk}, format="json"
    ).json()["id"]
    ok = platform.post(
        reverse("api:quotanode-list"), {"flavor": "F", "project": px, "quota": "2"}, format="json"
    )
    assert ok.status_code == 201, ok.content
    before = _snapshot()
    _assert_refused(
        platform.patch(
            reverse("api:quotanode-detail", args=[node.pk]), {"overcommit_ratio": "1"}, format="json"
        ),
        "quota",
        before,
    )


def test_parent_cannot_shrink_below_its_children(world, platform):
    before = _snapshot()
    response = platform.patch(
        reverse("api:quotanode-detail", args=[world.quota["A1"].pk]), {"quota": "3"}, format="json"
    )
    _assert_refused(response, "quota", before)


def test_root_is_bounded_by_healthy_capacity(world, platform):
    before = _snapshot()  # C = 16 and A + B = 16 already
    response = platform.patch(
        reverse("api:quotanode-detail", args=[world.quota["B"].pk]), {"quota": "9"}, format="json"
    )
    _assert_refused(response, "quota", before)
    assert "the pool" in response.json()["quota"][0]


def test_never_lent_parts_cannot_be_oversold(world, platform):
    # A (8) has children A1 (4, lends all) and pa (4). With ratio 2, raising A1 to 8 is within 2 × 8,
    # but making both keep everything (lend_limit 0) would promise 12 never-lent units out of 8.
    platform.patch(
        reverse("api:quotanode-detail", args=[world.quota["A"].pk]), {"overcommit_ratio": "2"}, format="json"
    )
    platform.patch(
        reverse("api:quotanode-detail", args=[world.quota["A1"].pk]),
        {"quota": "8", "lend_limit": "0"},
        format="json",
    )
    before = _snapshot()
    response = platform.patch(
        reverse("api:quotanode-detail", args=[world.quota["pa"].pk]), {"lend_limit": "0"}, format="json"
    )
    _assert_refused(response, "quota", before)
    assert "never-lent" in response.json()["quota"][0]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"quota": "-1"}, "quota"),
        ({"quota": "1e12"}, "quota"),
        ({"quota": "abc"}, "quota"),
        ({"quota": "NaN"}, "quota"),
        ({"quota": "0.5"}, "quota"),  # F is not shareable: whole cards only
        ({"borrow_limit": "-3"}, "borrow_limit"),
        ({"lend_limit": "5"}, "lend_limit"),  # above the quota 4
        ({"overcommit_ratio": "0.5"}, "overcommit_ratio"),
        ({"overcommit_ratio": "11"}, "overcommit_ratio"),
        ({"quota": None}, "quota"),
    ],
)
def test_absurd_quota_numbers_are_refused(world, platform, body, field):
    before = _snapshot()
    response = platform.patch(
        reverse("api:quotanode-detail", args=[world.quota["pa1"].pk]), body, format="json"
    )
    _assert_refused(response, field, before)


def test_unknown_flavor_is_a_field_error(world, platform):
    before = _snapshot()
    response = platform.post(
        reverse("api:quotanode-list"), {"flavor": "NOPE", "project": world.pa.pk, "quota": "1"}, format="json"
    )
    _assert_refused(response, "flavor", before)
    response = platform.get(reverse("api:quota-tree"), {"flavor": "NOPE"})
    assert response.status_code == 400 and "flavor" in response.json()


def test_department_cannot_become_its_own_ancestor(world, platform):
    before = _snapshot()
    url = reverse("api:department-detail", args=[world.A.pk])
    _assert_refused(platform.patch(url, {"parent": world.A1.pk}, format="json"), "parent", before)
    _assert_refused(platform.patch(url, {"parent": world.A.pk}, format="json"), "parent", before)


def test_moving_a_department_must_fit_the_new_parents_quota(world, platform):
    before = _snapshot()  # A1 holds 4 of F; B's children already use B's 8
    response = platform.patch(
        reverse("api:department-detail", args=[world.A1.pk]), {"parent": world.B.pk}, format="json"
    )
    _assert_refused(response, "parent", before)


def test_moving_a_project_must_fit_the_new_department(world, platform):
    before = _snapshot()
    response = platform.patch(
        reverse("api:project-detail", args=[world.pa.pk]), {"department": world.B.pk}, format="json"
    )
    _assert_refused(response, "department", before)


def test_malformed_json_is_a_400_with_detail(world, platform):
    before = _snapshot()
    response = platform.generic(
        "POST", reverse("api:department-list"), '{"code": "x", "name":', content_type="application/json"
    )
    _assert_refused(response, "detail", before)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"code": "has space", "name": "x"}, "code"),
        ({"code": "A", "name": "duplicate code"}, "code"),
        ({"code": "x" * 41, "name": "x"}, "code"),
        ({"code": "ok", "name": "x" * 500}, "name"),
        ({"code": "ok", "name": "x", "parent": 999999}, "parent"),
        ({"name": "missing code"}, "code"),
    ],
)
def test_bad_department_fields(world, platform, body, field):
    before = _snapshot()
    _assert_refused(platform.post(reverse("api:department-list"), body, format="json"), field, before)


def test_bad_loans_are_refused(world, platform):
    now = timezone.now()
    base = {
        "lender": world.quota["pb"].pk,
        "borrower": world.quota["pa"].pk,
        "amount": "2",
        "starts_at": now.isoformat(),
        "ends_at": (now + timedelta(days=1)).isoformat(),
        "state": "active",
    }
    before = _snapshot()
    _assert_refused(
        platform.post(reverse("api:loan-list"), {**base, "amount": "9"}, format="json"), "amount", before
    )
    _assert_refused(
        platform.post(
            reverse("api:loan-list"),
            {**base, "ends_at": (now - timedelta(hours=1)).isoformat()},
            format="json",
        ),
        "ends_at",
        before,
    )
    _assert_refused(
        platform.post(reverse("api:loan-list"), {**base, "borrower": world.quota["pb"].pk}, format="json"),
        "borrower",
        before,
    )
    assert platform.post(reverse("api:loan-list"), base, format="json").status_code == 201
    before = _snapshot()  # 2 of pb's 8 are promised now; 7 more would overlap
    _assert_refused(
        platform.post(reverse("api:loan-list"), {**base, "amount": "7"}, format="json"), "amount", before
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"quota": "5"}, "quota"),  # windows may only lower a quota (pa has 4)
        ({"lend_limit": "5"}, "lend_limit"),
        ({"weekdays": "9"}, "weekdays"),
        ({"weekdays": "11"}, "weekdays"),
        ({"end_time": "20:00"}, "end_time"),
        ({"lend_limit": None}, "detail"),  # overrides nothing
    ],
)
def test_bad_windows_are_refused(world, platform, body, field):
    base = {
        "quota_node": world.quota["pa"].pk,
        "name": "night",
        "start_time": "20:00",
        "end_time": "08:00",
        "lend_limit": "2",
        **body,
    }
    before = _snapshot()
    _assert_refused(platform.post(reverse("api:quotawindow-list"), base, format="json"), field, before)

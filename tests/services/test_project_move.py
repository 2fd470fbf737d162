"""Issue 19, item 4: moving a project is one service — effective-dated history for billing, its
quota nodes carried under the new department, refusals where history or the tree would break.

World (tests/conftest.py): flavor F, capacity 16; A q8 (A1 q4 → pa1 q4; pa q4), B q8 (pb q8)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse
from django.utils import timezone

from billing.models import MeterState, MonthClose
from billing.periods import month_label, month_of, month_start, previous_month
from portal.models import ApprovalRequest, Department, Project, ProjectMove
from portal.services import project_move, project_update
from quotas.models import Loan, Node, QuotaNode
from quotas.selectors import site_zone


@pytest.fixture(autouse=True)
def _aged(world, english):
    """The world's projects exist since last year (a move cannot predate its project); messages
    asserted below are English."""
    Project.objects.update(created_at=timezone.now() - timedelta(days=400))
    for project in (world.pa, world.pa1, world.pb):
        project.refresh_from_db()


@pytest.fixture
def platform(world):
    return world.users["platform"]


@pytest.fixture
def roomy(world):
    """A third node (capacity 24) and a top-level department C without any quota of F."""
    Node.objects.create(cluster=Node.objects.first().cluster, name="n2", flavor=world.F, gpu_count=8,
                        zone="z", spine="s", leaf="l2")
    return Department.objects.create(code="C", name="Dept C")


def _tree(world, api) -> dict:
    body = api(world.users["platform"]).get(reverse("api:quota-tree"), {"flavor": world.F.name}).json()
    return {(r["kind"], r["owner_id"]): r for r in body["nodes"]}


def _unchanged(world):
    world.pa.refresh_from_db()
    assert world.pa.department_id == world.A.pk
    assert not ProjectMove.objects.exists()
    assert QuotaNode.objects.get(project=world.pa).quota == Decimal(4)


def test_item4_move_reparents_quota_nodes_and_writes_the_history(world, platform, roomy, api):
    at = timezone.now() - timedelta(hours=1)
    node = QuotaNode.objects.get(project=world.pa)
    move = project_move(project=world.pa, to_department=roomy, actor=platform, reason="reorg", at=at)
    world.pa.refresh_from_db()
    assert world.pa.department_id == roomy.pk
    assert (move.from_department_id, move.to_department_id, move.at, move.actor, move.reason) == (
        world.A.pk, roomy.pk, at, platform, "reorg"
    )
    assert list(ProjectMove.objects.values_list("project", "from_department", "to_department")) == [
        (world.pa.pk, world.A.pk, roomy.pk)
    ]
    kept = QuotaNode.objects.get(project=world.pa)
    assert (kept.pk, kept.quota, kept.borrow_limit, kept.lend_limit) == (node.pk, Decimal(4), None, None)
    created = QuotaNode.objects.get(department=roomy, flavor=world.F)  # just enough to hold pa
    assert (created.quota, created.borrow_limit, created.lend_limit) == (Decimal(4), None, None)
    assert QuotaNode.objects.get(department=world.A).quota == Decimal(8)  # approved values stay
    tree = _tree(world, api)
    assert tree[("project", world.pa.pk)]["parent"] == f"department:{roomy.pk}"


def test_item4_move_into_a_department_node_with_room_keeps_every_value(world, platform):
    QuotaNode.objects.filter(project=world.pb).update(quota=Decimal(4))
    before = {n.pk: (n.quota, n.borrow_limit, n.lend_limit) for n in QuotaNode.objects.all()}
    project_move(project=world.pa, to_department=world.B, actor=platform, reason="")
    assert {n.pk: (n.quota, n.borrow_limit, n.lend_limit) for n in QuotaNode.objects.all()} == before
    assert Project.objects.get(pk=world.pa.pk).department_id == world.B.pk


def test_item4_a_move_that_today_is_refused_until_quota_nodes_are_deleted(world, platform, roomy):
    """Old code: project_update refused every move whose quota nodes did not fit as they stood —
    here C has no node of F, so pa's 4 could only move after deleting pa's node by hand."""
    project_update(actor=platform, project=world.pa, department=roomy)
    assert Project.objects.get(pk=world.pa.pk).department_id == roomy.pk
    assert ProjectMove.objects.get().to_department_id == roomy.pk
    assert QuotaNode.objects.get(department=roomy).quota == Decimal(4)


def test_item4_projects_without_guaranteed_quota_need_no_department_node(world, platform, roomy):
    QuotaNode.objects.filter(project=world.pa).update(quota=Decimal(0), borrow_limit=Decimal(2))
    project_move(project=world.pa, to_department=roomy, actor=platform)
    assert not QuotaNode.objects.filter(department=roomy).exists()
    assert QuotaNode.objects.get(project=world.pa).borrow_limit == Decimal(2)


def _refused(field, **kwargs):
    with pytest.raises(ValidationError) as caught:
        project_move(**kwargs)
    assert field in caught.value.message_dict, caught.value.message_dict
    return " ".join(caught.value.message_dict[field])


def test_item4_refuses_when_the_new_department_cannot_hold_the_quota(world, platform):
    text = _refused("department", project=world.pa, to_department=world.B, actor=platform)
    assert "cannot hold" in text and "8" in text
    _unchanged(world)


def test_item4_refuses_when_no_level_above_can_hold_a_new_department_node(world, platform):
    bare = Department.objects.create(code="D", name="Dept D")  # the pool (16) is all given out
    text = _refused("department", project=world.pa, to_department=bare, actor=platform)
    assert "the pool" in text
    _unchanged(world)
    assert not QuotaNode.objects.filter(department=bare).exists()


def test_item4_only_platform_admins_move_projects(world, roomy):
    for name in ("a_admin", "pa1_admin", "auditor"):
        with pytest.raises(PermissionDenied):
            project_move(project=world.pa, to_department=roomy, actor=world.users[name])
    _unchanged(world)


def test_item4_refuses_the_same_department_and_times_out_of_order(world, platform, roomy):
    _refused("department", project=world.pa, to_department=world.A, actor=platform)
    _refused("at", project=world.pa, to_department=roomy, actor=platform,
             at=timezone.now() + timedelta(minutes=5))
    _refused("at", project=world.pa, to_department=roomy, actor=platform,
             at=world.pa.created_at - timedelta(days=1))
    earlier = timezone.now() - timedelta(hours=1)
    project_move(project=world.pa, to_department=roomy, actor=platform, at=earlier)
    _refused("at", project=world.pa, to_department=world.A, actor=platform,
             at=timezone.now() - timedelta(hours=2))


def test_item4_refuses_a_time_already_metered(world, platform, roomy):
    now = timezone.now()
    MeterState.objects.update_or_create(pk=1, defaults={"metered_through": now - timedelta(minutes=10)})
    text = _refused("at", project=world.pa, to_department=roomy, actor=platform, at=now - timedelta(hours=1))
    assert "metered" in text
    _unchanged(world)
    project_move(project=world.pa, to_department=roomy, actor=platform, at=now - timedelta(minutes=5))


def test_item4_refuses_a_time_in_a_closed_month(world, platform, roomy):
    now = timezone.now()
    MonthClose.objects.create(month=month_of(now, site_zone()), through_record=0, closed_at=now)
    text = _refused("at", project=world.pa, to_department=roomy, actor=platform)
    assert "closed" in text
    _unchanged(world)


def test_item13_refuses_a_time_before_a_closed_month(world, platform, roomy):
    """Issue 32 item 13: this test closed January 2000, moved the project a second ago and asserted
    nothing. Closing a month settles every month before it too: a move dated in an earlier month
    is refused; one dated after the closed month goes through. The closed month is two months
    back, so "a second ago" is after it whatever the day of the month."""
    now = timezone.now()
    zone = site_zone()
    closed = previous_month(previous_month(month_of(now, zone)))
    MonthClose.objects.create(month=closed, through_record=0, closed_at=now)
    before = month_start(closed, zone) - timedelta(days=10)
    text = _refused("at", project=world.pa, to_department=roomy, actor=platform, at=before)
    assert "closed" in text and month_label(closed) in text
    _unchanged(world)
    project_move(project=world.pa, to_department=roomy, actor=platform, at=now - timedelta(seconds=1))
    assert Project.objects.get(pk=world.pa.pk).department_id == roomy.pk


def test_item4_refuses_while_the_project_has_a_live_loan(world, platform, roomy):
    now = timezone.now()
    loan = Loan.objects.create(lender=world.quota["pb"], borrower=world.quota["pa"], amount=Decimal(2),
                               starts_at=now - timedelta(hours=1), ends_at=now + timedelta(hours=1),
                               state="active")
    text = _refused("department", project=world.pa, to_department=roomy, actor=platform)
    assert f"#{loan.pk}" in text
    _unchanged(world)
    Loan.objects.filter(pk=loan.pk).update(state="returned")
    project_move(project=world.pa, to_department=roomy, actor=platform)


def test_item4_refuses_while_approval_requests_are_pending(world, platform, roomy):
    request = ApprovalRequest.objects.create(
        kind="quota", summary="more F", requester=world.users["pa1_admin"], project=world.pa,
        department=world.A,
    )
    text = _refused("department", project=world.pa, to_department=roomy, actor=platform)
    assert f"#{request.pk}" in text
    _unchanged(world)


# --- the API ---------------------------------------------------------------------------------


def test_item4_api_moves_a_project(world, api, roomy):
    url = reverse("api:project-move", args=[world.pa.pk])
    body = {"department": roomy.pk, "reason": "reorg"}
    response = api(world.users["platform"]).post(url, body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["to_department"] == roomy.pk
    assert Project.objects.get(pk=world.pa.pk).department_id == roomy.pk


def test_item4_api_refusals(world, api, roomy):
    url = reverse("api:project-move", args=[world.pa.pk])
    a_admin = api(world.users["a_admin"])  # administers A (and A1) but is no platform admin
    assert a_admin.post(url, {"department": world.A1.pk}, format="json").status_code == 403
    hidden = reverse("api:project-move", args=[world.pb.pk])
    assert a_admin.post(hidden, {"department": world.A.pk}, format="json").status_code == 404
    platform = api(world.users["platform"])
    full = platform.post(url, {"department": world.B.pk}, format="json")
    assert full.status_code == 400 and "department" in full.json()
    later = platform.post(url, {"department": roomy.pk, "at": "2999-01-01T00:00:00+08:00"}, format="json")
    assert later.status_code == 400 and "at" in later.json()
    assert platform.post(url, {"department": 999999}, format="json").status_code == 400
    _unchanged(world)


# --- the Django admin ---------------------------------------------------------------------------


def test_item4_admin_no_longer_changes_a_projects_department(world, client, roomy):
    client.force_login(world.users["platform"])
    url = reverse("admin:portal_project_change", args=[world.pa.pk])
    page = client.get(url).content.decode()
    assert 'name="department"' not in page and reverse("project-move", args=[world.pa.pk]) in page
    response = client.post(url, {"code": "pa", "name": "Renamed", "department": roomy.pk, "active": "on",
                                 "description": "", "queueing": "best_effort", "aging_bound_seconds": ""})
    assert response.status_code == 302
    world.pa.refresh_from_db()
    assert (world.pa.name, world.pa.department_id) == ("Renamed", world.A.pk)


@pytest.mark.parametrize("persona", ["a_admin", "a_finance", "pa1_admin", "pa1_member", "auditor",
                                     "b_admin", "b_finance", "pb_member", "outsider"])
def test_item4_api_persona_rule(world, api, roomy, persona):
    """Every persona but platform admins: 403 when it sees the project, 404 when it does not."""
    from portal.selectors import visible_projects

    user = world.users.get(persona)
    if user is None:
        pytest.skip(f"no persona {persona}")
    url = reverse("api:project-move", args=[world.pa.pk])
    seen = visible_projects(user).filter(pk=world.pa.pk).exists()
    response = api(user).post(url, {"department": roomy.pk, "reason": "try"}, format="json")
    assert response.status_code == (403 if seen else 404)
    _unchanged(world)

"""Reservations, maintenance windows and queue states through the API (issue 35 item 6, DESIGN §17):
a project's reservation is requested and approved like a loan (a platform admin decides); bad input
is a 400 that writes nothing (end ≤ start, dates out of range, more GPUs than the flavor has), a
project of another tenant a 404; maintenance is a platform admin's; hold and drain are audited,
the engine's snapshot carries them, and a drain requeues the running jobs, checkpointing ones first."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.models import Job, JobEvent, PriorityClass
from jobs.reservation_models import QueueSetting, QueueStateEvent, Reservation
from jobs.scheduling.snapshot import build_snapshot
from portal.models import ApprovalRequest
from quotas.models import Node

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(settings):
    settings.LANGUAGE_CODE = "en"


DAY = {"starts_at": "2030-01-01T00:00:00Z", "ends_at": "2030-01-02T00:00:00Z"}


def _window(hours_from=1, hours=4):
    now = timezone.now()
    return {"starts_at": (now + timedelta(hours=hours_from)).isoformat(),
            "ends_at": (now + timedelta(hours=hours_from + hours)).isoformat()}


def _ask(api, user, project, **body):
    return api(user).post(reverse("api:project-reservation-request", args=[project.pk]), body, format="json")


def _written():
    return ApprovalRequest.objects.count(), Reservation.objects.count()


def test_a_reservation_request_is_approved_by_a_platform_admin_and_reaches_the_engine(world, api):
    asked = _ask(api, world.users["pa1_admin"], world.pa1, flavor="F", gpus=8, reason="paper deadline",
                 **_window(hours_from=-1))
    assert asked.status_code == 201, asked.content
    request_id = asked.json()["id"]
    assert asked.json()["kind"] == "reservation"
    assert [s["approver_role"] for s in asked.json()["steps"]] == ["platform_admin"]
    assert not Reservation.objects.exists()  # nothing is held before approval
    inbox = api(world.users["platform"]).get(reverse("api:approval-list") + "?inbox=1").json()["results"]
    assert request_id in [r["id"] for r in inbox]
    decided = api(world.users["platform"]).post(reverse("api:approval-decide", args=[request_id]),
                                                {"approve": True}, format="json")
    assert decided.status_code == 200, decided.content
    resv = Reservation.objects.get(pk=decided.json()["subject_id"])
    assert (resv.project, resv.gpus, resv.flavor.name, resv.state) == (world.pa1, 8, "F", "active")
    listed = api(world.users["pa1_member"]).get(reverse("api:reservation-list")).json()["results"]
    assert [(r["project"], r["gpus"], r["maintenance"]) for r in listed] == [("pa1", 8, False)]
    assert api(world.users["pb_member"]).get(reverse("api:reservation-list")).json()["results"] == []
    [window] = build_snapshot(timezone.now()).windows
    assert (window.project_id, window.flavor, window.gpus) == (f"p{world.pa1.pk}", "F", 8)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"flavor": "F", "gpus": 2, "starts_at": "2030-01-02T00:00:00Z", "ends_at": "2030-01-01T00:00:00Z"},
         "ends_at"),
        ({"flavor": "F", "gpus": 2, "starts_at": "2030-01-01T00:00:00Z", "ends_at": "2030-01-01T00:00:00Z"},
         "ends_at"),
        ({"flavor": "F", "gpus": 2, "starts_at": "1066-10-14T00:00:00Z", "ends_at": "2030-01-01T00:00:00Z"},
         "starts_at"),
        ({"flavor": "F", "gpus": 2, "starts_at": "2030-01-01T00:00:00Z", "ends_at": "9999-12-31T00:00:00Z"},
         "ends_at"),
        ({"flavor": "F", "gpus": 2, "starts_at": "2001-01-01T00:00:00Z", "ends_at": "2001-01-02T00:00:00Z"},
         "ends_at"),
        ({"flavor": "F", "gpus": 17, **DAY},
         "gpus"),
        ({"flavor": "F", "gpus": 0, **DAY},
         "gpus"),
        ({**DAY}, "gpus"),
        ({"flavor": "F", "gpus": 2, "starts_at": "2030-01-01T00:00:00Z", "ends_at": "2030-09-01T00:00:00Z"},
         "ends_at"),
        ({"flavor": "nope", "gpus": 2, **DAY},
         "flavor"),
        ({"nodes": ["n0", "nope"], **DAY},
         "nodes"),
    ],
    ids=["end-before-start", "end-equals-start", "start-1066", "end-9999", "over", "more-than-flavor",
         "zero", "neither", "too-long", "unknown-flavor", "unknown-node"],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(world, api, body, field):
    before = _written()
    response = _ask(api, world.users["pa1_admin"], world.pa1, **body)
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert _written() == before


def test_a_count_beyond_what_other_reservations_leave_is_refused(world, api):
    first = _ask(api, world.users["pa1_admin"], world.pa1, flavor="F", gpus=12, **_window())
    api(world.users["platform"]).post(reverse("api:approval-decide", args=[first.json()["id"]]),
                                      {"approve": True}, format="json")
    assert Reservation.objects.count() == 1
    before = _written()
    second = _ask(api, world.users["pa1_admin"], world.pa1, flavor="F", gpus=8, **_window(hours_from=2))
    assert second.status_code == 400 and "at most 4 more" in second.json()["gpus"][0]
    assert _written() == before


def test_another_tenants_project_is_a_404_and_a_member_may_not_ask(world, api):
    before = _written()
    assert _ask(api, world.users["pb_member"], world.pa1, flavor="F", gpus=2, **_window()).status_code == 404
    assert _ask(api, world.users["pa1_member"], world.pa1, flavor="F", gpus=2, **_window()).status_code == 403
    missing = api(world.users["pa1_admin"]).post(reverse("api:project-reservation-request", args=[999999]),
                                                 {"flavor": "F", "gpus": 2, **_window()}, format="json")
    assert missing.status_code == 404
    # Through the generic approvals endpoint the invisible project does not exist either.
    body = {"kind": "reservation", "project": world.pa1.pk, "flavor": "F", "gpus": 2, **_window()}
    generic = api(world.users["pb_member"]).post(reverse("api:approval-list"), body, format="json")
    assert generic.status_code == 400 and "project" in generic.json()
    assert _written() == before


def test_maintenance_is_a_platform_admins_and_bars_its_nodes_in_the_snapshot(world, api):
    body = {"nodes": ["n0"], "reason": "firmware", **_window(hours_from=2, hours=2)}
    refused = api(world.users["a_admin"]).post(reverse("api:maintenance"), body, format="json")
    assert refused.status_code == 403
    made = api(world.users["platform"]).post(reverse("api:maintenance"), body, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["maintenance"] is True and made.json()["slurm_name"].startswith("gp_maint_")
    n0 = Node.objects.get(name="n0")
    [window] = build_snapshot(timezone.now()).windows
    assert (window.project_id, window.nodes) == (None, (f"n{n0.pk}",))
    # Every user sees maintenance (they plan around it); overlapping maintenance on n0 is refused.
    listed = api(world.users["pb_member"]).get(reverse("api:reservation-list")).json()["results"]
    assert [r["nodes"] for r in listed] == [["n0"]]
    again = api(world.users["platform"]).post(reverse("api:maintenance"), body, format="json")
    assert again.status_code == 400 and "n0" in again.json()["nodes"][0]
    no_reason = api(world.users["platform"]).post(reverse("api:maintenance"), {**body, "reason": ""},
                                                  format="json")
    assert no_reason.status_code == 400
    cancelled = api(world.users["platform"]).post(reverse("api:reservation-cancel", args=[made.json()["id"]]))
    assert cancelled.json()["state"] == "cancelled" and build_snapshot(timezone.now()).windows == ()


def _holding_job(world, name, *, checkpointing, admitted_minutes_ago):
    prio = PriorityClass.objects.get_or_create(name="training", defaults={"value": 100})[0]
    n0 = Node.objects.get(name="n0")
    now = timezone.now()
    since = now - timedelta(minutes=admitted_minutes_ago)
    return Job.objects.create(
        name=name, project=world.pa1, submitted_by=world.users["pa1_member"], kind="training", flavor=world.F,
        priority_class=prio, image="img", gpus_per_worker=1, max_runtime_seconds=3600, state="running",
        checkpointing=checkpointing, placement=[[[n0.pk, 0, 1000]]], state_changed_at=now,
        submitted_at=now - timedelta(hours=1), admitted_at=since, started_at=since,
    )


def test_hold_then_drain_are_audited_hold_the_queue_and_drain_requeues_checkpointing_jobs_first(world, api):
    url = reverse("api:project-queue-state", args=[world.pa1.pk])
    plain = _holding_job(world, "plain", checkpointing=False, admitted_minutes_ago=5)
    saving = _holding_job(world, "saving", checkpointing=True, admitted_minutes_ago=30)
    # A project admin does not set its queue; its department's admin does.
    def put(who, body):
        return api(world.users[who]).put(url, body, format="json").status_code

    assert put("pa1_admin", {"state": "hold", "reason": "x"}) == 403
    assert api(world.users["b_admin"]).get(url).status_code == 404
    assert put("b_admin", {"state": "hold", "reason": "x"}) == 404
    assert put("a_admin", {"state": "hold"}) == 400
    assert put("a_admin", {"state": "paused", "reason": "x"}) == 400
    assert not QueueStateEvent.objects.exists()

    held = api(world.users["a_admin"]).put(url, {"state": "hold", "reason": "budget review"}, format="json")
    assert held.status_code == 200 and held.json() == {"state": "hold"}
    assert build_snapshot(timezone.now()).queues_held == frozenset({f"p{world.pa1.pk}"})
    assert not Job.objects.filter(terminating_since__isnull=False).exists()  # hold stops nothing

    drained = api(world.users["a_admin"]).put(url, {"state": "drain", "reason": "move"}, format="json")
    assert drained.json() == {"state": "drain"}
    events = list(QueueStateEvent.objects.order_by("id").values_list("from_state", "to_state", "reason"))
    assert events == [("open", "hold", "budget review"), ("hold", "drain", "move")]
    assert QueueStateEvent.objects.order_by("id").last().data["requeued"] == [saving.pk, plain.pk]
    signals = JobEvent.objects.filter(kind="preemption_signal").order_by("id")
    assert [e.job_id for e in signals] == [saving.pk, plain.pk]
    assert "draining" in signals[0].reason

    opened = api(world.users["platform"]).put(url, {"state": "open", "reason": "done"}, format="json")
    assert opened.json() == {"state": "open"} and build_snapshot(timezone.now()).queues_held == frozenset()
    assert QueueSetting.objects.get(project=world.pa1).state == "open"


def test_a_department_hold_covers_its_projects(world, api):
    url = reverse("api:department-queue-state", args=[world.A.pk])
    assert api(world.users["a_admin"]).put(url, {"state": "hold", "reason": "audit"}, format="json").json() \
        == {"state": "hold"}
    assert build_snapshot(timezone.now()).queues_held == frozenset({f"d{world.A.pk}"})
    assert api(world.users["pb_member"]).get(url).status_code == 404


def _submit(api, world, runtime):
    PriorityClass.objects.get_or_create(name="training", defaults={"value": 100})
    body = {"name": "waits", "project": world.pa1.pk, "kind": "training", "flavor": "F",
            "priority": "training", "image": "img", "gpus_per_worker": 1, "max_runtime_seconds": runtime}
    response = api(world.users["pa1_member"]).post(reverse("api:job-list"), body, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _explain(api, world, job_id):
    return api(world.users["pa1_member"]).get(reverse("api:job-explain", args=[job_id])).json()


def test_explain_says_queue_on_hold(world, api):
    job_id = _submit(api, world, 3600)
    url = reverse("api:project-queue-state", args=[world.pa1.pk])
    api(world.users["a_admin"]).put(url, {"state": "hold", "reason": "review"}, format="json")
    out = _explain(api, world, job_id)
    assert out["reason"] == "queue_hold" and out["text"].startswith("Queue on hold: ")


def test_explain_names_the_nodes_and_the_start_of_a_maintenance_the_job_would_cross(world, api):
    start = timezone.now() + timedelta(hours=2)
    body = {"nodes": ["n0", "n1"], "reason": "power work", "starts_at": start.isoformat(),
            "ends_at": (start + timedelta(hours=2)).isoformat()}
    made = api(world.users["platform"]).post(reverse("api:maintenance"), body, format="json")
    assert made.status_code == 201
    crossing = _explain(api, world, _submit(api, world, 4 * 3600))
    assert crossing["reason"] == "maintenance", crossing
    assert crossing["text"].startswith(
        "Not placed on n0, n1: its maximum runtime crosses the maintenance at ")
    assert crossing["window"]["maintenance"] is True
    # A job that ends before the start is not held by it.
    assert _explain(api, world, _submit(api, world, 3600))["reason"] != "maintenance"


def _expected(name, sees, may, ok=200):
    """404 for whom cannot see it, ``ok`` for whom may act, 403 for the others."""
    return 404 if name not in sees else ok if name in may else 403


PERSONAS = ("platform", "auditor", "a_admin", "b_admin", "a_finance", "b_finance", "pa1_admin", "pa1_member",
            "pb_member", "outsider")


def test_every_persona_sees_maintenance_and_its_own_projects_reservations(world, api):
    now = timezone.now()
    maint = Reservation.objects.create(starts_at=now, ends_at=now + timedelta(hours=1), reason="m")
    for_pa1 = Reservation.objects.create(project=world.pa1, flavor=world.F, gpus=2, starts_at=now,
                                         ends_at=now + timedelta(hours=1))
    for_pb = Reservation.objects.create(project=world.pb, flavor=world.F, gpus=2, starts_at=now,
                                        ends_at=now + timedelta(hours=1))
    sees_pa1 = {"platform", "auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member"}
    sees_pb = {"platform", "auditor", "b_admin", "b_finance", "pb_member"}
    for name in PERSONAS:
        client = api(world.users[name])
        listed = {r["id"] for r in client.get(reverse("api:reservation-list")).json()["results"]}
        expected = {maint.pk} | ({for_pa1.pk} if name in sees_pa1 else set()) | (
            {for_pb.pk} if name in sees_pb else set())
        assert listed == expected, name
        # Cancelling: an invisible one is a 404; a visible one is the project's editors' or the platform's.
        answer = client.post(reverse("api:reservation-cancel", args=[for_pb.pk])).status_code
        assert answer == _expected(name, sees_pb, {"platform", "b_admin"}), name
        Reservation.objects.filter(pk=for_pb.pk).update(state="active")
        answer = client.post(reverse("api:reservation-cancel", args=[maint.pk])).status_code
        assert answer == (200 if name == "platform" else 403), name
        Reservation.objects.filter(pk=maint.pk).update(state="active")


def test_every_persona_and_the_queue_state_endpoints(world, api):
    url = reverse("api:project-queue-state", args=[world.pa1.pk])
    sees = {"platform", "auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member"}
    for name in PERSONAS:
        client = api(world.users[name])
        assert client.get(url).status_code == (200 if name in sees else 404), name
        answer = client.put(url, {"state": "hold", "reason": name}, format="json").status_code
        assert answer == _expected(name, sees, {"platform", "a_admin"}), name
        ask = client.post(reverse("api:project-reservation-request", args=[world.pa1.pk]),
                          {"flavor": "F", "gpus": 1, **_window()}, format="json").status_code
        assert ask == _expected(name, sees, {"platform", "a_admin", "pa1_admin"}, 201), name
        maint = client.post(reverse("api:maintenance"), {"nodes": ["n1"], "reason": "r", **_window()},
                            format="json")
        assert maint.status_code == (201 if name == "platform" else 403), name
    assert [e.reason for e in QueueStateEvent.objects.order_by("id")] == ["platform"]  # a_admin's: no change

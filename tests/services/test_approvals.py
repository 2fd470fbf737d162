"""The approval engine with job approvals (DESIGN §6): policies, chains, decisions, segregation
of duties, deadlines, notifications and mail, the append-only audit trail — on real PostgreSQL.

World (tests/conftest.py): departments A (sub-department A1) and B; projects pa (A), pa1 (A1),
pb (B); flavor F on 2 × 8 GPUs. a_admin administers A (so A1 too), b_admin B."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import DatabaseError, connection, transaction
from django.utils import timezone, translation

from jobs.approvals import approval_reasons, budget_checks, job_cards
from jobs.models import ApprovalPolicy, Job, JobEvent
from jobs.services import job_cancel, job_submit
from portal.approvals import (
    AlreadyDecided,
    approval_bulk_decide,
    approval_cancel,
    approval_comment,
    approval_deadlines_process,
    approval_decide,
    can_decide,
    inbox_steps,
    visible_approval_requests,
)
from portal.models import (
    ApprovalAudit,
    ApprovalRequest,
    Membership,
    Notification,
    Role,
    User,
)
from portal.notifications import mail_pending, notification_mark_read, unread_notifications
from portal.texts import render_in
from quotas.models import Cluster, Flavor, Node
from tests import factories as fx

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(settings):
    # Stored texts are written in the site language; these tests read them in English.
    settings.LANGUAGE_CODE = "en"
    with translation.override("en"):
        yield


def _submit(world, user, project, *, gpus=1, workers=1, flavor=None, runtime=3600, kind="training"):
    return job_submit(
        actor=user,
        project=project,
        name="train",
        kind=kind,
        flavor=flavor or world.F,
        priority_class=fx.priority(),
        image="img",
        workers=workers,
        gpus_per_worker=gpus,
        max_runtime_seconds=runtime,
    )


def _request_of(job) -> ApprovalRequest:
    return ApprovalRequest.objects.get(kind="job", subject_id=job.pk)


def _premium_flavor():
    flavor = Flavor.objects.create(
        name="H800", vendor="nvidia", model="H800", memory_mib=81920, premium=True, k8s_resource_name="x"
    )
    cluster = Cluster.objects.get_or_create(name="c-premium", kind="simulator")[0]
    Node.objects.create(cluster=cluster, name="h0", flavor=flavor, gpu_count=8, zone="z", spine="s", leaf="l")
    return flavor


def _admin_of(department, username):
    user = User.objects.create_user(username=username, email=f"{username}@example.org")
    Membership.objects.create(user=user, role=Role.DEPARTMENT_ADMIN, department=department)
    return user


# --- policies and reasons ------------------------------------------------------------------------


def test_without_a_policy_nothing_needs_approval(world):
    job = _submit(world, world.users["pa1_member"], world.pa1, gpus=8)
    assert job.state == "queued"
    assert not ApprovalRequest.objects.exists()


@pytest.mark.parametrize(
    ("policy", "shape", "expected"),
    [
        ({"max_gpus": 4}, {"gpus": 8}, "8 GPUs is more than the 4"),
        ({"max_gpus": 4}, {"gpus": 2, "workers": 2}, None),  # 4 cards: at the limit, not above
        ({"max_runtime_hours": 2}, {"runtime": 3 * 3600}, "maximum runtime of 3 h is longer than the 2 h"),
        ({"max_runtime_hours": 2}, {"runtime": None}, "No maximum runtime is set"),
        ({"max_runtime_hours": 2}, {"runtime": 7200}, None),
        ({"premium_flavors": True}, {"premium": True}, "H800 is a premium flavor"),
        ({"premium_flavors": False}, {"premium": True}, None),
    ],
)
def test_each_policy_rule_gives_its_reason(world, policy, shape, expected):
    ApprovalPolicy.objects.create(department=world.A, **policy)
    flavor = _premium_flavor() if shape.get("premium") else world.F
    reasons = approval_reasons(
        world.pa1,
        "training",
        flavor,
        shape.get("workers", 1),
        shape.get("gpus", 1),
        None,
        shape.get("runtime", 3600),
    )
    if expected is None:
        assert reasons == []
    else:
        assert len(reasons) == 1 and expected in render_in("en", reasons[0]), reasons


def test_a_listed_flavor_needs_approval(world):
    policy = ApprovalPolicy.objects.create(department=world.A, premium_flavors=False)
    policy.flavors.add(world.F)
    [reason] = approval_reasons(world.pa, "training", world.F, 1, 1, None, 60)
    assert "F needs approval in Dept A" in render_in("en", reason)


def test_the_nearest_policy_up_the_tree_applies(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    ApprovalPolicy.objects.create(department=world.A1, max_gpus=8)
    assert approval_reasons(world.pa1, "training", world.F, 1, 4, None, 60) == []  # A1's policy
    assert approval_reasons(world.pa, "training", world.F, 1, 4, None, 60) != []  # A's policy
    assert approval_reasons(world.pb, "training", world.F, 1, 8, None, 60) == []  # no policy above B


def test_gpus_count_as_whole_card_equivalents():
    mig = Flavor(name="mig", fraction_numerator=1, fraction_denominator=7)
    assert job_cards(mig, 1, 7, None) == Decimal("1.000")
    shared = Flavor(name="t4", shareable=True)
    assert job_cards(shared, 1, 1, 250) == Decimal("0.250")


def test_dev_jobs_count_their_default_lifetime_as_runtime(world, settings):
    ApprovalPolicy.objects.create(department=world.A, max_runtime_hours=12)
    assert approval_reasons(world.pa, "dev", world.F, 1, 1, None, None)  # 24 h default lifetime
    settings.GPUPOOL = {**settings.GPUPOOL, "DEV_LIFETIME_SECONDS": 3600}
    assert approval_reasons(world.pa, "dev", world.F, 1, 1, None, None) == []


def test_budget_hook_adds_its_reason_only_where_the_policy_asks(world, monkeypatch):
    monkeypatch.setattr("jobs.approvals.budget_checks", [*budget_checks, lambda p, cards: "over budget"])
    policy = ApprovalPolicy.objects.create(department=world.A)
    assert approval_reasons(world.pa, "training", world.F, 1, 1, None, 60) == ["over budget"]
    policy.over_budget = False
    policy.save()
    assert approval_reasons(world.pa, "training", world.F, 1, 1, None, 60) == []


# --- the job chain ------------------------------------------------------------------------------


def test_job_over_policy_waits_and_approval_queues_it(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    job = _submit(world, world.users["pa1_member"], world.pa1, gpus=4)
    assert job.state == "pending_approval"
    request = _request_of(job)
    assert request.state == "pending" and request.requester == world.users["pa1_member"]
    assert "4 GPUs" in render_in("en", request.payload["reasons"][0])
    [step] = request.steps.all()
    # A1 has no admin of its own: the step goes to the nearest department above with one.
    assert (step.approver_role, step.department_id, step.state) == ("department_admin", world.A.pk, "pending")
    assert step.deadline == step.opened_at + timedelta(hours=48)

    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True, comment="go")

    job.refresh_from_db()
    request.refresh_from_db()
    assert job.state == "queued" and job.approved
    assert request.state == "approved" and request.decided_at is not None
    event = JobEvent.objects.filter(job=job).order_by("id").last()
    assert (event.from_state, event.to_state, event.actor) == (
        "pending_approval",
        "queued",
        world.users["a_admin"],
    )
    assert list(request.audit.values_list("action", flat=True)) == [
        "created",
        "opened",
        "approved",
        "applied",
    ]


def test_the_scheduler_ignores_a_job_until_it_is_approved(world):
    from jobs.scheduling.cycle import schedule_once

    ApprovalPolicy.objects.create(department=world.B, max_gpus=2)
    job = _submit(world, world.users["pb_member"], world.pb, gpus=4)
    schedule_once()
    job.refresh_from_db()
    assert job.state == "pending_approval"
    approval_decide(actor=world.users["b_admin"], step_or_request=_request_of(job), approve=True)
    report = schedule_once()
    job.refresh_from_db()
    assert job.state == "admitted" and report.admitted


def test_the_minute_task_runs_the_sweep_and_the_outbox(world):
    from portal.tasks import approvals_tick

    User.objects.filter(username="b_admin").update(email="b@example.org")
    ApprovalPolicy.objects.create(department=world.B, max_gpus=2)
    _submit(world, world.users["pb_member"], world.pb, gpus=4)
    assert approvals_tick() == {"escalated": 0, "expired": 0, "mailed": 1}
    assert approvals_tick() == {"escalated": 0, "expired": 0, "mailed": 0}
    assert mail.outbox[0].to == ["b@example.org"]


def test_rejection_rejects_the_job(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    job = _submit(world, world.users["pa1_member"], world.pa1, gpus=4)
    approval_decide(
        actor=world.users["a_admin"], step_or_request=_request_of(job), approve=False, comment="no"
    )
    job.refresh_from_db()
    assert job.state == "rejected" and job.finished_at is not None
    assert _request_of(job).state == "rejected"


def test_above_the_platform_threshold_a_platform_admin_approves_second(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2, platform_gpus=4)
    job = _submit(world, world.users["pa1_member"], world.pa1, gpus=8)
    request = _request_of(job)
    assert list(request.steps.values_list("approver_role", "state")) == [
        ("department_admin", "pending"),
        ("platform_admin", "waiting"),
    ]
    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    request.refresh_from_db()
    job.refresh_from_db()
    assert request.state == "pending" and job.state == "pending_approval"
    assert list(request.steps.values_list("state", flat=True)) == ["approved", "pending"]
    # The department admin cannot take the platform's step.
    with pytest.raises(PermissionDenied, match="platform admin"):
        approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    approval_decide(actor=world.users["platform"], step_or_request=request, approve=True)
    job.refresh_from_db()
    assert job.state == "queued"


def test_the_requester_never_decides_even_as_platform_admin(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    job = _submit(world, world.users["platform"], world.pa, gpus=4)
    request = _request_of(job)
    with pytest.raises(PermissionDenied, match="segregation of duties"):
        approval_decide(actor=world.users["platform"], step_or_request=request, approve=True)
    assert request.audit.filter(action="approved").count() == 0
    assert not can_decide(world.users["platform"], request)
    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    assert _request_of(job).state == "approved"


def test_a_department_admins_own_job_goes_to_someone_else(world):
    """a_admin is A's only admin: its own request is addressed to the platform admins."""
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    job = _submit(world, world.users["a_admin"], world.pa, gpus=4)
    step = _request_of(job).steps.get()
    assert (step.approver_role, step.department_id) == ("platform_admin", None)
    assert step.on_deadline == "expire"


def test_only_approvers_of_the_step_may_decide(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    request = _request_of(_submit(world, world.users["pa1_member"], world.pa1, gpus=4))
    for persona in ("b_admin", "pa1_admin", "a_finance", "auditor"):
        with pytest.raises(PermissionDenied):
            approval_decide(actor=world.users[persona], step_or_request=request, approve=True)
    assert request.audit.filter(action__in=["approved", "rejected"]).count() == 0


def test_a_decided_request_answers_already_decided(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    request = _request_of(_submit(world, world.users["pa1_member"], world.pa1, gpus=4))
    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    with pytest.raises(AlreadyDecided, match="already decided"):
        approval_decide(actor=world.users["platform"], step_or_request=request, approve=False)
    step = request.steps.get()
    with pytest.raises(AlreadyDecided):
        approval_decide(actor=world.users["platform"], step_or_request=step, approve=False)
    assert request.audit.filter(action__in=["approved", "rejected"]).count() == 1


def test_cancelling_the_job_closes_its_request(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    job = _submit(world, world.users["pa1_member"], world.pa1, gpus=4)
    job_cancel(actor=world.users["pa1_member"], job=job)
    request = _request_of(job)
    assert request.state == "cancelled"
    assert list(request.steps.values_list("state", flat=True)) == ["skipped"]
    with pytest.raises(AlreadyDecided):
        approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)


def test_the_requester_may_withdraw_and_the_job_is_cancelled(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    job = _submit(world, world.users["pa1_member"], world.pa1, gpus=4)
    with pytest.raises(PermissionDenied):
        approval_cancel(actor=world.users["pa1_admin"], request=_request_of(job))
    approval_cancel(actor=world.users["pa1_member"], request=_request_of(job), comment="not needed")
    job.refresh_from_db()
    assert job.state == "cancelled"
    assert _request_of(job).audit.filter(action="cancelled", comment="not needed").exists()


def test_approving_a_job_that_left_pending_approval_is_refused_and_nothing_is_kept(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    job = _submit(world, world.users["pa1_member"], world.pa1, gpus=4)
    # The job moved without the engine (a direct transition): the effect can no longer apply.
    Job.objects.filter(pk=job.pk).update(state="cancelled")
    request = _request_of(job)
    with pytest.raises(ValidationError, match="no longer waiting for approval"):
        approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    request.refresh_from_db()
    assert request.state == "pending"
    assert request.steps.get().state == "pending"
    assert request.audit.filter(action="approved").count() == 0


def test_bulk_decide_answers_per_id(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    ApprovalPolicy.objects.create(department=world.B, max_gpus=2)
    first = _request_of(_submit(world, world.users["pa1_member"], world.pa1, gpus=4))
    second = _request_of(_submit(world, world.users["pa1_member"], world.pa1, gpus=3))
    foreign = _request_of(_submit(world, world.users["pb_member"], world.pb, gpus=4))
    approval_decide(actor=world.users["a_admin"], step_or_request=second, approve=False)
    visible = visible_approval_requests(world.users["a_admin"]).in_bulk([first.pk, second.pk, foreign.pk])
    results = approval_bulk_decide(
        actor=world.users["a_admin"],
        requests={pk: visible.get(pk) for pk in (first.pk, second.pk, foreign.pk)},
        approve=True,
    )
    assert [(r["id"], r["ok"]) for r in results] == [
        (first.pk, True),
        (second.pk, False),
        (foreign.pk, False),
    ]
    assert "already decided" in results[1]["error"] and results[2]["error"] == "Not found."
    assert ApprovalRequest.objects.get(pk=foreign.pk).state == "pending"


def test_comments_go_on_the_record_and_to_the_other_side(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    request = _request_of(_submit(world, world.users["pa1_member"], world.pa1, gpus=4))
    approval_comment(actor=world.users["a_admin"], request=request, comment="why 4?")
    approval_comment(actor=world.users["pa1_member"], request=request, comment="a sweep")
    assert list(request.audit.filter(action="comment").values_list("comment", flat=True)) == [
        "why 4?",
        "a sweep",
    ]
    assert Notification.objects.filter(recipient=world.users["pa1_member"], text__contains="why 4?").exists()
    assert Notification.objects.filter(recipient=world.users["a_admin"], text__contains="a sweep").exists()
    with pytest.raises(PermissionDenied):
        approval_comment(actor=world.users["b_admin"], request=request, comment="hi")


# --- visibility and the inbox ---------------------------------------------------------------------


def test_visibility_follows_the_scope(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    request = _request_of(_submit(world, world.users["pa1_member"], world.pa1, gpus=4))
    seeing = {
        name
        for name, user in world.users.items()
        if visible_approval_requests(user).filter(pk=request.pk).exists()
    }
    assert seeing == {"platform", "auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member"}


def test_the_inbox_holds_the_steps_addressed_to_me(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2, platform_gpus=3)
    request = _request_of(_submit(world, world.users["pa1_member"], world.pa1, gpus=4))
    assert [s.request_id for s in inbox_steps(world.users["a_admin"])] == [request.pk]
    for persona in ("platform", "b_admin", "pa1_member", "auditor"):
        assert not inbox_steps(world.users[persona]).exists(), persona
    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    assert not inbox_steps(world.users["a_admin"]).exists()
    assert [s.request_id for s in inbox_steps(world.users["platform"])] == [request.pk]


# --- deadlines ------------------------------------------------------------------------------------


def test_overdue_steps_escalate_up_the_tree_then_expire(world):
    a1_admin = _admin_of(world.A1, "a1_admin")
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2, step_timeout_hours=1)
    job = _submit(world, world.users["pa1_member"], world.pa1, gpus=4)
    request = _request_of(job)
    first = request.steps.get()
    assert first.department_id == world.A1.pk  # A1 has its own admin now
    t = timezone.now()

    assert approval_deadlines_process(now=t + timedelta(minutes=59)) == {"escalated": 0, "expired": 0}
    assert approval_deadlines_process(now=t + timedelta(minutes=61)) == {"escalated": 1, "expired": 0}
    steps = list(request.steps.order_by("id").values_list("approver_role", "department_id", "state"))
    assert steps == [
        ("department_admin", world.A1.pk, "escalated"),
        ("department_admin", world.A.pk, "pending"),
    ]
    # Running again at the same instant changes nothing (idempotent).
    assert approval_deadlines_process(now=t + timedelta(minutes=61)) == {"escalated": 0, "expired": 0}
    # a1_admin's inbox no longer holds it; a_admin's does.
    assert not inbox_steps(a1_admin).exists() and inbox_steps(world.users["a_admin"]).exists()

    assert approval_deadlines_process(now=t + timedelta(minutes=122)) == {"escalated": 1, "expired": 0}
    top = request.steps.get(state="pending")
    assert (top.approver_role, top.on_deadline) == ("platform_admin", "expire")

    assert approval_deadlines_process(now=t + timedelta(minutes=183)) == {"escalated": 0, "expired": 1}
    request.refresh_from_db()
    job.refresh_from_db()
    assert request.state == "expired" and job.state == "expired"
    assert list(request.audit.values_list("action", flat=True)) == [
        "created",
        "opened",
        "escalated",
        "opened",
        "escalated",
        "opened",
        "expired",
    ]
    assert Notification.objects.filter(
        recipient=world.users["pa1_member"], text__startswith="Expired"
    ).exists()


def test_escalation_to_the_platform_covers_a_following_platform_step(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2, platform_gpus=3, step_timeout_hours=1)
    job = _submit(world, world.users["pa1_member"], world.pa1, gpus=4)
    request = _request_of(job)
    approval_deadlines_process(now=timezone.now() + timedelta(hours=2))
    assert sorted(request.steps.values_list("approver_role", "state")) == [
        ("department_admin", "escalated"),
        ("platform_admin", "pending"),
        ("platform_admin", "skipped"),
    ]
    approval_decide(actor=world.users["platform"], step_or_request=request, approve=True)
    job.refresh_from_db()
    assert job.state == "queued"


def test_a_decision_after_the_deadline_sweep_is_already_decided(world):
    ApprovalPolicy.objects.create(department=world.B, max_gpus=2, step_timeout_hours=1)
    request = _request_of(_submit(world, world.users["pb_member"], world.pb, gpus=4))
    # B is top level: its step escalates to the platform, whose step then expires.
    approval_deadlines_process(now=timezone.now() + timedelta(hours=2))
    approval_deadlines_process(now=timezone.now() + timedelta(hours=4))
    with pytest.raises(AlreadyDecided, match="Expired"):
        approval_decide(actor=world.users["platform"], step_or_request=request, approve=True)


# --- notifications and mail --------------------------------------------------------------------------


def test_approvers_are_told_when_a_step_opens_and_the_requester_of_the_outcome(world):
    User.objects.filter(username="a_admin").update(email="a@example.org")
    User.objects.filter(username="pa1_member").update(email="m@example.org")
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    request = _request_of(_submit(world, User.objects.get(username="pa1_member"), world.pa1, gpus=4))

    [note] = unread_notifications(world.users["a_admin"])
    assert note.request == request and "asks for your approval" in note.text
    assert note.link.endswith(f"/{request.pk}/")
    assert not Notification.objects.filter(recipient=world.users["platform"]).exists()
    assert mail_pending() == 1
    assert [m.to for m in mail.outbox] == [["a@example.org"]]
    assert "asks for your approval" in mail.outbox[0].subject
    assert request.summary in mail.outbox[0].body
    assert mail_pending() == 0  # sent once only

    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=False, comment="too big")
    [outcome] = unread_notifications(world.users["pa1_member"])
    assert outcome.text.startswith("Rejected:") and "too big" in outcome.text
    mail_pending()
    assert mail.outbox[-1].to == ["m@example.org"]

    notification_mark_read(actor=world.users["pa1_member"], notification=outcome)
    assert not unread_notifications(world.users["pa1_member"]).exists()


def test_a_failing_mail_server_keeps_the_mail_pending_then_gives_up(world, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 2  # nothing listens
    User.objects.filter(username="a_admin").update(email="a@example.org")
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    _submit(world, world.users["pa1_member"], world.pa1, gpus=4)
    note = Notification.objects.get(recipient__username="a_admin")
    later = timezone.now()
    for attempt in range(1, 6):
        later += timedelta(minutes=11)  # past the claim timeout of the previous attempt
        assert mail_pending(now=later) == 0
        note.refresh_from_db()
        assert note.mail_attempts == attempt
        assert note.mail_state == ("failed" if attempt == 5 else "pending")


# --- the audit trail -----------------------------------------------------------------------------------


def test_the_audit_trail_is_append_only(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    request = _request_of(_submit(world, world.users["pa1_member"], world.pa1, gpus=4))
    entry = request.audit.first()
    entry.comment = "rewritten"
    with pytest.raises(TypeError):
        entry.save()
    with pytest.raises(TypeError):
        entry.delete()
    with pytest.raises(TypeError):
        ApprovalAudit.objects.filter(pk=entry.pk).update(comment="rewritten")
    with pytest.raises(TypeError):
        ApprovalAudit.objects.filter(pk=entry.pk).delete()
    # And below the ORM: the database trigger refuses UPDATE and DELETE.
    for sql in (
        "UPDATE portal_approvalaudit SET comment = 'x' WHERE id = %s",
        "DELETE FROM portal_approvalaudit WHERE id = %s",
    ):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cur,
        ):
            cur.execute(sql, [entry.pk])
    assert ApprovalAudit.objects.get(pk=entry.pk).comment == ""


def test_the_admin_shows_approvals_read_only(world, rf):
    from django.contrib import admin

    request = rf.get("/admin/")
    request.user = world.users["platform"]
    for model in (ApprovalAudit, ApprovalRequest, Notification):
        model_admin = admin.site._registry[model]
        assert model_admin.has_view_permission(request)
        assert not model_admin.has_add_permission(request)
        assert not model_admin.has_change_permission(request)
        assert not model_admin.has_delete_permission(request)

"""Issue 18 items 4–6 at the service: a job that could never run is refused at submission (and
not approved later), priority classes have usage rules, and the centre's maximum runtime per kind
binds — every refusal a field error with the numbers, and nothing written.

World (tests/conftest.py): departments A (sub-department A1) and B; projects pa (A), pa1 (A1),
pb (B); flavor F on 2 × 8 GPUs in cluster c1; quotas A 8 (A1 4, pa 4; pa1 4), B 8 (pb 8), no
borrow limits. pa1_member is a member of pa1, pa1_admin its project admin, a_admin administers A."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone, translation

from jobs.models import ApprovalPolicy, Job, JobEvent, PriorityClass
from jobs.services import job_submit, priority_class_create, priority_class_update
from portal.approvals import approval_decide
from portal.models import ApprovalRequest, Membership, Role, User
from portal.texts import render_data
from quotas.models import Cluster, Loan, Node, NodeState, QuotaNode
from tests import factories as fx

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]  # messages asserted in English


@pytest.fixture(autouse=True)
def _english(settings):
    settings.LANGUAGE_CODE = "en"  # stored reasons are in the site language; read them in English
    with translation.override("en"):
        yield


def _submit(user, project, flavor, *, workers=1, gpus=1, prio=None, kind="training", runtime=3600, **kw):
    return job_submit(
        actor=user,
        project=project,
        name="job",
        kind=kind,
        flavor=flavor,
        priority_class=prio or fx.priority(),
        image="pytorch:2.3",
        workers=workers,
        gpus_per_worker=gpus,
        max_runtime_seconds=runtime,
        **kw,
    )


def _refused(call, field: str) -> str:
    """Run ``call``; it must be refused on ``field`` and write nothing. Returns the message."""
    before = (Job.objects.count(), JobEvent.objects.count(), ApprovalRequest.objects.count())
    with pytest.raises(ValidationError) as caught:
        call()
    assert field in caught.value.message_dict, caught.value.message_dict
    assert (Job.objects.count(), JobEvent.objects.count(), ApprovalRequest.objects.count()) == before
    return " ".join(caught.value.message_dict[field])


def _cap(node: QuotaNode, borrow) -> None:
    QuotaNode.objects.filter(pk=node.pk).update(borrow_limit=Decimal(borrow))


# --- item 4: jobs that could never run --------------------------------------------------------


@pytest.fixture
def issue_pool(db):
    """The issue's numbers: 248 A100-80G (31 nodes × 8) in one cluster; department ai with
    project nlp-llm, quota 64 and borrow limit 64 (so at most 128); alice a member of it; and a
    policy that asks for approval above 8 cards (the job used to go to an approver)."""
    f = fx.flavor("A100-80G")
    fx.nodes(f, 31, 8, cluster="main")
    ai = fx.department("ai")
    nlp = fx.project("nlp-llm", ai)
    fx.quota(f, ai, 248)
    fx.quota(f, nlp, 64, borrow=64)
    alice = User.objects.create_user(username="alice")
    Membership.objects.create(user=alice, role=Role.MEMBER, project=nlp)
    ApprovalPolicy.objects.create(department=ai, max_gpus=8)
    return f, nlp, alice


def test_item4_the_issue_example_is_refused_with_capacity_and_quota_named(issue_pool):
    f, nlp, alice = issue_pool
    message = _refused(lambda: _submit(alice, nlp, f, workers=64, gpus=8), "workers")
    assert "512 × A100-80G" in message
    assert "more than the 248 that the largest cluster has" in message
    assert "more than nlp-llm may ever hold: 128 (quota 64 + borrow limit 64)" in message


def test_item4_a_job_within_the_project_limit_still_goes_to_its_approver(issue_pool):
    f, nlp, alice = issue_pool
    job = _submit(alice, nlp, f, workers=16, gpus=8)  # 128: the limit, not above
    assert job.state == "pending_approval"
    message = _refused(lambda: _submit(alice, nlp, f, workers=17, gpus=8), "workers")
    assert "136 × A100-80G" in message and "128" in message


def test_item4_a_gang_must_fit_in_one_cluster(world):
    fx.nodes(world.F, 1, 8, cluster="c2")  # 24 GPUs in all, at most 16 in one cluster
    member = world.users["pb_member"]
    message = _refused(lambda: _submit(member, world.pb, world.F, workers=3, gpus=8), "workers")
    assert "24 × F" in message and "the 16 that the largest cluster has" in message
    assert _submit(member, world.pb, world.F, workers=2, gpus=8).state == "queued"


def test_item4_workers_must_pack_onto_nodes(world):
    member = world.users["pb_member"]
    # 3 × 5 = 15 ≤ 16, but a node of 8 holds one worker of 5: two fit.
    message = _refused(lambda: _submit(member, world.pb, world.F, workers=3, gpus=5), "workers")
    assert "At most 2 workers of 5 × F fit on the nodes of one cluster; the job needs 3 at once." in message
    message = _refused(lambda: _submit(member, world.pb, world.F, gpus=9), "gpus_per_worker")
    assert "F nodes have at most 8 devices" in message


def test_item4_an_elastic_job_is_judged_by_its_minimum(world):
    member = world.users["pb_member"]
    job = _submit(member, world.pb, world.F, workers=4, gpus=8, min_workers=2)
    assert job.state == "queued"
    message = _refused(
        lambda: _submit(member, world.pb, world.F, workers=4, gpus=8, min_workers=3), "min_workers"
    )
    assert "24 × F" in message


def test_item4_cordoned_and_down_nodes_count_nodes_of_inactive_clusters_do_not(world):
    member = world.users["pb_member"]
    Node.objects.filter(name="n0").update(state=NodeState.DOWN)
    Node.objects.filter(name="n1").update(state=NodeState.CORDONED)
    assert _submit(member, world.pb, world.F, workers=2, gpus=8).state == "queued"  # they come back
    Cluster.objects.filter(name="c1").update(active=False)
    message = _refused(lambda: _submit(member, world.pb, world.F), "flavor")
    assert "No node of an active cluster offers F" in message


def test_without_borrow_limits_only_capacity_caps_a_job(world):
    # pb's quota is 8 and no node on its path has a borrow limit: it may borrow up to the pool.
    assert _submit(world.users["pb_member"], world.pb, world.F, workers=2, gpus=8).state == "queued"


def test_item4_the_smallest_cap_on_the_path_binds_and_hidden_departments_stay_unnamed(world):
    member = world.users["pa1_member"]  # sees pa1 and its department A1, not A
    _cap(world.quota["A1"], 2)  # A1: 4 + 2 = 6
    message = _refused(lambda: _submit(member, world.pa1, world.F, gpus=7), "workers")
    assert "more than Dept A1 may ever hold: 6 (quota 4 + borrow limit 2)" in message
    _cap(world.quota["A"], 0)  # A: 8 + 0 = 8 — larger than A1's 6: A1 still binds
    assert "Dept A1" in _refused(lambda: _submit(member, world.pa1, world.F, gpus=7), "workers")
    _cap(world.quota["A1"], 8)  # A1: 12 — now A's 8 binds, and pa1's member may not see A
    message = _refused(lambda: _submit(member, world.pa1, world.F, workers=3, gpus=3), "workers")
    assert "more than a department above pa1 may ever hold: 8 (quota 8 + borrow limit 0)" in message
    assert "Dept A " not in message
    admin_message = _refused(
        lambda: _submit(world.users["a_admin"], world.pa1, world.F, workers=3, gpus=3), "workers"
    )
    assert "more than Dept A may ever hold: 8" in admin_message
    assert _submit(member, world.pa1, world.F, gpus=8).state == "queued"


def test_item4_no_quota_and_no_borrowing_refuses_the_flavor(world):
    _cap(world.quota["pb"], 0)
    QuotaNode.objects.filter(pk=world.quota["pb"].pk).update(quota=0)
    message = _refused(lambda: _submit(world.users["pb_member"], world.pb, world.F), "flavor")
    assert "more than pb may ever hold: 0 (quota 0 + borrow limit 0)" in message


def test_item4_approved_loans_into_a_node_raise_what_it_may_hold(world):
    member = world.users["pb_member"]
    _cap(world.quota["pb"], 0)  # pb: 8 + 0
    lender = world.quota["pa"]
    now = timezone.now()

    def loan(amount, start_h, end_h, state="active"):
        Loan.objects.create(
            lender=lender,
            borrower=world.quota["pb"],
            amount=Decimal(amount),
            starts_at=now + timedelta(hours=start_h),
            ends_at=now + timedelta(hours=end_h),
            state=state,
        )

    loan(2, -1, 1)  # in force now
    loan(2, 2, 3)  # later: never at the same time as the first
    loan(4, 2, 3, state="pending")  # not approved: does not count
    loan(4, -3, -2, state="active")  # over: does not count
    message = _refused(lambda: _submit(member, world.pb, world.F, workers=11, gpus=1), "workers")
    assert "10 (quota 8 + borrow limit 0 + approved loans 2)" in message
    loan(1, 0.5, 2.5)  # overlaps both: the peak is 3
    assert _submit(member, world.pb, world.F, workers=11, gpus=1).state == "queued"


def test_item4_shared_requests_count_their_fraction(world):
    shared = fx.flavor("T4-shared", shareable=True)
    fx.nodes(shared, 1, 4, cluster="c1")
    fx.quota(shared, world.B, 1)
    fx.quota(shared, world.pb, 0, borrow="0.25")
    member = world.users["pb_member"]
    assert _submit(member, world.pb, shared, gpu_milli=250).state == "queued"
    message = _refused(lambda: _submit(member, world.pb, shared, gpu_milli=500), "workers")
    assert "0.5 × T4-shared" in message and "0.25 (quota 0 + borrow limit 0.25)" in message


def test_item4_approving_a_job_that_can_no_longer_run_is_refused(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=4)
    job = _submit(world.users["pa1_member"], world.pa1, world.F, gpus=8)
    assert job.state == "pending_approval"
    request = ApprovalRequest.objects.get(kind="job", subject_id=job.pk)
    _cap(world.quota["pa1"], 2)  # pa1: 4 + 2 = 6 < 8, after the submission
    with pytest.raises(ValidationError) as caught:
        approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    text = " ".join(caught.value.messages)
    assert (
        "Not approved:" in text and "more than pa1 may ever hold: 6" in text and "Reject the request" in text
    )
    job.refresh_from_db()
    request.refresh_from_db()
    assert (job.state, request.state) == ("pending_approval", "pending")
    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=False, comment="too big")
    job.refresh_from_db()
    assert job.state == "rejected"


def test_approval_still_queues_a_job_that_can_run(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=4)
    job = _submit(world.users["pa1_member"], world.pa1, world.F, gpus=8)
    request = ApprovalRequest.objects.get(kind="job", subject_id=job.pk)
    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    job.refresh_from_db()
    assert job.state == "queued" and job.approved


# --- item 5: who may use a priority class -----------------------------------------------------


def _class(name, value, **rules):
    return PriorityClass.objects.create(name=name, value=value, **rules)


def test_item5_a_class_for_other_kinds_is_refused(world):
    online = _class("inference-online", 1000, preemptible=False, allowed_kinds=["inference"])
    member = world.users["pb_member"]
    message = _refused(lambda: _submit(member, world.pb, world.F, prio=online), "priority_class")
    assert message == "The priority class inference-online is for Inference jobs only."
    _refused(
        lambda: _submit(member, world.pb, world.F, prio=online, kind="dev", runtime=None), "priority_class"
    )
    assert _submit(member, world.pb, world.F, prio=online, kind="inference").state == "queued"


def test_item5_a_class_above_the_role_is_refused(world):
    high = _class("training-high", 500, min_role="project_admin")
    message = _refused(
        lambda: _submit(world.users["pa1_member"], world.pa1, world.F, prio=high), "priority_class"
    )
    assert message == "The priority class training-high is for the role Project admin or above in pa1."
    assert _submit(world.users["pa1_admin"], world.pa1, world.F, prio=high).state == "queued"
    assert _submit(world.users["a_admin"], world.pa1, world.F, prio=high).state == "queued"  # A covers A1


def _english(data):
    with translation.override("en"):
        return render_data(data)


def test_item5_a_class_above_the_role_may_need_approval_instead(world):
    high = _class("training-high", 500, min_role="project_admin", approval_below_role=True)
    job = _submit(world.users["pa1_member"], world.pa1, world.F, prio=high)
    assert job.state == "pending_approval"
    request = ApprovalRequest.objects.get(kind="job", subject_id=job.pk)
    assert _english(request.payload["reasons"]) == [
        "The priority class training-high needs approval below the role Project admin."
    ]
    with translation.override("zh-hans"):  # stored as data, read in the reader's language
        [text] = render_data(request.payload["reasons"])
        assert text == "低于项目管理员角色使用优先级 training-high 需要审批。"
    assert list(request.steps.values_list("approver_role", flat=True)) == ["department_admin"]
    assert _submit(world.users["pa1_admin"], world.pa1, world.F, prio=high).state == "queued"


def test_item5_a_class_for_platform_admins_is_granted_by_one(world):
    top = _class("top", 900, min_role="platform_admin", approval_below_role=True)
    job = _submit(world.users["pa1_member"], world.pa1, world.F, prio=top)
    request = ApprovalRequest.objects.get(kind="job", subject_id=job.pk)
    assert list(request.steps.order_by("order").values_list("approver_role", flat=True)) == [
        "department_admin",
        "platform_admin",
    ]
    assert _submit(world.users["platform"], world.pa1, world.F, prio=top).state == "queued"


def test_item5_new_fields_default_to_every_kind_and_every_member(world):
    plain = PriorityClass.objects.create(name="plain", value=10)
    assert (plain.allowed_kinds, plain.min_role, plain.approval_below_role) == ([], "member", False)
    member = world.users["pb_member"]
    for kind in ("training", "inference", "dev"):
        runtime = None if kind == "dev" else 3600
        assert _submit(member, world.pb, world.F, prio=plain, kind=kind, runtime=runtime).state == "queued"


def test_item5_platform_admins_set_the_rules_through_the_services(world):
    admin = world.users["platform"]
    pc = priority_class_create(
        actor=admin,
        name="urgent",
        value=600,
        allowed_kinds=["training", "training"],
        min_role="department_admin",
    )
    assert (pc.allowed_kinds, pc.min_role) == (["training"], "department_admin")
    pc = priority_class_update(
        actor=admin,
        priority_class=pc,
        value=600,
        preemptible=True,
        grace_seconds=30,
        allowed_kinds=[],
        min_role="project_admin",
        approval_below_role=True,
    )
    pc.refresh_from_db()
    assert (pc.allowed_kinds, pc.min_role, pc.approval_below_role) == ([], "project_admin", True)
    with pytest.raises(ValidationError):
        priority_class_create(actor=admin, name="bad", value=1, allowed_kinds=["batch"])
    with pytest.raises(ValidationError):
        priority_class_create(actor=admin, name="bad", value=1, min_role="auditor")
    with pytest.raises(PermissionDenied):
        priority_class_create(actor=world.users["a_admin"], name="mine", value=1)
    assert not PriorityClass.objects.filter(name__in=["bad", "mine"]).exists()


# --- item 6: the centre's maximum runtime per kind --------------------------------------------


def test_item6_a_dev_job_longer_than_the_centre_maximum_is_refused(world):
    member = world.users["pb_member"]
    message = _refused(
        lambda: _submit(member, world.pb, world.F, kind="dev", runtime=7 * 86400), "max_runtime_seconds"
    )
    assert message == "Development jobs may run at most 72 h here (the centre's maximum); 168 h was asked."
    assert _submit(member, world.pb, world.F, kind="dev", runtime=72 * 3600).state == "queued"


def test_item6_no_policy_lifts_the_maximum_but_a_policy_sends_longer_jobs_to_approval(world):
    ApprovalPolicy.objects.create(department=world.B, max_runtime_hours=24)
    member = world.users["pb_member"]
    job = _submit(member, world.pb, world.F, kind="dev", runtime=48 * 3600)
    assert job.state == "pending_approval"
    assert (
        "48 h is longer than the 24 h"
        in _english(ApprovalRequest.objects.get(subject_id=job.pk).payload["reasons"])[0]
    )
    ApprovalPolicy.objects.filter(department=world.B).update(max_runtime_hours=500)
    _refused(
        lambda: _submit(member, world.pb, world.F, kind="dev", runtime=100 * 3600), "max_runtime_seconds"
    )


def test_a_dev_job_without_a_runtime_still_gets_its_lifetime(world):
    job = _submit(world.users["pb_member"], world.pb, world.F, kind="dev", runtime=None)
    assert job.max_runtime_seconds == 86400


def test_item6_training_and_inference_maxima_are_settings(world, settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "MAX_RUNTIME_HOURS": {"training": 168, "inference": 0, "dev": 72}}
    member = world.users["pb_member"]
    message = _refused(lambda: _submit(member, world.pb, world.F, runtime=200 * 3600), "max_runtime_seconds")
    assert message == "Training jobs may run at most 168 h here (the centre's maximum); 200 h was asked."
    job = _submit(member, world.pb, world.F, runtime=None)
    assert job.max_runtime_seconds == 168 * 3600  # no runtime named: the kind's maximum, as Slurm does
    service = _submit(member, world.pb, world.F, kind="inference", runtime=None)
    assert service.max_runtime_seconds is None  # no maximum for inference: it may run until stopped


def test_item6_every_refusal_comes_at_once(world, settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "MAX_RUNTIME_HOURS": {"training": 24, "inference": 0, "dev": 72}}
    high = _class("training-high", 500, min_role="project_admin")
    member = world.users["pa1_member"]
    _refused(
        lambda: _submit(member, world.pa1, world.F, prio=high, workers=3, gpus=8, runtime=48 * 3600),
        "workers",
    )
    with pytest.raises(ValidationError) as caught:
        _submit(member, world.pa1, world.F, prio=high, workers=3, gpus=8, runtime=48 * 3600)
    assert set(caught.value.message_dict) == {"workers", "max_runtime_seconds", "priority_class"}

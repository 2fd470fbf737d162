"""Issue 18 items 4–6 on the pages: the submission form says live why a job could never run, what
priority classes it may use and the centre's maximum runtime; the approval page of a job shows the
flavor's capacity and the project's quotas next to the request; platform admins edit the class
rules. World: tests/conftest.py (F on 2 × 8 GPUs; pa1 in A1 under A, quota 4; no borrow limits)."""

from decimal import Decimal

import pytest
from django.utils import translation

from jobs.approvals import approval_policy_set
from jobs.models import Job, JobEvent, PriorityClass
from jobs.services import job_submit
from portal.models import ApprovalRequest
from portal.texts import render_data
from quotas.models import QuotaNode

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(settings):
    settings.LANGUAGE_CODE = "en"  # stored reasons are in the site language; read them in English
    with translation.override("en"):
        yield


@pytest.fixture
def classes(prio):
    return {
        "training": prio,
        "online": PriorityClass.objects.create(
            name="inference-online", value=1000, preemptible=False, allowed_kinds=["inference"]
        ),
        "high": PriorityClass.objects.create(
            name="training-high",
            value=500,
            allowed_kinds=["training"],
            min_role="project_admin",
            approval_below_role=True,
        ),
        "admins": PriorityClass.objects.create(name="admins-only", value=700, min_role="department_admin"),
    }


def _body(world, prio, **changes):
    body = {
        "name": "bert",
        "project": world.pa1.pk,
        "kind": "training",
        "flavor": world.F.pk,
        "priority_class": prio.pk,
        "workers": "1",
        "gpus_per_worker": "4",
        "min_workers": "",
        "gpu_milli": "",
        "image": "pytorch:2.3",
        "command": "",
        "max_runtime_seconds": "3600",
    }
    body.update(changes)
    return body


def _validate(client, body):
    return client.post("/jobs/new/validate/", body, HTTP_HX_REQUEST="true")


def _options(form) -> list[str]:
    return [str(label) for value, label in form.fields["priority_class"].widget.choices if value != ""]


# --- item 4 ------------------------------------------------------------------------------------


def test_item4_the_form_says_live_that_a_job_could_never_run(page_client, world, prio):
    response = _validate(page_client("pa1_member"), _body(world, prio, workers="3", gpus_per_worker="8"))
    form = response.context["form"]
    assert form.errors["workers"] == [
        "The job needs 24 × F at once, more than the 16 that the largest cluster has "
        "(a job runs within one cluster)."
    ]
    assert 'id="id_workers-error"' in response.content.decode()
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_item4_submitting_a_job_over_the_cap_shows_the_numbers_and_writes_nothing(page_client, world, prio):
    QuotaNode.objects.filter(pk=world.quota["pa1"].pk).update(borrow_limit=Decimal(1))
    response = page_client("pa1_member").post("/jobs/new/", _body(world, prio, gpus_per_worker="8"))
    assert response.status_code == 200
    assert response.context["form"].errors["workers"] == [
        "The job needs 8 × F at once, more than pa1 may ever hold: 5 (quota 4 + borrow limit 1)."
    ]
    assert Job.objects.count() == 0


def _held_request(world, prio, *, gpus: int) -> ApprovalRequest:
    """pa1_member's job of ``gpus`` cards, over A's two-card policy: its approval request."""
    job = job_submit(
        actor=world.users["pa1_member"],
        project=world.pa1,
        name="big",
        kind="training",
        flavor=world.F,
        priority_class=prio,
        image="pytorch:2.3",
        gpus_per_worker=gpus,
        max_runtime_seconds=3600,
    )
    return ApprovalRequest.objects.get(kind="job", subject_id=job.pk)


def test_item4_the_approval_page_shows_capacity_quota_and_usage(page_client, world, prio):
    approval_policy_set(actor=world.users["platform"], department=world.A, max_gpus=2)
    QuotaNode.objects.filter(pk=world.quota["A1"].pk).update(borrow_limit=Decimal(4))
    request = _held_request(world, prio, gpus=8)
    response = page_client("a_admin").get(f"/approvals/{request.pk}/")
    facts = response.context["facts"]
    assert facts["capacity"] == {
        "total": 16,
        "healthy": Decimal(16),
        "largest_cluster": 16,
        "largest_node": 8,
        "clusters": 1,
    }
    assert facts["demand"] == 8 and facts["limit"] == 8 and facts["limit_owner"] == "Dept A1"
    assert [(str(r["owner"]), r["quota"], r["limit"]) for r in facts["path"]] == [
        ("Project a1 (pa1)", Decimal(4), None),
        ("Dept A1 (A1)", Decimal(4), Decimal(8)),
        ("Dept A (A)", Decimal(8), None),
    ]
    assert facts["never"] == []
    page = response.content.decode()
    assert "Capacity and quota now" in page and "16 on active clusters (1), 16 healthy now" in page
    assert "could never start" not in page
    # The cap shrinks after the submission: the page says the job could never start.
    QuotaNode.objects.filter(pk=world.quota["A1"].pk).update(borrow_limit=Decimal(2))
    page = page_client("a_admin").get(f"/approvals/{request.pk}/").content.decode()
    assert "This job could never start:" in page and "more than Dept A1 may ever hold: 6" in page


def test_item4_the_requester_sees_only_the_quota_rows_they_may_see(page_client, world, prio):
    approval_policy_set(actor=world.users["platform"], department=world.A, max_gpus=2)
    QuotaNode.objects.filter(pk=world.quota["A"].pk).update(borrow_limit=Decimal(0))
    request = _held_request(world, prio, gpus=4)
    facts = page_client("pa1_member").get(f"/approvals/{request.pk}/").context["facts"]
    assert [str(r["owner"]) for r in facts["path"]] == ["Project a1 (pa1)", "Dept A1 (A1)"]
    assert facts["limit"] == 8 and facts["limit_owner"] == "a department above pa1"


# --- item 5 ------------------------------------------------------------------------------------


def test_item5_the_form_offers_only_the_classes_the_user_may_use(page_client, world, classes):
    member = page_client("pa1_member")
    form = member.get("/jobs/new/").context["form"]
    assert _options(form) == ["training-high (500) — needs approval", "training (100)"]
    form = _validate(member, _body(world, classes["training"], kind="inference")).context["form"]
    assert _options(form) == ["inference-online (1000)", "training (100)"]
    admin = page_client("a_admin")
    form = _validate(admin, _body(world, classes["training"])).context["form"]
    assert _options(form) == ["admins-only (700)", "training-high (500)", "training (100)"]


def test_item5_the_live_check_swaps_the_class_options_and_replaces_an_unusable_choice(
    page_client, world, classes
):
    response = _validate(page_client("pa1_member"), _body(world, classes["high"], kind="inference"))
    form = response.context["form"]
    assert "priority_class" not in form.errors
    assert form.cleaned_data["priority_class"] == classes["training"]
    assert form.fields["priority_class"].help_text == (
        "training-high cannot be used for this kind of job here; training was chosen instead."
    )
    page = response.content.decode()
    assert "training-high cannot be used for this kind of job here; training was chosen instead." in page
    assert '<select name="priority_class" hx-swap-oob="innerHTML"' in page
    assert f'<option value="{classes["training"].pk}" selected>' in page
    assert "training-high" not in page.split('id="id_priority_class"', 1)[1].split("</select>")[0]


def test_item5_the_summary_names_the_approval_a_class_needs(page_client, world, classes):
    response = _validate(page_client("pa1_member"), _body(world, classes["high"]))
    with translation.override("en"):
        assert render_data(response.context["summary"]["approvals"]) == [
            "The priority class training-high needs approval below the role Project admin."
        ]


def test_item5_submitting_a_class_the_user_may_not_use_is_refused_on_the_field(page_client, world, classes):
    response = page_client("pa1_member").post("/jobs/new/", _body(world, classes["admins"]))
    form = response.context["form"]
    assert form.errors["priority_class"] == [
        "The priority class admins-only is for the role Department admin or above in pa1."
    ]
    assert "admins-only (700)" in _options(form)  # the choice stays shown next to its error
    assert Job.objects.count() == 0


def test_item5_platform_admins_edit_the_rules_on_the_page(page_client, world, classes):
    online = classes["online"]
    response = page_client("platform").post(
        f"/priority-classes/{online.pk}/edit/",
        {
            "value": "1000",
            "grace_seconds": "60",
            "description": "",
            "allowed_kinds": ["inference", "dev"],
            "min_role": "project_admin",
            "approval_below_role": "on",
        },
    )
    assert response.status_code == 302, response.context["form"].errors
    online.refresh_from_db()
    assert (online.allowed_kinds, online.min_role, online.approval_below_role) == (
        ["dev", "inference"],
        "project_admin",
        True,
    )
    listing = page_client("pa1_member").get("/priority-classes/").content.decode()
    assert "<td>Development, Inference</td>" in listing
    assert "Project admin and above; others with approval" in listing
    form_page = page_client("platform").get(f"/priority-classes/{online.pk}/edit/").content.decode()
    assert 'type="checkbox" name="allowed_kinds" value="inference"' in form_page
    admin_page = (
        page_client("platform").get(f"/admin/jobs/priorityclass/{online.pk}/change/").content.decode()
    )
    assert 'type="checkbox" name="allowed_kinds" value="training"' in admin_page


# --- item 6 ------------------------------------------------------------------------------------


def test_item6_the_form_says_live_that_a_runtime_is_over_the_centres_maximum(page_client, world, prio):
    body = _body(world, prio, kind="dev", gpus_per_worker="1", max_runtime_seconds=str(7 * 86400))
    form = _validate(page_client("pa1_member"), body).context["form"]
    assert form.errors["max_runtime_seconds"] == [
        "Development jobs may run at most 72 h here (the centre's maximum); 168 h was asked."
    ]
    assert Job.objects.count() == 0


def test_item4_to_6_refusals_speak_the_users_language(page_client, world, prio):
    client = page_client("pa1_member", language="zh-hans")
    body = _body(world, prio, kind="dev", gpus_per_worker="1", max_runtime_seconds=str(100 * 3600))
    form = _validate(client, body).context["form"]
    assert form.errors["max_runtime_seconds"] == [
        "开发调试任务在本中心最长运行 72 小时（中心上限）；申请的是 100 小时。"
    ]
    form = _validate(client, _body(world, prio, workers="3", gpus_per_worker="8")).context["form"]
    assert form.errors["workers"] == [
        "该任务需要同时使用 24 × F，超过最大集群拥有的 16 个（一个任务只在一个集群内运行）。"
    ]

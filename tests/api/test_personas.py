"""Every API list and detail endpoint against every persona (DESIGN §1: visibility fails
closed; another tenant's object is 404). The endpoint list comes from the URL
configuration, so a new endpoint without a rule here fails ``test_every_endpoint_has_a_rule``.

The persona world and its objects are written once for the module (``tests.conftest.shared_scene``):
every test starts from the same rows, and what a test writes is rolled back after it.
"""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import get_resolver, reverse
from django.utils import timezone

from jobs.models import ApprovalPolicy
from portal.models import DirectoryRule
from quotas.models import Loan, LoanState, QuotaWindow
from tests.conftest import build_world, shared_scene

ALL = (
    "platform",
    "auditor",
    "a_admin",
    "b_admin",
    "a_finance",
    "b_finance",
    "pa1_admin",
    "pa1_member",
    "pb_member",
    "outsider",
)

# Which objects (by fixture name) each persona sees, per tenant-scoped list endpoint.
VISIBLE = {
    # Webhooks (issue 24 item 7): one's own, and those of the projects one may edit.
    "webhook-list": {**{p: set() for p in ALL}, "platform": {"hook_pa1", "hook_pb"}, "a_admin": {"hook_pa1"},
                     "b_admin": {"hook_pb"}, "pa1_admin": {"hook_pa1"}, "pa1_member": {"hook_own"}},
    "department-list": {
        "platform": {"A", "A1", "B"},
        "auditor": {"A", "A1", "B"},
        "a_admin": {"A", "A1"},
        "b_admin": {"B"},
        "a_finance": {"A", "A1"},
        "b_finance": {"B"},
        "pa1_admin": {"A1"},
        "pa1_member": {"A1"},
        "pb_member": {"B"},
        "outsider": set(),
    },
    "project-list": {
        "platform": {"pa", "pa1", "pb"},
        "auditor": {"pa", "pa1", "pb"},
        "a_admin": {"pa", "pa1"},
        "b_admin": {"pb"},
        "a_finance": {"pa", "pa1"},
        "b_finance": {"pb"},
        "pa1_admin": {"pa1"},
        "pa1_member": {"pa1"},
        "pb_member": {"pb"},
        "outsider": set(),
    },
    "quotanode-list": {
        "platform": {"A", "A1", "pa", "pa1", "B", "pb"},
        "auditor": {"A", "A1", "pa", "pa1", "B", "pb"},
        "a_admin": {"A", "A1", "pa", "pa1"},
        "a_finance": {"A", "A1", "pa", "pa1"},
        "b_admin": {"B", "pb"},
        "b_finance": {"B", "pb"},
        "pa1_admin": {"A1", "pa1"},
        "pa1_member": {"A1", "pa1"},
        "pb_member": {"B", "pb"},
        "outsider": set(),
    },
    "membership-list": {
        "platform": set(ALL) - {"outsider"},
        "auditor": set(ALL) - {"outsider"},
        "a_admin": {"a_admin", "a_finance", "pa1_admin", "pa1_member"},
        "a_finance": {"a_admin", "a_finance", "pa1_admin", "pa1_member"},
        "b_admin": {"b_admin", "b_finance", "pb_member"},
        "b_finance": {"b_admin", "b_finance", "pb_member"},
        "pa1_admin": {"pa1_admin", "pa1_member"},
        "pa1_member": {"pa1_admin", "pa1_member"},
        "pb_member": {"pb_member"},
        "outsider": set(),
    },
    # Jobs follow their project.
    "job-list": {
        "platform": {"job_pa1", "job_pb"},
        "auditor": {"job_pa1", "job_pb"},
        "a_admin": {"job_pa1"},
        "b_admin": {"job_pb"},
        "a_finance": {"job_pa1"},
        "b_finance": {"job_pb"},
        "pa1_admin": {"job_pa1"},
        "pa1_member": {"job_pa1"},
        "pb_member": {"job_pb"},
        "outsider": set(),
    },
    # One loan A1 → pb: seen by whoever sees either quota node.
    "loan-list": {p: ({"loan"} if p not in ("outsider",) else set()) for p in ALL},
    # One window on pa's quota: only who sees project pa.
    "quotawindow-list": {
        p: ({"window"} if p in ("platform", "auditor", "a_admin", "a_finance") else set()) for p in ALL
    },
    # Approval requests: a quota request of pa1, one of pb, and a loan request pa1 ← B, which the
    # lender's side (B's admin and finance) sees too; its requester is pa1_admin. A rule change
    # (kind policy, no department: it concerns the whole pool) only platform admins and auditors see.
    "approval-list": {
        "platform": {"req_pa1", "req_pb", "loan_pa1_b", "rule_change"},
        "auditor": {"req_pa1", "req_pb", "loan_pa1_b", "rule_change"},
        "a_admin": {"req_pa1", "loan_pa1_b"},
        "a_finance": {"req_pa1", "loan_pa1_b"},
        "b_admin": {"req_pb", "loan_pa1_b"},
        "b_finance": {"req_pb", "loan_pa1_b"},
        "pa1_admin": {"req_pa1", "loan_pa1_b"},
        "pa1_member": {"req_pa1", "loan_pa1_b"},
        "pb_member": {"req_pb"},
        "outsider": set(),
    },
    # Job approval policies on A1 and B: seen with their department and from below it.
    "approvalpolicy-list": {
        "platform": {"pol_A1", "pol_B"},
        "auditor": {"pol_A1", "pol_B"},
        "a_admin": {"pol_A1"},
        "a_finance": {"pol_A1"},
        "b_admin": {"pol_B"},
        "b_finance": {"pol_B"},
        "pa1_admin": {"pol_A1"},
        "pa1_member": {"pol_A1"},
        "pb_member": {"pol_B"},
        "outsider": set(),
    },
}
# Statements: finance and department admins of the subtree, platform admins and auditors only.
VISIBLE["statement-list"] = {
    "platform": {"st_A", "st_A1", "st_B"},
    "auditor": {"st_A", "st_A1", "st_B"},
    "a_admin": {"st_A", "st_A1"},
    "a_finance": {"st_A", "st_A1"},
    "b_admin": {"st_B"},
    "b_finance": {"st_B"},
    "pa1_admin": set(),
    "pa1_member": set(),
    "pb_member": set(),
    "outsider": set(),
}
# Budgets follow their department (as the quota nodes do) or their project: budgets on A1, pa1, B, pb.
VISIBLE["budget-list"] = {
    "platform": {"bu_A1", "bu_pa1", "bu_B", "bu_pb"},
    "auditor": {"bu_A1", "bu_pa1", "bu_B", "bu_pb"},
    "a_admin": {"bu_A1", "bu_pa1"},
    "a_finance": {"bu_A1", "bu_pa1"},
    "b_admin": {"bu_B", "bu_pb"},
    "b_finance": {"bu_B", "bu_pb"},
    "pa1_admin": {"bu_A1", "bu_pa1"},
    "pa1_member": {"bu_A1", "bu_pa1"},
    "pb_member": {"bu_B", "bu_pb"},
    "outsider": set(),
}
# Manual adjustments (issue 19) follow their department, as statements: on A1 and B.
VISIBLE["manualadjustment-list"] = {
    "platform": {"adj_A1", "adj_B"},
    "auditor": {"adj_A1", "adj_B"},
    "a_admin": {"adj_A1"},
    "a_finance": {"adj_A1"},
    "b_admin": {"adj_B"},
    "b_finance": {"adj_B"},
    "pa1_admin": set(),
    "pa1_member": set(),
    "pb_member": set(),
    "outsider": set(),
}
# External sources (DESIGN §11): one unmapped (no tenant's: platform admins and auditors only),
# one mapped to pa1 and one to pb, which follow their project as jobs do.
VISIBLE["externalsource-list"] = {
    "platform": {"src_unmapped", "src_pa1", "src_pb"},
    "auditor": {"src_unmapped", "src_pa1", "src_pb"},
    "a_admin": {"src_pa1"},
    "b_admin": {"src_pb"},
    "a_finance": {"src_pa1"},
    "b_finance": {"src_pb"},
    "pa1_admin": {"src_pa1"},
    "pa1_member": {"src_pa1"},
    "pb_member": {"src_pb"},
    "outsider": set(),
}
# Directory rules (DESIGN §12) are the platform's: platform admins write, auditors read, nobody
# else sees any — not even rules about their own projects (tests/api/test_directory_rules_api.py).
VISIBLE["directoryrule-list"] = {p: ({"rule_pa1", "rule_B"} if p in ("platform", "auditor") else set())
                                 for p in ALL}
# Job templates (issue 22): one's own and the shared ones of projects one submits to; another
# user's private template is nobody else's (not even the platform's). Shared: tpl_pa1 by pa1_admin,
# tpl_pb by b_admin; private: tpl_private of pa1_member.
VISIBLE["jobtemplate-list"] = {
    "platform": {"tpl_pa1", "tpl_pb"},
    "auditor": set(),
    "a_admin": {"tpl_pa1"},
    "b_admin": {"tpl_pb"},
    "a_finance": set(),
    "b_finance": set(),
    "pa1_admin": {"tpl_pa1"},
    "pa1_member": {"tpl_pa1", "tpl_private"},
    "pb_member": {"tpl_pb"},
    "outsider": set(),
}
# Pool resources are not tenant data: every signed-in user reads them, only platform admins write.
GLOBAL_LISTS = {"flavor-list", "cluster-list", "node-list"}
# Endpoints covered by dedicated tests elsewhere (not object lists).
# Sub-resources with their own tests (job-events / job-explain: test_job_sub_resources_…).
OTHER = {"me", "token", "quota-tree", "quota-usage", "loan-cancel", "job-cancel", "job-events", "job-explain",
         "job-utilisation"}
OTHER |= {"statement-estimate", "chargeback"}  # per-persona tests in tests/billing/test_api.py
OTHER |= {"manualadjustment-decide"}  # tests/billing/test_manual_api.py
OTHER |= {"project-move"}  # a POST only: tests/services/test_project_move.py::test_item4_api_persona_rule
OTHER |= {"job-scale"}  # test_job_scale_follows_visibility_then_the_edit_rule below
OTHER |= {"job-autoscale"}  # test_job_autoscale_follows_visibility_then_the_edit_rule below
# A job's log and dev port (issue 22): tests/api/test_job_logs_api.py, every persona.
OTHER |= {"job-log", "job-log-download", "job-access"}
OTHER |= {"externalsource-map"}  # tests/api/test_external_sources_api.py
# Per-persona tests in tests/api/test_job_templates_api.py.
OTHER |= {"jobtemplate-submit", "project-storages", "project-secrets"}
OTHER |= {"webhook-test", "webhook-deliveries"}  # tests/api/test_webhooks_api.py, every persona
# Approval actions, request creation and notifications: tests/api/test_approvals_api.py.
OTHER |= {"approval-decide", "approval-bulk-decide", "approval-cancel", "approval-comment", "quota-request",
          "loan-request", "notification-list", "notification-read", "notification-read-all"}
# The node / GPU map (issue 24): every persona in tests/api/test_nodes_api.py.
OTHER |= {"node-occupancy", "node-cordon", "node-drain", "node-uncordon"}
# The usage explorer's API (issue 24): every persona's rows, page and API, in
# tests/billing/test_usage.py::test_each_persona_sees_its_own_rows_only.
OTHER |= {"usage"}
# History as a trace (issue 25): every persona in tests/api/test_history_api.py.
OTHER |= {"history-export"}
# The policy advisor (issue 25): platform admins only, every persona in
# tests/advisor/test_advisor_pages_api.py::test_only_platform_admins_use_the_advisor_api.
OTHER |= {"advisorsearch-list", "advisorsearch-detail", "advisorcandidate-apply"}
# Cancelling a search: platform admins; 404 for every other persona, in
# tests/advisor/test_advisor_cancel.py::test_only_platform_admins_cancel_and_others_get_404.
OTHER |= {"advisorsearch-cancel"}
# Personal API tokens (issue 32 item 16) are one's own only, every persona in
# tests/api/test_api_tokens.py::test_item16_every_persona_sees_and_revokes_only_its_own_tokens.
OTHER |= {"apitoken-list", "apitoken-detail"}
# Software baselines (issue 33 item 6): read by every signed-in user, written by platform admins;
# the drift report for platform admins and auditors — every persona in tests/api/test_baselines_api.py.
OTHER |= {"baseline-list", "baseline-detail", "node-drift"}
# Fair share (issue 34): a node's weight and the report, every persona in
# tests/api/test_fair_share_api.py and tests/billing/test_fairshare_report.py.
OTHER |= {"quota-fair-share", "fair-share"}
# A project's idle-policy override (issue 34): every persona in
# tests/api/test_idle_policy_api.py::test_who_reads_and_who_writes.
OTHER |= {"project-idle-policy"}
# Reservations, maintenance and queue states (issue 35 item 6): every persona in
# tests/api/test_reservations_api.py::test_every_persona_sees_maintenance_and_its_own_projects_reservations
# and ::test_every_persona_and_the_queue_state_endpoints.
OTHER |= {"reservation-list", "reservation-cancel", "maintenance", "project-reservation-request",
          "project-queue-state", "department-queue-state"}
# Arrays and a job's dependencies (DESIGN §17): test_arrays_and_dependencies_follow_visibility below.
OTHER |= {"array-detail", "array-cancel", "job-dependencies"}


def _api_route_names():
    resolver = get_resolver()
    for pattern in resolver.url_patterns:
        if getattr(pattern, "namespace", None) == "api":
            for sub in pattern.url_patterns:
                yield sub.name


def test_every_endpoint_has_a_rule():
    names = set(_api_route_names())
    lists = set(VISIBLE) | GLOBAL_LISTS
    details = {n.replace("-list", "-detail") for n in lists}
    assert names - lists - details - OTHER == set(), "new API endpoint without a persona rule"


def _build():
    world = build_world()
    return world, _objects(world)


_scene, scene = shared_scene(_build)


@pytest.fixture
def world(scene):
    return scene[0]


@pytest.fixture
def objects(scene):
    return scene[1]


def _objects(world):
    loan = Loan.objects.create(
        lender=world.quota["A1"],
        borrower=world.quota["pb"],
        amount=Decimal(1),
        starts_at=timezone.now(),
        ends_at=timezone.now() + timedelta(days=1),
        state=LoanState.ACTIVE,
    )
    window = QuotaWindow.objects.create(
        quota_node=world.quota["pa"],
        name="night",
        start_time="20:00",
        end_time="08:00",
        lend_limit=Decimal(4),
    )
    by_list = {
        "department-list": {"A": world.A.pk, "A1": world.A1.pk, "B": world.B.pk},
        "project-list": {"pa": world.pa.pk, "pa1": world.pa1.pk, "pb": world.pb.pk},
        "quotanode-list": {k: v.pk for k, v in world.quota.items()},
        "membership-list": {
            u.username: u.memberships.get().pk for u in world.users.values() if u.memberships.exists()
        },
        "loan-list": {"loan": loan.pk},
        "quotawindow-list": {"window": window.pk},
        "job-list": {"job_pa1": _job(world, world.pa1).pk, "job_pb": _job(world, world.pb).pk},
        "approval-list": _approval_requests(world),
        "approvalpolicy-list": {
            "pol_A1": ApprovalPolicy.objects.create(department=world.A1, max_gpus=100).pk,
            "pol_B": ApprovalPolicy.objects.create(department=world.B, max_gpus=100).pk,
        },
    }
    by_list["externalsource-list"] = _external_sources(world)
    by_list["directoryrule-list"] = {
        "rule_pa1": DirectoryRule.objects.create(directory="ldap", group="cn=g", role="member",
                                                 project=world.pa1).pk,
        "rule_B": DirectoryRule.objects.create(directory="oidc", group="b-admins", role="department_admin",
                                               department=world.B).pk,
    }
    by_list["statement-list"] = _statements(world)
    by_list["budget-list"] = _budgets(world)
    by_list["manualadjustment-list"] = _adjustments(world)
    by_list["jobtemplate-list"] = _templates(world)
    by_list["webhook-list"] = _webhooks(world)
    return by_list


def _webhooks(world):
    from portal.models import Webhook

    url = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k"
    made = {"hook_pa1": {"project": world.pa1}, "hook_pb": {"project": world.pb},
            "hook_own": {"user": world.users["pa1_member"]}}
    return {key: Webhook.objects.create(kind="wecom", name=key, url=url, **owner).pk
            for key, owner in made.items()}


def _templates(world):
    from jobs.models import PriorityClass
    from jobs.templates_service import template_save

    PriorityClass.objects.get_or_create(name="training", defaults={"value": 100})
    values = {"kind": "training", "flavor": "F", "priority": "training", "image": "img"}
    made = {
        "tpl_pa1": ("pa1_admin", world.pa1, True),
        "tpl_pb": ("b_admin", world.pb, True),
        "tpl_private": ("pa1_member", world.pa1, False),
    }
    return {
        key: template_save(actor=world.users[u], project=project, name=key, values=values, shared=shared).pk
        for key, (u, project, shared) in made.items()
    }


def _external_sources(world):
    from jobs.native.models import ExternalSource
    from quotas.models import Cluster

    hpc = Cluster.objects.create(name="hpc", kind="slurm")
    made = {name: ExternalSource.objects.create(cluster=hpc, kind="slurm_account", name=name, project=project)
            for name, project in (("unmapped", None), ("pa1", world.pa1), ("pb", world.pb))}
    return {f"src_{name}": source.pk for name, source in made.items()}


def _adjustments(world):
    from billing.manual import adjustment_propose

    return {
        f"adj_{d.code}": adjustment_propose(
            actor=world.users["platform"], department=d, kind="debit", amount="1", reason="r"
        ).pk
        for d in (world.A1, world.B)
    }


def _budgets(world):
    from billing.models import Budget

    owners = {"A1": {"department": world.A1}, "pa1": {"project": world.pa1}, "B": {"department": world.B},
              "pb": {"project": world.pb}}
    return {f"bu_{name}": Budget.objects.create(card_hours=100, **owner).pk for name, owner in owners.items()}


def _statements(world):
    from billing.models import Statement

    month = timezone.now().date().replace(day=1)
    made = {d.code: Statement.objects.create(department=d, month=month) for d in (world.A, world.A1, world.B)}
    return {f"st_{code}": statement.pk for code, statement in made.items()}


def _approval_requests(world):
    from quotas.approvals import loan_request_create, quota_request_create

    def quota(persona, project):
        user = world.users[persona]
        return quota_request_create(actor=user, flavor=world.F, project=project, quota=Decimal(2))

    loan = loan_request_create(
        actor=world.users["pa1_admin"],
        borrower=world.quota["pa1"],
        lender=world.B,
        amount=Decimal(1),
        starts_at=timezone.now(),
        ends_at=timezone.now() + timedelta(days=1),
    )
    from jobs.rule_changes import rule_change_request_create

    rule = rule_change_request_create(actor=world.users["platform"],
                                      changes=[{"type": "scheduler_backfill", "backfill": False}])
    return {"req_pa1": quota("pa1_member", world.pa1).pk, "req_pb": quota("pb_member", world.pb).pk,
            "loan_pa1_b": loan.pk, "rule_change": rule.pk}


def _job(world, project, **kw):
    from jobs.models import PriorityClass
    from jobs.services import job_submit

    prio = PriorityClass.objects.get_or_create(name="training", defaults={"value": 100})[0]
    return job_submit(
        actor=world.users["platform"],
        project=project,
        name=f"job-{project.code}",
        kind="training",
        flavor=world.F,
        priority_class=prio,
        image="img",
        gpus_per_worker=1,
        **kw,
    )


@pytest.mark.parametrize("persona", ALL)
@pytest.mark.parametrize("route", ["job-events", "job-explain", "job-utilisation"])
def test_job_sub_resources_are_404_outside_the_scope(world, objects, api, persona, route):
    client = api(world.users[persona])
    for name, pk in objects["job-list"].items():
        response = client.get(reverse(f"api:{route}", args=[pk]))
        assert response.status_code == (200 if name in VISIBLE["job-list"][persona] else 404), (persona, name)


# Who may scale a job (its owner — here the platform admin submitted both — or an admin of
# its project); everyone else who sees it gets 403, the others 404.
SCALERS = {"platform": {"job_pa1", "job_pb"}, "a_admin": {"job_pa1"}, "b_admin": {"job_pb"},
           "pa1_admin": {"job_pa1"}}


@pytest.mark.parametrize("persona", ALL)
def test_job_scale_follows_visibility_then_the_edit_rule(world, objects, api, persona):
    client = api(world.users[persona])
    for name, pk in objects["job-list"].items():
        response = client.post(reverse("api:job-scale", args=[pk]), {"replicas": 1}, format="json")
        if name not in VISIBLE["job-list"][persona]:
            expected = 404
        elif name not in SCALERS.get(persona, set()):
            expected = 403
        else:
            expected = 400  # allowed, but a queued fixed-size job cannot be scaled
        assert response.status_code == expected, (persona, name, response.content)


@pytest.mark.parametrize("persona", ALL)
def test_job_autoscale_follows_visibility_then_the_edit_rule(world, objects, api, persona):
    client = api(world.users[persona])
    for name, pk in objects["job-list"].items():
        url = reverse("api:job-autoscale", args=[pk])
        visible = name in VISIBLE["job-list"][persona]
        assert client.get(url).status_code == (200 if visible else 404), (persona, name)
        response = client.put(url, {"query": ""}, format="json")
        if not visible:
            expected = 404
        elif name not in SCALERS.get(persona, set()):
            expected = 403
        else:
            expected = 400  # allowed, but only an inference job scales from load
        assert response.status_code == expected, (persona, name, response.content)


def _ids(response):
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["results"]}


@pytest.mark.parametrize("persona", ALL)
@pytest.mark.parametrize("endpoint", sorted(VISIBLE))
def test_list_shows_exactly_the_visible_objects(world, objects, api, persona, endpoint):
    client = api(world.users[persona])
    expected = {objects[endpoint][name] for name in VISIBLE[endpoint][persona]}
    assert _ids(client.get(reverse(f"api:{endpoint}"))) == expected


@pytest.mark.parametrize("persona", ALL)
@pytest.mark.parametrize("endpoint", sorted(VISIBLE))
def test_detail_is_404_outside_the_scope(world, objects, api, persona, endpoint):
    client = api(world.users[persona])
    detail = endpoint.replace("-list", "-detail")
    for name, pk in objects[endpoint].items():
        response = client.get(reverse(f"api:{detail}", args=[pk]))
        visible = name in VISIBLE[endpoint][persona]
        assert response.status_code == (200 if visible else 404), (persona, name, response.content)
        if visible:
            assert response.json()["id"] == pk


@pytest.mark.parametrize("persona", ALL)
@pytest.mark.parametrize("endpoint", sorted(GLOBAL_LISTS))
def test_pool_resources_are_readable_by_every_signed_in_user(world, api, persona, endpoint):
    response = api(world.users[persona]).get(reverse(f"api:{endpoint}"))
    assert response.status_code == 200
    assert response.json()["count"] >= 1


@pytest.mark.parametrize("endpoint", sorted(set(VISIBLE) | GLOBAL_LISTS | {"me", "quota-tree"}))
def test_anonymous_requests_are_refused(world, api, endpoint):
    assert api(None).get(reverse(f"api:{endpoint}")).status_code in (401, 403)


WRITES = [
    # (persona, method, endpoint, target fixture, body, expected status)
    ("auditor", "post", "department-list", None, {"code": "X", "name": "x"}, 403),
    ("auditor", "patch", "department-detail", "A1", {"name": "renamed"}, 403),
    ("auditor", "patch", "quotanode-detail", "pa1", {"quota": "2"}, 403),
    ("a_admin", "patch", "department-detail", "A", {"name": "renamed"}, 403),  # own node: parent's call
    ("a_admin", "patch", "department-detail", "A1", {"name": "renamed"}, 200),
    ("b_admin", "patch", "department-detail", "A1", {"name": "renamed"}, 404),
    ("outsider", "patch", "department-detail", "A", {"name": "renamed"}, 404),
    ("pa1_member", "patch", "project-detail", "pa1", {"description": "x"}, 403),
    ("pa1_admin", "patch", "project-detail", "pa1", {"description": "x"}, 200),
    ("pb_member", "patch", "project-detail", "pa1", {"description": "x"}, 404),
    ("a_admin", "patch", "quotanode-detail", "pa1", {"quota": "2"}, 200),
    ("pa1_admin", "patch", "quotanode-detail", "pa1", {"quota": "2"}, 403),
    ("b_admin", "patch", "quotanode-detail", "pa1", {"quota": "2"}, 404),
    ("a_finance", "patch", "quotanode-detail", "pa1", {"quota": "2"}, 403),
    ("platform", "patch", "quotanode-detail", "A", {"borrow_limit": "4"}, 200),
    ("a_admin", "patch", "flavor-detail", "F", {"memory_mib": 1}, 403),
    ("platform", "patch", "flavor-detail", "F", {"memory_mib": 2048}, 200),
    ("auditor", "delete", "membership-detail", "pa1_member", None, 403),
    ("pa1_admin", "delete", "membership-detail", "pa1_member", None, 204),
    ("b_admin", "delete", "membership-detail", "pa1_member", None, 404),
]


@pytest.mark.parametrize(("persona", "method", "endpoint", "target", "body", "status"), WRITES)
def test_writes_follow_the_role_rules(world, objects, api, persona, method, endpoint, target, body, status):
    client = api(world.users[persona])
    if target is None:
        url = reverse(f"api:{endpoint}")
    elif endpoint == "flavor-detail":
        url = reverse(f"api:{endpoint}", args=[world.F.pk])
    else:
        url = reverse(f"api:{endpoint}", args=[objects[endpoint.replace("-detail", "-list")][target]])
    response = getattr(client, method)(url, body, format="json")
    assert response.status_code == status, response.content


def test_department_admin_creates_projects_only_in_its_subtree(world, api):
    client = api(world.users["a_admin"])
    ok = client.post(
        reverse("api:project-list"), {"code": "new", "name": "n", "department": world.A1.pk}, format="json"
    )
    assert ok.status_code == 201
    refused = client.post(
        reverse("api:project-list"), {"code": "new2", "name": "n", "department": world.B.pk}, format="json"
    )
    assert refused.status_code == 400
    assert "department" in refused.json()


def test_me_reports_roles_and_scope(world, api):
    body = api(world.users["a_admin"]).get(reverse("api:me")).json()
    assert body["roles"] == ["department_admin"]
    assert set(body["departments"]) == {world.A.pk, world.A1.pk}
    assert set(body["projects"]) == {world.pa.pk, world.pa1.pk}


def test_token_endpoint_issues_a_working_token(world, api):
    response = api(None).post(
        reverse("api:token"), {"username": "pa1_member", "password": "pw-pa1_member"}, format="json"
    )
    assert response.status_code == 200
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {response.json()['token']}")
    assert client.get(reverse("api:me")).json()["username"] == "pa1_member"
    bad = api(None).post(reverse("api:token"), {"username": "pa1_member", "password": "nope"}, format="json")
    assert bad.status_code in (401, 403)


@pytest.mark.parametrize("persona", ALL)
def test_arrays_and_dependencies_follow_visibility(world, objects, api, persona):
    """An array and a job's dependencies: 200 for whoever sees the job (as ``job-list``), 404 for
    the others; cancel all: the owner (the platform admin submitted both) and the project's
    admins, 403 for the others who see it — and then nothing changed."""
    from jobs.models import Job

    arrays = {}
    for name, project in (("job_pa1", world.pa1), ("job_pb", world.pb)):
        arrays[name] = _job(world, project, array="0-1").array_id
    client = api(world.users[persona])
    for name, pk in objects["job-list"].items():
        seen = name in VISIBLE["job-list"][persona]
        assert client.get(reverse("api:job-dependencies", args=[pk])).status_code == (200 if seen else 404)
        detail = client.get(reverse("api:array-detail", args=[arrays[name]]))
        assert detail.status_code == (200 if seen else 404)
        response = client.post(reverse("api:array-cancel", args=[arrays[name]]))
        expected = 200 if name in SCALERS.get(persona, set()) else 403 if seen else 404
        assert response.status_code == expected, (persona, name, response.status_code)
        states = set(Job.objects.filter(array_id=arrays[name]).values_list("state", flat=True))
        assert states == ({"cancelled"} if expected == 200 else {"queued"}), (persona, name, states)

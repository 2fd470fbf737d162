"""Every HTML page against every persona (DESIGN §1: visibility fails closed; another tenant's
object is 404). The page list comes from the URL configuration, so a new page without a rule
here fails ``test_every_page_has_a_rule`` — the pages' counterpart of tests/api/test_personas.py.

Objects of department A live in sub-department A1 / project pa1; their twins live in B / pb.
Departments and projects carry unique names, so "the other tenant's data is not on the page" is
a substring check on the whole response (HTML, form choices and the charts' JSON alike).

The persona world and its objects are written once for the module (``tests.conftest.shared_scene``):
every test starts from the same rows, and what a test writes (an action) is rolled back after it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from billing.models import Budget, Statement, StatementState, WhatIfRun
from jobs.models import ApprovalPolicy, Job
from jobs.services import job_submit
from jobs.whatif.models import AdvisorSearch
from portal.models import ApprovalRequest, DirectoryRule, Membership, Notification
from portal.notifications import notify
from quotas.approvals import quota_request_create
from quotas.models import Loan, LoanState, Node, SoftwareBaseline
from tests import factories as fx
from tests.advisor.scene import finished_search
from tests.conftest import build_world, shared_scene

pytestmark = [pytest.mark.django_db, pytest.mark.isolation]

OWNERS = ("platform", "a_admin", "a_finance", "pa1_member")
OTHERS = ("outsider", "pb_member", "b_admin", "b_finance", "auditor")
PERSONAS = (*OWNERS, *OTHERS)

# Unique names: the A side's markers never occur in the B side's and the other way round.
NAMES = {"A": "AlphaDept", "A1": "AoneDept", "B": "BravoDept", "pa": "PaProj", "pa1": "PaoneProj",
         "pb": "PbProj"}

# Outcomes. A page answering 200 shows the A tenant's marker iff "A" is in the outcome, the B
# tenant's iff "B" is; NONE is a 200 showing neither. 403/404 are statuses; POST actions use
# the ACTIONS table below instead.
NONE, A, B, AB = "", "A", "B", "AB"
# Who sees what of a tenant-scoped list (the selector's table in docs/tenancy.md).
STD = {"platform": AB, "auditor": AB, "a_admin": A, "a_finance": A, "pa1_member": A,
       "b_admin": B, "b_finance": B, "pb_member": B, "outsider": NONE}
# Pool-wide pages (flavors, nodes, priority classes): no tenant data for anyone.
GLOBAL = dict.fromkeys(PERSONAS, NONE)
# One object of A1 / pa1: its tenant and the all-seeing read it, everyone else gets 404.
A_OBJECT = {p: (A if p in ("platform", "auditor", "a_admin", "a_finance", "pa1_member") else 404)
            for p in PERSONAS}
PLATFORM_ONLY = {p: (NONE if p == "platform" else 403) for p in PERSONAS}
# Statements: finance and department admins of the subtree, platform admins and auditors.
SUBMITTERS = {**STD, "a_finance": NONE, "b_finance": NONE, "auditor": NONE}
PLATFORM_404 = {p: (NONE if p == "platform" else 404) for p in PERSONAS}
STATEMENTS = {**STD, "pa1_member": NONE, "pb_member": NONE}
A_STATEMENT = {**A_OBJECT, "pa1_member": 404}
READERS = {**{p: 404 for p in PERSONAS}, "platform": AB, "auditor": AB}
HOOKS = {**dict.fromkeys(PERSONAS, NONE), "platform": AB, "a_admin": A, "b_admin": B}
A_HOOK = {**{p: 404 for p in PERSONAS}, "platform": A, "a_admin": A}
HOOK_ACTION = {**{p: (404, False) for p in PERSONAS}, "a_admin": (302, True), "platform": (302, True)}


@dataclass(frozen=True)
class Page:
    rule: dict  # persona -> outcome
    markers: tuple[str, str] = ("", "")  # (A marker, B marker) looked for in the body
    method: str = "get"
    query: str = ""


# route name -> Page. The markers are filled in from the objects by ``_marker``.
RULES: dict[str, Page] = {
    "dashboard": Page(STD, (NAMES["A1"], NAMES["B"])),
    "quota-tree": Page(STD, (NAMES["pa1"], NAMES["pb"])),
    # Who borrows pa1's idle quota (issue 24): a quota node is an object of its tenant.
    "quota-borrowers": Page(A_OBJECT, (NAMES["pa1"], NAMES["pb"])),
    # The fair-share report (DESIGN §16): platform admins and auditors the whole tree, department
    # admins their subtree, nobody else; a node's weight form: platform admins only (403 for the
    # others who see the node, 404 for those who do not).
    "fair-share-report": Page({**dict.fromkeys(PERSONAS, 403), "platform": AB, "auditor": AB, "a_admin": A,
                               "b_admin": B}, (NAMES["pa1"], NAMES["pb"])),
    "fair-share-weight": Page({p: (A if p == "platform" else 403 if A_OBJECT[p] == A else 404)
                               for p in PERSONAS}, (NAMES["pa1"], NAMES["pb"])),
    "inventory": Page(GLOBAL, (NAMES["A1"], NAMES["B"])),
    "job-list": Page(STD, ("job:a", "job:b")),
    # The project choices are the projects the persona may submit into (finance and auditors: none).
    "job-new": Page(SUBMITTERS, (NAMES["pa1"], NAMES["pb"])),
    # The live-validation fragment names no project; posting the other tenant's is "not a choice".
    "job-new-validate": Page(GLOBAL, (NAMES["pa1"], NAMES["pb"]), method="post"),
    "job-queue": Page(STD, ("job:a", "job:b")),
    "job-queue-table": Page(STD, ("job:a", "job:b")),
    "job-detail": Page(A_OBJECT, ("job:a", "job:b")),
    # An array (DESIGN §17): an object of its tenant, as its tasks are.
    "array-detail": Page(A_OBJECT, ("arr:a", "arr:b")),
    # The log panel of job:a (not started: it says so); its download and its dev port have
    # nothing to give yet, so whoever sees the job is sent back to its page, the others get 404.
    "job-log": Page({p: (NONE if A_OBJECT[p] == A else 404) for p in PERSONAS}),
    "job-log-download": Page({p: (302 if A_OBJECT[p] == A else 404) for p in PERSONAS}),
    "job-open": Page({p: (302 if A_OBJECT[p] == A else 404) for p in PERSONAS}),
    "loan-list": Page(STD, ("loan:a", "loan:b")),
    # Reservations (issue 35 item 6): the reservations of the projects one sees (maintenance: all).
    "reservations": Page(STD, ("resv:a", "resv:b")),
    "priority-class-list": Page(GLOBAL, (NAMES["A1"], NAMES["B"])),
    "priority-class-new": Page(PLATFORM_ONLY),
    "priority-class-edit": Page(PLATFORM_ONLY),
    "approval-inbox": Page(STD, ("req:a", "req:b"), query="?tab=all"),
    "approval-detail": Page(A_OBJECT, ("req:a", "req:b")),
    # Request forms: 200 for everyone, choices only where the persona may ask (loans: admins).
    "quota-request-new": Page(SUBMITTERS, (NAMES["pa1"], NAMES["pb"])),
    "loan-request-new": Page({**SUBMITTERS, "pa1_member": NONE, "pb_member": NONE},
                             (NAMES["pa1"], NAMES["pb"])),
    "approval-policy-list": Page(STD, (NAMES["A1"], NAMES["B"])),
    # A1 and B already have a policy: only A (top level, the platform admins' call) is left.
    "approval-policy-new": Page(PLATFORM_ONLY, (NAMES["A1"], NAMES["B"])),
    "approval-policy-edit": Page({**A_OBJECT, "auditor": 403, "a_finance": 403, "pa1_member": 403},
                                 (NAMES["A1"], NAMES["B"])),
    "notification-list": Page({**dict.fromkeys(PERSONAS, NONE), "pa1_member": A, "pb_member": B},
                              ("note:a", "note:b")),
    "reports": Page(STD, (NAMES["A1"], NAMES["B"])),
    "billing-statements": Page(STATEMENTS, (NAMES["A1"], NAMES["B"])),
    "billing-statement": Page(A_STATEMENT, (NAMES["A1"], NAMES["B"])),
    "billing-statement-download": Page(A_STATEMENT, ("chargeback-", "-B.csv")),
    "billing-budgets": Page(STD, (NAMES["pa1"], NAMES["B"])),
    # Issue 19: the whole-subtree chargeback file (no month given: 400 for those who read
    # statements, 404 for everyone else) and the manual adjustments (finance and platform only).
    "billing-chargeback": Page({p: (400 if STATEMENTS[p] else 404) for p in PERSONAS}),
    "billing-adjustments": Page({**PLATFORM_404, "platform": AB, "a_finance": A, "b_finance": B},
                                ("adj:a", "adj:b")),
    # Moving a project (issue 19): platform admins only; those who see the project get 403, the
    # rest 404 (another tenant's project is not there).
    "project-move": Page({**{p: (403 if A_OBJECT[p] == A else 404) for p in PERSONAS}, "platform": A},
                         (NAMES["pa1"], NAMES["pb"])),
    # What-if (策略推演) replays the whole pool: platform admins only, 404 for everyone else.
    "what-if": Page({**PLATFORM_404, "platform": AB}, (NAMES["A1"], NAMES["B"])),  # department choices
    "what-if-run": Page(PLATFORM_404, (NAMES["A1"], NAMES["B"])),
    "what-if-progress": Page(PLATFORM_404, (NAMES["A1"], NAMES["B"])),
    # The policy advisor (issue 25) searches over a replayed trace: platform admins only.
    "advisor": Page(PLATFORM_404, (NAMES["A1"], NAMES["B"])),
    "advisor-search": Page(PLATFORM_404, (NAMES["A1"], NAMES["B"])),
    "advisor-progress": Page(PLATFORM_404, (NAMES["A1"], NAMES["B"])),
    # External sources (issue 20): mapped ones follow their project; unmapped ones (no tenant's)
    # only platform admins and auditors see — the navigation links the page for them only.
    "external-source-list": Page(STD, ("src:a", "src:b")),
    # Directory rules and users (issue 21) are the platform's: platform admins and auditors read
    # them, only platform admins write (the auditor's 403), and nobody else knows they are there.
    "directory-rule-list": Page(READERS, ("zz-rule-alpha", "zz-rule-bravo")),
    "directory-rule-new": Page({**PLATFORM_404, "auditor": 403}),
    "directory-rule-edit": Page({**PLATFORM_404, "auditor": 403}),
    "user-list": Page({**PLATFORM_404, "auditor": NONE}),
    # pa1_member's page lists its role on pa1 (and nothing of B).
    "user-detail": Page({**PLATFORM_404, "platform": A, "auditor": A}, (NAMES["pa1"], NAMES["pb"])),
    # Job templates (issue 22): one's own and the shared ones of the projects one submits to.
    "job-template-list": Page(SUBMITTERS, ("tpl:a", "tpl:b")),
    # Saving a job as a template: the page of a job one sees (the service refuses who cannot submit).
    "job-template-from-job": Page(A_OBJECT, ("job:a", "job:b")),
    # Webhooks (issue 24 item 7): one's own, and those of the projects one may edit (project and
    # department admins above them, platform admins); nobody else knows a project's hook is there.
    "webhook-list": Page(HOOKS, ("hook:a", "hook:b")),
    "webhook-new": Page(HOOKS, (NAMES["pa1"], NAMES["pb"])),  # the project choices
    "webhook-edit": Page(A_HOOK, ("hook:a", "hook:b")),
    # The node map (issue 24) is pool-wide, a job named only to who sees it (tests/api/test_nodes_api.py);
    # a node's page (its jobs, history and actions) is for platform admins, 403 for everyone else.
    "node-map": Page(GLOBAL, (NAMES["A1"], NAMES["B"])),
    "node-page": Page(PLATFORM_ONLY),
    # Software baselines (issue 33 item 6) are managed by platform admins (403 for everyone else);
    # the drift report is the platform's, read by platform admins and auditors.
    "baseline-list": Page(PLATFORM_ONLY),
    "baseline-edit": Page(PLATFORM_ONLY),
    "node-drift": Page({**dict.fromkeys(PERSONAS, 403), "platform": NONE, "auditor": NONE}),
    # The usage explorer (issue 24 item 4) shows each persona its own scope (every persona's rows,
    # money and files: tests/billing/test_usage.py); here: nobody is refused the page.
    "billing-usage": Page(dict.fromkeys(PERSONAS, NONE)),
    # Personal API tokens (issue 32 item 16): one's own only, whoever one is.
    "api-token-list": Page({**dict.fromkeys(PERSONAS, NONE), "pa1_member": A, "pb_member": B},
                           ("token:a", "token:b")),
    # Closing a month (issue 32 item 9) closes every department's: platform admins and finance of
    # the whole centre (no persona here), 404 for everyone else, its progress box too.
    "billing-close": Page(PLATFORM_404, (NAMES["A1"], NAMES["B"])),
    "billing-close-progress": Page(PLATFORM_404, (NAMES["A1"], NAMES["B"])),
}

# POST actions on an A-side object: persona -> (status, changed). Anyone outside the object's
# scope gets 404; inside it, a refused write is a redirect with a message (the views show a
# service's refusal on the page) — in every refused case the row is unchanged.
NOT_SEEN = {p: (404, False) for p in ("outsider", "pb_member", "b_admin", "b_finance")}
ACTIONS: dict[str, dict] = {
    "job-cancel": {**NOT_SEEN, "auditor": (403, False), "a_finance": (403, False),
                   "pa1_member": (302, True), "a_admin": (302, True), "platform": (302, True)},
    "array-cancel": {**NOT_SEEN, "auditor": (403, False), "a_finance": (403, False),
                     "pa1_member": (302, True), "a_admin": (302, True), "platform": (302, True)},
    # Asking for an exemption from the idle policy: the job's owner or whoever may edit its project.
    "job-idle-exemption": {**NOT_SEEN, "auditor": (403, False), "a_finance": (403, False),
                           "pa1_member": (302, True), "a_admin": (302, True), "platform": (302, True)},
    "approval-decide": {**NOT_SEEN, "auditor": (302, False), "a_finance": (302, False),
                        "pa1_member": (302, False), "a_admin": (302, True), "platform": (302, True)},
    "approval-cancel": {**NOT_SEEN, "auditor": (302, False), "a_finance": (302, False),
                        "pa1_member": (302, True), "a_admin": (302, False), "platform": (302, True)},
    "approval-comment": {**NOT_SEEN, "auditor": (302, False), "a_finance": (302, False),
                         "pa1_member": (302, True), "a_admin": (302, True), "platform": (302, True)},
    # Bulk: one result per id, refusals as messages; ids outside the scope are "not found".
    "approval-bulk-decide": {**{p: (302, False) for p in NOT_SEEN}, "auditor": (302, False),
                             "a_finance": (302, False), "pa1_member": (302, False),
                             "a_admin": (302, True), "platform": (302, True)},
    "approval-policy-delete": {**NOT_SEEN, "auditor": (302, False), "a_finance": (302, False),
                               "pa1_member": (302, False), "a_admin": (302, True), "platform": (302, True)},
    "billing-budget-delete": {**NOT_SEEN, "auditor": (302, False), "pa1_member": (302, False),
                              "a_finance": (302, True), "a_admin": (302, True), "platform": (302, True)},
    # a_finance proposed adj:a: it may not decide it (segregation of duties), the platform admin may.
    "billing-adjustment-decide": {**NOT_SEEN, "pa1_member": (404, False), "auditor": (302, False),
                                  "a_admin": (302, False), "a_finance": (302, False),
                                  "platform": (302, True)},
    # A project's webhook: those who may edit the project delete it or send it a test.
    "webhook-delete": HOOK_ACTION,
    "webhook-test": HOOK_ACTION,
    # Notifications are the recipient's own: only pa1_member reads its note.
    "notification-read": {**{p: (404, False) for p in PERSONAS}, "pa1_member": (302, True)},
    "notification-read-all": {**{p: (302, False) for p in PERSONAS}, "pa1_member": (302, True)},
    # Mapping the unmapped source: platform admins only; the auditor sees it (403), nobody else does.
    "external-source-map": {**{p: (404, False) for p in PERSONAS}, "auditor": (403, False),
                            "platform": (302, True)},
    "directory-rule-delete": {**{p: (404, False) for p in PERSONAS}, "auditor": (302, False),
                              "platform": (302, True)},
    # A hand-given role on pa1: removed by who may grant it (as the API's membership delete).
    "membership-remove": {**NOT_SEEN, "auditor": (302, False), "a_finance": (302, False),
                          "pa1_member": (302, False), "a_admin": (302, True), "platform": (302, True)},
    # tpl:a is shared with pa1 by a_admin: its members use it (a delete is 403), its admins delete it;
    # who may not submit to pa1 does not see it.
    "job-template-delete": {**{p: (404, False) for p in PERSONAS}, "pa1_member": (403, False),
                            "a_admin": (302, True), "platform": (302, True)},
    # Autoscaling (issue 24 item 8) on job:a, a training job: readers who may not change it get 403
    # (as for cancel), its owner and admins are told no (only inference services scale), nobody
    # else learns it is there.
    # Applying an advisor candidate (quota requests for every project): platform admins only.
    "advisor-apply": {**{p: (404, False) for p in PERSONAS}, "platform": (302, True)},
    # Cancelling a running advisor search: platform admins only, like every advisor page.
    "advisor-cancel": {**{p: (404, False) for p in PERSONAS}, "platform": (302, True)},
    "job-autoscale-form": {**NOT_SEEN, "auditor": (403, False), "a_finance": (403, False),
                           "pa1_member": (302, False), "a_admin": (302, False), "platform": (302, False)},
    # Deleting a software baseline: platform admins only (403 for everyone else, nothing deleted).
    "baseline-delete": {**{p: (403, False) for p in PERSONAS}, "platform": (302, True)},
    # An API token is its owner's alone: nobody else, a platform admin included, finds it here.
    "api-token-revoke": {**{p: (404, False) for p in PERSONAS}, "pa1_member": (302, True)},
}

# Not pages of the portal: sign-in, and machine endpoints with their own guards and tests.
# The OIDC pair is sign-in itself (tests/security/test_oidc_signin.py), like the login page.
# The ingress check answers ingress-nginx, never a browser: 401/403 instead of sign-in and 404
# (tests/pages/test_job_logs.py holds it to that for every persona). The back-channel logout
# answers the provider's server, proving itself with a signed token (tests/security/test_oidc_deprovision.py).
EXEMPT = {"login", "logout", "healthz", "metrics", "schema", "api-docs",
          "oidc_authentication_init", "oidc_authentication_callback", "job-access-auth",
          "oidc-backchannel-logout"}


def _page_names():
    """Route names of every pattern outside the API, admin and i18n includes."""

    def walk(patterns):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if pattern.namespace in ("api", "admin") or str(pattern.pattern).startswith("i18n/"):
                    continue
                yield from walk(pattern.url_patterns)
            elif isinstance(pattern, URLPattern):
                yield pattern.name

    return set(walk(get_resolver().url_patterns))


def test_every_page_has_a_rule():
    names = _page_names()
    assert None not in names, "a page without a route name"
    assert names - set(RULES) - set(ACTIONS) - EXEMPT == set(), "new page without an isolation rule"
    assert set(RULES) & set(ACTIONS) == set()


def test_item14_every_listed_name_resolves():
    """Issue 32 item 14: the other way round — a rule for a name the URL configuration no longer
    has (a page renamed or removed) fails instead of skipping its checks."""
    assert (set(RULES) | set(ACTIONS) | EXEMPT) - _page_names() == set(), "listed but not a page"


# --- the objects ----------------------------------------------------------------------------------


def _job(world, prio, project, name, persona, **kw):
    return job_submit(actor=world.users[persona], project=project, name=name, kind="training",
                      flavor=world.F, priority_class=prio, image="img", workers=1, gpus_per_worker=1,
                      max_runtime_seconds=3600, **kw)


def _request(world, persona, project, summary):
    req = quota_request_create(actor=world.users[persona], flavor=world.F, project=project,
                               quota=Decimal(2))
    # A unique marker, as a request stored before summaries were messages: pages show its text.
    ApprovalRequest.objects.filter(pk=req.pk).update(summary=summary, summary_message=None)
    req.refresh_from_db()
    return req


def _loan(world, lender, borrower, reason):
    return Loan.objects.create(lender=world.quota[lender], borrower=world.quota[borrower], amount=Decimal(1),
                               starts_at=timezone.now() - timedelta(hours=1),
                               ends_at=timezone.now() + timedelta(days=1), state=LoanState.ACTIVE,
                               reason=reason)


def _adjustment(world, persona, department, reason):
    from billing.manual import adjustment_propose

    return adjustment_propose(actor=world.users[persona], department=department, kind="credit", amount="1",
                              reason=reason)


def _sources(world):
    from jobs.native.models import ExternalSource
    from quotas.models import Cluster

    cluster = Cluster.objects.get(name="c1")
    owners = (("src:a", "zz-src-alpha", world.pa1), ("src:b", "zz-src-bravo", world.pb),
              ("src:u", "zz-src-unmapped", None))
    return {key: ExternalSource.objects.create(cluster=cluster, kind="slurm_account", name=n, project=project)
            for key, n, project in owners}


def _templates(world):
    from jobs.templates_service import template_save

    values = {"kind": "training", "flavor": "F", "priority": "training", "image": "img"}
    return {
        key: template_save(actor=world.users[user], project=project, name=name, values=values, shared=True)
        for key, user, project, name in (("tpl:a", "a_admin", world.pa1, "zz-tpl-alpha"),
                                         ("tpl:b", "b_admin", world.pb, "zz-tpl-bravo"))
    }


def _hooks(world):
    from portal.models import Webhook

    # 127.0.0.1 is refused at send time (no host is allowed in tests here): a test send needs no network.
    hooks = (("hook:a", world.pa1, "zz-hook-alpha"), ("hook:b", world.pb, "zz-hook-bravo"))
    return {key: Webhook.objects.create(project=project, kind="wecom", name=name, url="https://127.0.0.1/x")
            for key, project, name in hooks}


def _api_tokens(world):
    from portal.tokens import api_token_create

    return {key: api_token_create(actor=world.users[persona], name=name).token
            for key, persona, name in (("token:a", "pa1_member", "zz-token-alpha"),
                                       ("token:b", "pb_member", "zz-token-bravo"))}


def _reservation(project, flavor, reason):
    from jobs.reservation_models import Reservation

    now = timezone.now()
    return Reservation.objects.create(project=project, flavor=flavor, gpus=1, reason=reason,
                                      starts_at=now + timedelta(hours=1), ends_at=now + timedelta(hours=2))


def _build():
    world = build_world()
    prio = fx.priority("training", 100)  # as tests/pages/conftest.py's prio
    return world, prio, _objs(world, prio)


_scene, scene = shared_scene(_build)


@pytest.fixture
def world(scene):
    return scene[0]


@pytest.fixture
def prio(scene):
    return scene[1]


@pytest.fixture
def objs(scene):
    return scene[2]


def _objs(world, prio):
    for key, name in NAMES.items():
        target = getattr(world, key)
        type(target).objects.filter(pk=target.pk).update(name=name)
        target.refresh_from_db()
    month = timezone.now().date().replace(day=1) - timedelta(days=40)
    month = month.replace(day=1)
    found = {
        "job:a": _job(world, prio, world.pa1, "zz-job-alpha", "pa1_member"),
        "job:b": _job(world, prio, world.pb, "zz-job-bravo", "pb_member"),
        "arr:a": _job(world, prio, world.pa1, "zz-arr-alpha", "pa1_member", array="0-1").array,
        "arr:b": _job(world, prio, world.pb, "zz-arr-bravo", "pb_member", array="0-1").array,
        "req:a": _request(world, "pa1_member", world.pa1, "zz-req-alpha"),
        "req:b": _request(world, "pb_member", world.pb, "zz-req-bravo"),
        "loan:a": _loan(world, "pa", "pa1", "zz-loan-alpha"),
        "loan:b": _loan(world, "B", "pb", "zz-loan-bravo"),
        "pol:a": ApprovalPolicy.objects.create(department=world.A1, max_gpus=100),
        "pol:b": ApprovalPolicy.objects.create(department=world.B, max_gpus=100),
        "st:a": Statement.objects.create(department=world.A1, month=month, state=StatementState.CLOSED,
                                         closed_at=timezone.now()),
        "st:b": Statement.objects.create(department=world.B, month=month, state=StatementState.CLOSED,
                                         closed_at=timezone.now()),
        "bu:a": Budget.objects.create(project=world.pa1, card_hours=100),
        "bu:b": Budget.objects.create(department=world.B, card_hours=100),
        "note:a": notify(recipients=[world.users["pa1_member"]], text="zz-note-alpha")[0],
        "note:b": notify(recipients=[world.users["pb_member"]], text="zz-note-bravo")[0],
        "adj:a": _adjustment(world, "a_finance", world.A1, "zz-adj-alpha"),
        "adj:b": _adjustment(world, "b_finance", world.B, "zz-adj-bravo"),
        "proj:a": world.pa1,
        "qn:a": world.quota["pa1"],
        "rule:a": DirectoryRule.objects.create(directory="ldap", group="zz-rule-alpha", role="member",
                                               project=world.pa1),
        "rule:b": DirectoryRule.objects.create(directory="oidc", group="zz-rule-bravo", role="member",
                                               project=world.pb),
        "user:a": world.users["pa1_member"],
        "resv:a": _reservation(world.pa1, world.F, "zz-resv-alpha"),
        "resv:b": _reservation(world.pb, world.F, "zz-resv-bravo"),
        "member:a": world.users["pa1_member"].memberships.get(),
        **_sources(world),
        **_templates(world),
        **_hooks(world),
        **_api_tokens(world),
    }
    found["whatif"] = WhatIfRun.objects.create(created_by=world.users["platform"], month=month,
                                               change=WhatIfRun._meta.get_field("change").choices[0][0])
    found["node"] = Node.objects.order_by("pk").first()
    found["baseline"] = SoftwareBaseline.objects.create(flavor=world.F, cuda_version="12.4")
    from billing.models import MonthCloseRun

    found["closerun"] = MonthCloseRun.objects.create(month=month, requested_by=world.users["platform"])
    found["advisor"], found["advcand"] = finished_search(world.users["platform"])
    found["advlive"] = AdvisorSearch.objects.create(
        created_by=world.users["platform"], scenario=found["advisor"].scenario,
        bounds=found["advisor"].bounds, seed=1, budget=3, state="running")
    return found


# The A-side object each object page and action is about.
SUBJECT = {
    "job-detail": "job:a", "job-cancel": "job:a", "job-idle-exemption": "job:a",
    "array-detail": "arr:a", "array-cancel": "arr:a",
    "job-log": "job:a", "job-log-download": "job:a",
    "job-open": "job:a", "quota-borrowers": "qn:a",
    "priority-class-edit": "prio",
    "approval-detail": "req:a", "approval-decide": "req:a", "approval-cancel": "req:a",
    "approval-comment": "req:a",
    "approval-policy-edit": "pol:a", "approval-policy-delete": "pol:a",
    "notification-read": "note:a",
    "billing-statement": "st:a", "billing-statement-download": "st:a",
    "billing-budget-delete": "bu:a", "billing-adjustment-decide": "adj:a",
    "what-if-run": "whatif", "what-if-progress": "whatif", "billing-close-progress": "closerun",
    "project-move": "proj:a",
    "external-source-map": "src:u",
    "directory-rule-edit": "rule:a", "directory-rule-delete": "rule:a",
    "user-detail": "user:a", "membership-remove": "member:a",
    "job-template-from-job": "job:a", "job-template-delete": "tpl:a",
    "webhook-edit": "hook:a", "webhook-delete": "hook:a", "webhook-test": "hook:a",
    "node-page": "node", "job-autoscale-form": "job:a",
    "advisor-search": "advisor", "advisor-progress": "advisor", "advisor-apply": "advcand",
    "advisor-cancel": "advlive", "api-token-revoke": "token:a",
    "baseline-edit": "baseline", "baseline-delete": "baseline",
}


def _url(name, objs, prio):
    if name == "fair-share-weight":  # a tree node: its kind and id
        return reverse(name, args=["project", objs["proj:a"].pk])
    subject = SUBJECT.get(name)
    if subject is None:
        return reverse(name)
    pk = prio.pk if subject == "prio" else objs[subject].pk
    return reverse(name, args=[pk])


def _marker(text, objs):
    """A marker names an object ("job:a") or is a literal string."""
    obj = objs.get(text)
    if obj is None:
        return text
    for field in ("summary", "reason", "text", "name"):
        if hasattr(obj, field):
            return getattr(obj, field)
    raise AssertionError(text)


def _resolving(name):
    """A listed page that left the URL configuration (renamed, removed) fails here: it used to be
    skipped as "not in the URL configuration yet", so its rule silently checked nothing."""
    assert name in _page_names(), f"{name} is listed here but not in the URL configuration: update its rule"


# --- pages ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("name", sorted(RULES))
def test_page_shows_only_the_personas_tenants(page_client, objs, prio, name, persona):
    _resolving(name)
    page = RULES[name]
    client = page_client(persona)
    response = getattr(client, page.method)(_url(name, objs, prio) + page.query)
    expected = page.rule[persona]
    if isinstance(expected, int):
        assert response.status_code == expected, (name, persona, response.status_code)
        body = response.content.decode()
        for marker in page.markers:
            if marker:
                assert _marker(marker, objs) not in body, (name, persona, marker)
        return
    assert response.status_code == 200, (name, persona, response.status_code)
    body = _body(response)
    a_mark, b_mark = (_marker(m, objs) for m in page.markers)
    if a_mark:
        assert (a_mark in body) == (A in expected), (name, persona, "A side", a_mark)
    if b_mark:
        assert (b_mark in body) == (B in expected), (name, persona, "B side", b_mark)


def _body(response) -> str:
    if response.streaming:
        return b"".join(response.streaming_content).decode()
    disposition = response.get("Content-Disposition", "")
    return disposition + response.content.decode("utf-8", "replace")


@pytest.mark.parametrize("persona", ["platform", "a_admin", "pa1_member"])
@pytest.mark.parametrize("name", sorted(RULES))
def test_item2_no_page_cuts_what_is_typed(page_client, objs, prio, name, persona):
    """A ``maxlength`` makes the browser cut typed or pasted text without a word (issue 32 item
    2): no page carries one — the server refuses over-long input with its length instead."""
    _resolving(name)
    page = RULES[name]
    response = getattr(page_client(persona), page.method)(_url(name, objs, prio) + page.query)
    if response.status_code == 200 and response.get("Content-Type", "").startswith("text/html"):
        assert "maxlength" not in _body(response).lower(), name


@pytest.mark.parametrize("name", sorted(set(RULES) | set(ACTIONS)))
def test_anonymous_is_sent_to_sign_in(page_client, objs, prio, name):
    _resolving(name)
    client = page_client(None)
    url = _url(name, objs, prio)
    for method in ("get", "post"):
        response = getattr(client, method)(url)
        assert response.status_code == 302, (name, method)
        assert response["Location"].startswith(reverse("login") + "?next="), (name, method)
    assert b"zz-" not in response.content


# --- POST actions -----------------------------------------------------------------------------------


def _state(name, objs):
    """What the action would change, read back from the database."""
    if name == "job-cancel":
        return Job.objects.get(pk=objs["job:a"].pk).state
    if name == "array-cancel":
        return sorted(objs["arr:a"].tasks.values_list("state", flat=True))
    if name == "job-idle-exemption":
        return ApprovalRequest.objects.filter(kind="idle_exemption", subject_id=objs["job:a"].pk).count()
    if name in ("approval-decide", "approval-cancel", "approval-bulk-decide"):
        req = ApprovalRequest.objects.get(pk=objs["req:a"].pk)
        return req.state, list(req.steps.values_list("state", flat=True))
    if name == "approval-comment":
        return ApprovalRequest.objects.get(pk=objs["req:a"].pk).audit.filter(comment="zz-comment").count()
    if name == "approval-policy-delete":
        return ApprovalPolicy.objects.filter(pk=objs["pol:a"].pk).exists()
    if name == "billing-budget-delete":
        return Budget.objects.filter(pk=objs["bu:a"].pk).exists()
    if name == "billing-adjustment-decide":
        from billing.models import ManualAdjustment

        return ManualAdjustment.objects.get(pk=objs["adj:a"].pk).state
    if name in ("notification-read", "notification-read-all"):
        return Notification.objects.get(pk=objs["note:a"].pk).read_at is not None
    if name == "external-source-map":
        return type(objs["src:u"]).objects.get(pk=objs["src:u"].pk).project_id
    if name == "directory-rule-delete":
        return DirectoryRule.objects.filter(pk=objs["rule:a"].pk).exists()
    if name == "membership-remove":
        return Membership.objects.filter(pk=objs["member:a"].pk).exists()
    if name == "webhook-delete":
        return type(objs["hook:a"]).objects.filter(pk=objs["hook:a"].pk).exists()
    if name == "webhook-test":
        return objs["hook:a"].deliveries.count()
    if name == "job-template-delete":
        return type(objs["tpl:a"]).objects.filter(pk=objs["tpl:a"].pk).exists()
    if name == "job-autoscale-form":
        return Job.objects.get(pk=objs["job:a"].pk).autoscale_query
    if name == "advisor-apply":
        return ApprovalRequest.objects.count()
    if name == "advisor-cancel":
        return type(objs["advlive"]).objects.get(pk=objs["advlive"].pk).state
    if name == "api-token-revoke":
        return type(objs["token:a"]).objects.get(pk=objs["token:a"].pk).revoked_at
    if name == "baseline-delete":
        return SoftwareBaseline.objects.filter(pk=objs["baseline"].pk).exists()
    raise AssertionError(name)


def _body_of(name, objs):
    if name == "job-idle-exemption":
        return {"reason": "zz-long evaluation", "until": ""}
    if name == "approval-bulk-decide":
        return {"ids": [objs["req:a"].pk], "decision": "approve", "comment": "ok"}
    if name == "approval-decide":
        return {"decision": "approve", "comment": "ok"}
    if name in ("approval-cancel", "approval-comment"):
        return {"comment": "zz-comment"}
    if name == "billing-adjustment-decide":
        return {"decision": "approve"}
    if name == "external-source-map":
        return {"project": objs["proj:a"].pk}
    if name == "job-autoscale-form":
        return {"query": 'sum(rps{job="{job}"})', "target": "10", "cooldown_seconds": "300"}
    if name == "advisor-apply":  # the confirm of the preview (without it nothing is filed)
        from jobs.whatif.proposals import advisor_candidate_preview

        admin = objs["advcand"].search.created_by
        return {"digest": advisor_candidate_preview(actor=admin, candidate=objs["advcand"])["digest"]}
    return {}


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_action_by_the_wrong_persona_changes_nothing(page_client, objs, prio, name, persona):
    status, changes = ACTIONS[name][persona]
    before = _state(name, objs)
    # The other tenant's note stays unread whoever marks "all" read.
    other = Notification.objects.get(pk=objs["note:b"].pk).read_at
    response = page_client(persona).post(_url(name, objs, prio), _body_of(name, objs))
    assert response.status_code == status, (name, persona, response.status_code)
    assert (_state(name, objs) != before) == changes, (name, persona, before, _state(name, objs))
    if persona != "pb_member":
        assert Notification.objects.get(pk=objs["note:b"].pk).read_at == other
    assert b"zz-" not in response.content


@pytest.mark.parametrize("name", ["job-new", "job-new-validate", "quota-request-new"])
def test_forms_refuse_the_other_tenants_project(page_client, world, objs, prio, name):
    body = {"project": world.pa1.pk, "name": "zz-intruder", "kind": "training", "flavor": world.F.pk,
            "priority_class": prio.pk, "image": "img", "workers": 1, "gpus_per_worker": 1, "quota": "1",
            "owner": f"project:{world.pa1.pk}"}
    field = "owner" if name == "quota-request-new" else "project"
    jobs, requests = Job.objects.count(), ApprovalRequest.objects.count()
    response = page_client("pb_member").post(reverse(name), body)
    assert response.status_code == 200  # the form again, with its error
    assert field in response.context["form"].errors
    assert NAMES["pa1"] not in response.content.decode()
    assert (Job.objects.count(), ApprovalRequest.objects.count()) == (jobs, requests)

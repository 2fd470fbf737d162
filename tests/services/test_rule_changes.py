"""Rule-change requests (issue 25, docs/approvals.md "Rule changes"): validation (400 naming the
entry, nothing created), create → approve → every change applied with its event, a stale
"before" refuses the whole approval, only platform admins ask and decide, the scheduling cycle
honours the operator's backfill setting, zh/en lines."""

from datetime import time, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation

from jobs.models import Job, PriorityClass, RuleChangeEvent, SchedulerSettings
from jobs.rule_changes import rule_change_request_create
from jobs.scheduling.cycle import schedule_once
from jobs.scheduling.settings import engine_flags
from jobs.services import job_submit
from portal.approvals import approval_decide
from portal.models import ApprovalRequest, Membership, Role, User
from portal.texts import render_data
from quotas.models import QuotaWindow
from tests import factories as fx

pytestmark = pytest.mark.django_db
_HL = "fair_share_half_life_seconds"


@pytest.fixture(autouse=True)
def settings_row(db):
    """The settings row as migration jobs/0021 makes it. A transactional test that ran earlier in
    this process flushed every table, the migration's row with it, and an ``update()`` of a
    missing row changes nothing (the cycle then reads the defaults)."""
    return SchedulerSettings.objects.get_or_create(pk=1)[0]


def _second_admin() -> User:
    user = User.objects.create_user(username="root-2")
    Membership.objects.create(user=user, role=Role.PLATFORM_ADMIN)
    return user


def _all_changes(world):
    PriorityClass.objects.create(name="normal", value=10, grace_seconds=30)
    return [
        {"type": "project_queueing", "project": "pa", "queueing": "strict_fifo", "aging_bound_seconds": 600},
        {"type": "quota_limits", "project": "pb", "flavor": "F", "borrow_limit": 4, "lend_limit": "2",
         "before": {"borrow_limit": None, "lend_limit": None}},
        {"type": "quota_window", "project": "pa1", "flavor": "F", "name": "night", "start_hour": 20,
         "end_hour": 8, "lend_limit": 3},
        {"type": "priority_grace", "priority_class": "normal", "grace_seconds": 90,
         "before": {"grace_seconds": 30}},
        {"type": "scheduler_backfill", "backfill": False},
        {"type": "scheduler_packing", "packing": "best_fit", "before": {"packing": "fragmentation_aware"}},
    ]


def test_create_approve_applies_every_change_with_events(world):
    asker, decider = world.users["platform"], _second_admin()
    req = rule_change_request_create(actor=asker, changes=_all_changes(world), reason="advisor")
    assert req.kind == "policy" and req.department_id is None and len(req.payload["lines"]) == 8
    assert SchedulerSettings.objects.get().backfill is True  # nothing before approval
    approval_decide(actor=decider, step_or_request=req, approve=True)
    req.refresh_from_db()
    assert req.state == "approved"
    world.pa.refresh_from_db()
    assert (world.pa.queueing, world.pa.aging_bound_seconds) == ("strict_fifo", 600)
    pb = world.quota["pb"]
    pb.refresh_from_db()
    assert (pb.borrow_limit, pb.lend_limit) == (Decimal(4), Decimal(2))
    w = QuotaWindow.objects.get(quota_node=world.quota["pa1"], name="night")
    assert (w.start_time, w.end_time, w.lend_limit, w.quota, w.weekdays) == (
        time(20), time(8), 3, None, "0123456")
    assert PriorityClass.objects.get(name="normal").grace_seconds == 90
    s = SchedulerSettings.objects.get()
    assert (s.backfill, s.packing) == (False, "best_fit")
    assert engine_flags() == {"fragmentation_aware": False, "backfill": False}
    events = list(RuleChangeEvent.objects.order_by("id"))
    assert [e.type for e in events] == ["project_queueing", "quota_limits", "quota_window", "priority_grace",
                                        "scheduler_backfill", "scheduler_packing"]
    assert all(e.request_id == req.pk and e.actor_id == decider.pk for e in events)
    assert (events[4].old, events[4].new) == ({"backfill": True}, {"backfill": False})
    assert events[2].old is None and events[2].new["start_time"] == "20:00"


def test_a_value_changed_meanwhile_refuses_the_approval_and_changes_nothing(world):
    req = rule_change_request_create(actor=world.users["platform"], changes=_all_changes(world))
    PriorityClass.objects.filter(name="normal").update(grace_seconds=45)  # an admin edited it meanwhile
    with pytest.raises(ValidationError) as refused, translation.override("en"):
        approval_decide(actor=_second_admin(), step_or_request=req, approve=True)
    assert "Change 3 (priority_grace)" in " ".join(refused.value.messages)
    assert "changed since the request" in " ".join(refused.value.messages)
    req.refresh_from_db()
    world.pa.refresh_from_db()
    assert req.state == "pending" and world.pa.queueing == "best_effort"  # the earlier change undone
    assert not QuotaWindow.objects.exists() and not RuleChangeEvent.objects.exists()
    assert PriorityClass.objects.get(name="normal").grace_seconds == 45  # what the admin set is kept
    assert SchedulerSettings.objects.get().backfill is True


@pytest.mark.parametrize("entry, words", [
    ({"type": "project_queueing", "project": "nope", "queueing": "strict_fifo"}, "unknown project"),
    ({"type": "project_queueing", "project": "pa", "queueing": "fifo"}, "queueing: one of"),
    ({"type": "project_queueing", "project": "pa", "aging_bound_seconds": 5}, "aging_bound_seconds"),
    ({"type": "project_queueing", "project": "pa", "queueing": "strict_fifo", "colour": 1},
     "unknown key(s): colour"),
    ({"type": "quota_limits", "project": "pa", "flavor": "G", "borrow_limit": 1}, "unknown flavor"),
    ({"type": "quota_limits", "project": "pa", "flavor": "F", "lend_limit": 5}, "cannot exceed the quota"),
    ({"type": "quota_limits", "project": "pa", "flavor": "F", "borrow_limit": 1.5}, "whole units"),
    ({"type": "quota_limits", "project": "pa", "flavor": "F", "borrow_limit": -1}, "between 0"),
    ({"type": "quota_window", "project": "pa", "flavor": "F", "name": "n", "start_hour": 20, "end_hour": 24,
      "lend_limit": 1}, "end_hour"),
    ({"type": "quota_window", "project": "pa", "flavor": "F", "name": "n", "start_hour": 20, "end_hour": 8,
      "borrow_limit": 1}, "unknown key(s): borrow_limit"),
    ({"type": "priority_grace", "priority_class": "gold", "grace_seconds": 5}, "unknown priority class"),
    ({"type": "priority_grace", "priority_class": "normal", "grace_seconds": 86401}, "grace_seconds"),
    ({"type": "scheduler_fair_share", _HL: 0}, "fair_share_half_life_seconds: a whole"),
    ({"type": "scheduler_fair_share", _HL: 3599}, "from 3600 to 31536000"),
    ({"type": "scheduler_fair_share", _HL: 10**12}, _HL),
    ({"type": "scheduler_fair_share", _HL: "7d"}, _HL),
    ({"type": "scheduler_fair_share", _HL: 86400.5}, _HL),
    ({"type": "scheduler_fair_share", "fair_share_entry_seconds": -1}, "fair_share_entry_seconds: a whole"),
    ({"type": "scheduler_fair_share", "fair_share_entry_seconds": True}, "fair_share_entry_seconds"),
    ({"type": "scheduler_fair_share", "fair_share_entry_seconds": 3600}, "nothing to change"),
    ({"type": "scheduler_backfill", "backfill": "no"}, "backfill: true or false"),
    ({"type": "scheduler_packing", "packing": "worst_fit"}, "packing: one of"),
    ({"type": "scheduler_packing", "packing": "best_fit", "before": {"packing": "best_fit"}}, "before is"),
    ({"type": "scheduler_backfill", "backfill": True}, "nothing to change"),
    ({"type": "quota_limits", "project": "pa", "flavor": "F", "lend_limit": 1, "before": {"lend_limit": 2.0}},
     "before is"),
    ({"type": "teleport"}, "unknown type"),
    ({"type": ["scheduler_backfill"], "backfill": False}, "unknown type"),
    ({"type": "quota_limits", "project": "pa", "flavor": "F", "lend_limit": "NaN"}, "between 0"),
    ({"type": "quota_limits", "project": ["pa"], "flavor": "F", "lend_limit": 1}, "project: a name"),
    ({"type": "project_queueing", "project": "pa", "queueing": "strict_fifo", "before": "x"}, "before is"),
])
def test_bad_changes_are_a_400_naming_the_entry_and_create_nothing(world, api, entry, words):
    PriorityClass.objects.create(name="normal", value=10, grace_seconds=30)
    good = {"type": "project_queueing", "project": "pb", "queueing": "strict_fifo"}
    r = api(world.users["platform"]).post(reverse("api:approval-list"),
                                          {"kind": "policy", "changes": [good, entry]}, format="json")
    assert r.status_code == 400, r.content
    text = str(r.json())
    assert "changes[1]" in text and words in text, text
    assert not ApprovalRequest.objects.exists()


def test_what_the_quota_services_would_refuse_at_approval_is_a_400_at_once(world, api):
    """A overcommits ×2 (A1 4 + pa 8 under A's 8): A1 never lending is fine (4 kept ≤ 8), pa never
    lending too would keep 12 > 8 of A's quota out of the pool — A's level rule (docs/quotas.md)."""
    from quotas.models import QuotaNode

    QuotaNode.objects.filter(pk=world.quota["A"].pk).update(overcommit_ratio=2)
    QuotaNode.objects.filter(pk=world.quota["pa"].pk).update(quota=8)
    changes = [{"type": "quota_limits", "department": "A1", "flavor": "F", "lend_limit": 0},
               {"type": "quota_limits", "project": "pa", "flavor": "F", "lend_limit": 0}]
    body = {"kind": "policy", "changes": changes}
    r = api(world.users["platform"]).post(reverse("api:approval-list"), body, format="json")
    assert r.status_code == 400, r.content
    assert "changes[1] (quota_limits): The never-lent parts" in str(r.json())
    assert not ApprovalRequest.objects.exists()
    assert QuotaNode.objects.get(pk=world.quota["A1"].pk).lend_limit is None  # the dry run left nothing


def test_the_api_creates_a_rule_change_request_and_the_same_target_twice_is_refused(world, api):
    client = api(world.users["platform"])
    body = {"kind": "policy", "reason": "why", "changes": [{"type": "scheduler_backfill", "backfill": False}]}
    made = client.post(reverse("api:approval-list"), body, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["kind"] == "policy"
    assert made.json()["payload"]["lines"] == ["Scheduler EASY backfill: on → off"]
    assert made.json()["steps"][0]["approver_role"] == "platform_admin"
    body["changes"] = body["changes"] * 2
    assert client.post(reverse("api:approval-list"), body, format="json").status_code == 400


@pytest.mark.parametrize("persona", ["auditor", "a_admin", "a_finance", "pa1_member", "outsider"])
def test_only_platform_admins_ask_for_or_decide_rule_changes(world, api, persona):
    user = world.users[persona]
    r = api(user).post(reverse("api:approval-list"),
                       {"kind": "policy", "changes": "not even a list"}, format="json")
    assert r.status_code == 403  # before the body is read
    with pytest.raises(PermissionDenied):
        rule_change_request_create(actor=user, changes=[{"type": "scheduler_backfill", "backfill": False}])
    req = rule_change_request_create(actor=world.users["platform"],
                                     changes=[{"type": "scheduler_backfill", "backfill": False}])
    decided = api(user).post(reverse("api:approval-decide", args=[req.pk]), {"approve": True},
                             format="json")
    assert decided.status_code == (403 if persona == "auditor" else 404)  # others do not see it at all
    assert SchedulerSettings.objects.get().backfill is True
    seen = api(user).get(reverse("api:approval-detail", args=[req.pk])).status_code
    assert seen == (200 if persona == "auditor" else 404)
    page = Client()
    page.force_login(user)
    assert page.get(reverse("approval-detail", args=[req.pk])).status_code == seen
    decided_on_page = page.post(reverse("approval-decide", args=[req.pk]), {"decision": "approve"})
    assert decided_on_page.status_code == (302 if persona == "auditor" else 404)
    assert SchedulerSettings.objects.get().backfill is True


def test_the_requester_cannot_decide_their_own_rule_change(world):
    req = rule_change_request_create(actor=world.users["platform"],
                                     changes=[{"type": "scheduler_backfill", "backfill": False}])
    with pytest.raises(PermissionDenied):
        approval_decide(actor=world.users["platform"], step_or_request=req, approve=True)


@pytest.mark.parametrize("language, words", [
    ("en", ("Rule change", "Project A/pa queueing: best effort → strict FIFO", "Scheduler packing: "
            "fragmentation-aware → best fit", "Quota window “night” of A1/pa1 for F")),
    ("zh-hans", ("策略变更", "项目 A/pa 排队策略: 尽力而为 → 严格先进先出",
                 "调度器装箱策略: 碎片感知 → 最佳适配")),
])
def test_the_request_page_and_inbox_show_the_changes_readably(world, language, words):
    req = rule_change_request_create(actor=world.users["platform"], changes=_all_changes(world))
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(_second_admin())
    page = client.get(reverse("approval-detail", args=[req.pk])).content.decode()
    for word in words:
        assert word in page, word
    inbox = client.get(reverse("approval-inbox")).content.decode()
    assert reverse("approval-detail", args=[req.pk]) in inbox
    with translation.override(language):
        assert words[1] in render_data(req.payload)["lines"]


# -- the scheduling cycle reads the operator's settings -----------------------------------------


def _job(project, flavor, name, gpus, runtime):
    return job_submit(actor=fx.platform_admin(), project=project, name=name, kind="training",
                      flavor=flavor, priority_class=fx.priority(), image="pytorch:2.3", workers=1,
                      gpus_per_worker=gpus,
                      max_runtime_seconds=runtime)


def _blocked_head_and_a_small_job():
    """Two 8-GPU nodes: a (8 GPUs, 10 min) fills one, d (4 GPUs, 1 h) half the other. Then b
    (8 GPUs) waits for a's node and c (2 GPUs) fits beside d without delaying b: backfill admits
    c; without backfill the blocked head b stops it."""
    f, p = fx.single_project_pool(node_count=2)
    _job(p, f, "a", 8, 600)
    _job(p, f, "d", 4, 3600)
    assert schedule_once().admitted == 2
    _job(p, f, "b", 8, 3600)
    return _job(p, f, "c", 2, 3600)


@pytest.mark.parametrize("warm", [True, False])
def test_the_cycle_backfills_by_default(warm):
    c = _blocked_head_and_a_small_job()
    schedule_once(warm=warm)
    assert Job.objects.get(pk=c.pk).state != "queued"


@pytest.mark.parametrize("warm", [True, False])
def test_the_cycle_honours_backfill_off_from_the_database(warm):
    c = _blocked_head_and_a_small_job()
    SchedulerSettings.objects.filter(pk=1).update(backfill=False)
    schedule_once(warm=warm)
    assert Job.objects.get(pk=c.pk).state == "queued"


def _packing_world():
    """Leaf l0: nodes of 3 and 8 GPUs (11 free); leaf l1: one node of 3 GPUs. A 2-GPU job fits
    best on either 3-GPU node: plain best fit takes the first in topology order (l0's),
    fragmentation-aware placement the one in the leaf with the fewest free GPUs (l1's)."""
    from quotas.models import Cluster, Node

    f = fx.flavor()
    cluster = Cluster.objects.create(name="sim", kind="simulator")
    made = {}
    for name, gpus, leaf in (("n3a", 3, "l0"), ("n8", 8, "l0"), ("n3b", 3, "l1")):
        made[name] = Node.objects.create(cluster=cluster, name=name, flavor=f, gpu_count=gpus, zone="z1",
                                         spine="s0", leaf=leaf)
    dept = fx.department("D")
    proj = fx.project("p", dept)
    fx.quota(f, dept, 16)
    fx.quota(f, proj, 16)
    job = _job(proj, f, "small", 2, 600)
    return job, {n.pk: name for name, n in made.items()}


@pytest.mark.parametrize("packing, node", [("fragmentation_aware", "n3b"), ("best_fit", "n3a")])
@pytest.mark.parametrize("warm", [True, False])
def test_the_cycle_places_with_the_packing_from_the_database(packing, node, warm):
    job, names = _packing_world()
    SchedulerSettings.objects.filter(pk=1).update(packing=packing)
    schedule_once(warm=warm)
    job.refresh_from_db()
    assert {names[slot[0]] for worker in job.placement for slot in worker} == {node}


def test_start_estimates_and_the_forms_estimate_honour_backfill_off():
    from django.core.cache import cache
    from django.utils import timezone

    from jobs.scheduling import start_estimates

    c = _blocked_head_and_a_small_job()
    project_id, now = c.project_id, timezone.now()

    def estimates():
        start_estimates.start_estimates_refresh(now)
        cache.delete(start_estimates._FORM_SNAPSHOT_KEY)  # the form's snapshot holds its flags
        new = start_estimates.start_estimate_new(
            project_id=project_id, flavor="A100", workers=1, min_workers=None, gpus_per_worker=2,
            gpu_milli=None, priority=100, preemptible=True, max_runtime_seconds=3600, needs_approval=False,
            now=now)
        return start_estimates.cached_start_estimates([c])[c.pk].estimated_start, new.estimated_start

    queued_on, new_on = estimates()
    SchedulerSettings.objects.filter(pk=1).update(backfill=False)
    queued_off, new_off = estimates()
    # backfill: c and a job like it start beside d at once; without it they wait behind b,
    # which starts when a ends (10 min)
    assert queued_on - now < timedelta(minutes=5) and new_on - now < timedelta(minutes=5)
    assert queued_off - now >= timedelta(minutes=9) and new_off - now >= timedelta(minutes=9)


def test_a_quantity_before_may_be_given_as_a_number(world):
    from quotas.models import QuotaNode

    QuotaNode.objects.filter(pk=world.quota["pa"].pk).update(lend_limit=2)
    change = {"type": "quota_limits", "project": "pa", "flavor": "F", "lend_limit": 1,
              "before": {"lend_limit": 2.0}}
    req = rule_change_request_create(actor=world.users["platform"], changes=[change])
    assert req.payload["changes"][0]["before"] == {"lend_limit": "2"}


# -- fair share (DESIGN §16): the half-life and entry time --------------------------------------


def test_a_fair_share_change_is_applied_and_seen_by_the_next_cycles_configuration(world):
    from jobs.scheduling.config import ConfigReader

    reader = ConfigReader()
    now = timezone.now()
    before = reader.read(now)
    assert (before.fair_half_life_s, before.fair_entry_s) == (7 * 86400, 3600)
    req = rule_change_request_create(actor=world.users["platform"], changes=[
        {"type": "scheduler_fair_share", "fair_share_half_life_seconds": 2 * 86400,
         "fair_share_entry_seconds": 0}])
    with translation.override("en"):
        assert render_data(req.payload)["lines"] == ["Fair-share half-life: 604800 s → 172800 s",
                                                     "Fair-share entry time: 3600 s → 0 s"]
    approval_decide(actor=_second_admin(), step_or_request=req, approve=True)
    row = SchedulerSettings.objects.get()
    assert (row.fair_share_half_life_seconds, row.fair_share_entry_seconds) == (2 * 86400, 0)
    event = RuleChangeEvent.objects.get(type="scheduler_fair_share")
    assert event.old == {"fair_share_half_life_seconds": 604800, "fair_share_entry_seconds": 3600}
    after = reader.read(now)  # the same kept reader: the digest must notice the settings row
    assert (after.fair_half_life_s, after.fair_entry_s) == (2 * 86400, 0)
    assert after != before


def test_a_missing_settings_row_reads_the_fair_share_defaults(world):
    from jobs.scheduling.config import read_config

    SchedulerSettings.objects.all().delete()
    config = read_config(timezone.now())
    assert (config.fair_half_life_s, config.fair_entry_s) == (7 * 86400, 3600)

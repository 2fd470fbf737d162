"""Approval flows in a real browser, each actor in their own browser context (own cookies):

a. a 16-GPU training job over its department's policy waits for approval, the department admin
   approves it in the inbox, and the member watches it go queued and then running on the real
   simulated cluster on the self-refreshing queue page;
b. a quota request through two steps (department admin, then a platform admin);
c. a loan approved by the lender's admin, visible on both departments' pages;
d. the inbox in Chinese.

World (tests/conftest.py): departments A (sub A1) and B; projects pa, pa1 (A1), pb (B); flavor F
on 2 × 8 GPUs of cluster c1; quota A 8 (A1 4, pa 4; pa1 4), B 8 (pb 8)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs.approvals import approval_policy_set
from jobs.clusters import dispatch
from jobs.clusters.backends.base import NodeInfo
from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from jobs.services import job_submit
from portal.models import ApprovalRequest
from quotas.models import Cluster, Flavor, Loan, Node, QuotaNode
from tests import factories as fx
from tests.waiting import settle

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _english_records(settings):
    # Stored texts (summaries, notifications) are written in the site language; read them in English.
    settings.LANGUAGE_CODE = "en"


def _login(browser_for, world, name):
    return browser_for(world.users[name], f"pw-{name}")


def _row(page, selector: str, text: str):
    return page.locator(selector, has_text=text)


def _cell(page, table: str, row_text: str, column: int) -> str:
    return _row(page, f"{table} tbody tr", row_text).locator("td").nth(column).inner_text().strip()


def _cluster_on(simserver) -> Cluster:
    """Point the world's cluster at the real simulator process and give it the same nodes."""
    cluster = Cluster.objects.get(name="c1")
    cluster.config = {"url": simserver.url}
    cluster.save(update_fields=["config"])
    nodes = Node.objects.filter(cluster=cluster).select_related("flavor").order_by("name")
    simserver.backend().set_inventory(
        [NodeInfo(n.name, n.flavor.name, n.gpu_count, "ready", n.zone, n.spine, n.leaf) for n in nodes]
    )
    return cluster


def _room_for_sixteen(world):
    """All 16 GPUs in A's quota down to project pa1, so the approved job runs in quota."""
    for key, quota in {"B": 0, "pb": 0, "pa": 0, "A": 16, "A1": 16, "pa1": 16}.items():
        QuotaNode.objects.filter(pk=world.quota[key].pk).update(quota=Decimal(quota))


def test_a_big_job_waits_for_approval_then_runs_on_the_cluster(world, browser_for, shot, simserver):
    fx.priority()  # the "training" priority class the form preselects
    _room_for_sixteen(world)
    cluster = _cluster_on(simserver)

    # A platform admin writes A's policy on the policies page: more than 8 cards needs approval.
    admin = _login(browser_for, world, "platform")
    admin.goto(admin.base + "/approval-policies/")
    admin.click("main a:has-text('New policy')")
    admin.select_option("#id_department", label="Dept A (A)")
    admin.fill("#id_max_gpus", "8")
    with admin.expect_navigation():
        admin.click("main button:has-text('Save')")
    assert admin.url.endswith("/approval-policies/")
    assert "Dept A" in admin.inner_text("table.policies")
    shot(admin, "approval-policies")

    # The member submits 2 × 8 GPUs through the submission form: the summary says it needs approval.
    member = _login(browser_for, world, "pa1_member")
    member.goto(member.base + "/jobs/new/")
    member.fill("#id_name", "llm-pretrain")
    member.select_option("#id_project", label="Project a1 (pa1)")
    member.select_option("#id_flavor", label="F")
    member.fill("#id_workers", "2")
    member.fill("#id_gpus_per_worker", "8")
    member.fill("#id_max_runtime_seconds", "7200")
    member.fill("#id_image", "pytorch:2.3")
    member.locator("#id_command").click()  # leaving a field fires "change": live validation
    member.wait_for_selector("article.summary >> text=Needs approval")
    with member.expect_navigation():
        member.click("main form button[type=submit]:has-text('Submit')")
    job = Job.objects.get(name="llm-pretrain")
    assert job.state == "pending_approval"
    assert "Pending approval" in member.inner_text("h1")
    req = ApprovalRequest.objects.get(kind="job", subject_id=job.pk)
    member.goto(member.base + "/jobs/queue/")
    assert "Pending approval" in _row(member, "#queue-table tr", "llm-pretrain").inner_text()

    # The department admin sees the count in the header, opens the inbox and approves.
    dept = _login(browser_for, world, "a_admin")
    assert dept.inner_text("header a.nav-approvals mark.count") == "1"
    dept.click("header a.nav-approvals")
    dept.wait_for_url("**/approvals/")
    assert "llm-pretrain" in dept.inner_text("table.approvals")
    shot(dept, "approvals-inbox")
    dept.click("table.approvals a:has-text('llm-pretrain')")
    dept.wait_for_url(f"**/approvals/{req.pk}/")
    assert "2 workers × 8 GPUs of F" in dept.inner_text("main")
    dept.fill("#id_comment", "fine for this week")
    shot(dept, "approval-detail")
    with dept.expect_navigation():
        dept.click("section.decision button[value=approve]")
    assert f"Request #{req.pk} was approved." in dept.inner_text("main")

    # The member's queue page, without a reload: queued, then running once a real cycle admitted
    # it and it was dispatched to the simulator.
    member.wait_for_selector("#queue-table tr:has-text('llm-pretrain') >> text=Queued")
    schedule_once()
    job.refresh_from_db()
    assert job.state == "admitted", job.state
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    settle(cluster, job, {"running"})
    member.wait_for_selector("#queue-table tr:has-text('llm-pretrain') >> text=Running")
    shot(member, "approval-job-running")


def test_a_quota_request_goes_through_the_department_and_the_platform(world, browser_for, shot):
    Node.objects.create(
        cluster=Cluster.objects.get(name="c1"),
        name="n9",
        flavor=world.F,
        gpu_count=8,
        zone="z",
        spine="s",
        leaf="l9",
    )  # C = 24: the pool can hold B at 12

    # pb's member asks for 12 from the quota tree's "request more" (B itself holds only 8).
    member = _login(browser_for, world, "pb_member")
    member.goto(member.base + "/quotas/?flavor=F")
    _row(member, "table.tree tbody tr", "Project b").locator("a.request-more").click()
    member.wait_for_url("**/quotas/requests/new/**")
    assert member.input_value("#id_quota") == "8"
    member.fill("#id_quota", "12")
    member.fill("#id_reason", "a new detection model")
    shot(member, "quota-request-form")
    with member.expect_navigation():
        member.click("main button:has-text('Send for approval')")
    req = ApprovalRequest.objects.get(kind="quota")
    assert member.url.endswith(f"/approvals/{req.pk}/")
    page = member.inner_text("main")
    assert "8 → 12" in page and "Dept B (B): 8 → 12" in page  # B must grow too
    assert "You cannot approve your own request." in page
    assert member.locator("section.decision button[value=approve]").count() == 0
    shot(member, "approval-detail-own-request")

    # Step 1: B's admin approves from the inbox with the bulk form.
    dept = _login(browser_for, world, "b_admin")
    dept.goto(dept.base + "/approvals/")
    dept.check(f"input[name=ids][value='{req.pk}']")
    dept.fill("#id_bulk_comment", "fine by B")
    with dept.expect_navigation():
        dept.click("main button:has-text('Approve selected')")
    assert f"request #{req.pk} goes to the next approver" in dept.inner_text("main")
    assert QuotaNode.objects.get(pk=world.quota["pb"].pk).quota == 8  # nothing changes yet

    # Step 2: a platform admin, for whom it is now in the inbox.
    admin = _login(browser_for, world, "platform")
    admin.goto(admin.base + "/approvals/")
    admin.click(f"table.approvals a[href='/approvals/{req.pk}/'] >> nth=0")
    admin.wait_for_url(f"**/approvals/{req.pk}/")
    with admin.expect_navigation():
        admin.click("section.decision button[value=approve]")
    assert f"Request #{req.pk} was approved." in admin.inner_text("main")
    assert "fine by B" in admin.inner_text("table.steps")

    member.goto(member.base + "/quotas/?flavor=F")
    assert _cell(member, "table.tree", "Project b", 1) == "12"
    assert _cell(member, "table.tree", "Dept B", 1) == "12"
    shot(member, "quota-tree-after-request")


def test_a_loan_approved_by_the_lender_shows_in_both_departments(world, browser_for, shot):
    borrower = _login(browser_for, world, "a_admin")
    borrower.goto(borrower.base + "/quotas/loans/")
    borrower.click("main a:has-text('Request a loan')")
    borrower.wait_for_url("**/quotas/loans/request/")
    borrower.select_option("#id_owner", label="Dept A (A)")
    borrower.select_option("#id_flavor", label="F")
    borrower.wait_for_function(_LENDERS_ARE, arg=["A1", "B"])  # the list follows the choices
    borrower.select_option("#id_lender", value="B")
    borrower.fill("#id_amount", "4")
    start = timezone.localtime().replace(second=0, microsecond=0)  # in effect from now
    borrower.fill("#id_starts_at", start.strftime("%Y-%m-%dT%H:%M"))
    borrower.fill("#id_ends_at", (start + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M"))
    borrower.fill("#id_reason", "conference deadline")
    shot(borrower, "loan-request-form")
    with borrower.expect_navigation():
        borrower.click("main button:has-text('Send for approval')")
    req = ApprovalRequest.objects.get(kind="loan")
    assert borrower.url.endswith(f"/approvals/{req.pk}/")

    # The lender's admin follows the notification from the bell and approves.
    lender = _login(browser_for, world, "b_admin")
    assert lender.inner_text("header a.bell mark.count") == "1"
    lender.click("header a.bell")
    lender.wait_for_url("**/notifications/")
    assert "asks for your approval" in lender.inner_text("ul.notifications")
    shot(lender, "notifications")
    with lender.expect_navigation():
        lender.click("ul.notifications button:has-text('Open')")
    assert lender.url.endswith(f"/approvals/{req.pk}/")
    assert lender.locator("header a.bell mark.count").count() == 0  # read on the way
    with lender.expect_navigation():
        lender.click("section.decision button[value=approve]")
    loan = Loan.objects.get()
    assert loan.state == "active" and loan.amount == 4

    # Both sides see it: the loans page, and the effective quota on the quota tree.
    for page, own, effective in [(lender, "Dept B", "4"), (borrower, "Dept A", "12")]:
        page.goto(page.base + "/quotas/loans/")
        row = _row(page, "table tbody tr", "conference deadline").inner_text()
        assert "Dept A" in row and "Dept B" in row and "in effect" in row
        page.goto(page.base + "/quotas/?flavor=F")
        assert _cell(page, "table.tree", own, 2) == effective
    shot(borrower, "quota-tree-with-loan")
    borrower.goto(borrower.base + "/notifications/")
    assert "Approved:" in borrower.inner_text("ul.notifications")


_LENDERS_ARE = """codes => JSON.stringify([...document.querySelectorAll('#id_lender option')]
    .map(o => o.value).filter(Boolean)) === JSON.stringify(codes)"""


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_item8_the_loan_form_lists_only_lenders_of_the_flavor_with_their_amounts(
    world, browser_for, shot, lang
):
    """Flavor G: only B holds it, and has lent 3 of its 4 for the coming month. Choosing G lists B alone,
    with 1 lendable; choosing the borrower takes it off the list; the request goes through."""
    g = Flavor.objects.create(name="G", vendor="nvidia", model="G", memory_mib=1024,
                              k8s_resource_name="nvidia.com/gpu")
    lender = QuotaNode.objects.create(flavor=g, department=world.B, quota=Decimal(4))
    QuotaNode.objects.create(flavor=g, department=world.A, quota=Decimal(0))
    other = QuotaNode.objects.create(flavor=g, project=world.pb, quota=Decimal(0))
    now = timezone.now()
    Loan.objects.create(lender=lender, borrower=other, amount=Decimal(3), starts_at=now,
                        ends_at=now + timedelta(days=30), state="active")
    page = _login(browser_for, world, "a_admin")
    if lang != "en":
        page.goto(page.base + "/quotas/loans/request/")
        with page.expect_navigation():
            page.select_option("form.lang-switch select", lang)
    page.goto(page.base + "/quotas/loans/request/")
    page.wait_for_function(_LENDERS_ARE, arg=["A", "A1", "B"])  # F, the default: every holder
    page.select_option("#id_owner", label="Dept A (A)")
    page.wait_for_function(_LENDERS_ARE, arg=["A1", "B"])  # not itself
    page.select_option("#id_flavor", label="G")
    page.wait_for_function(_LENDERS_ARE, arg=["B"])
    label = page.locator("#id_lender option[value=B]").inner_text()
    assert label == ("Dept B (B) — 1 of G lendable" if lang == "en" else "Dept B (B) — 可借出 1 个 G")
    shot(page, f"loan-request-lenders-{lang}")
    page.select_option("#id_lender", value="B")
    page.fill("#id_amount", "1")
    with page.expect_navigation():
        page.click("form.loan-request button[type=submit]")
    request = ApprovalRequest.objects.get(kind="loan")
    assert page.url.endswith(f"/approvals/{request.pk}/")
    assert request.payload["lender"] == lender.pk and request.payload["amount"] == "1"


def test_the_inbox_in_chinese(world, browser_for, shot):
    approval_policy_set(actor=world.users["platform"], department=world.A, max_gpus=2)
    job_submit(
        actor=world.users["pa1_member"],
        project=world.pa1,
        name="zh-train",
        kind="training",
        flavor=world.F,
        priority_class=fx.priority(),
        image="pytorch:2.3",
        gpus_per_worker=4,
        max_runtime_seconds=3600,
    )
    page = _login(browser_for, world, "a_admin")
    page.goto(page.base + "/approvals/")
    with page.expect_navigation():
        page.select_option("form.lang-switch select", "zh-hans")
    assert page.url.endswith("/approvals/")
    assert "仪表盘" in page.locator("header nav").inner_text()
    assert page.evaluate("document.documentElement.lang") == "zh-hans"
    assert "zh-train" in page.inner_text("table.approvals")
    shot(page, "approvals-inbox-zh-hans")
    with page.expect_navigation():
        page.select_option("form.lang-switch select", "en")
    assert "Approvals" in page.locator("header nav").inner_text()

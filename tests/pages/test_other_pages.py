"""Dashboard, loans and priority classes; every page in both languages."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs.models import Job, PriorityClass
from quotas.models import Flavor, Loan, LoanState, QuotaNode

pytestmark = pytest.mark.django_db

PERSONAS = ["platform", "auditor", "a_admin", "b_admin", "a_finance", "pa1_admin", "pa1_member", "pb_member",
            "outsider"]


def test_dashboard_shows_my_jobs_counts_quota_usage_and_the_pool(page_client, world, pa1_job, pb_job):
    node = world.F.nodes.first()
    Job.objects.filter(pk=pa1_job.pk).update(
        state="running", placement=[[[node.pk, g, 1000] for g in range(4)]], on_loan=True
    )
    response = page_client("pa1_member").get("/")
    page = response.content.decode()
    assert "pa1-train" in page and "pb-secret" not in page
    assert response.context["counts"] == {"running": 1}
    rows = {(r["node"].owner.code, r["node"].flavor.name): r for r in response.context["quota_rows"]}
    assert rows[("pa1", "F")]["used"] == 4 and rows[("pa1", "F")]["borrowed"] == 4
    assert response.context["pool"] == [(world.F, Decimal(16), Decimal(4), 0)]  # 0 stranded
    assert "data-plotly=" in page and "plotly-cartesian-4.1.1.min.js" in page
    assert "25%" in page  # 4 of 16 GPUs in use


def test_dashboard_for_an_outsider_has_no_jobs_and_no_quota(page_client, pa1_job):
    response = page_client("outsider").get("/")
    page = response.content.decode()
    assert response.status_code == 200 and "pa1-train" not in page
    assert response.context["quota_rows"] == [] and response.context["counts"] == {}
    assert "No quota visible." in page


@pytest.fixture
def loan(world):
    return Loan.objects.create(
        lender=world.quota["A1"],
        borrower=world.quota["pb"],
        amount=Decimal(2),
        starts_at=timezone.now() - timedelta(hours=1),
        ends_at=timezone.now() + timedelta(days=1),
        state=LoanState.ACTIVE,
        reason="night batch",
    )


@pytest.mark.parametrize("persona", PERSONAS)
def test_loans_page_lists_the_visible_loans(page_client, loan, persona):
    response = page_client(persona).get("/quotas/loans/")
    assert response.status_code == 200
    assert ("night batch" in response.content.decode()) == (persona != "outsider")


def test_loans_page_filters_and_marks_loans_in_effect(page_client, loan):
    client = page_client("platform")
    page = client.get("/quotas/loans/?state=active&flavor=F").content.decode()
    assert "night batch" in page and "in effect" in page
    assert "night batch" not in client.get("/quotas/loans/?state=returned").content.decode()
    assert client.get("/quotas/loans/?state=bogus&flavor=nope&page=x").status_code == 200


@pytest.mark.parametrize("persona", PERSONAS)
def test_priority_classes_are_listed_for_everyone_and_edited_by_platform_admins(page_client, prio, persona):
    client = page_client(persona)
    page = client.get("/priority-classes/").content.decode()
    assert "<code>training</code>" in page
    admin = persona == "platform"
    assert ('href="/priority-classes/new/"' in page) == admin
    assert client.get("/priority-classes/new/").status_code == (200 if admin else 403)
    body = {"name": "urgent", "value": "700", "grace_seconds": "60"}
    response = client.post("/priority-classes/new/", body)
    assert response.status_code == (302 if admin else 403)
    assert PriorityClass.objects.filter(name="urgent").exists() == admin


def test_platform_admin_edits_a_priority_class(page_client, prio):
    client = page_client("platform")
    page = client.get(f"/priority-classes/{prio.pk}/edit/").content.decode()
    assert 'value="training"' in page and "disabled" in page  # the name is fixed
    response = client.post(
        f"/priority-classes/{prio.pk}/edit/",
        {"name": "renamed", "value": "150", "preemptible": "", "grace_seconds": "120", "description": "x"},
    )
    assert response.status_code == 302
    prio.refresh_from_db()
    assert (prio.name, prio.value, prio.preemptible, prio.grace_seconds) == ("training", 150, False, 120)


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "training", "value": "1"}, "name"),  # taken
        ({"name": "Bad Name", "value": "1"}, "name"),
        ({"name": "ok", "value": "9999999"}, "value"),
        ({"name": "ok", "value": "1", "grace_seconds": "-5"}, "grace_seconds"),
    ],
)
def test_bad_priority_class_input_shows_errors_and_writes_nothing(page_client, prio, body, field):
    response = page_client("platform").post("/priority-classes/new/", {"grace_seconds": "30", **body})
    assert response.status_code == 200 and field in response.context["form"].errors
    assert PriorityClass.objects.count() == 1


def test_missing_pages_are_404(page_client, prio):
    client = page_client("platform")
    assert client.get("/jobs/999999/").status_code == 404
    assert client.get("/priority-classes/999999/edit/").status_code == 404


@pytest.mark.parametrize("persona", ["platform", "pa1_member", "outsider"])
def test_every_page_renders_in_chinese(page_client, world, pa1_job, loan, prio, persona):
    client = page_client(persona, language="zh-hans")
    paths = ["/", "/jobs/", "/jobs/queue/", "/jobs/queue/table/", "/jobs/new/", "/quotas/loans/",
             "/priority-classes/", "/quotas/", "/inventory/", "/external-sources/"]
    if persona != "outsider":
        paths.append(f"/jobs/{pa1_job.pk}/")
    if persona == "platform":
        paths += ["/priority-classes/new/", f"/priority-classes/{prio.pk}/edit/"]
    for path in paths:
        response = client.get(path)
        assert response.status_code == 200, path
        if not path.endswith("/table/"):
            assert 'lang="zh-hans"' in response.content.decode(), path
            assert "仪表盘" in response.content.decode(), path  # the nav is already translated
    validate = client.post("/jobs/new/validate/", {"workers": "x"})
    assert validate.status_code == 200


def test_item15_quota_pages_open_on_a_flavor_the_user_holds_quota_in(page_client, world):
    # "A-slice" sorts before F: department A1 holds some, project pa1 holds none.
    slices = Flavor.objects.create(
        name="A-slice", vendor="nvidia", model="A100 1g", memory_mib=10240,
        fraction_numerator=1, fraction_denominator=7, k8s_resource_name="nvidia.com/mig-1g.10gb",
    )
    QuotaNode.objects.create(flavor=slices, department=world.A, quota=Decimal(7))
    QuotaNode.objects.create(flavor=slices, department=world.A1, quota=Decimal(7))
    member = page_client("pa1_member")  # pa1 holds quota of F only
    tree = member.get("/quotas/")
    assert tree.context["flavor"] == world.F
    assert "Project a1" in tree.content.decode()
    assert member.get("/reports/").context["flavor"] == world.F  # the reports' quota chart
    assert member.get("/quotas/?flavor=A-slice").context["flavor"] == slices  # a choice stays
    # B's admin holds nothing of the slices: F too; a platform admin holds nothing itself and
    # sees every node: the first flavor that has quota.
    assert page_client("b_admin").get("/quotas/").context["flavor"] == world.F
    assert page_client("platform").get("/quotas/").context["flavor"] == slices
    assert page_client("platform").get("/reports/").context["flavor"] == slices

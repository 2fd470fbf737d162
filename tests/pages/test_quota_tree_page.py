"""The quota tree page (issue 24 item 6): one flavor or all, usage bars with their figures in text,
over-quota rows marked, and "who borrows from me" within the viewer's scope."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.scheduling.cycle import schedule_once
from quotas.models import Flavor, QuotaNode
from tests import factories as fx


@pytest.fixture
def borrowing(world):
    """pa (quota 4) runs 4 in quota and 2 on loan, from its sibling A1's idle quota."""
    fx.submit(world.pa, world.F, gpus=4, name="pa-in")
    schedule_once()
    loan = fx.submit(world.pa, world.F, gpus=2, name="pa-loan")
    schedule_once()
    loan.refresh_from_db()
    assert loan.on_loan is True
    return loan


def _html(response):
    assert response.status_code == 200
    return response.content.decode()


def test_one_flavor_shows_bars_figures_and_the_over_quota_row(page_client, world, borrowing):
    html = _html(page_client("a_admin").get("/quotas/?flavor=F"))
    assert f'data-node="project-{world.pa.pk}" data-parent="department-{world.A.pk}"' in html
    pa_row = html.split(f'data-node="project-{world.pa.pk}"')[1].split("</tr>")[0]
    assert "over quota" in pa_row
    assert "In quota 4, on loan 2 (of which 2 borrowed from outside), lent 0; quota 4." in pa_row
    a1_row = html.split(f'data-node="department-{world.A1.pk}"')[1].split("</tr>")[0]
    assert "lent 2; quota 4." in a1_row and "who borrows from me (1)" in a1_row
    assert 'data-tree-toggle="department-' in html  # departments fold their subtrees
    assert html.count("over-quota") == 1


def test_item8_every_level_says_who_borrows_from_it_or_nobody(page_client, world, borrowing):
    """pa borrows 2 of A1's idle quota (pa1's, below it): A1 and pa1 name a borrower; A (pa is
    inside it), pa, B and pb say nobody — no row leaves the question open."""
    html = _html(page_client("platform").get("/quotas/?flavor=F"))
    says = {}
    for key, owner in (("department", world.A), ("department", world.A1), ("project", world.pa),
                       ("project", world.pa1), ("department", world.B), ("project", world.pb)):
        row = html.split(f'data-node="{key}-{owner.pk}"')[1].split("</tr>")[0]
        says[owner.code] = ("(1)" if "who borrows from me (1)" in row
                            else "nobody" if "who borrows from me: nobody" in row else "")
    assert says == {"A": "nobody", "A1": "(1)", "pa": "nobody", "pa1": "(1)", "B": "nobody", "pb": "nobody"}
    zh = _html(page_client("platform", "zh-hans").get("/quotas/?flavor=F"))
    assert zh.count("谁在借用我的配额：无") == 4


def test_all_flavors_is_a_grid_of_the_flavors_with_visible_quota(page_client, world, borrowing):
    slices = Flavor.objects.create(name="A-slice", vendor="nvidia", model="A100 1g", memory_mib=10240,
                                   fraction_numerator=1, fraction_denominator=7,
                                   k8s_resource_name="nvidia.com/mig-1g.10gb")
    QuotaNode.objects.create(flavor=slices, department=world.B, quota=Decimal(7))
    Flavor.objects.create(name="Unused", vendor="nvidia", model="X", memory_mib=1, k8s_resource_name="x/gpu")
    html = _html(page_client("platform").get("/quotas/?flavor=all"))
    head = html.split("<thead>")[1].split("</thead>")[0]
    assert ">A-slice</a>" in head and ">F</a>" in head and "Unused" not in head
    b_row = html.split(f'data-node="department-{world.B.pk}"')[1].split("</tr>")[0]
    assert "0 / 7" in b_row and "0 / 8" in b_row
    a1_row = html.split(f'data-node="department-{world.A1.pk}"')[1].split("</tr>")[0]
    assert 'aria-label="no quota"' in a1_row  # A1 holds no slices
    # a member's grid: its own path only, one flavor column
    member = _html(page_client("pb_member").get("/quotas/?flavor=all"))
    assert "Project a" not in member and "A-slice" in member


def test_borrowers_fragment_names_visible_projects_and_counts_the_others(page_client, world, borrowing):
    url = f"/quotas/nodes/{world.quota['A1'].pk}/borrowers/"
    admin = _html(page_client("a_admin").get(url, headers={"HX-Request": "true"}))
    assert "Project a" in admin and f'href="/jobs/{borrowing.pk}/"' in admin
    assert "<html" not in admin  # a fragment
    member_url = f"/quotas/nodes/{world.quota['pa1'].pk}/borrowers/"
    member = _html(page_client("pa1_member").get(member_url))
    assert "Project a<" not in member and f"/jobs/{borrowing.pk}/" not in member
    assert "1 project you cannot see uses 2 (1 on-loan jobs)." in member
    assert page_client("pb_member").get(member_url).status_code == 404
    assert page_client("outsider").get(url).status_code == 404
    assert page_client("platform").get("/quotas/nodes/999999/borrowers/").status_code == 404
    page = _html(page_client("a_admin").get(url))  # without JavaScript: a page of its own
    assert "<html" in page and "Who borrows from Dept A1 (A1) (F)" in page


def test_the_page_reads_a_fixed_number_of_queries(page_client, world, borrowing):
    client = page_client("platform")
    client.get("/quotas/?flavor=all")
    counts = []
    for extra in (0, 6):
        for i in range(extra):
            fx.submit(world.pb, world.F, gpus=1, name=f"more-{i}")
        schedule_once()
        with CaptureQueriesContext(connection) as queries:
            _html(client.get("/quotas/?flavor=all"))
        counts.append(len(queries.captured_queries))
    assert counts[0] == counts[1]


def test_the_page_speaks_chinese(page_client, world, borrowing):
    html = _html(page_client("a_admin", "zh-hans").get("/quotas/?flavor=F"))
    assert "超出配额" in html and "借用中" in html

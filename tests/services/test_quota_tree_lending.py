"""The quota tree's reads (jobs.quota_tree, issue 24 item 6): in-quota / on-loan / borrowed / lent
per node from the scheduler's usage aggregate, who borrows a node's idle quota, and what each
persona may see of the borrowers."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import Job
from jobs.quota_tree import quota_borrowers, quota_grid
from jobs.scheduling.cycle import schedule_once
from tests import factories as fx

D = Decimal


@pytest.fixture
def borrowing(world):
    """C = 16. pa (quota 4) runs 4 in quota and 2 on loan — from its sibling A1's idle quota;
    pb (quota 8) runs 8 in quota and 2 on loan — from A's idle quota, i.e. A1's and pa1's."""
    jobs = {
        "pa_in": fx.submit(world.pa, world.F, gpus=4, name="pa-in"),
        "pb_in": fx.submit(world.pb, world.F, gpus=8, name="pb-in"),
    }
    schedule_once()
    jobs["pa_loan"] = fx.submit(world.pa, world.F, gpus=2, name="pa-loan")
    jobs["pb_loan"] = fx.submit(world.pb, world.F, gpus=2, name="pb-loan")
    schedule_once()
    for job in jobs.values():
        job.refresh_from_db()
    assert {n: (j.state, j.on_loan) for n, j in jobs.items()} == {
        "pa_in": ("admitted", False), "pb_in": ("admitted", False),
        "pa_loan": ("admitted", True), "pb_loan": ("admitted", True),
    }
    return jobs


def _cells(user, flavor):
    grid = quota_grid(user, [flavor])
    return {row.key: row.cells[0] for row in grid["rows"]}


def figures(cell):
    return tuple(int(v) for v in (cell.quota, cell.in_quota, cell.on_loan, cell.borrowed, cell.lent))


def test_borrowed_and_lent_per_node_with_a_project_borrowing_from_a_sibling(world, borrowing):
    cells = _cells(world.users["platform"], world.F)
    #                                       quota in-quota on-loan borrowed lent
    assert figures(cells[("project", world.pa.pk)]) == (4, 4, 2, 2, 0)
    assert figures(cells[("department", world.A1.pk)]) == (4, 0, 0, 0, 4)
    assert figures(cells[("project", world.pa1.pk)]) == (4, 0, 0, 0, 4)
    assert figures(cells[("department", world.A.pk)]) == (8, 4, 2, 0, 2)  # pa borrows inside A
    assert figures(cells[("department", world.B.pk)]) == (8, 8, 2, 2, 0)
    assert figures(cells[("project", world.pb.pk)]) == (8, 8, 2, 2, 0)
    assert cells[("project", world.pa.pk)].over and cells[("project", world.pb.pk)].over
    assert not cells[("department", world.A.pk)].over  # 6 of 8
    assert cells[("project", world.pa1.pk)].lends_to == 2


def test_who_borrows_names_only_projects_the_viewer_sees(world, borrowing):
    pa1_node = world.quota["pa1"].pk
    everything = quota_borrowers(world.users["platform"], pa1_node)
    assert [(r["project"], r["amount"], [j.name for j in r["jobs"]]) for r in everything["rows"]] == [
        (world.pa, D(2), ["pa-loan"]), (world.pb, D(2), ["pb-loan"])]
    assert everything["hidden_projects"] == 0

    a_admin = quota_borrowers(world.users["a_admin"], pa1_node)
    assert [r["project"] for r in a_admin["rows"]] == [world.pa]
    assert (a_admin["hidden_projects"], a_admin["hidden_amount"], a_admin["hidden_jobs"]) == (1, D(2), 1)

    member = quota_borrowers(world.users["pa1_member"], pa1_node)
    assert member["rows"] == [] and (member["hidden_projects"], member["hidden_jobs"]) == (2, 2)

    # A node the viewer does not see: nothing (the page answers 404).
    assert quota_borrowers(world.users["pb_member"], pa1_node) is None
    assert quota_borrowers(world.users["outsider"], pa1_node) is None


def test_the_member_sees_its_path_only(world, borrowing):
    keys = set(_cells(world.users["pa1_member"], world.F))
    assert ("project", world.pb.pk) not in keys and ("department", world.B.pk) not in keys
    assert ("project", world.pa1.pk) in keys


def test_query_count_does_not_depend_on_the_number_of_jobs(world, borrowing):
    user = world.users["platform"]
    quota_grid(user, [world.F])  # the user's scope is read once per request
    with CaptureQueriesContext(connection) as before:
        quota_grid(user, [world.F])
    fx.nodes(world.F, 2)
    for i in range(12):  # more holding jobs (and queued ones) change nothing in the count
        fx.submit(world.pb, world.F, gpus=1, name=f"more-{i}")
    schedule_once()
    assert Job.objects.filter(state="admitted").count() > 8
    with CaptureQueriesContext(connection) as after:
        quota_grid(user, [world.F])
    assert len(after.captured_queries) == len(before.captured_queries)


def test_the_quota_usage_api_adds_the_lending_figures(world, borrowing, api):
    from django.urls import reverse

    body = api(world.users["a_admin"]).get(reverse("api:quota-usage"), {"flavor": "F"}).json()
    rows = {(r["kind"], r["owner_id"]): r for r in body["nodes"]}
    pa, a1 = rows[("project", world.pa.pk)], rows[("department", world.A1.pk)]
    assert (pa["on_loan"], pa["borrowed_from_outside"], pa["lent_to_outside"], pa["over_quota"]) == (
        "2.000", "2.000", "0.000", True)
    assert (a1["lent_to_outside"], a1["borrowers"], a1["over_quota"]) == ("4.000", 2, False)
    assert ("department", world.B.pk) not in rows  # the scope, as before

"""A reservation request approved, in a real browser (issue 35 "Browser", DESIGN §17), in English and
Chinese: a project admin asks for 8 GPUs of F for project pa1 on the reservations page, a platform
admin approves it on the request's page, and the project admin finds it on the reservations page;
then a platform admin puts a node under maintenance and holds pa1's queue there.

World (tests/conftest.py): departments A (sub A1) and B; projects pa, pa1 (A1), pb (B); flavor F on
2 × 8 GPUs of cluster c1."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.reservation_models import QueueSetting, QueueStateEvent, Reservation
from portal.models import ApprovalRequest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _login(browser_for, world, name, lang):
    return browser_for(world.users[name], f"pw-{name}", lang)


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_a_reservation_request_approved(world, browser_for, shot, lang):
    asker = _login(browser_for, world, "pa1_admin", lang)
    asker.goto(asker.base + "/reservations/")
    assert asker.evaluate("document.documentElement.lang") == lang
    asker.select_option("#id_project", label=str(world.pa1))
    asker.select_option("#id_flavor", label="F")
    asker.fill("#id_gpus", "8")
    start = timezone.localtime().replace(second=0, microsecond=0) + timedelta(hours=1)
    asker.fill("#id_starts_at", start.strftime("%Y-%m-%dT%H:%M"))
    asker.fill("#id_ends_at", (start + timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M"))
    asker.fill("#id_reason", "camera-ready deadline")
    shot(asker, f"reservation-request-form-{lang}")
    with asker.expect_navigation():
        asker.click("form.reservation-request button[type=submit]")
    req = ApprovalRequest.objects.get(kind="reservation")
    assert asker.url.endswith(f"/approvals/{req.pk}/")
    assert not Reservation.objects.exists()

    admin = _login(browser_for, world, "platform", lang)
    admin.goto(admin.base + f"/approvals/{req.pk}/")
    shot(admin, f"reservation-request-decision-{lang}")
    with admin.expect_navigation():
        admin.click("section.decision button[value=approve]")
    resv = Reservation.objects.get()
    assert (resv.project_id, resv.gpus, resv.state, resv.request_id) == (world.pa1.pk, 8, "active", req.pk)

    asker.goto(asker.base + "/reservations/")
    row = asker.locator("table.reservations tbody tr", has_text="camera-ready deadline").inner_text()
    assert "pa1" in row and "8 × F" in row
    shot(asker, f"reservation-approved-{lang}")
    # Another tenant does not see it.
    other = _login(browser_for, world, "pb_member", lang)
    other.goto(other.base + "/reservations/")
    assert "camera-ready deadline" not in other.inner_text("table.reservations")
    asker.click("table.reservations tbody tr:has-text('camera-ready deadline') button[type=submit]")
    asker.wait_for_selector("table.reservations tbody tr:has-text('camera-ready deadline')", state="detached")
    assert Reservation.objects.get().state == "cancelled"


def test_maintenance_and_a_queue_hold_from_the_page(world, browser_for, shot):
    admin = _login(browser_for, world, "platform", "en")
    admin.goto(admin.base + "/reservations/")
    start = timezone.localtime().replace(second=0, microsecond=0) + timedelta(hours=2)
    admin.fill("form.maintenance #id_nodes", "n0")
    admin.fill("form.maintenance #id_starts_at", start.strftime("%Y-%m-%dT%H:%M"))
    admin.fill("form.maintenance #id_ends_at", (start + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"))
    admin.fill("form.maintenance #id_reason", "PSU swap")
    with admin.expect_navigation():
        admin.click("form.maintenance button[type=submit]")
    row = admin.locator("table.reservations tbody tr", has_text="PSU swap").inner_text()
    assert "Maintenance" in row and "n0" in row
    # A member sees the maintenance, without a way to cancel it.
    member = _login(browser_for, world, "pa1_member", "en")
    member.goto(member.base + "/reservations/")
    member_row = member.locator("table.reservations tbody tr", has_text="PSU swap")
    assert member_row.count() == 1 and member_row.locator("button").count() == 0
    admin.select_option("form.queue-state #id_queue", label=f"{world.pa1.name} ({world.pa1.code})")
    admin.select_option("form.queue-state #id_state", value="hold")
    admin.fill("form.queue-state #id_reason", "budget review")
    with admin.expect_navigation():
        admin.click("form.queue-state button[type=submit]")
    assert "On hold" in admin.inner_text("ul.queues-held")
    assert QueueSetting.objects.get(project=world.pa1).state == "hold"
    assert QueueStateEvent.objects.get().reason == "budget review"
    shot(admin, "reservations-maintenance-and-hold")

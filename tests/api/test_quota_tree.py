from datetime import timedelta
from decimal import Decimal

from django.urls import reverse
from django.utils import timezone

from quotas.models import Loan, LoanState


def test_quota_tree_shows_effective_quota_within_the_scope(world, api):
    now = timezone.now()
    Loan.objects.create(lender=world.quota["B"], borrower=world.quota["A"], amount=Decimal(2),
                        starts_at=now - timedelta(hours=1), ends_at=now + timedelta(hours=1),
                        state=LoanState.ACTIVE)
    body = api(world.users["platform"]).get(reverse("api:quota-tree"), {"flavor": "F"}).json()
    assert body["capacity"] == "16" or Decimal(body["capacity"]) == 16
    rows = {(r["kind"], r["owner_id"]): r for r in body["nodes"]}
    assert len(rows) == 6
    a, b = rows[("department", world.A.pk)], rows[("department", world.B.pk)]
    assert (Decimal(a["quota"]), Decimal(a["effective_quota"])) == (8, 10)
    assert (Decimal(b["quota"]), Decimal(b["effective_quota"])) == (8, 6)
    assert rows[("project", world.pa1.pk)]["parent"] == f"department:{world.A1.pk}"
    assert [r["depth"] for r in body["nodes"]][:1] == [0]

    scoped = api(world.users["a_admin"]).get(reverse("api:quota-tree"), {"flavor": "F"}).json()
    assert {(r["kind"], r["owner_id"]) for r in scoped["nodes"]} == {
        ("department", world.A.pk), ("department", world.A1.pk), ("project", world.pa.pk),
        ("project", world.pa1.pk)}

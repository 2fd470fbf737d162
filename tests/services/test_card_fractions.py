"""Issue 19, item 7: a flavor's card fraction is exact (numerator / denominator), so seven 1/7
MIG slices for an hour are exactly 3600 card-seconds of one card — not 0.14285714 × 7."""

from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from billing import pricing, settlement
from jobs.approvals import job_cards
from jobs.selectors import card_hours_estimate
from quotas.admin import FlavorAdminForm
from quotas.effective import Limits
from quotas.fractions import card_seconds, parse_card_fraction
from quotas.models import Flavor


def _flavor(name="A100-1g", top=1, bottom=7, **more):
    return Flavor.objects.create(
        name=name, vendor="nvidia", model="A100 MIG", memory_mib=9728,
        fraction_numerator=top, fraction_denominator=bottom, k8s_resource_name="nvidia.com/mig-1g.10gb",
        **more,
    )


def test_seven_slices_for_an_hour_are_exactly_3600_card_seconds_of_one_card(db):
    mig = _flavor()
    assert card_seconds(1, 7, mig.fraction_numerator, mig.fraction_denominator, None, 3600) == Decimal(3600)
    assert card_seconds(7, 1, 1, 7, None, Decimal("3600.000000")) == Decimal("3600.000000")
    assert job_cards(mig, 1, 7, None) == Decimal(1)
    assert card_hours_estimate(flavor=mig, workers=1, gpus_per_worker=7, gpu_milli=None,
                               runtime_seconds=3600) == Decimal("1.00")
    # A 3g.40gb slice is 3/7; a shared request of 250 milli of it is 3/28 of a card.
    assert card_seconds(1, 1, 3, 7, 250, 2800) == Decimal(300)


def test_item7_reserved_fee_of_seven_slices_is_one_card_hour_exactly(db):
    """Lender credits and reserved fees price quota × fraction × 3600 per hour: a quota of 7 slices
    of 1/7 is 3600 card-seconds (old code: 0.14285714 × 7 × 3600 = 3599.999928)."""
    mig = _flavor()
    hour = datetime(2026, 3, 1, 10, tzinfo=ZoneInfo("Asia/Shanghai"))
    schedules = {(mig.pk, "reserved"): pricing.periods_from([(hour, Decimal(5), None)])}
    limits = {1: Limits(Decimal(7), None, None)}
    [usage] = settlement._reserved(mig.pk, hour, limits, mig.fraction, schedules)
    assert usage.card_seconds == Decimal("3600.000000")


def test_card_fraction_is_derived_by_the_database_from_the_exact_fraction(db):
    three = _flavor("A100-3g", 3, 7)
    three.refresh_from_db()
    assert three.card_fraction == Decimal("0.42857143")
    assert three.fraction == Fraction(3, 7) and three.fraction_label == "3/7"
    assert Flavor.objects.filter(card_fraction__lt=1).get() == three  # still queryable for display


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1/7", Fraction(1, 7)), (" 3 / 7 ", Fraction(3, 7)), ("1", Fraction(1)), ("0.5", Fraction(1, 2)),
     ("0.14285714", Fraction(1, 7)), ("2/14", Fraction(1, 7))],
)
def test_parsing_accepts_fractions_and_their_decimals(text, expected):
    assert parse_card_fraction(text) == expected


def _post(client, **body):
    base = {"name": "MIG-x", "vendor": "nvidia", "model": "A100 MIG", "memory_mib": 9728,
            "k8s_resource_name": "nvidia.com/mig-1g.10gb"}
    return client.post(reverse("api:flavor-list"), base | body, format="json")


def test_item7_api_takes_a_fraction_as_text_or_as_numerator_and_denominator(world, api):
    client = api(world.users["platform"])
    response = _post(client, card_fraction="3/7")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["fraction_numerator"], body["fraction_denominator"]) == (3, 7)
    assert body["card_fraction"] == "0.42857143"
    response = _post(client, name="MIG-y", fraction_numerator=2, fraction_denominator=14)
    assert response.status_code == 201, response.content
    assert (response.json()["fraction_numerator"], response.json()["fraction_denominator"]) == (1, 7)
    patched = client.patch(
        reverse("api:flavor-detail", args=[response.json()["id"]]), {"fraction_numerator": 2}, format="json"
    )
    assert patched.status_code == 200 and patched.json()["card_fraction"] == "0.28571429"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"card_fraction": "1/0"}, "card_fraction"),
        ({"card_fraction": "abc"}, "card_fraction"),
        ({"card_fraction": "0.123"}, "card_fraction"),  # no small fraction: ask for 1/7 style
        ({"card_fraction": "8/7"}, "card_fraction"),
        ({"card_fraction": "0"}, "card_fraction"),
        ({"card_fraction": "1/65"}, "card_fraction"),
        ({"card_fraction": None}, "card_fraction"),
        ({"fraction_numerator": 0, "fraction_denominator": 7}, "fraction_numerator"),
        ({"fraction_numerator": 8, "fraction_denominator": 7}, "card_fraction"),
        ({"card_fraction": "1/7", "fraction_numerator": 1}, "card_fraction"),
    ],
)
def test_item7_bad_fractions_are_a_400_naming_the_field(world, api, body, field):
    response = _post(api(world.users["platform"]), **body)
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not Flavor.objects.filter(name="MIG-x").exists()


def test_item7_admin_form_takes_one_fraction(db):
    data = {"name": "MIG-z", "vendor": "nvidia", "model": "A100 MIG", "memory_mib": 9728,
            "fraction": "1/7", "k8s_resource_name": "nvidia.com/mig-1g.10gb", "pool_overcommit_ratio": "1",
            "active": "on"}
    form = FlavorAdminForm(data)
    assert form.is_valid(), form.errors
    flavor = form.save()
    assert (flavor.fraction_numerator, flavor.fraction_denominator) == (1, 7)
    assert FlavorAdminForm(instance=flavor).initial["fraction"] == "1/7"
    bad = FlavorAdminForm(data | {"name": "MIG-w", "fraction": "one seventh"})
    assert not bad.is_valid() and "fraction" in bad.errors


@pytest.mark.django_db(transaction=True)
def test_item7_migration_converts_the_old_decimals_to_fractions():
    executor = MigrationExecutor(connection)
    executor.migrate([("quotas", "0001_initial")])
    old = executor.loader.project_state([("quotas", "0001_initial")]).apps.get_model("quotas", "Flavor")
    values = {"whole": "1", "slice": "0.14285714", "three": "0.42857143", "half": "0.50000000",
              "quarter": "0.25", "odd": "0.33333333"}
    for name, value in values.items():
        old.objects.create(name=name, vendor="nvidia", model="m", memory_mib=1, card_fraction=Decimal(value),
                           k8s_resource_name="nvidia.com/gpu")
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    got = {f.name: (f.fraction_numerator, f.fraction_denominator, f.card_fraction)
           for f in Flavor.objects.all()}
    assert got == {
        "whole": (1, 1, Decimal("1.00000000")),
        "slice": (1, 7, Decimal("0.14285714")),
        "three": (3, 7, Decimal("0.42857143")),
        "half": (1, 2, Decimal("0.50000000")),
        "quarter": (1, 4, Decimal("0.25000000")),
        "odd": (1, 3, Decimal("0.33333333")),
    }

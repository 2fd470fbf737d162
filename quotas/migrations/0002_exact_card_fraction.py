"""Issue 19, item 7: a flavor's card fraction becomes exact (numerator / denominator); the old
8-place decimal survives as a column the database derives from them."""

from decimal import Decimal
from fractions import Fraction

import django.core.validators
from django.db import migrations, models
from django.db.models import F, Q
from django.db.models.functions import Cast


def to_fraction(apps, schema_editor):
    # The nearest fraction with a denominator of at most 64 (0.14285714 → 1/7, 0.42857143 → 3/7);
    # the logic is copied here, not imported, so the migration never changes with the app.
    Flavor = apps.get_model("quotas", "Flavor")
    for flavor in Flavor.objects.all():
        value = Fraction(str(flavor.card_fraction)).limit_denominator(64)
        if not 0 < value <= 1:
            value = Fraction(1)  # the old check constraint kept 0 < f ≤ 1; a safety net only
        Flavor.objects.filter(pk=flavor.pk).update(
            fraction_numerator=value.numerator, fraction_denominator=value.denominator
        )


def to_decimal(apps, schema_editor):
    Flavor = apps.get_model("quotas", "Flavor")
    for flavor in Flavor.objects.all():
        value = Decimal(flavor.fraction_numerator) / Decimal(flavor.fraction_denominator)
        Flavor.objects.filter(pk=flavor.pk).update(card_fraction=value.quantize(Decimal("0.00000001")))


RANGE = [django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(64)]


class Migration(migrations.Migration):
    dependencies = [("quotas", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="flavor",
            name="fraction_numerator",
            field=models.PositiveSmallIntegerField(
                default=1, validators=RANGE, verbose_name="card fraction numerator"
            ),
        ),
        migrations.AddField(
            model_name="flavor",
            name="fraction_denominator",
            field=models.PositiveSmallIntegerField(
                default=1, validators=RANGE, verbose_name="card fraction denominator"
            ),
        ),
        migrations.RunPython(to_fraction, to_decimal),
        migrations.RemoveConstraint(model_name="flavor", name="flavor_fraction_range"),
        migrations.RemoveField(model_name="flavor", name="card_fraction"),
        migrations.AddField(
            model_name="flavor",
            name="card_fraction",
            field=models.GeneratedField(
                db_persist=True,
                expression=Cast(
                    Cast("fraction_numerator", models.DecimalField(max_digits=20, decimal_places=10))
                    / F("fraction_denominator"),
                    models.DecimalField(max_digits=10, decimal_places=8),
                ),
                output_field=models.DecimalField(max_digits=10, decimal_places=8),
                verbose_name="card fraction",
            ),
        ),
        migrations.AddConstraint(
            model_name="flavor",
            constraint=models.CheckConstraint(
                condition=Q(fraction_numerator__gte=1)
                & Q(fraction_numerator__lte=F("fraction_denominator"))
                & Q(fraction_denominator__lte=64),
                name="flavor_fraction_range",
            ),
        ),
    ]

# Issue 23 (DESIGN §14): normalised card-hours. The ledger snapshots the flavor's relative throughput
# when a row is metered (existing rows: 1.0, the only value profiles had); statement lines carry the
# normalised sums; a statement records whether it was priced on them.

from decimal import Decimal
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0007_manual_adjustments"),
    ]

    operations = [
        migrations.AddField(
            model_name="statement",
            name="priced_normalised",
            field=models.BooleanField(
                db_default=False, default=False, verbose_name="priced per normalised card-hour"
            ),
        ),
        migrations.AddField(
            model_name="statementline",
            name="normalised_card_hours",
            field=models.DecimalField(blank=True, decimal_places=6, max_digits=20, null=True),
        ),
        migrations.AddField(
            model_name="statementline",
            name="normalised_card_seconds",
            field=models.DecimalField(blank=True, decimal_places=9, max_digits=26, null=True),
        ),
        migrations.AddField(
            model_name="usagerecord",
            name="relative_throughput",
            field=models.DecimalField(
                db_default=Decimal("1"),
                decimal_places=3,
                default=Decimal("1"),
                max_digits=6,
                verbose_name="relative throughput",
            ),
        ),
    ]

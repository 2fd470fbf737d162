# Issue 33 item 5 (DESIGN §15 "Metering"): core-seconds and MiB-seconds in the ledger beside card-seconds,
# and the part beyond the share the cards include; their daily sums; rates per core-hour / GiB-hour of
# that part; statement lines that bill it. Existing ledger and daily rows: 0 (the meter did not record
# CPU or memory before; db_default, so no row is rewritten and the append-only trigger is not fired);
# existing rates and lines: card.

import django.core.validators
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0011_month_close_runs'),
        ('jobs', '0026_whole_machine'),
        ('portal', '0013_user_directory_synced_at_label'),
        ('quotas', '0006_whole_machine'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='rate',
            options={'ordering': ['flavor_id', 'tier', 'resource', 'valid_from'], 'verbose_name': 'rate', 'verbose_name_plural': 'rates'},
        ),
        migrations.RemoveConstraint(
            model_name='rate',
            name='rate_unique_start',
        ),
        migrations.AddField(
            model_name='rate',
            name='resource',
            field=models.CharField(choices=[('card', 'card-hours'), ('core', 'core-hours beyond the share'), ('gib', 'GiB-hours beyond the share')], db_default='card', default='card', max_length=4, verbose_name='priced per'),
        ),
        migrations.AddField(
            model_name='statementline',
            name='core_hours',
            field=models.DecimalField(blank=True, decimal_places=6, max_digits=20, null=True),
        ),
        migrations.AddField(
            model_name='statementline',
            name='core_seconds',
            field=models.DecimalField(blank=True, decimal_places=6, max_digits=22, null=True),
        ),
        migrations.AddField(
            model_name='statementline',
            name='gib_hours',
            field=models.DecimalField(blank=True, decimal_places=6, max_digits=20, null=True),
        ),
        migrations.AddField(
            model_name='statementline',
            name='mib_seconds',
            field=models.DecimalField(blank=True, decimal_places=6, max_digits=26, null=True),
        ),
        migrations.AddField(
            model_name='statementline',
            name='resource',
            field=models.CharField(choices=[('card', 'card-hours'), ('core', 'core-hours beyond the share'), ('gib', 'GiB-hours beyond the share')], db_default='card', default='card', max_length=4),
        ),
        migrations.AddField(
            model_name='usageday',
            name='core_seconds',
            field=models.DecimalField(db_default=Decimal('0'), decimal_places=6, default=Decimal('0'), max_digits=22),
        ),
        migrations.AddField(
            model_name='usageday',
            name='extra_core_seconds',
            field=models.DecimalField(db_default=Decimal('0'), decimal_places=6, default=Decimal('0'), max_digits=22),
        ),
        migrations.AddField(
            model_name='usageday',
            name='extra_mib_seconds',
            field=models.DecimalField(db_default=Decimal('0'), decimal_places=6, default=Decimal('0'), max_digits=26),
        ),
        migrations.AddField(
            model_name='usageday',
            name='mib_seconds',
            field=models.DecimalField(db_default=Decimal('0'), decimal_places=6, default=Decimal('0'), max_digits=26),
        ),
        migrations.AddField(
            model_name='usagerecord',
            name='core_seconds',
            field=models.DecimalField(db_default=Decimal('0'), decimal_places=6, default=Decimal('0'), max_digits=22, verbose_name='core-seconds'),
        ),
        migrations.AddField(
            model_name='usagerecord',
            name='extra_core_seconds',
            field=models.DecimalField(db_default=Decimal('0'), decimal_places=6, default=Decimal('0'), max_digits=22, verbose_name='core-seconds beyond the share'),
        ),
        migrations.AddField(
            model_name='usagerecord',
            name='extra_mib_seconds',
            field=models.DecimalField(db_default=Decimal('0'), decimal_places=6, default=Decimal('0'), max_digits=26, verbose_name='MiB-seconds beyond the share'),
        ),
        migrations.AddField(
            model_name='usagerecord',
            name='mib_seconds',
            field=models.DecimalField(db_default=Decimal('0'), decimal_places=6, default=Decimal('0'), max_digits=26, verbose_name='MiB-seconds'),
        ),
        migrations.AlterField(
            model_name='rate',
            name='price',
            field=models.DecimalField(decimal_places=4, max_digits=12, validators=[django.core.validators.MinValueValidator(0)], verbose_name='price per unit-hour'),
        ),
        migrations.AddConstraint(
            model_name='rate',
            constraint=models.UniqueConstraint(fields=('flavor', 'tier', 'resource', 'valid_from'), name='rate_unique_start'),
        ),
        migrations.AddConstraint(
            model_name='usagerecord',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('core_seconds__gte', models.F('extra_core_seconds')), ('extra_core_seconds__gte', 0), ('extra_mib_seconds__gte', 0), ('mib_seconds__gte', models.F('extra_mib_seconds')), ('reverses__isnull', True)), models.Q(('core_seconds__lte', models.F('extra_core_seconds')), ('extra_core_seconds__lte', 0), ('extra_mib_seconds__lte', 0), ('mib_seconds__lte', models.F('extra_mib_seconds')), ('reverses__isnull', False)), _connector='OR'), name='usage_machine_charge_positive_reversal_negative'),
        ),
    ]

"""Events get two clocks (DESIGN §7 "Facts and corrections"): ``at`` becomes ``occurred_at`` (the
backend's time where it reports one, ``time_source`` says whose), beside ``recorded_at`` and
``recorded_xid`` (when and in which transaction the portal wrote the row; the meter's cursor).
Rows written before this migration were recorded when they occurred, by the portal's clock."""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0011_merge_priority_rules_and_event_messages"),
    ]

    operations = [
        migrations.RenameField(model_name="jobevent", old_name="at", new_name="occurred_at"),
        # PostgreSQL's indexes follow the renamed column; only Django's record of them changes.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="jobevent", name="jobs_jobeve_job_id_86b84e_idx"),
                migrations.RemoveIndex(model_name="jobevent", name="jobs_jobeve_kind_fe1fff_idx"),
                migrations.AddIndex(
                    model_name="jobevent",
                    index=models.Index(fields=["job", "occurred_at"], name="jobs_jobeve_job_id_86b84e_idx"),
                ),
                migrations.AddIndex(
                    model_name="jobevent",
                    index=models.Index(fields=["kind", "occurred_at"], name="jobs_jobeve_kind_fe1fff_idx"),
                ),
            ]
        ),
        migrations.AlterField(
            model_name="jobevent",
            name="occurred_at",
            field=models.DateTimeField(verbose_name="occurred at"),
        ),
        migrations.AlterModelOptions(
            name="jobevent",
            options={
                "ordering": ["occurred_at", "id"],
                "verbose_name": "job event",
                "verbose_name_plural": "job events",
            },
        ),
        migrations.AddField(
            model_name="jobevent",
            name="recorded_at",
            field=models.DateTimeField(
                db_default=django.db.models.functions.datetime.Now(), editable=False, verbose_name="recorded at"
            ),
        ),
        migrations.AddField(
            model_name="jobevent",
            name="recorded_xid",
            field=models.BigIntegerField(db_default=models.Func(function="txid_current"), editable=False),
        ),
        migrations.AddField(
            model_name="jobevent",
            name="time_source",
            field=models.CharField(
                choices=[
                    ("portal", "portal clock"),
                    ("simulator", "simulator"),
                    ("slurm", "Slurm (sacct)"),
                    ("kubernetes", "Kubernetes (container status)"),
                ],
                db_default="portal",
                max_length=12,
                verbose_name="time source",
            ),
        ),
        # Old rows: recorded when they occurred.
        migrations.RunSQL("UPDATE jobs_jobevent SET recorded_at = occurred_at", migrations.RunSQL.noop),
        migrations.AddIndex(
            model_name="jobevent",
            index=models.Index(fields=["recorded_xid"], name="jobevent_recorded_xid"),
        ),
    ]

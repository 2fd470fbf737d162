"""The external-job models join the `native` app (issue 31). State only: the tables already exist
(jobs 0013) and keep their names (``db_table``), so this migration runs no SQL; jobs 0024 removes
the same models from the `jobs` app's state."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("jobs", "0023_advisor_to_whatif"),
        ('portal', '0011_approval_kind_rule_change'),
        ('quotas', '0005_nodes_node_hold_events'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='ExternalSource',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('kind', models.CharField(choices=[('slurm_account', 'Slurm account'), ('k8s_namespace', 'Kubernetes namespace')], max_length=20, verbose_name='kind')),
                        ('name', models.CharField(max_length=100, verbose_name='name')),
                        ('first_seen_at', models.DateTimeField(auto_now_add=True, verbose_name='first seen')),
                        ('last_seen_at', models.DateTimeField(blank=True, null=True, verbose_name='last seen')),
                        ('mapped_at', models.DateTimeField(blank=True, null=True, verbose_name='mapped')),
                        ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='external_sources', to='quotas.cluster')),
                        ('mapped_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('project', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='external_sources', to='portal.project', verbose_name='project')),
                    ],
                    options={
                        'verbose_name': 'external source',
                        'verbose_name_plural': 'external sources',
                        'db_table': 'jobs_externalsource',
                        'ordering': ['cluster', 'kind', 'name'],
                    },
                ),
                migrations.CreateModel(
                    name='ExternalObservation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('backend_id', models.CharField(max_length=100)),
                        ('record', models.JSONField()),
                        ('observed_at', models.DateTimeField(auto_now=True)),
                        ('source', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='observations', to='native.externalsource')),
                    ],
                    options={
                        'db_table': 'jobs_externalobservation',
                    },
                ),
                migrations.CreateModel(
                    name='ExternalCursor',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('kind', models.CharField(max_length=20)),
                        ('value', models.CharField(max_length=200)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='quotas.cluster')),
                    ],
                    options={
                        'db_table': 'jobs_externalcursor',
                        'constraints': [models.UniqueConstraint(fields=('cluster', 'kind'), name='external_cursor_unique')],
                    },
                ),
                migrations.AddConstraint(
                    model_name='externalsource',
                    constraint=models.UniqueConstraint(fields=('cluster', 'kind', 'name'), name='external_source_unique'),
                ),
                migrations.AddConstraint(
                    model_name='externalobservation',
                    constraint=models.UniqueConstraint(fields=('source', 'backend_id'), name='external_observation_unique'),
                ),
            ],
            database_operations=[],
        ),
    ]

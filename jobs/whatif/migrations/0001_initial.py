"""The advisor's models join the `whatif` app (issue 31). State only: the tables already exist
(jobs 0017, 0020) and keep their names (``db_table``), so this migration runs no SQL; jobs 0023
removes the same models from the `jobs` app's state."""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("jobs", "0022_gpu_sample_hours"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='AdvisorCandidate',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('number', models.PositiveIntegerField()),
                        ('params', models.JSONField()),
                        ('inputs', models.JSONField()),
                        ('state', models.CharField(choices=[('queued', 'queued'), ('running', 'running'), ('done', 'done'), ('failed', 'failed')], default='queued', max_length=10)),
                        ('attempt', models.PositiveIntegerField(default=0)),
                        ('runs', models.PositiveIntegerField(default=0)),
                        ('enqueued_at', models.DateTimeField(blank=True, null=True)),
                        ('heartbeat_at', models.DateTimeField(blank=True, null=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('result', models.JSONField(blank=True, null=True)),
                        ('objective', models.FloatField(blank=True, null=True)),
                        ('feasible', models.BooleanField(null=True)),
                        ('verdict', models.JSONField(blank=True, null=True)),
                        ('error', models.TextField(blank=True)),
                    ],
                    options={
                        'db_table': 'jobs_advisorcandidate',
                        'ordering': ['search', 'number'],
                    },
                ),
                migrations.CreateModel(
                    name='AdvisorSearch',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('scenario', models.JSONField()),
                        ('bounds', models.JSONField()),
                        ('seed', models.PositiveIntegerField()),
                        ('budget', models.PositiveIntegerField(validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(2000)])),
                        ('in_flight', models.PositiveSmallIntegerField(default=2, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(64)])),
                        ('p95_bound', models.FloatField(default=1.5)),
                        ('p95_floor_s', models.FloatField(default=60.0)),
                        ('projects', models.JSONField(default=list)),
                        ('state', models.CharField(choices=[('queued', 'queued'), ('running', 'running'), ('done', 'done'), ('failed', 'failed'), ('cancelled', 'cancelled')], default='queued', max_length=10)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('error', models.TextField(blank=True)),
                        ('created_by', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'verbose_name': 'advisor search',
                        'verbose_name_plural': 'advisor searches',
                        'db_table': 'jobs_advisorsearch',
                        'ordering': ['-id'],
                    },
                ),
                migrations.CreateModel(
                    name='AdvisorHistoryData',
                    fields=[
                        ('search', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='history_data', serialize=False, to='whatif.advisorsearch')),
                        ('files', models.JSONField()),
                    ],
                    options={
                        'db_table': 'jobs_advisorhistorydata',
                    },
                ),
                migrations.CreateModel(
                    name='AdvisorEvent',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('at', models.DateTimeField(auto_now_add=True)),
                        ('from_state', models.CharField(max_length=10)),
                        ('to_state', models.CharField(max_length=10)),
                        ('reason', models.CharField(blank=True, max_length=200)),
                        ('candidate', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='whatif.advisorcandidate')),
                        ('search', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='events', to='whatif.advisorsearch')),
                    ],
                    options={
                        'db_table': 'jobs_advisorevent',
                        'ordering': ['id'],
                    },
                ),
                migrations.AddField(
                    model_name='advisorcandidate',
                    name='search',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='candidates', to='whatif.advisorsearch'),
                ),
                migrations.AddIndex(
                    model_name='advisorcandidate',
                    index=models.Index(fields=['state', 'heartbeat_at'], name='advisor_candidate_state'),
                ),
                migrations.AddConstraint(
                    model_name='advisorcandidate',
                    constraint=models.UniqueConstraint(fields=('search', 'number'), name='advisor_candidate_number'),
                ),
            ],
            database_operations=[],
        ),
    ]

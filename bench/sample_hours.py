"""The usage explorer's utilisation from GPU samples: every sample of the range against each job's
hourly sums (``jobs.GpuSampleHour``, issue 24). Prints ONE JSON object. Not a timed test.

    python bench/sample_hours.py                  # 1,400 jobs × 1,440 minutes = 2,016,000 samples
    python bench/sample_hours.py --jobs 200

The demo centre (``seed_demo``) gets ``--jobs`` running jobs, each with a sample per minute of one
UTC day, loaded by one ``INSERT … SELECT`` (``load_s``: the triggers recompute every hour it
touched; ``rebuild_s``: the repair, ``jobs.sample_hours.rebuild``). Then, medians of ``--repeat``:

* ``raw_ms``: the explorer's query before the roll-up (every sample of the range, kept here as
  the reference) over that day, by project and user;
* ``rollup_ms``: ``billing.usage._samples`` over the same day (whole UTC hours: no sample read);
* ``edges_ms``: ``_samples`` over an Asia/Kolkata day (+05:30: the half hours at its edges read
  from the samples), and ``edges_raw_ms`` the reference over it;
* ``equal``: both ranges' figures equal to the reference's (every row, the total);
* ``poll_ms`` / ``poll_untriggered_ms``: the poller's statement (``jobs.clusters.metrics.upsert_samples``:
  one upsert of every job's sample) for ``--poll`` jobs' next minute, with and without the
  triggers; ``overwrite_ms``: the same minutes again (each row an overwrite). Medians too.
  ``per_row_*``: the same by the poller's statement before (an upsert per job by
  ``executemany``: each fires the triggers).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratchdb import scratch_django

DAY = datetime(2026, 11, 5, tzinfo=UTC)
KOLKATA_DAY = datetime(2026, 11, 5, tzinfo=ZoneInfo("Asia/Kolkata")).astimezone(UTC)
GROUP_BY = ("project", "user")

# A sample per job and minute of the day, uneven utilisations; the jobs' own GPU counts.
_LOAD = """
INSERT INTO jobs_jobgpusample (job_id, minute, gpu_util_pct, fb_used_mib, gpus)
SELECT j.id, %(day)s + m * interval '1 minute', ((j.id * 7919 + m * 37) %% 1000) / 10.0, 1024,
       j.gpus_per_worker
FROM jobs_job j CROSS JOIN generate_series(0, 1439) m
WHERE j.name LIKE 'samples-%%'
"""


def _jobs(count: int) -> None:
    from django.core.management import call_command
    from django.utils import timezone

    from jobs.models import Job, PriorityClass
    from portal.models import Project, User
    from quotas.models import QuotaNode

    call_command("seed_demo", verbosity=0, stdout=io.StringIO())  # stdout carries only the JSON
    quotas = list(QuotaNode.objects.filter(project__isnull=False).select_related("flavor", "project"))
    users = list(User.objects.filter(memberships__isnull=False).distinct())
    classes = list(PriorityClass.objects.all())
    now = timezone.now()
    Job.objects.bulk_create(
        [Job(name=f"samples-{i}", project=Project(pk=q.project_id), submitted_by=users[i % len(users)],
             kind=("training", "inference", "dev")[i % 3], flavor=q.flavor,
             priority_class=classes[i % len(classes)],
             workers=1, gpus_per_worker=1 if q.flavor.shareable else (1, 2, 4, 8)[i % 4],
             gpu_milli=500 if q.flavor.shareable else None, image="img", state="running",
             state_changed_at=now, submitted_at=now, started_at=now)
         for i, q in ((i, quotas[i % len(quotas)]) for i in range(count))],
        batch_size=2000,
    )


def _ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(times), 1)


def _reference(start, end) -> dict:
    from tests.billing.per_sample import per_sample_figures

    return per_sample_figures(start, end, GROUP_BY)


def _rolled_up(scope, start, end) -> dict:
    from billing import usage

    rows, total = {}, usage.UsageRow(key=())
    usage._samples(scope, usage.UsageQuery(start, end, GROUP_BY), rows, total)
    found = {k: (r.sampled_card_hours, r.effective_card_hours) for k, r in rows.items()}
    found[(None, None)] = (total.sampled_card_hours, total.effective_card_hours)
    return found


def _poll(jobs: list[int], minute: datetime) -> None:
    from jobs.clusters.metrics import upsert_samples

    upsert_samples(minute, {job: (42.5, 1024.0, 1) for job in jobs})


# The poller's statement before the roll-up: one upsert per job, sent by ``executemany``.
_UPSERT_ONE = """
INSERT INTO jobs_jobgpusample (job_id, minute, gpu_util_pct, fb_used_mib, gpus) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (job_id, minute) DO UPDATE
SET gpu_util_pct = EXCLUDED.gpu_util_pct, fb_used_mib = EXCLUDED.fb_used_mib, gpus = EXCLUDED.gpus
"""


def _poll_per_row(jobs: list[int], minute: datetime) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.executemany(_UPSERT_ONE, [(job, minute, 42.5, 1024.0, 1) for job in jobs])


def _poll_ms(jobs: list[int], minutes: list[datetime], *, triggers: bool, poll=_poll) -> float:
    """``poll`` for ``jobs``, once per minute of ``minutes``, in ms (median), with the triggers on
    or off."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE jobs_jobgpusample {'ENABLE' if triggers else 'DISABLE'} TRIGGER USER")
    try:
        left = iter(minutes)
        return _ms(lambda: poll(jobs, next(left)), len(minutes))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE jobs_jobgpusample ENABLE TRIGGER USER")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1400)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--poll", type=int, default=1000)
    args = parser.parse_args()
    with scratch_django():
        from django.db import connection

        from billing.reports import ReportScope
        from jobs.models import Job
        from jobs.sample_hours import rebuild
        from portal.models import User

        _jobs(args.jobs)
        began = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(_LOAD, {"day": DAY})
            samples = cursor.rowcount
            load_s = time.perf_counter() - began
            began = time.perf_counter()
            rebuild()
            rebuild_s = time.perf_counter() - began
            cursor.execute("VACUUM ANALYZE jobs_jobgpusample")
            cursor.execute("VACUUM ANALYZE jobs_gpusamplehour")
        scope = ReportScope.of(User.objects.get(username="admin"))
        day, kolkata = (DAY, DAY + timedelta(days=1)), (KOLKATA_DAY, KOLKATA_DAY + timedelta(days=1))
        equal = all(_rolled_up(scope, *r) == _reference(*r) for r in (day, kolkata))
        jobs = list(Job.objects.filter(name__startswith="samples-").values_list("pk", flat=True)[: args.poll])
        after = [DAY + timedelta(days=1, minutes=m) for m in range(4 * args.repeat)]
        triggered, per_row_off, per_row_on = (after[i * args.repeat:(i + 1) * args.repeat] for i in (1, 2, 3))
        figures = {
            "samples": samples,
            "hours": connection.cursor().execute("SELECT count(*) FROM jobs_gpusamplehour").fetchone()[0],
            "load_s": round(load_s, 1),
            "rebuild_s": round(rebuild_s, 1),
            "raw_ms": _ms(lambda: _reference(*day), args.repeat),
            "rollup_ms": _ms(lambda: _rolled_up(scope, *day), args.repeat),
            "edges_raw_ms": _ms(lambda: _reference(*kolkata), args.repeat),
            "edges_ms": _ms(lambda: _rolled_up(scope, *kolkata), args.repeat),
            "equal": equal,
            "poll_rows": len(jobs),
            "poll_untriggered_ms": _poll_ms(jobs, after[: args.repeat], triggers=False),
            "poll_ms": _poll_ms(jobs, triggered, triggers=True),
            "overwrite_ms": _poll_ms(jobs, triggered, triggers=True),
            "per_row_untriggered_ms": _poll_ms(jobs, per_row_off, triggers=False, poll=_poll_per_row),
            "per_row_ms": _poll_ms(jobs, per_row_on, triggers=True, poll=_poll_per_row),
            "per_row_overwrite_ms": _poll_ms(jobs, per_row_on, triggers=True, poll=_poll_per_row),
        }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

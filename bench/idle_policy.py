"""The idle policy's pass (``jobs.idle_service.run_idle_policy``) over a busy centre. Prints ONE JSON
object. Not a timed test.

    python bench/idle_policy.py                   # 2,000 running jobs, 3 h of samples each
    python bench/idle_policy.py --jobs 500 --idle-share 0.2

The demo centre (``seed_demo``) gets ``--jobs`` running jobs (1–8 cards each), each with a sample per
minute of the last ``idle + grace + 1`` minutes (181 by default); ``--idle-share`` of them idle (every
card at 1 %), the rest busy. Medians of ``--repeat`` passes at one instant, interleaved:

* ``pass_ms``: the pass as it runs (the last two minutes pick the jobs worth a look: the warned ones
  and those idle now; only theirs are read back the whole window);
* ``all_ms``: the same pass reading every running job's whole window (the prefilter off — what it
  would cost without it); ``steps`` what the first pass did (both variants decide the same: ``equal``);
* ``steady_ms``: a pass a minute later, once those warnings are kept (nothing new to do: the usual
  pass — it still reads the warned jobs' windows, as it must to clear or act on them).
Each timed pass runs in a transaction rolled back, so every repeat sees the same unwarned jobs.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratchdb import scratch_django

_LOAD = """
INSERT INTO jobs_jobgpusample (job_id, minute, gpu_util_pct, gpu_util_max_pct, fb_used_mib, gpus)
SELECT j.id, %(start)s + m * interval '1 minute',
       CASE WHEN j.name LIKE 'idle-%%' THEN 0.5 ELSE 40 + (j.id * 7919 + m * 37) %% 50 END,
       CASE WHEN j.name LIKE 'idle-%%' THEN 1.0 ELSE 60 + (j.id * 7919 + m * 37) %% 40 END,
       1024, j.gpus_per_worker
FROM jobs_job j CROSS JOIN generate_series(0, %(minutes)s - 1) m
WHERE j.name LIKE 'idle-%%' OR j.name LIKE 'busy-%%'
"""


def _jobs(count: int, idle_share: float, started) -> None:
    from django.core.management import call_command

    from jobs.models import Job, PriorityClass
    from portal.models import Project, User
    from quotas.models import QuotaNode

    call_command("seed_demo", verbosity=0, stdout=io.StringIO())  # stdout carries only the JSON
    quotas = list(QuotaNode.objects.filter(project__isnull=False).select_related("flavor", "project"))
    users = list(User.objects.filter(memberships__isnull=False).distinct())
    classes = list(PriorityClass.objects.all())
    idle = int(count * idle_share)
    jobs = []
    for i in range(count):
        q = quotas[i % len(quotas)]
        gpus = 1 if i % 3 == 2 else (1, 2, 4, 8)[i % 4]  # a dev job (every third) has one card
        jobs.append(Job(
            name=f"{'idle' if i < idle else 'busy'}-{i}", project=Project(pk=q.project_id),
            submitted_by=users[i % len(users)], kind=("training", "inference", "dev")[i % 3], flavor=q.flavor,
            priority_class=classes[i % len(classes)], workers=1, gpus_per_worker=gpus, image="img",
            state="running", state_changed_at=started, submitted_at=started, started_at=started,
            dispatched_at=started, placement=[[[1, k, 1000] for k in range(gpus)]],
        ))
    Job.objects.bulk_create(jobs, batch_size=2000)


class _Rollback(Exception):
    pass


def _timed(run, now) -> tuple[float, dict]:
    from django.db import transaction

    began = time.perf_counter()
    result = {}
    try:
        with transaction.atomic():
            result = run(now)
            raise _Rollback
    except _Rollback:
        pass
    return (time.perf_counter() - began) * 1000, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--idle-share", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with scratch_django():
        from datetime import timedelta

        from django.db import connection
        from django.utils import timezone

        from jobs import idle_service

        policy = idle_service.policies().centre
        minutes = policy.idle_minutes + policy.grace_minutes + 1
        now = timezone.now().replace(second=30, microsecond=0)
        start = (now - timedelta(minutes=minutes - 1)).replace(second=0)
        _jobs(args.jobs, args.idle_share, start)
        with connection.cursor() as cursor:
            cursor.execute(_LOAD, {"start": start, "minutes": minutes})
            samples = cursor.rowcount
            cursor.execute("VACUUM ANALYZE jobs_jobgpusample")
            cursor.execute("VACUUM ANALYZE jobs_job")
        prefilter = idle_service._worth_a_look

        def every_job(now_):
            idle_service._worth_a_look = lambda jobs, *_a: jobs
            try:
                return idle_service.run_idle_policy(now_)
            finally:
                idle_service._worth_a_look = prefilter

        passes, alls, steps, equal = [], [], None, True
        for _ in range(args.repeat):  # interleaved: the two variants see the same cache state
            ms, first = _timed(idle_service.run_idle_policy, now)
            passes.append(ms)
            ms, other = _timed(every_job, now)
            alls.append(ms)
            steps = steps or first
            equal = equal and first == other
        idle_service.run_idle_policy(now)  # kept: the idle jobs are warned now
        later = now + timedelta(minutes=1)
        steady = [_timed(idle_service.run_idle_policy, later)[0] for _ in range(args.repeat)]
        figures = {
            "jobs": args.jobs,
            "samples": samples,
            "steps": steps,
            "equal": equal,
            "pass_ms": round(statistics.median(passes), 1),
            "all_ms": round(statistics.median(alls), 1),
            "steady_ms": round(statistics.median(steady), 1),
        }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

"""Importing a month of jobs users submitted to Slurm directly (DESIGN §11), on PostgreSQL in a
scratch database (bench/scratchdb.py).

A month (November 2026) of 100,000 finished jobs is generated as ``sacct -X -P -n`` prints it
(the columns of ``jobs.native.backends.slurm_native.SACCT_FIELDS``, times as epoch seconds): 40
accounts, 36 mapped to projects and 4 to none (their jobs become observations), 120 users (half
of them portal users), A100 and H100 GRES, 1–16 GPUs, waits of minutes to hours and runs of
minutes to a day; mostly COMPLETED, some FAILED, TIMEOUT, NODE_FAIL, array tasks and
heterogeneous components, and cancelled jobs, some before they started.

Timed (``sacct_import_seconds``, target ≤ 60 s): parsing that text and recording it
(``jobs.native.native_slurm.import_jobs``: the portal-job filter and ``record_external``), as one
``import_native --since`` back-fill of the month would. Prints one JSON object with
``sacct_import_jobs`` and ``sacct_import_seconds`` (plus what was recorded).
``--jobs N`` for another size. Needs DATABASE_URL and REDIS_URL.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratchdb import scratch_django

MONTH_START = int(datetime(2026, 10, 31, 16, tzinfo=UTC).timestamp())  # 1 Nov, Asia/Shanghai
MONTH_END = int(datetime(2026, 11, 30, 16, tzinfo=UTC).timestamp())
ACCOUNTS = [f"acct{i:02d}" for i in range(40)]
UNMAPPED = set(ACCOUNTS[-4:])
USERS = [f"u{i:03d}" for i in range(120)]
GRES = [("a100", 0.7), ("h100", 0.3)]
GPUS = [(1, 0.35), (2, 0.2), (4, 0.2), (8, 0.2), (16, 0.05)]
STATES = [("COMPLETED", 0.82), ("FAILED", 0.07), ("CANCELLED by 1001", 0.06), ("TIMEOUT", 0.03),
          ("NODE_FAIL", 0.02)]


def _pick(rng: random.Random, weighted: list) -> object:
    values, weights = zip(*weighted, strict=True)
    return rng.choices(values, weights)[0]


def sacct_month(jobs: int, seed: int = 20) -> str:
    """``jobs`` finished jobs of the month as ``sacct -X -P -n`` lines."""
    rng = random.Random(seed)
    lines = []
    raw = 500_000
    for n in range(jobs):
        raw += 1
        gres, gpus = _pick(rng, GRES), _pick(rng, GPUS)
        state = _pick(rng, STATES)
        submit = rng.randrange(MONTH_START, MONTH_END - 2 * 86400)
        start = submit + int(rng.expovariate(1 / 1800))
        end = start + rng.randrange(300, 86400)
        display = str(raw)
        if n % 50 == 0:
            display = f"{raw - 1}_{n % 7}"  # an array task
        elif n % 97 == 0:
            display = f"{raw - 1}+1"  # a heterogeneous component
        nodes = max(1, gpus // 8)
        tres = (f"billing={gpus},cpu={gpus * 8},gres/gpu:{gres}={gpus},gres/gpu={gpus},"
                f"mem={gpus * 64}G,node={nodes}")
        nodelist = f"gpu-{gres}-[{1 + n % 60}-{nodes + n % 60}]" if nodes > 1 else f"gpu-{gres}-{1 + n % 60}"
        alloc, code = tres, "0:0"
        if state.startswith("CANCELLED") and n % 3 == 0:  # cancelled while pending: nothing allocated
            alloc, nodelist, start = "", "None assigned", end
        elif state == "FAILED":
            code = f"{rng.randrange(1, 3)}:0"
        elif state == "TIMEOUT":
            code = "0:15"
        account = rng.choice(ACCOUNTS)
        lines.append("|".join([
            str(raw), display, account, rng.choice(USERS), state, str(submit), str(start), str(end), alloc,
            tres, nodelist, "normal", code, "None", f"train-{account}-{n % 1000}",
        ]))
    return "\n".join(lines) + "\n"


def _populate() -> object:
    from jobs.models import PriorityClass
    from jobs.native.models import ExternalSource
    from portal.models import Department, Project, User
    from quotas.models import Cluster, Flavor

    for model in ("a100", "h100"):
        Flavor.objects.create(name=model.upper(), vendor="nvidia", model=model.upper(), memory_mib=81920,
                              k8s_resource_name="nvidia.com/gpu", slurm_gres=f"gpu:{model}")
    PriorityClass.objects.create(name="normal", value=100)
    cluster = Cluster.objects.create(name="hpc", kind="slurm", config={"slurm_conf": "/etc/slurm/slurm.conf"})
    depts = [Department.objects.create(code=f"d{i}", name=f"Dept {i}") for i in range(6)]
    for i, account in enumerate(ACCOUNTS):
        project = None
        if account not in UNMAPPED:
            project = Project.objects.create(code=f"p{i:02d}", name=f"Project {i}", department=depts[i % 6])
        ExternalSource.objects.create(cluster=cluster, kind="slurm_account", name=account, project=project)
    User.objects.bulk_create([User(username=u) for u in USERS[::2]])
    return cluster


def run(jobs: int = 100_000) -> dict:
    text = sacct_month(jobs)
    with scratch_django():
        from jobs.models import Job, JobEvent
        from jobs.native.backends.slurm_native import parse_sacct
        from jobs.native.models import ExternalObservation
        from jobs.native.native_slurm import import_jobs

        cluster = _populate()
        started = time.perf_counter()
        out = import_jobs(cluster, [], parse_sacct(text))
        seconds = time.perf_counter() - started
        again = time.perf_counter()
        second = import_jobs(cluster, [], parse_sacct(text))  # the overlap of the next window: nothing new
        again = time.perf_counter() - again
        return {
            "sacct_import_jobs": jobs,
            "sacct_import_seconds": round(seconds, 2),
            "created": out.counts["created"],
            "observed": out.counts["observed"],
            "jobs": Job.objects.count(),
            "events": JobEvent.objects.count(),
            "observations": ExternalObservation.objects.count(),
            "reimport_seconds": round(again, 2),
            "reimport_created": second.counts["created"],
        }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    print(json.dumps(run(parser.parse_args().jobs)))

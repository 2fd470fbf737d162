"""Server time of the pages people look at most, with a realistic amount of history.

The demo centre (``seed_demo``: 9 departments, 9 projects, 76 nodes, every persona) gets
``--jobs`` more jobs (10,000 by default) spread over its projects, flavors and the job states
of a working centre (a third waiting, a tenth drawn running — as many as the free GPUs hold,
the others finished —, the rest finished), each with the events of its history, all in the
past; one scheduling cycle then runs so the queue's explanations exist, as in production.
Each page is requested ``--repeat`` times per persona through Django's test client (the whole
request: middleware, session, queries, template rendering), after one warm-up request.

The meter then runs once, so the usage explorer (``usage``: the last 30 days by project and
user) reads a real ledger; the running jobs get an hour of GPU samples.

``signin`` (issue 32 item 12) measures what a person waits for between pressing "Sign in" and
seeing the dashboard: the form's POST and the GET of the dashboard it redirects to, in a fresh
session each time, ``--repeat`` times per persona, with the **production** password hashers (the
test settings' MD5 would hide the cost). Per persona the p50 of the whole (``total_ms``), of the
POST, of the password check and of any re-hash within it (Django re-hashes a password stored with
other parameters than the current hasher's, and writes it), of the rest of the POST, of the
dashboard, and both requests' SQL queries; ``upgrade`` the same once for a password stored as
Django 5.2's default hasher stores it (PBKDF2-SHA256, 1,000,000 iterations: the accounts of a
centre that ran an earlier gpupool), the one sign-in that re-hashes it. ``hasher`` and
``hasher_params`` name the hasher measured.

Prints one JSON object: ``jobs``, ``signin_ms_p50`` (the worst persona's),
``queue_page_ms_p50``, ``dashboard_ms_p50``, ``job_list_ms_p50``, ``approvals_ms_p50``,
``usage_ms_p50``, ``budgets_ms_p50``, ``quota_tree_ms_p50``, ``quota_tree_all_ms_p50``,
``node_map_ms_p50`` (the worst persona's median; the node map shows the demo's first cluster; the approval
inbox, with the jobs waiting for approval given their requests, for the two approvers only),
``meter_s``, per persona and page the p50 / p95 and the number of SQL queries, and ``signin``.
Needs DATABASE_URL and REDIS_URL; works in a scratch database (bench/scratchdb.py).

To measure a change without repopulating (~4 min populate + ~2 min meter at 100,000 jobs): a run
with ``--keep`` leaves its database in place; ``--reuse`` measures that database again (migrated to
the code's migrations first, so a change's backfill runs on it; no populate, no meter), and
``--pages usage,approvals`` measures only those pages (``--pages signin`` only the sign-in).
Drop it with a last run without ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import statistics
import sys
import time
from datetime import date, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratchdb import scratch_django

_TODAY = date.today()
# The usage explorer over the bench's month of history (the jobs are from the last 30 days).
USAGE_URL = (f"/billing/usage/?start={_TODAY - timedelta(days=30)}&end={_TODAY + timedelta(days=1)}"
             "&group_by=project&then_by=user")
PAGES = {
    "queue": "/jobs/queue/",
    "dashboard": "/",
    "jobs": "/jobs/",
    "usage": USAGE_URL,
    "approvals": "/approvals/",
    "budgets": "/billing/budgets/",
    "quota_tree": "/quotas/",
    "quota_tree_all": "/quotas/?flavor=all",
    "nodes": "/nodes/",
}
PERSONAS = ("alice", "ai-admin", "admin")
SIGNIN = "signin"  # the sign-in, measured apart from the pages (_sign_in)
# How Django 5.2's default hasher (gpupool's before issue 32 item 12) stored a password.
LEGACY_PBKDF2_ITERATIONS = 1_000_000
# Pages measured only for the personas that use them: the approval inbox for the approvers (a
# department admin and a platform admin), each request with its context (issue 24 item 3).
PAGE_PERSONAS = {"approvals": ("ai-admin", "admin")}
# state, share of the generated jobs
MIX = (
    ("queued", 0.30),
    ("pending_approval", 0.03),
    ("running", 0.10),
    ("succeeded", 0.42),
    ("failed", 0.08),
    ("cancelled", 0.05),
    ("preempted", 0.0),
    ("rejected", 0.02),
)


def _populate(total: int, seed: int) -> None:
    """Bulk-insert ``total`` jobs with their events, as a working centre's database holds them:
    running jobs only where their GPUs are free (a "running" draw that no longer fits became a
    finished job: the centre is full), every time in the past, and each job's history the
    transitions it went through (``_events``)."""
    from django.core.management import call_command
    from django.utils import timezone

    from jobs.models import Job, JobEvent, JobGpuSample, PriorityClass
    from portal.models import Membership, Project, User
    from quotas.models import QuotaNode

    call_command("seed_demo", verbosity=0, stdout=io.StringIO())  # stdout carries only the JSON
    rng = random.Random(seed)
    now = timezone.now()
    projects = list(Project.objects.all())
    members = {
        p.pk: list(User.objects.filter(memberships__project=p).distinct())
        or [User.objects.get(username="admin")]
        for p in projects
    }
    flavors_of = {}
    for q in QuotaNode.objects.filter(project__isnull=False).select_related("flavor"):
        flavors_of.setdefault(q.project_id, []).append(q.flavor)
    classes = list(PriorityClass.objects.all())
    free = _free_gpus()
    states = [s for s, _ in MIX]
    weights = [w for _, w in MIX]
    jobs = []
    for i in range(total):
        project = rng.choice([p for p in projects if p.pk in flavors_of])
        flavor = rng.choice(flavors_of[project.pk])
        state = rng.choices(states, weights)[0]
        gpus = 1 if flavor.shareable or flavor.fraction < 1 else rng.choice((1, 1, 2, 4, 8))
        placement = _take(free, flavor.pk, gpus, rng) if state == "running" else None
        if state == "running" and placement is None:
            state = "succeeded"
        submitted = now - timedelta(seconds=rng.randint(60, 30 * 86400))
        started = min(submitted + timedelta(seconds=rng.randint(0, 3600)), now - timedelta(seconds=30))
        finished = min(started + timedelta(seconds=rng.randint(60, 86400)), now - timedelta(seconds=1))
        ran = state in ("running", "succeeded", "failed")
        ended = state in ("succeeded", "failed", "cancelled", "rejected")
        jobs.append(
            Job(
                name=f"bench-{i}",
                project=project,
                submitted_by=rng.choice(members[project.pk]),
                kind=rng.choice(("training", "training", "inference", "dev")) if gpus == 1 else "training",
                flavor=flavor,
                priority_class=rng.choice(classes),
                workers=1,
                gpus_per_worker=gpus,
                image="registry.local/bench:1",
                state=state,
                state_changed_at=finished if ended else started if state == "running" else submitted,
                submitted_at=submitted,
                admitted_at=started if ran else None,
                started_at=started if ran else None,
                finished_at=finished if ended else None,
                granted_workers=1 if state == "running" else None,
                placement=[placement] if placement else [],
                on_loan=False if state == "running" else None,
            )
        )
    Job.objects.bulk_create(jobs, batch_size=2000)
    events = []
    for job in Job.objects.filter(name__startswith="bench-").only(
        "id", "state", "submitted_at", "started_at", "finished_at"
    ):
        events.extend(_events(job, JobEvent))
    JobEvent.objects.bulk_create(events, batch_size=5000)
    # The running jobs' last hour of GPU samples (the usage explorer's utilisation).
    JobGpuSample.objects.bulk_create(
        (JobGpuSample(job_id=job_id, minute=(now - timedelta(minutes=m)).replace(second=0, microsecond=0),
                      gpu_util_pct=rng.uniform(0, 100), fb_used_mib=1024, gpus=gpus)
         for job_id, gpus in Job.objects.filter(name__startswith="bench-", state="running")
         .values_list("id", "gpus_per_worker") for m in range(1, 61)),
        batch_size=5000, ignore_conflicts=True)
    assert Membership.objects.exists()


def _free_gpus() -> dict[int, list[list[int]]]:
    """Per flavor, ``[node id, GPU index]`` of the GPUs that no job of the demo holds."""
    from jobs.models import Job
    from quotas.models import Node

    held = {(node, gpu) for job in Job.objects.exclude(placement=[]).only("placement")
            for worker in job.placement for node, gpu, _milli in worker}
    free: dict[int, list[list[int]]] = {}
    for node in Node.objects.order_by("id"):
        free.setdefault(node.flavor_id, []).extend(
            [node.pk, g] for g in range(node.gpu_count) if (node.pk, g) not in held)
    return free


def _take(free: dict, flavor: int, gpus: int, rng: random.Random) -> list | None:
    """Whole GPUs of one node for a running job, or None when no node has that many free."""
    by_node: dict[int, list[int]] = {}
    for node, gpu in free.get(flavor, []):
        by_node.setdefault(node, []).append(gpu)
    fitting = [node for node, gpu_list in by_node.items() if len(gpu_list) >= gpus]
    if not fitting:
        return None
    node = rng.choice(fitting)
    taken = by_node[node][:gpus]
    free[flavor] = [pair for pair in free[flavor] if not (pair[0] == node and pair[1] in taken)]
    return [[node, g, 1000] for g in taken]


def _events(job, event_model) -> list:
    """The transitions the job went through: submitted, admitted and started if it ran, and its
    end (from running if it ran, else from where it waited) at its finish time."""
    first = "pending_approval" if job.state in ("pending_approval", "rejected") else "queued"
    out = [event_model(job=job, from_state="", to_state=first, reason="submitted",
                       occurred_at=job.submitted_at)]
    if job.started_at:
        out.append(event_model(job=job, from_state="queued", to_state="admitted", reason="admitted",
                               occurred_at=job.started_at))
        out.append(event_model(job=job, from_state="admitted", to_state="running", reason="started",
                               occurred_at=job.started_at))
    if job.finished_at:
        before = "running" if job.started_at else first
        out.append(event_model(job=job, from_state=before, to_state=job.state, reason="bench",
                               occurred_at=job.finished_at))
    return out


def _open_approvals() -> None:
    """The generated jobs waiting for approval get their approval requests, as ``job_submit``
    opens them: the inbox of the department admins (and, above their policy's platform threshold,
    of the platform admins) holds a working centre's backlog."""
    from jobs.approvals import job_approval_decide, job_approval_open, with_approval_request
    from jobs.models import Job

    waiting = with_approval_request(Job.objects.filter(state="pending_approval")).filter(
        approval_request_pk__isnull=True  # the demo's own already have theirs
    )
    for job in waiting.select_related("project", "flavor", "submitted_by"):
        decision = job_approval_decide(job, job.submitted_by, reasons=[])
        job_approval_open(job=job, actor=job.submitted_by, decision=decision)


def _measure(repeat: int, pages: dict[str, str]) -> dict:
    from django.db import connection, reset_queries
    from django.test import Client
    from django.test.utils import override_settings

    from portal.models import User

    out = {}
    for username in PERSONAS:
        client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans", SERVER_NAME="localhost")  # an allowed host
        client.force_login(User.objects.get(username=username))
        for page, url in pages.items():
            if username not in PAGE_PERSONAS.get(page, PERSONAS):
                continue
            response = client.get(url)  # warm-up (template loading, first-connection costs)
            if response.status_code != 200:
                raise SystemExit(f"{url} as {username}: HTTP {response.status_code}")
            samples = []
            for _ in range(repeat):
                started = time.perf_counter()
                response = client.get(url)
                samples.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200
            with override_settings(DEBUG=True):
                reset_queries()
                client.get(url)
                queries = len(connection.queries)
            samples.sort()
            out[f"{username}:{page}"] = {
                "p50_ms": round(statistics.median(samples), 1),
                "p95_ms": round(samples[int(0.95 * (len(samples) - 1))], 1),
                "queries": queries,
                "bytes": len(response.content),
            }
    return out


def _production_hashers() -> list[str]:
    """The hashers production uses (portal/settings/base.py, else Django's default), not the test
    settings' MD5."""
    from django.conf import global_settings

    from portal.settings import base

    return list(getattr(base, "PASSWORD_HASHERS", global_settings.PASSWORD_HASHERS))


@contextlib.contextmanager
def _hasher_clock(hasher_classes, spent: dict):
    """Adds the time the ``hasher_classes`` spend checking a password (``verify`` and, for a
    stored hash weaker than the current parameters, ``harden_runtime``) and making a new one
    (``encode`` outside a check: the re-hash on sign-in) to ``spent`` in ms."""
    parts = {"verify": "check_ms", "harden_runtime": "check_ms", "encode": "rehash_ms"}
    originals = {(cls, name): cls.__dict__.get(name) for cls in hasher_classes for name in parts}
    depth = [0]

    def timed(method, part):
        def wrapper(self, *args, **kwargs):
            outermost = depth[0] == 0
            depth[0] += 1
            started = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                depth[0] -= 1
                if outermost:  # verify calls encode: count it as the check
                    spent[part] = spent.get(part, 0.0) + (time.perf_counter() - started) * 1000
        return wrapper

    for cls, name in originals:
        setattr(cls, name, timed(getattr(cls, name), parts[name]))
    try:
        yield
    finally:
        for (cls, name), method in originals.items():
            if method is None:
                delattr(cls, name)  # inherited: the base class's again
            else:
                setattr(cls, name, method)


def _sign_in_once(username: str, password: str, hasher_classes) -> dict:
    """One sign-in in a fresh session: the form's POST, then the dashboard it redirects to."""
    from django.test import Client

    client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans", SERVER_NAME="localhost")
    spent: dict = {}
    with _hasher_clock(hasher_classes, spent):
        started = time.perf_counter()
        response = client.post("/accounts/login/", {"username": username, "password": password})
        post_ms = (time.perf_counter() - started) * 1000
    if response.status_code != 302 or response["Location"] != "/":
        raise SystemExit(f"sign-in as {username}: HTTP {response.status_code} {response.get('Location')}")
    started = time.perf_counter()
    page = client.get(response["Location"])
    dashboard_ms = (time.perf_counter() - started) * 1000
    assert page.status_code == 200
    check_ms, rehash_ms = spent.get("check_ms", 0.0), spent.get("rehash_ms", 0.0)
    return {"total_ms": post_ms + dashboard_ms, "post_ms": post_ms, "check_ms": check_ms,
            "rehash_ms": rehash_ms, "post_rest_ms": post_ms - check_ms - rehash_ms,
            "dashboard_ms": dashboard_ms}


def _sign_in_queries(username: str, password: str) -> tuple[int, int]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans", SERVER_NAME="localhost")
    with CaptureQueriesContext(connection) as post:
        client.post("/accounts/login/", {"username": username, "password": password})
    with CaptureQueriesContext(connection) as page:
        client.get("/")
    return len(post), len(page)


def _medians(samples: list[dict]) -> dict:
    return {key: round(statistics.median(s[key] for s in samples), 1) for key in samples[0]}


def _sign_in(repeat: int) -> dict:
    """Sign-in to the dashboard per persona with the production hashers (the module's docstring)."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher, get_hasher
    from django.test.utils import override_settings

    from portal.demo import DEMO_PASSWORD
    from portal.models import User

    out: dict = {}
    with override_settings(PASSWORD_HASHERS=_production_hashers()):
        hasher = get_hasher()
        out["hasher"] = hasher.algorithm
        out["hasher_params"] = {name: getattr(hasher, name) for name in
                                ("iterations", "time_cost", "memory_cost", "parallelism", "rounds")
                                if hasattr(hasher, name)}
        legacy = PBKDF2PasswordHasher()
        clocked = {type(hasher), PBKDF2PasswordHasher}  # the current hasher and the legacy one
        personas, upgrades = {}, {}
        for username in PERSONAS:
            user = User.objects.get(username=username)
            # The first sign-in with a password as an earlier gpupool stored it: any re-hash is here.
            user.password = legacy.encode(DEMO_PASSWORD, legacy.salt(), LEGACY_PBKDF2_ITERATIONS)
            user.save(update_fields=["password"])
            upgrades[username] = _medians([_sign_in_once(username, DEMO_PASSWORD, clocked)])
            user.set_password(DEMO_PASSWORD)  # stored with the current hasher: the usual sign-in
            user.save(update_fields=["password"])
            _sign_in_once(username, DEMO_PASSWORD, clocked)  # warm-up
            samples = [_sign_in_once(username, DEMO_PASSWORD, clocked) for _ in range(repeat)]
            personas[username] = _medians(samples)
            personas[username]["post_queries"], personas[username]["dashboard_queries"] = (
                _sign_in_queries(username, DEMO_PASSWORD))
    out["signin_ms_p50"] = max(p["total_ms"] for p in personas.values())
    out["personas"] = personas
    out["upgrade"] = upgrades
    return out


def run(jobs: int, repeat: int, seed: int, *, pages: dict[str, str] = PAGES, signin: bool = True,
        keep: bool = False, reuse: bool = False) -> dict:
    """Populate (unless ``reuse``: the database a ``keep`` run left), meter, then measure ``pages``
    and (``signin``) the sign-in."""
    with scratch_django(keep=keep, reuse=reuse):
        from django.db import connection

        from billing.meter import usage_meter
        from jobs.models import Job
        from jobs.scheduling.cycle import schedule_once

        timings = {}
        if not reuse:
            started = time.perf_counter()
            _populate(jobs, seed)
            timings["populate_s"] = round(time.perf_counter() - started, 1)
            started = time.perf_counter()
            schedule_once()
            timings["first_cycle_s"] = round(time.perf_counter() - started, 2)
            _open_approvals()
            started = time.perf_counter()
            usage_meter()  # the ledger the usage explorer reads
            timings["meter_s"] = round(time.perf_counter() - started, 1)
        with connection.cursor() as cursor:
            # The statistics and visibility map autovacuum keeps in a working centre (index-only
            # scans, e.g. the approval inbox's requester history, need the latter).
            cursor.execute("VACUUM ANALYZE")
        measured = _measure(repeat, pages)
        signed_in = _sign_in(repeat) if signin else None
        total = Job.objects.count()
    worst = {p: max(v["p50_ms"] for k, v in measured.items() if k.endswith(":" + p)) for p in pages}
    names = {"queue": "queue_page_ms_p50", "dashboard": "dashboard_ms_p50", "jobs": "job_list_ms_p50",
             "nodes": "node_map_ms_p50"}
    return {
        "jobs": total,
        **({"signin_ms_p50": signed_in["signin_ms_p50"]} if signed_in else {}),
        **{names.get(p, f"{p}_ms_p50"): ms for p, ms in worst.items()},
        "repeat": repeat,
        "reused": reuse,
        **timings,
        "pages": measured,
        **({"signin": signed_in} if signed_in else {}),
    }


if __name__ == "__main__":
    import logging

    logging.disable(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="1,000 jobs, 5 requests per page")
    parser.add_argument("--pages", help=f"comma-separated subset of {','.join([*PAGES, SIGNIN])} "
                        "(default: all)")
    parser.add_argument("--keep", action="store_true", help="leave the populated scratch database in place")
    parser.add_argument("--reuse", action="store_true",
                        help="measure the database a --keep run left (migrated; no populate, no meter)")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.repeat = 1_000, 5
    chosen = args.pages.split(",") if args.pages else [*PAGES, SIGNIN]
    unknown = sorted(set(chosen) - {*PAGES, SIGNIN})
    if unknown:
        parser.error(f"unknown pages: {', '.join(unknown)}")
    pages = {p: PAGES[p] for p in chosen if p != SIGNIN}
    print(json.dumps(run(args.jobs, args.repeat, args.seed, pages=pages, signin=SIGNIN in chosen,
                         keep=args.keep, reuse=args.reuse or False)))

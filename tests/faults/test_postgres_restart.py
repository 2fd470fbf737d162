"""PostgreSQL restarted (``pg_ctl restart -m fast``) while web, worker and beat use it and a client
submits jobs: requests fail only while it is down, then work continues with no manual action
(every process reconnects: CONN_HEALTH_CHECKS), and every acknowledged job runs once.

A private cluster on its own port: the machine's PostgreSQL is shared and never restarted. The
test process never connects to it through Django; everything is asserted with psycopg."""

import json
import subprocess
import sys
import threading
import time
from collections import Counter

import psycopg
import pytest
import requests

from tests.celery_procs import private_queue
from tests.faults.checks import assert_chain
from tests.faults.procs import ROOT, Celery, Client, PrivatePostgres, Web, django_env, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.celery_worker]


def _manage(url: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True,
                          env=django_env(DATABASE_URL=url), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


class Submitter(threading.Thread):
    """One job every 0.1 s; each request's outcome in order, with the time it ended."""

    def __init__(self, client: Client, seed: dict):
        super().__init__(daemon=True)
        self.client, self.seed = client, seed
        self.outcomes: list[tuple[str, float, object]] = []  # (name, when, 201's id | status | error)
        self.stop = threading.Event()

    def created(self) -> int:
        return sum(1 for _, _, o in list(self.outcomes) if isinstance(o, int) and not isinstance(o, bool))

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            name = f"pg-{n}"
            n += 1
            try:
                answer = self.client.submit(name, self.seed["project"], self.seed["flavor"], gpus=2,
                                            duration=100)
                outcome = answer.json()["id"] if answer.status_code == 201 else f"HTTP {answer.status_code}"
            except requests.RequestException as error:
                outcome = type(error).__name__
            self.outcomes.append((name, time.monotonic(), outcome))
            time.sleep(0.1)


def _rows(url: str, sql: str, *params) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, params or None).fetchall()


def test_a_postgres_restart_needs_no_manual_action_and_loses_no_acknowledged_job(tmp_path, simserver):
    pg = PrivatePostgres()
    queue = private_queue()
    web = celery = submitter = None
    t0 = time.monotonic()
    try:
        pg.init_and_start()
        url = pg.url()
        _manage(url, "migrate", "--noinput", "-v0")
        seeding = f"from tests.faults.seed import main; main({simserver.url!r})"
        seed = json.loads(_manage(url, "shell", "-c", seeding).splitlines()[-1])
        prepared = time.monotonic() - t0
        web = Web(django_env(DATABASE_URL=url, CELERY_QUEUE=queue), tmp_path / "web.log")
        celery = Celery(queue, tmp_path, DATABASE_URL=url)
        web.start()
        celery.start()
        submitter = Submitter(Client(web.url, seed["token"]), seed)
        submitter.start()
        wait_until(lambda: submitter.created() >= 6, "submissions before the restart")
        started = _rows(url, "SELECT pg_postmaster_start_time()")[0][0]
        down = time.monotonic()
        pg.restart()
        up = time.monotonic()
        assert _rows(url, "SELECT pg_postmaster_start_time()")[0][0] > started  # really restarted
        wait_until(lambda: submitter.created() >= 12, "submissions after the restart")
        submitter.stop.set()
        submitter.join(timeout=30)
        names = {name: o for name, _, o in submitter.outcomes}
        acked = {name: o for name, o in names.items() if isinstance(o, int)}
        succeeded = "SELECT count(*) FROM jobs_job WHERE state = 'succeeded' AND id = ANY(%s)"
        wait_until(lambda: _rows(url, succeeded, list(acked.values()))[0][0] == len(acked),
                   "every acknowledged job to succeed")
        converged = time.monotonic() - up
        jobs = _rows(url, "SELECT id, name, state FROM jobs_job")
        events = _rows(
            url, "SELECT job_id, kind, from_state, to_state FROM jobs_jobevent ORDER BY occurred_at, id"
        )
    finally:
        if submitter is not None:
            submitter.stop.set()
        for part in (celery, web):
            if part is not None:
                part.stop()
        pg.stop()
    stored = Counter(name for _, name, _ in jobs)
    assert all(n == 1 for n in stored.values())  # nothing twice
    assert {name: pk for pk, name, _ in jobs if name in acked} == acked  # nothing acknowledged lost
    # Requests that met the server down failed (500: the database is unreachable); once it is back
    # not one more does — every process reconnected by itself.
    failed = [(name, when, o) for name, when, o in submitter.outcomes if not isinstance(o, int)]
    recovered = min(when for _, when, o in submitter.outcomes if isinstance(o, int) and when > up)
    assert all(when <= recovered for _, when, _ in failed)  # once back, not one more error
    for pk, _, state in jobs:
        chain = [(f, t) for job, kind, f, t in events if job == pk and kind == "transition"]
        dispatched = sum(1 for job, kind, _, _ in events if job == pk and kind == "dispatched")
        assert_chain(pk, chain, state, dispatched)
    backend = requests.get(simserver.url + "/jobs", timeout=10).json()["jobs"]
    assert sorted(backend) == sorted(f"gp-{pk}" for pk, _, state in jobs if state == "succeeded")
    assert {view["phase"] for view in backend.values()} == {"succeeded"}
    print(f"postgres restart ({up - down:.2f} s): {len(acked)} acknowledged, {len(failed)} refused "
          f"({Counter(o for _, _, o in failed)}); first 201 {recovered - up:.2f} s after it was back; "
          f"converged {converged:.1f} s after; cluster, migrate and seed took {prepared:.1f} s")

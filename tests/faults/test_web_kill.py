"""The web server SIGKILLed in the middle of a burst of API submissions, then started again:
every submission the client saw a 201 for exists exactly once, a request cut off in flight left
its job whole or not at all, and the jobs the server took are scheduled like any other."""

import threading
import time
from collections import Counter

import pytest
import redis
import requests
from django.conf import settings

from jobs.models import Job, JobEvent
from jobs.scheduling.cycle import schedule_once
from tests.celery_procs import database_url_of_tests, private_queue
from tests.faults.checks import assert_event_log_consistent
from tests.faults.procs import Client, Web, django_env, wait_until
from tests.faults.seed import seed_pool

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]
CLIENTS = 6


class Burst:
    """Client threads submitting jobs back to back; each outcome is kept per job name."""

    def __init__(self, web: Web, seed: dict):
        self.web, self.seed = web, seed
        self.outcomes: dict[str, tuple] = {}  # name → ("created", id) | ("cut",) | ("refused",) | (status,)
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(CLIENTS)]

    def created(self) -> int:
        return sum(1 for o in list(self.outcomes.values()) if o[0] == "created")

    def _run(self, index: int) -> None:
        client = Client(self.web.url, self.seed["token"])
        for n in range(10**6):
            if self.stop.is_set():
                return
            name = f"burst-{index}-{n}"
            try:
                answer = client.submit(name, self.seed["project"], self.seed["flavor"], gpus=1, duration=600)
                self.outcomes[name] = ("created", answer.json()["id"]) if answer.status_code == 201 else (
                    answer.status_code,)
            except requests.RequestException as error:
                # Refused: the server was down, the request never reached it. Anything else (reset,
                # remote end closed, a cut-off answer): in flight when the server died — unknown.
                refused = isinstance(error, requests.ConnectionError) and "refused" in str(error).lower()
                self.outcomes[name] = ("refused",) if refused else ("cut",)
                time.sleep(0.05)


def test_a_web_server_killed_mid_burst_loses_no_acknowledged_job_and_writes_no_half_job(tmp_path, simserver):
    seed = seed_pool(simserver.url)
    queue = private_queue()  # the submissions' cycle requests go here; no worker consumes them
    web = Web(django_env(DATABASE_URL=database_url_of_tests(), CELERY_QUEUE=queue), tmp_path / "web.log")
    web.start()
    burst = Burst(web, seed)
    try:
        for thread in burst.threads:
            thread.start()
        wait_until(lambda: burst.created() >= 20, "20 submissions before the kill", interval=0.02)
        web.kill9()
        killed_at, before = time.monotonic(), burst.created()
        time.sleep(0.5)  # clients meet a dead server
        boot = web.start()
        first = wait_until(lambda: burst.created() > before and time.monotonic(), "a 201 after restart",
                           interval=0.01)
        wait_until(lambda: burst.created() >= before + 20, "20 submissions after the restart")
    finally:
        burst.stop.set()
        for thread in burst.threads:
            thread.join(timeout=30)
        web.stop()
        redis.Redis.from_url(settings.REDIS_CLIENT_URL).delete(queue)
    kinds = Counter(outcome[0] for outcome in burst.outcomes.values())
    assert kinds["cut"] >= 1, kinds  # the kill did land in the middle of requests
    assert set(kinds) <= {"created", "cut", "refused"}, kinds  # never a 5xx or another error
    stored = Counter(Job.objects.values_list("name", flat=True))
    assert all(n == 1 for n in stored.values())  # no job twice
    for name, outcome in burst.outcomes.items():
        if outcome[0] == "created":  # acknowledged: exists, exactly as acknowledged
            assert Job.objects.get(name=name).pk == outcome[1]
        elif outcome[0] == "refused":
            assert name not in stored
    assert set(stored) <= set(burst.outcomes)
    ids = list(Job.objects.values_list("pk", flat=True))
    # No half-written job: each one has its submission event (one, and nothing else yet).
    assert JobEvent.objects.filter(job_id__in=ids).count() == len(ids)
    assert_event_log_consistent(ids)
    report = schedule_once()  # the jobs it took are ordinary jobs: one cycle admits what fits
    assert report.admitted == min(16, len(ids))
    assert_event_log_consistent(ids)
    cut_stored = sum(1 for name, o in burst.outcomes.items() if o[0] == "cut" and name in stored)
    print(f"web SIGKILL: {kinds['created']} acknowledged, {kinds['cut']} cut in flight "
          f"({cut_stored} of them stored whole), {kinds['refused']} refused; "
          f"first 201 {first - killed_at:.2f} s after the kill (0.5 s down, {boot:.2f} s to boot)")

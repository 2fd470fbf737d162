"""The API of a job's log and dev port (DESIGN §13, issue 22) against a real simulator process:
the tail and its bounds, the whole log as a stream, access, and 404 outside the job's scope."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.urls import reverse

from jobs.clusters import logs
from jobs.clusters.backends.base import LOG_CHUNK_BYTES
from tests import job_runs
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db

SEES_PA1 = {"platform", "auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member"}
OTHERS = {"b_admin", "b_finance", "pb_member", "outsider"}


def _tail(client, job, query=""):
    return client.get(reverse("api:job-log", args=[job.pk]) + query)


def test_the_tail_grows_and_has_its_fields(world, simserver, api):
    job = job_runs.run(world, simserver)
    client = api(world.users["pa1_member"])

    def last_step():
        body = _tail(client, job).json()
        return max(job_runs.steps(body["text"]), default=0)

    first = wait_until(last_step, "a first step line")
    wait_until(lambda: last_step() > first, f"a step after {first}")
    wait_until(lambda: _tail(client, job).json()["size"] > 600, "a log longer than 600 bytes")
    body = _tail(client, job, "?tail_bytes=300").json()
    assert set(body) == {"text", "size", "truncated", "missing"}
    assert body["missing"] == "" and body["truncated"] is True and body["size"] > 300
    assert 0 < len(body["text"].encode()) <= 300


def test_the_default_tail_is_the_portals_setting(world, fast_simserver, api):
    job = job_runs.run(world, fast_simserver, sim_seconds=10_000, until={"succeeded"})  # 1,000 step lines
    whole = job_runs.log_file(fast_simserver, job).read_bytes()
    assert len(whole) > settings.GPUPOOL["LOG_TAIL_BYTES"]
    body = _tail(api(world.users["pa1_member"]), job).json()
    assert body["truncated"] and body["size"] == len(whole)
    assert len(body["text"].encode()) <= settings.GPUPOOL["LOG_TAIL_BYTES"]
    assert whole.endswith(body["text"].encode())


@pytest.mark.parametrize("value", ["0", "-1", "1048577", "abc", "1.5", "99999999999999999999"])
def test_a_bad_tail_bytes_is_400_naming_the_bounds(world, api, value):
    job = job_runs.submit(world)
    response = _tail(api(world.users["pa1_member"]), job, f"?tail_bytes={value}")
    assert response.status_code == 400
    assert response.json() == {"tail_bytes": ["A whole number of bytes from 1 to 1048576."]}


@pytest.mark.parametrize("value", ["1", "1048576"])
def test_the_bounds_themselves_are_accepted(world, api, value):
    job = job_runs.submit(world)
    response = _tail(api(world.users["pa1_member"]), job, f"?tail_bytes={value}")
    assert response.status_code == 200 and response.json()["missing"].startswith("Not started yet")


def test_a_job_not_started_has_no_log_and_says_why(world, api):
    job = job_runs.submit(world)
    client = api(world.users["pa1_member"])
    assert _tail(client, job).json() == {
        "text": "",
        "size": None,
        "truncated": False,
        "missing": "Not started yet: the job has a log once it has been sent to its cluster.",
    }
    response = client.get(reverse("api:job-log-download", args=[job.pk]))
    assert response.status_code == 404 and response.json()["detail"].startswith("Not started yet")


def test_the_download_streams_the_whole_log(world, fast_simserver, api):
    job = job_runs.run(world, fast_simserver, sim_seconds=20_000, until={"succeeded"})
    whole = job_runs.log_file(fast_simserver, job).read_bytes()
    response = api(world.users["auditor"]).get(reverse("api:job-log-download", args=[job.pk]))
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="gp-{job.pk}.log"'
    pieces = list(response.streaming_content)
    assert all(len(p) <= LOG_CHUNK_BYTES for p in pieces) and b"".join(pieces) == whole


def test_access_is_the_simulators_page_for_a_running_dev_job_only(world, simserver, api):
    dev = job_runs.run(world, simserver, kind="dev", expose_port=8888, name="notebook")
    client = api(world.users["pa1_member"])
    body = client.get(reverse("api:job-access", args=[dev.pk])).json()
    assert body == {
        "url": f"{simserver.url}/jobs/gp-{dev.pk}/port/8888/",
        "command": "",
        "note": body["note"],
    }
    assert body["note"]
    training = job_runs.submit(world, name="training")
    response = client.get(reverse("api:job-access", args=[training.pk]))
    assert response.status_code == 404 and "exposes nothing" in response.json()["detail"]


@pytest.mark.parametrize("persona", sorted(SEES_PA1 | OTHERS))
def test_log_download_and_access_are_404_outside_the_scope(world, simserver, api, persona):
    job = job_runs.run(world, simserver, kind="dev", expose_port=8888)
    wait_until(lambda: job_runs.steps(logs.job_log_tail(job, max_bytes=4096).text), "a step line")
    client = api(world.users[persona])
    for route in ("api:job-log", "api:job-log-download", "api:job-access"):
        response = client.get(reverse(route, args=[job.pk]))
        # The log is for whoever sees the job; the way into a dev job only for its owner.
        sees = persona in SEES_PA1 and (route != "api:job-access" or persona == "pa1_member")
        assert response.status_code == (200 if sees else 404), (route, persona)
        if persona in OTHERS:
            assert b"step" not in response.content and b"gp-" not in response.content


def test_anonymous_api_calls_are_refused(world, api):
    job = job_runs.submit(world)
    for route in ("api:job-log", "api:job-log-download", "api:job-access"):
        assert api(None).get(reverse(route, args=[job.pk])).status_code in (401, 403), route

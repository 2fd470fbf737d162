"""``GET /api/v1/history/export/`` (issue 25 item 1): platform admins only — the trace covers every
tenant, so everyone else (auditors included) gets 404 and an anonymous caller 401/403; bad
parameters are a 400 naming the field and export nothing."""

import io
import json
import zipfile
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.models import Job, JobEvent
from tests import factories as fx
from tests.conftest import PERSONAS

pytestmark = pytest.mark.django_db
URL = "/api/v1/history/export/"


@pytest.fixture
def job(world):
    at = timezone.now() - timedelta(days=1)
    job = Job.objects.create(
        name="h",
        project=world.pb,
        submitted_by=world.users["pb_member"],
        kind="training",
        flavor=world.F,
        priority_class=fx.priority(),
        gpus_per_worker=2,
        image="img",
        state="succeeded",
        state_changed_at=at,
        submitted_at=at,
        finished_at=at + timedelta(hours=1),
    )
    for source, target, t in (
        ("", "queued", at),
        ("queued", "admitted", at + timedelta(minutes=1)),
        ("admitted", "running", at + timedelta(minutes=1)),
        ("running", "succeeded", at + timedelta(hours=1)),
    ):
        JobEvent.objects.create(job=job, from_state=source, to_state=target, occurred_at=t)
    return job


def test_the_route_is_the_documented_one():
    assert reverse("api:history-export") == URL


@pytest.mark.parametrize("persona", [p for p in PERSONAS if p != "platform"])
def test_everyone_but_platform_admins_gets_404(world, api, job, persona):
    response = api(world.users[persona]).get(URL, {"weeks": 1})
    assert response.status_code == 404


def test_anonymous_is_refused(api):
    assert api(None).get(URL, {"weeks": 1}).status_code in (401, 403)


def test_platform_admin_gets_a_zip_of_the_four_files(world, api, job):
    response = api(world.users["platform"]).get(URL, {"weeks": 1})
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].startswith('attachment; filename="gpupool-history-')
    with zipfile.ZipFile(io.BytesIO(response.content)) as z:
        assert sorted(z.namelist()) == ["cluster.json", "manifest.json", "recorded.csv", "trace.csv"]
        trace = z.read("trace.csv").decode().splitlines()
        assert (
            trace[0] == "job_id,submit_time,duration,num_gpus,gpu_milli,gpu_type,tenant,kind,priority,"
            "workers,cpu_milli,memory_mib"
        )
        assert trace[1].split(",")[0] == str(job.pk) and ",B/pb," in trace[1]
        assert json.loads(z.read("manifest.json"))["jobs"] == 1


def test_json_format_has_the_same_content(world, api, job):
    since = (timezone.now() - timedelta(days=2)).isoformat()
    response = api(world.users["platform"]).get(URL, {"since": since, "format": "json"})
    assert response.status_code == 200
    body = response.json()
    assert sorted(body) == ["cluster", "manifest", "recorded", "trace"]
    assert [r["job_id"] for r in body["trace"]] == [str(job.pk)]
    assert body["trace"][0]["duration"] == 3540.0
    assert body["cluster"]["quotas"]["B/pb"] == {"F": {"quota": 8}}


@pytest.mark.parametrize(
    "params, field",
    [
        ({}, "weeks"),
        ({"weeks": "four"}, "weeks"),
        ({"weeks": 0}, "weeks"),
        ({"weeks": 1000}, "weeks"),
        ({"weeks": 1, "since": "2026-11-01T00:00:00+08:00"}, "weeks"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-11-01T00:00:00"}, "since"),  # no offset
        ({"since": "2000-01-01T00:00:00+08:00"}, "since"),  # longer than GPUPOOL_HISTORY_MAX_DAYS
        ({"since": "2026-11-02T00:00:00+08:00", "until": "2026-11-01T00:00:00+08:00"}, "until"),
        ({"weeks": 1, "format": "xml"}, "format"),
    ],
)
def test_bad_parameters_are_a_400_naming_the_field(world, api, params, field):
    response = api(world.users["platform"]).get(URL, params)
    assert response.status_code == 400, response.content
    assert field in response.json()


YEAR_1 = [
    {"since": "0001-01-01T00:00:00+08:00", "until": "0001-01-02T00:00:00+08:00"},  # before year 1 in UTC
    {"since": "0001-01-01T00:00:00+00:00", "until": "0001-01-02T00:00:00+00:00"},
    {"since": "0001-01-01T00:00:00+14:00"},
]


@pytest.mark.parametrize("params", YEAR_1, ids=lambda p: p["since"][-6:] + ("+until" if "until" in p else ""))
@pytest.mark.parametrize("fmt", ["zip", "json"])
def test_item21_a_range_in_year_1_is_a_400_naming_the_field(world, api, job, params, fmt):
    """Year 1 at +08:00 is an instant before year 1 in UTC: it was a 500 (OverflowError) once the
    export read the range. Date-times a user gives stay within 2000-01-01 … 2100-12-31."""
    response = api(world.users["platform"]).get(URL, {**params, "format": fmt})
    assert response.status_code == 400, (response.status_code, response.content[:200])
    assert response.json() == {"since": ["Give a date from 2000-01-01 to 2100-12-31."]}
    late = api(world.users["platform"]).get(URL, {"since": "2026-01-01T00:00:00+08:00",
                                                 "until": "9999-12-31T23:59:59-12:00"})
    assert late.status_code == 400 and "until" in late.json(), late.content[:200]

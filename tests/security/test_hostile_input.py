"""Hostile input to job submission, through the API and the HTML form: huge, negative, unicode,
NUL, megabyte and injection-laden values are refused with a message on the field and nothing
written; injection strings that are valid values are stored verbatim and rendered escaped."""

from __future__ import annotations

import json
import subprocess

import pytest

from jobs.clusters.backends.base import JobSpec
from jobs.clusters.backends.slurm import SlurmBackend
from jobs.models import Job, JobEvent
from portal.models import ApprovalRequest
from tests import factories as fx

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db]

MB = 1024 * 1024
INJECTIONS = ["; rm -rf /", "' OR 1=1 --", "<script>alert(1)</script>", "$(reboot)", "`id`", "a\nb"]


def _snapshot():
    return (Job.objects.count(), JobEvent.objects.count(), ApprovalRequest.objects.count())


@pytest.fixture
def member(world, api):
    fx.priority("training", 100)
    return api(world.users["pa1_member"])


def _job(world, **changes):
    body = {
        "name": "bert",
        "project": world.pa1.pk,
        "kind": "training",
        "flavor": "F",
        "priority": "training",
        "workers": 1,
        "gpus_per_worker": 1,
        "image": "pytorch:2.3",
        "command": "python train.py",
        "max_runtime_seconds": 3600,
    }
    body.update(changes)
    return body


def _refused(response, field, before):
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    assert field in body, body
    messages = body[field] if isinstance(body[field], list) else [body[field]]
    assert all(isinstance(m, str) and m for m in messages), body
    assert _snapshot() == before


BAD_FIELDS = [
    ("workers", 10**30),
    ("workers", 2**63),
    ("workers", -1),
    ("workers", 0),
    ("workers", "NaN"),
    ("workers", "inf"),
    ("workers", 1.5),
    ("workers", [1]),
    ("workers", {"n": 1}),
    ("gpus_per_worker", -8),
    ("gpus_per_worker", 2**31),
    ("gpu_milli", 0),
    ("gpu_milli", 1000),
    ("max_runtime_seconds", 10**30),
    ("max_runtime_seconds", -60),
    ("max_runtime_seconds", "Infinity"),
    ("sim_duration_seconds", -1),
    ("priority", "no-such-class"),
    ("priority", ["training"]),
    ("flavor", {"name": "F"}),
    ("flavor", "F\x00"),
    ("project", -1),
    ("project", 2**63),
    ("project", "pa1"),
    ("kind", "root"),
    ("checkpointing", "maybe"),
    ("name", ""),
    ("name", "x" * MB),
    ("name", "Bert"),
    ("name", "بيرت"),  # right-to-left
    ("name", "bert-🚀"),
    ("name", "bert\x00"),
    ("name", "\u202ebert"),  # RTL override
    *[("name", value) for value in INJECTIONS],
    ("image", ""),
    ("image", "x" * MB),
    ("image", "pytorch:2.3\x00"),
    ("image", "镜像"),
    ("image", "a" * 301),
    *[("image", value) for value in INJECTIONS],
    ("command", "x" * MB),
    ("command", "x" * 10001),
    ("command", "rm -rf /\x00"),
    ("command", ["python", "train.py"]),
]


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS, ids=lambda v: repr(v)[:30])
def test_hostile_api_values_are_refused_on_their_field(world, member, field, value):
    before = _snapshot()
    _refused(member.post("/api/v1/jobs/", _job(world, **{field: value}), format="json"), field, before)


@pytest.mark.parametrize(
    "raw",
    [
        '{"name": "bert", ',  # truncated
        "[1, 2, 3]",  # an array where an object is expected
        '"just a string"',
        "null",
        "{'name': 'single quotes'}",
        '{"name": "\\ud800"}',  # a lone surrogate
        "\x00",
    ],
)
def test_malformed_bodies_are_a_400(world, member, raw):
    before = _snapshot()
    response = member.generic("POST", "/api/v1/jobs/", raw, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert response.json() and _snapshot() == before


def test_a_megabyte_body_is_refused_and_an_oversized_one_too(world, member, settings):
    before = _snapshot()
    padded = json.dumps({**_job(world), "padding": "x" * MB})  # unknown keys are ignored...
    response = member.generic("POST", "/api/v1/jobs/", padded, content_type="application/json")
    assert response.status_code == 201  # ...so a 1 MB body with a valid job is just a job
    before = _snapshot()
    # Over DATA_UPLOAD_MAX_MEMORY_SIZE (Django's 2.5 MB): refused before parsing.
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    huge = json.dumps({**_job(world, name="other"), "command": "x" * (limit + 1)})
    response = member.generic("POST", "/api/v1/jobs/", huge, content_type="application/json")
    assert response.status_code in (400, 413), response.status_code
    assert _snapshot() == before


def test_nul_in_a_query_string_is_a_400_not_a_500(world, member, page_client):
    assert member.get("/api/v1/jobs/", {"state": "queued\x00"}).status_code == 400
    assert member.get("/api/v1/quota-usage/", {"flavor": "F\x00"}).status_code == 400
    assert page_client("pa1_member").get("/jobs/", {"project": "pa1\x00"}).status_code == 400


def test_nul_in_a_multipart_body_is_a_400_not_a_500(world, member):
    # DRF parses multipart on every endpoint; a NUL in a slug looked up in PostgreSQL (flavor,
    # priority) was a DataError → 500 (found by a random schemathesis run on POST /nodes/).
    before = _snapshot()
    body = {k: str(v) for k, v in _job(world, flavor="F\x00").items()}
    response = member.post("/api/v1/jobs/", body, format="multipart")
    assert response.status_code == 400 and "flavor" in response.json(), response.content
    assert _snapshot() == before


@pytest.mark.parametrize("value", INJECTIONS[:5])
def test_valid_injection_strings_in_the_command_are_stored_verbatim_and_shown_escaped(
    world, member, page_client, value
):
    response = member.post("/api/v1/jobs/", _job(world, command=value), format="json")
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert job.command == value and response.json()["command"] == value
    page = page_client("pa1_member").get(f"/jobs/{job.pk}/").content.decode()
    assert "<script>alert(1)</script>" not in page
    if value.startswith("<script>"):
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


FORM_BAD = [
    ("name", "bert\x00"),
    ("name", "x" * MB),
    ("name", "<script>"),
    ("image", "x" * MB),
    ("image", "; rm -rf /"),
    ("image", "a\x00"),
    ("command", "x" * MB),
    ("command", "a\x00b"),
    ("workers", str(2**63)),
    ("workers", "-1"),
    ("workers", "NaN"),
    ("gpus_per_worker", "1e30"),
    ("max_runtime_seconds", "inf"),
    ("project", "1\x00"),
    ("priority_class", "' OR 1=1 --"),
]


@pytest.mark.parametrize(("field", "value"), FORM_BAD, ids=lambda v: repr(v)[:30])
def test_hostile_form_values_are_field_errors(world, page_client, field, value):
    prio = fx.priority("training", 100)
    body = {
        "name": "bert",
        "project": world.pa1.pk,
        "kind": "training",
        "flavor": world.F.pk,
        "priority_class": prio.pk,
        "workers": "1",
        "gpus_per_worker": "1",
        "image": "pytorch:2.3",
        "command": "python train.py",
        "max_runtime_seconds": "3600",
        field: value,
    }
    before = _snapshot()
    response = page_client("pa1_member").post("/jobs/new/", body)
    # The form page answers 200 with the form and its errors (the pages' pattern, tests/pages).
    assert response.status_code == 200
    assert field in response.context["form"].errors, response.context["form"].errors
    assert _snapshot() == before


def test_the_slurm_script_hands_the_command_to_bash_as_one_quoted_word(tmp_path):
    """The batch script is run by a real bash with srun replaced by a function that prints its
    arguments: the hostile command arrives as one argument, byte for byte, and nothing runs."""
    command = "; touch PWNED; echo $(id) `id` 'q' \"d\" \\ && rm -rf / #\nsecond line"
    spec = JobSpec(
        job_id=1,
        name="gp-1",
        kind="training",
        image="pytorch:2.3",
        command=command,
        flavor="F",
        k8s_resource="nvidia.com/gpu",
        slurm_gres="gpu",
        workers=1,
        gpus_per_worker=1,
        gpu_milli=None,
        placement=(),
        labels={"project": "$(touch PWNED2)"},
    )
    script = SlurmBackend(str(tmp_path / "slurm.conf"), jobs_dir=str(tmp_path))._script(spec)
    run = subprocess.run(
        ["/bin/bash", "-c", 'srun() { printf "%s\\0" "$@"; }; source "$0"', "/dev/stdin"],
        input=script,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=10,
        check=True,
    )
    args = run.stdout.split("\x00")[:-1]
    assert args == ["--kill-on-bad-exit=1", "/bin/bash", "-c", command]
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "PWNED2").exists()

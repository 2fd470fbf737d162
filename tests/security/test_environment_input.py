"""Hostile input to a job's working environment (DESIGN §13), as an attacker sends it: mounts the
project does not have, traversal in names and secret references, reserved or repeated variables,
an image from a registry the centre does not allow, a 10 MB value — each a 400 on its field, and
nothing written."""

from __future__ import annotations

import json

import pytest

from jobs.models import Job, JobEvent, ProjectSecret, ProjectStorage
from portal.models import ApprovalRequest
from tests import factories as fx

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db]

MB = 1024 * 1024


def _snapshot():
    return (Job.objects.count(), JobEvent.objects.count(), ApprovalRequest.objects.count())


@pytest.fixture
def storages(world):
    ProjectSecret.objects.create(project=world.pa1, name="hf-token")
    own = ProjectStorage.objects.create(
        project=world.pa1,
        name="data",
        kind="hostpath",
        host_path="/shared/pa1/data",
        mount_path="/data",
        read_only=True,
    )
    ProjectStorage.objects.create(
        project=world.pa1,
        name="old",
        kind="hostpath",
        host_path="/shared/pa1/old",
        mount_path="/old",
        active=False,
    )
    ProjectStorage.objects.create(
        project=world.pb,
        name="secret-data",
        kind="nfs",
        nfs_server="nfs.b",
        nfs_path="/b",
        mount_path="/b",
    )
    return own


@pytest.fixture
def member(world, api, storages):
    fx.priority("training", 100)
    return api(world.users["pa1_member"])


def _job(world, **changes):
    body = {
        "name": "bert",
        "project": world.pa1.pk,
        "kind": "training",
        "flavor": "F",
        "priority": "training",
        "image": "pytorch:2.3",
        "command": "python train.py",
        "max_runtime_seconds": 3600,
    }
    body.update(changes)
    return body


def _refused(response, field, before, says=""):
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    keys = [key for key in body if key == field or key.startswith(field + ".")]  # env.0.name
    assert keys, body
    text = json.dumps([body[key] for key in keys], ensure_ascii=False)
    assert says in text, body
    assert _snapshot() == before


HOSTILE = [
    ("mounts", ["secret-data"], "Not a storage of project pa1"),  # another project's storage
    ("mounts", ["old"], "Not a storage of project pa1"),  # removed (inactive)
    ("mounts", ["../../etc"], "Not a storage"),
    ("mounts", ["data", "data"], "once"),
    ("mounts", "data", ""),  # a string where a list is expected
    ("mounts", [{"name": "data"}], ""),
    ("mounts", ["x"] * 17, ""),
    ("env", [{"name": "../x", "value": "1"}], "Variable 1"),
    ("env", [{"name": "A B", "value": "1"}], "Variable 1"),
    ("env", [{"name": "1ABC", "value": "1"}], "Variable 1"),
    ("env", [{"name": "PATH\x00", "value": "1"}], ""),
    ("env", [{"name": "GPUPOOL_CHECKPOINT_DIR", "value": "/etc"}], "GPUPOOL_"),
    ("env", [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "once"),
    ("env", [{"name": "A", "secret": "../../etc/passwd", "key": "x"}], "Secret name"),
    ("env", [{"name": "A", "secret": "s", "key": ".."}], "Secret key"),
    ("env", [{"name": "A", "secret": "s", "key": "a/b"}], "Secret key"),
    ("env", [{"name": "A", "value": "1", "secret": "s", "key": "k"}], "either name and value"),
    ("env", [{"name": "A"}], "either"),
    ("env", [{"name": "A", "value": "x" * (33 * 1024)}], ""),
    ("env", [{"name": f"V{i}", "value": "x" * (30 * 1024)} for i in range(9)], "KiB"),
    ("env", [{"name": f"V{i}", "value": "1"} for i in range(65)], ""),
    ("env", {"A": "1"}, ""),
    ("env", [["A", "1"]], ""),
    ("expose_port", 0, ""),
    ("expose_port", 65536, ""),
    ("expose_port", "22; rm -rf /", ""),
]


@pytest.mark.parametrize(("field", "value", "says"), HOSTILE, ids=lambda v: repr(v)[:40])
def test_hostile_environment_values_are_refused_on_their_field(world, member, field, value, says):
    before = _snapshot()
    response = member.post("/api/v1/jobs/", _job(world, **{field: value}), format="json")
    _refused(response, field, before, says)


@pytest.mark.parametrize(
    "entry",
    [{"name": "N", "value": 5}, {"name": "N", "value": 1e3}, {"name": "N", "value": -0.5},
     {"name": "N", "secret": 5, "key": "k"}, {"name": "N", "secret": "s", "key": 7}],
    ids=lambda e: repr(e),
)
def test_item22_an_env_entry_sent_as_a_number_is_refused_not_stored_as_text(world, api, member, entry):
    """A number was turned into text (5 → "5", 1e3 → "1000.0") and stored without a word. The job
    API and the templates' values refuse it on the entry, and nothing is written."""
    from jobs.models import JobTemplate

    before = _snapshot()
    response = member.post("/api/v1/jobs/", _job(world, env=[entry]), format="json")
    _refused(response, "env", before, 'send a number in quotes, e.g. \\"5\\"')
    values = {k: v for k, v in _job(world, env=[entry]).items() if k != "project"}
    template = member.post("/api/v1/job-templates/", {"name": "t", "project": world.pa1.pk, "values": values},
                           format="json")
    assert template.status_code == 400 and "env" in json.dumps(template.json()), template.content[:300]
    assert not JobTemplate.objects.exists()


def test_a_port_on_a_training_job_is_refused(world, member):
    before = _snapshot()
    _refused(
        member.post("/api/v1/jobs/", _job(world, expose_port=8888), format="json"), "expose_port", before
    )


def test_an_image_from_a_registry_the_centre_does_not_allow_is_refused(world, member, settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "REGISTRY_ALLOWLIST": ["registry.centre.cn", "nvcr.io/nvidia"]}
    before = _snapshot()
    for image in (
        "pytorch:2.3",
        "evil.example/pytorch:2.3",
        "nvcr.io/other/x:1",
        "registry.centre.cn.evil.io/a",
    ):
        response = member.post("/api/v1/jobs/", _job(world, image=image), format="json")
        _refused(response, "image", before, "centre's registries")
    for image in ("registry.centre.cn/ai/pytorch:2.3", "nvcr.io/nvidia/pytorch:24.01-py3"):
        response = member.post(
            "/api/v1/jobs/", _job(world, image=image, name=f"ok{len(image)}"), format="json"
        )
        assert response.status_code == 201, response.content


def test_a_10_mb_env_value_is_a_400_and_writes_nothing(world, member):
    before = _snapshot()
    body = json.dumps(_job(world, env=[{"name": "BIG", "value": "x" * (10 * MB)}]))
    response = member.generic("POST", "/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400, response.status_code
    assert _snapshot() == before


def test_a_secret_is_stored_as_a_reference_and_a_value_verbatim(world, member):
    env = [
        {"name": "HF_TOKEN", "secret": "hf-token", "key": "token"},
        {"name": "NOTE", "value": "$(reboot) 'x'"},
    ]
    response = member.post("/api/v1/jobs/", _job(world, env=env, mounts=["data"]), format="json")
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert job.env == env
    assert response.json()["mounts"] == [{"name": "data", "mount_path": "/data", "read_only": True}]


FORM_HOSTILE = [
    ("env_text", "NO_EQUALS_SIGN"),
    ("env_text", "../x=1"),
    ("env_text", "GPUPOOL_JOB_ID=7"),
    ("env_text", "BIG=" + "x" * MB),
    ("secret_env_text", "TOKEN=../../etc/passwd"),
    ("secret_env_text", "TOKEN=no-slash"),
    ("mounts", "999999"),
]


def _form(world, **changes) -> dict:
    body = {
        "name": "bert",
        "project": world.pa1.pk,
        "kind": "training",
        "flavor": world.F.pk,
        "priority_class": fx.priority("training", 100).pk,
        "workers": "1",
        "gpus_per_worker": "1",
        "image": "pytorch:2.3",
        "max_runtime_seconds": "3600",
    }
    return {**body, **changes}


def _form_refused(page_client, persona, body, field) -> str:
    before = _snapshot()
    response = page_client(persona).post("/jobs/new/", body)
    # The form page answers 200 with the form and its errors (the pages' pattern, tests/pages).
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors, errors
    assert _snapshot() == before
    return " ".join(errors[field])


@pytest.mark.parametrize(("field", "value"), FORM_HOSTILE, ids=lambda v: repr(v)[:30])
def test_hostile_environment_form_values_are_field_errors(world, page_client, storages, field, value):
    _form_refused(page_client, "pa1_member", _form(world, **{field: value}), field)


def test_the_form_refuses_another_projects_storage(world, page_client, storages):
    # Not even offered to a member of pa1 only...
    other = ProjectStorage.objects.get(name="secret-data")
    _form_refused(page_client, "pa1_member", _form(world, mounts=[str(other.pk)]), "mounts")
    # ...and offered to a department admin who submits to pa too, but not for a job of pa1.
    pa_data = ProjectStorage.objects.create(
        project=world.pa, name="pa-data", kind="hostpath", host_path="/shared/pa", mount_path="/pa"
    )
    said = _form_refused(page_client, "a_admin", _form(world, mounts=[str(pa_data.pk)]), "mounts")
    assert "storages of the job's project only" in said


def test_item17_the_form_names_the_declared_secrets_and_refuses_any_other(world, page_client, storages):
    """The secrets' textarea says which Secrets the user's projects declare; the portal's own
    Secret, another project's or an undeclared one is a field error, and nothing is written."""
    ProjectSecret.objects.create(project=world.pb, name="pb-token")
    form = page_client("pa1_member").get("/jobs/new/").content.decode()
    assert "Secrets your projects declare: pa1 / hf-token." in form and "pb-token" not in form
    for line in ("DB=gpupool-secrets/DATABASE_URL", "KEY=gpupool-secrets/SECRET_KEY", "T=pb-token/token"):
        said = _form_refused(page_client, "pa1_member", _form(world, secret_env_text=line), "secret_env_text")
        assert "is not a secret of project pa1" in said
    response = page_client("pa1_member").post("/jobs/new/", _form(world, secret_env_text="T=hf-token/token"))
    assert response.status_code == 302, response.context["form"].errors
    assert Job.objects.get().env == [{"name": "T", "secret": "hf-token", "key": "token"}]
    ProjectSecret.objects.filter(project=world.pb).update(active=False)
    none = page_client("pb_member").get("/jobs/new/").content.decode()
    assert "Your projects declare no secrets yet" in none

"""Submission templates and project storages through the API (issue 22 item 6): every persona
against every endpoint (another user's private template and another tenant's storages are 404),
submitting from a template checks everything again, hostile values are a 400 with nothing written."""

import pytest
from django.urls import reverse

from jobs.models import Job, JobEvent, JobTemplate, ProjectSecret, ProjectStorage
from tests import factories as fx

pytestmark = pytest.mark.django_db

VALUES = {
    "name": "bert",
    "kind": "training",
    "flavor": "F",
    "priority": "training",
    "image": "pytorch:2.3",
    "command": "python train.py --data /data",
    "workers": 1,
    "gpus_per_worker": 2,
    "max_runtime_seconds": 3600,
    "mounts": ["data"],
    "env": [{"name": "EPOCHS", "value": "3"}, {"name": "HF_TOKEN", "secret": "hf-token", "key": "token"}],
}


@pytest.fixture
def storages(world):
    fx.priority("training", 100)
    ProjectSecret.objects.create(project=world.pa1, name="hf-token", note="Hugging Face")
    ProjectSecret.objects.create(project=world.pa1, name="old-token", active=False)
    ProjectSecret.objects.create(project=world.pb, name="pb-token")
    data = ProjectStorage.objects.create(
        project=world.pa1,
        name="data",
        kind="hostpath",
        host_path="/srv/pa1/data",
        mount_path="/data",
        read_only=True,
    )
    work = ProjectStorage.objects.create(
        project=world.pa1,
        name="work",
        kind="hostpath",
        host_path="/srv/pa1/work",
        mount_path="/work",
        checkpoints=True,
    )
    ProjectStorage.objects.create(
        project=world.pb, name="data", kind="nfs", nfs_server="nfs.b", nfs_path="/b", mount_path="/data"
    )
    return {"data": data, "work": work}


def _create(api, world, user="pa1_member", **changes):
    body = {"name": "BERT fine-tune", "project": world.pa1.pk, "values": VALUES, **changes}
    return api(world.users[user]).post(reverse("api:jobtemplate-list"), body, format="json")


def _template(api, world, user="pa1_member", **changes) -> dict:
    response = _create(api, world, user, **changes)
    assert response.status_code == 201, response.content
    return response.json()


def _nothing_written():
    return JobTemplate.objects.count() == 0 and Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_a_member_saves_a_template_holding_the_submission_body(api, world, storages):
    body = _template(api, world)
    assert body["owner"] == "pa1_member" and body["shared"] is False and body["project"] == world.pa1.pk
    assert body["values"]["mounts"] == ["data"]
    assert body["values"]["flavor"] == "F" and body["values"]["priority"] == "training"
    assert body["values"]["env"] == VALUES["env"]
    listed = api(world.users["pa1_member"]).get(reverse("api:jobtemplate-list")).json()["results"]
    assert [t["id"] for t in listed] == [body["id"]]


@pytest.mark.parametrize("viewer", ["pa1_admin", "a_admin", "platform", "auditor", "pb_member", "outsider"])
def test_a_private_template_is_404_for_everyone_else(api, world, storages, viewer):
    template = _template(api, world)
    client = api(world.users[viewer])
    detail = reverse("api:jobtemplate-detail", args=[template["id"]])
    assert client.get(detail).status_code == 404
    assert client.patch(detail, {"name": "mine"}, format="json").status_code == 404
    assert client.delete(detail).status_code == 404
    submit = reverse("api:jobtemplate-submit", args=[template["id"]])
    assert client.post(submit, {"name": "stolen"}, format="json").status_code == 404
    assert client.get(reverse("api:jobtemplate-list")).json()["results"] == []
    assert JobTemplate.objects.get().name == "BERT fine-tune" and Job.objects.count() == 0


def test_only_project_admins_share_and_members_of_the_project_use_shared_ones(api, world, storages):
    refused = _create(api, world, shared=True)
    assert refused.status_code == 400 and list(refused.json()) == ["shared"]
    shared = _template(api, world, "pa1_admin", shared=True)
    assert shared["shared"] is True
    member = api(world.users["pa1_member"])
    assert [t["id"] for t in member.get(reverse("api:jobtemplate-list")).json()["results"]] == [shared["id"]]
    # A member uses it but does not change it; another tenant does not see it.
    detail = reverse("api:jobtemplate-detail", args=[shared["id"]])
    assert member.patch(detail, {"name": "x"}, format="json").status_code == 403
    assert member.delete(detail).status_code == 403
    assert api(world.users["pb_member"]).get(detail).status_code == 404
    # The department's admin administers the project: may delete the shared template.
    assert api(world.users["a_admin"]).delete(detail).status_code == 204
    assert not JobTemplate.objects.exists()


def test_a_non_member_cannot_save_a_template_for_a_project(api, world, storages):
    assert _create(api, world, "pb_member").status_code == 400  # pa1 is not a project they see
    assert _create(api, world, "a_finance").status_code == 403  # they see it, may not submit there
    assert _nothing_written()


def test_submitting_from_a_template_makes_the_job_as_the_job_api_shows_it(api, world, storages):
    template = _template(api, world)
    client = api(world.users["pa1_member"])
    response = client.post(
        reverse("api:jobtemplate-submit", args=[template["id"]]), {"name": "bert-2"}, format="json"
    )
    assert response.status_code == 201, response.content
    job = Job.objects.get()
    assert response.json() == client.get(reverse("api:job-detail", args=[job.pk])).json()
    assert response.json()["name"] == "bert-2" and response.json()["gpus_per_worker"] == 2
    assert response.json()["mounts"] == [{"name": "data", "mount_path": "/data", "read_only": True}]
    assert response.json()["checkpoint_dir"] == f"/work/.gpupool/checkpoints/{job.pk}"
    assert job.env == VALUES["env"] and job.submitted_by == world.users["pa1_member"]


def test_a_template_whose_mount_was_removed_since_is_refused_naming_it(api, world, storages):
    template = _template(api, world)
    ProjectStorage.objects.filter(pk=storages["data"].pk).update(active=False)
    response = api(world.users["pa1_member"]).post(
        reverse("api:jobtemplate-submit", args=[template["id"]]), {}, format="json"
    )
    assert response.status_code == 400
    assert list(response.json()) == ["mounts"]
    assert "data" in response.json()["mounts"][0] and "pa1" in response.json()["mounts"][0]
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"workers": "many"}, "workers"),
        ({"gpus_per_worker": 10**6}, "gpus_per_worker"),
        ({"mounts": ["../../etc"]}, "mounts"),
        ({"mounts": ["data", "data"]}, "mounts"),
        ({"env": [{"name": "../PATH", "value": "x"}]}, "env"),
        ({"env": [{"name": "BIG", "value": "x" * (100 * 1024)}]}, "env"),  # over 32 KiB
        ({"expose_port": 8888}, "expose_port"),  # a training job exposes no port
        ({"priority": "no-such-class"}, "priority"),
        ({"name": "Not A Name"}, "name"),
        ({"image": "evil image;rm -rf /"}, "image"),
    ],
)
def test_overrides_are_checked_as_a_submission_and_write_nothing(api, world, storages, overrides, field):
    template = _template(api, world)
    response = api(world.users["pa1_member"]).post(
        reverse("api:jobtemplate-submit", args=[template["id"]]), overrides, format="json"
    )
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


@pytest.mark.parametrize(
    "values, field",
    [
        ({**VALUES, "mounts": ["data", "secrets"]}, "mounts"),  # not a storage of pa1
        ({**VALUES, "mounts": ["/etc/shadow"]}, "mounts"),
        ({**VALUES, "env": [{"name": "GPUPOOL_CHECKPOINT_DIR", "value": "/"}]}, "env"),
        ({**VALUES, "env": [{"name": "A", "secret": "../x", "key": "k"}]}, "env"),
        ({**VALUES, "env": [{"name": "BIG", "value": "x" * (100 * 1024)}]}, "env"),
        ({**VALUES, "gpus_per_worker": 64}, "gpus_per_worker"),  # can never run: F has 8 per node
        ({k: v for k, v in VALUES.items() if k != "image"}, "image"),
        ("not an object", "non_field_errors"),
    ],
)
def test_hostile_template_values_are_refused_with_nothing_written(api, world, storages, values, field):
    response = _create(api, world, values=values)
    assert response.status_code == 400, response.content
    assert field in str(response.json()), response.json()
    assert _nothing_written()


def test_a_10_mb_env_value_is_a_400_with_nothing_written(api, world, storages):
    template = _template(api, world)
    client = api(world.users["pa1_member"])
    client.raise_request_exception = False  # Django refuses the body before any view: a 400
    huge = {"env": [{"name": "BIG", "value": "x" * (10 * 1024 * 1024)}]}
    submitted = client.post(reverse("api:jobtemplate-submit", args=[template["id"]]), huge, format="json")
    assert submitted.status_code == 400
    body = {"name": "huge", "project": world.pa1.pk, "values": {**VALUES, **huge}}
    assert client.post(reverse("api:jobtemplate-list"), body, format="json").status_code == 400
    assert JobTemplate.objects.count() == 1 and Job.objects.count() == 0


def test_an_image_from_a_registry_not_allowed_is_refused(api, world, storages, settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "REGISTRY_ALLOWLIST": ["registry.centre.cn"]}
    response = _create(api, world)
    assert response.status_code == 400 and "image" in response.json()["values"]
    assert _nothing_written()


def test_patch_changes_the_given_values_and_checks_them_again(api, world, storages):
    template = _template(api, world)
    client = api(world.users["pa1_member"])
    detail = reverse("api:jobtemplate-detail", args=[template["id"]])
    changed = client.patch(detail, {"name": "renamed", "values": {"workers": 2}}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["name"] == "renamed"
    assert changed.json()["values"]["workers"] == 2 and changed.json()["values"]["mounts"] == ["data"]
    refused = client.patch(detail, {"values": {"mounts": ["nope"]}}, format="json")
    assert refused.status_code == 400
    assert JobTemplate.objects.get().values["mounts"] == ["data"]
    assert client.patch(detail, {"shared": True}, format="json").status_code == 400


def test_the_same_name_twice_in_a_project_is_a_400(api, world, storages):
    _template(api, world)
    response = _create(api, world)
    assert response.status_code == 400 and list(response.json()) == ["name"]
    assert JobTemplate.objects.count() == 1


@pytest.mark.parametrize("viewer", ["pa1_member", "pa1_admin", "a_admin", "a_finance", "platform", "auditor"])
def test_the_projects_storages_are_listed_to_whoever_sees_the_project(api, world, storages, viewer):
    ProjectStorage.objects.create(
        project=world.pa1, name="old", kind="hostpath", host_path="/srv/old", mount_path="/old", active=False
    )
    response = api(world.users[viewer]).get(reverse("api:project-storages", args=[world.pa1.pk]))
    assert response.status_code == 200
    rows = response.json()["results"]
    assert [r["name"] for r in rows] == ["data", "work"]
    assert rows[0] == {
        "id": storages["data"].pk,
        "name": "data",
        "kind": "hostpath",
        "mount_path": "/data",
        "read_only": True,
        "checkpoints": False,
        "quota_note": "",
    }
    assert rows[1]["checkpoints"] is True


@pytest.mark.parametrize("viewer", ["pb_member", "b_admin", "outsider"])
def test_another_tenants_storages_are_404(api, world, storages, viewer):
    response = api(world.users[viewer]).get(reverse("api:project-storages", args=[world.pa1.pk]))
    assert response.status_code == 404
    assert api(world.users[viewer]).get(reverse("api:project-storages", args=[999999])).status_code == 404


@pytest.mark.parametrize("viewer", ["pa1_member", "pa1_admin", "a_admin", "a_finance", "platform", "auditor"])
def test_item17_the_projects_secrets_are_listed_by_name_to_whoever_sees_it(api, world, storages, viewer):
    response = api(world.users[viewer]).get(reverse("api:project-secrets", args=[world.pa1.pk]))
    assert response.status_code == 200
    rows = response.json()["results"]
    assert [(r["name"], r["note"]) for r in rows] == [("hf-token", "Hugging Face")]  # not the inactive one
    assert set(rows[0]) == {"id", "name", "note"}  # names only: the portal holds no value


@pytest.mark.parametrize("viewer", ["pb_member", "b_admin", "outsider"])
def test_item17_another_tenants_secrets_are_404(api, world, storages, viewer):
    response = api(world.users[viewer]).get(reverse("api:project-secrets", args=[world.pa1.pk]))
    assert response.status_code == 404
    assert api(world.users[viewer]).get(reverse("api:project-secrets", args=[999999])).status_code == 404


"""Submission templates through their services (issue 22 item 6): who sees and changes which
template, values checked as a submission is, a template submitting through ``job_submit`` again;
and the demo's storages and shared template, seeded only when missing."""

import io

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management import call_command

from jobs import templates_service as templates
from jobs.models import Job, JobTemplate, ProjectStorage
from portal.models import Project, User
from tests import factories as fx

pytestmark = pytest.mark.django_db

VALUES = {
    "name": "bert",
    "kind": "training",
    "flavor": "F",
    "priority": "training",
    "image": "pytorch:2.3",
    "workers": 1,
    "gpus_per_worker": 1,
    "max_runtime_seconds": 3600,
    "mounts": ["data"],
    "env": [{"name": "EPOCHS", "value": "3"}],
}


@pytest.fixture
def data(world):
    fx.priority("training", 100)
    return ProjectStorage.objects.create(
        project=world.pa1,
        name="data",
        kind="hostpath",
        host_path="/srv/data",
        mount_path="/data",
        read_only=True,
    )


def _save(world, user="pa1_member", **kw):
    kw = {"name": "t", "values": VALUES, **kw}
    return templates.template_save(actor=world.users[user], project=world.pa1, **kw)


def test_visible_templates_are_ones_own_and_the_shared_ones_of_projects_one_submits_to(world, data):
    private = _save(world)
    shared = _save(world, "pa1_admin", name="shared", shared=True)
    own_of_admin = _save(world, "pa1_admin", name="admin's own")

    def seen(user):
        return set(templates.visible_templates(world.users[user]))

    assert seen("pa1_member") == {private, shared}
    assert seen("pa1_admin") == {shared, own_of_admin}
    assert seen("a_admin") == {shared}  # administers the project's department: may submit there
    assert seen("platform") == {shared}  # nobody sees another user's private template
    assert seen("pb_member") == seen("outsider") == seen("auditor") == seen("a_finance") == set()


def test_saving_needs_the_right_to_submit_and_sharing_the_project_admin_role(world, data):
    with pytest.raises(PermissionDenied):
        _save(world, "pb_member")
    with pytest.raises(PermissionDenied):
        _save(world, "a_finance")
    with pytest.raises(ValidationError) as refused:
        _save(world, shared=True)
    assert list(refused.value.message_dict) == ["shared"]
    assert not JobTemplate.objects.exists()
    assert _save(world, "a_admin", shared=True).shared


def test_only_the_owner_or_the_projects_admins_change_a_template(world, data):
    shared = _save(world, "pa1_admin", name="shared", shared=True)
    private = _save(world)
    for user, template in (("pa1_member", shared), ("pa1_admin", private), ("platform", private)):
        with pytest.raises(PermissionDenied):
            templates.template_delete(actor=world.users[user], template=template)
        with pytest.raises(PermissionDenied):
            templates.template_update(actor=world.users[user], template=template, name="x")
    templates.template_update(actor=world.users["a_admin"], template=shared, name="renamed")
    templates.template_delete(actor=world.users["pa1_member"], template=private)
    assert list(JobTemplate.objects.values_list("name", flat=True)) == ["renamed"]


@pytest.mark.parametrize(
    "values, field",
    [
        ({**VALUES, "mounts": ["data", "../../etc"]}, "mounts"),
        ({**VALUES, "workers": "4"}, "workers"),
        ({**VALUES, "workers": True}, "workers"),
        ({**VALUES, "checkpointing": "yes"}, "checkpointing"),
        ({**VALUES, "shell": "rm -rf /"}, "values"),
        ({**VALUES, "project": 999999}, "project"),
        ({**VALUES, "flavor": "no-such"}, "flavor"),
        ({**VALUES, "name": "Bad Name!"}, "name"),
        ({**VALUES, "env": [{"name": "X", "value": "v" * (40 * 1024)}]}, "env"),
        ({**VALUES, "env": [{"name": "1BAD", "value": "v"}]}, "env"),
        ({**VALUES, "kind": "dev", "gpus_per_worker": 2}, "kind"),
        ({**VALUES, "expose_port": 22}, "expose_port"),
        ({k: v for k, v in VALUES.items() if k != "flavor"}, "flavor"),
        (["not", "a", "dict"], "values"),
    ],
)
def test_values_are_checked_as_a_submission_with_nothing_written(world, data, values, field):
    with pytest.raises(ValidationError) as refused:
        _save(world, values=values)
    assert field in refused.value.message_dict, refused.value.message_dict
    assert not JobTemplate.objects.exists()


def test_a_template_submits_through_job_submit_and_a_removed_mount_is_refused(world, data):
    template = _save(world)
    job = templates.template_submit(
        actor=world.users["pa1_member"], template=template, overrides={"workers": 2}
    )
    assert (job.name, job.workers, job.env) == ("bert", 2, VALUES["env"])
    assert [m["name"] for m in job.mounts] == ["data"] and job.mounts[0]["mount_path"] == "/data"
    data.active = False
    data.save()
    with pytest.raises(ValidationError) as refused:
        templates.template_submit(actor=world.users["pa1_member"], template=template)
    assert "data" in " ".join(refused.value.message_dict["mounts"])
    assert Job.objects.count() == 1


def test_a_jobs_values_leave_out_a_storage_removed_since(world, data):
    job = templates.template_submit(actor=world.users["pa1_member"], template=_save(world))
    ProjectStorage.objects.filter(pk=data.pk).delete()
    job.refresh_from_db()
    values, left_out = templates.job_values(job)
    assert values["mounts"] == [] and left_out == ["data"]
    assert values["flavor"] == "F" and values["priority"] == "training" and values["env"] == VALUES["env"]
    again = templates.template_save(
        actor=world.users["pa1_member"], project=job.project, name="again", values=values
    )
    assert again.values["mounts"] == []


def _demo_storages():
    return list(
        ProjectStorage.objects.order_by("pk").values_list("project__code", "name", "mount_path", "active")
    )


def test_the_demo_gets_data_and_work_storages_and_a_shared_template_only_when_missing():
    call_command("seed_demo", stdout=io.StringIO())
    projects = Project.objects.count()
    assert ProjectStorage.objects.filter(name="data", read_only=True, mount_path="/data").count() == projects
    assert (
        ProjectStorage.objects.filter(name="work", checkpoints=True, mount_path="/work").count() == projects
    )
    template = JobTemplate.objects.get(shared=True)
    assert template.project.code == "nlp-llm" and template.values["mounts"] == ["data"]
    # Users changed the demo: a storage moved, one deactivated, another removed, the template renamed.
    ProjectStorage.objects.filter(project__code="nlp-llm", name="data").update(mount_path="/datasets")
    ProjectStorage.objects.filter(project__code="cv-gen", name="work").update(active=False)
    ProjectStorage.objects.filter(project__code="ad-bev", name="data").delete()
    before = [row for row in _demo_storages() if row[:2] != ("ad-bev", "data")]
    call_command("seed_demo", stdout=io.StringIO())
    after = _demo_storages()
    assert after[: len(before)] == before  # unchanged
    assert after[len(before) :] == [("ad-bev", "data", "/data", True)]  # the removed one comes back
    # alice (a member of nlp-llm) submits from the shared template: the storages' checks pass.
    job = templates.template_submit(actor=User.objects.get(username="alice"), template=template)
    assert job.checkpoint["subdir"] == f".gpupool/checkpoints/{job.pk}"
    assert job.mounts[0]["mount_path"] == "/datasets"

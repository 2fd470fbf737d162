"""The template pages (issue 22 item 6): the submission form filled from a template (its mount
checked), saving a template from the form and from a job, the list with use and delete, and
"submit a copy" carrying mounts, env and the exposed port (a storage removed since left out,
with a note)."""

import re

import pytest

from jobs import templates_service as templates
from jobs.models import Job, JobTemplate, ProjectSecret, ProjectStorage
from jobs.services import job_submit

pytestmark = pytest.mark.django_db

VALUES = {
    "name": "bert",
    "kind": "training",
    "flavor": "F",
    "priority": "training",
    "image": "pytorch:2.3",
    "command": "python train.py",
    "workers": 1,
    "gpus_per_worker": 2,
    "max_runtime_seconds": 7200,
    "mounts": ["data"],
    "env": [{"name": "EPOCHS", "value": "3"}, {"name": "HF_TOKEN", "secret": "hf", "key": "token"}],
}


@pytest.fixture
def storages(world, prio):
    for secret in ("hf", "s"):  # the Secrets the templates' env reads, declared for pa1
        ProjectSecret.objects.create(project=world.pa1, name=secret)
    make = ProjectStorage.objects.create
    return {
        "data": make(project=world.pa1, name="data", kind="hostpath", host_path="/srv/d", mount_path="/data"),
        "work": make(project=world.pa1, name="work", kind="hostpath", host_path="/srv/w", mount_path="/work"),
    }


def _checked_mounts(html: str) -> set[str]:
    tags = re.findall(r'<input type="checkbox" name="mounts"[^>]*>', html)
    return {re.search(r'value="(\d+)"', t).group(1) for t in tags if " checked" in t}


def _field(html: str, name: str) -> str:
    match = re.search(rf'<textarea name="{name}"[^>]*>\n?(.*?)</textarea>', html, re.S)
    return match.group(1) if match else ""


def test_the_form_is_filled_from_a_template_with_its_mount_checked(page_client, world, storages):
    template = templates.template_save(
        actor=world.users["pa1_member"], project=world.pa1, name="t", values=VALUES
    )
    html = page_client("pa1_member").get(f"/jobs/new/?template={template.pk}").content.decode()
    assert _checked_mounts(html) == {str(storages["data"].pk)}
    assert 'value="bert"' in html and 'value="pytorch:2.3"' in html
    assert _field(html, "env_text") == "EPOCHS=3" and _field(html, "secret_env_text") == "HF_TOKEN=hf/token"
    assert f'<option value="{template.pk}" selected>' in html  # the picker shows the chosen one


def test_another_users_private_template_fills_nothing(page_client, world, storages):
    template = templates.template_save(
        actor=world.users["pa1_member"], project=world.pa1, name="t", values=VALUES
    )
    html = page_client("pa1_admin").get(f"/jobs/new/?template={template.pk}").content.decode()
    assert "pytorch:2.3" not in html and _checked_mounts(html) == set()
    assert 'id="id_template"' not in html  # no template to offer: no picker


def test_a_template_whose_storage_was_removed_leaves_it_out_with_a_note(page_client, world, storages):
    template = templates.template_save(
        actor=world.users["pa1_member"], project=world.pa1, name="t", values=VALUES
    )
    storages["data"].delete()
    html = page_client("pa1_member").get(f"/jobs/new/?template={template.pk}").content.decode()
    assert _checked_mounts(html) == set()
    assert "Left out: data — no longer a storage of project pa1." in html


def _form(world, prio, storages, **changes):
    return {
        "name": "bert-large",
        "project": world.pa1.pk,
        "kind": "training",
        "flavor": world.F.pk,
        "priority_class": prio.pk,
        "workers": "1",
        "gpus_per_worker": "2",
        "image": "pytorch:2.3",
        "command": "python train.py",
        "max_runtime_seconds": "7200",
        "mounts": [storages["data"].pk, storages["work"].pk],
        "env_text": "EPOCHS=3",
        "secret_env_text": "HF_TOKEN=hf/token",
        "template_name": "My BERT",
        "save_template": "1",
        **changes,
    }


def test_save_as_template_from_the_form_saves_the_values_and_submits_nothing(
    page_client, world, prio, storages
):
    response = page_client("pa1_member").post("/jobs/new/", _form(world, prio, storages))
    template = JobTemplate.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/new/?template={template.pk}"
    assert (template.name, template.owner, template.shared) == ("My BERT", world.users["pa1_member"], False)
    assert template.values["mounts"] == ["data", "work"] and template.values["flavor"] == "F"
    assert template.values["env"] == [
        {"name": "EPOCHS", "value": "3"},
        {"name": "HF_TOKEN", "secret": "hf", "key": "token"},
    ]
    assert Job.objects.count() == 0


def test_save_as_template_shows_the_refusals_on_the_form(page_client, world, prio, storages):
    client = page_client("pa1_member")
    response = client.post("/jobs/new/", _form(world, prio, storages, template_shared="1"))
    assert response.status_code == 200
    assert (
        "Template: Only the project&#x27;s administrators share templates with it."
        in response.content.decode()
    )
    response = client.post("/jobs/new/", _form(world, prio, storages, template_name=""))
    assert "Template: A name of 1–80 characters." in response.content.decode()
    response = client.post("/jobs/new/", _form(world, prio, storages, env_text="BAD NAME=1"))
    assert "env_text" in response.context["form"].errors
    assert not JobTemplate.objects.exists() and not Job.objects.exists()
    admin = page_client("pa1_admin").post("/jobs/new/", _form(world, prio, storages, template_shared="1"))
    assert admin.status_code == 302 and JobTemplate.objects.get().shared


def _job(world, prio, **kw):
    return job_submit(
        actor=world.users["pa1_member"],
        project=world.pa1,
        name="notebook",
        kind=kw.pop("kind", "dev"),
        flavor=world.F,
        priority_class=prio,
        image="jupyter:4",
        max_runtime_seconds=3600,
        mounts=["data", "work"],
        env=[{"name": "A", "value": "1"}, {"name": "T", "secret": "s", "key": "k"}],
        **kw,
    )


def test_save_as_template_from_a_job_page(page_client, world, prio, storages):
    job = _job(world, prio, expose_port=8888)
    client = page_client("pa1_member")
    assert f'href="/jobs/{job.pk}/save-template/"' in client.get(f"/jobs/{job.pk}/").content.decode()
    page = client.get(f"/jobs/{job.pk}/save-template/").content.decode()
    assert 'value="notebook"' in page
    response = client.post(f"/jobs/{job.pk}/save-template/", {"template_name": "Notebook"})
    assert response.status_code == 302 and response["Location"] == "/jobs/templates/"
    values = JobTemplate.objects.get().values
    assert values["mounts"] == ["data", "work"] and values["expose_port"] == 8888 and values["kind"] == "dev"
    refused = page_client("a_finance").post(f"/jobs/{job.pk}/save-template/", {"template_name": "x"})
    assert refused.status_code == 403 and JobTemplate.objects.count() == 1


def test_submit_a_copy_carries_mounts_env_and_port_and_notes_a_removed_storage(
    page_client, world, prio, storages
):
    job = _job(world, prio, expose_port=8888)
    client = page_client("pa1_member")
    html = client.get(f"/jobs/new/?copy={job.pk}").content.decode()
    assert _checked_mounts(html) == {str(storages["data"].pk), str(storages["work"].pk)}
    assert _field(html, "env_text") == "A=1" and _field(html, "secret_env_text") == "T=s/k"
    assert re.search(r'name="expose_port" value="8888"', html)
    storages["work"].delete()
    html = client.get(f"/jobs/new/?copy={job.pk}").content.decode()
    assert _checked_mounts(html) == {str(storages["data"].pk)}
    assert "Left out: work — no longer a storage of project pa1." in html


def test_the_list_offers_use_and_delete_to_who_may(page_client, world, prio, storages):
    shared = templates.template_save(
        actor=world.users["pa1_admin"], project=world.pa1, name="Shared one", values=VALUES, shared=True
    )
    mine = templates.template_save(
        actor=world.users["pa1_member"], project=world.pa1, name="Mine", values=VALUES
    )
    html = page_client("pa1_member").get("/jobs/templates/").content.decode()
    assert "Shared one" in html and "Mine" in html
    assert f"/jobs/new/?template={shared.pk}" in html and f"/jobs/templates/{mine.pk}/delete/" in html
    assert f"/jobs/templates/{shared.pk}/delete/" not in html
    other = page_client("pa1_admin")
    assert "Mine" not in other.get("/jobs/templates/").content.decode()
    assert other.post(f"/jobs/templates/{mine.pk}/delete/").status_code == 404
    response = page_client("pa1_member").post(f"/jobs/templates/{mine.pk}/delete/")
    assert response.status_code == 302 and list(JobTemplate.objects.all()) == [shared]

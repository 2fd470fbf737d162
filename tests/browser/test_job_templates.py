"""Submitting from a template in a real browser (issue 22, "Must show"): the user picks a template
that mounts a storage, the form fills in with the storage's box ticked, the job is submitted, and
the job (its page, and its API as the same signed-in browser reads it) carries the mount."""

import pytest

from jobs.models import Job, ProjectStorage
from jobs.templates_service import template_save
from tests import factories as fx

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_user_submits_from_a_template_with_a_mount(world, browser_for, shot):
    fx.priority("training", 100)
    data = ProjectStorage.objects.create(
        project=world.pa1,
        name="imagenet",
        kind="hostpath",
        host_path="/srv/pa1/imagenet",
        mount_path="/data/imagenet",
        read_only=True,
    )
    scratch = ProjectStorage.objects.create(
        project=world.pa1,
        name="scratch",
        kind="hostpath",
        host_path="/srv/pa1/scratch",
        mount_path="/scratch",
    )
    template = template_save(
        actor=world.users["pa1_admin"],
        project=world.pa1,
        name="ResNet on ImageNet",
        shared=True,
        values={
            "name": "resnet-imagenet",
            "kind": "training",
            "flavor": "F",
            "priority": "training",
            "image": "pytorch:2.3",
            "command": "python train.py --data /data/imagenet",
            "workers": 1,
            "gpus_per_worker": 2,
            "max_runtime_seconds": 7200,
            "mounts": ["imagenet"],
            "env": [{"name": "EPOCHS", "value": "3"}],
        },
    )
    page = browser_for(world.users["pa1_member"], "pw-pa1_member")
    page.goto(page.base + "/jobs/new/")
    page.select_option("#id_template", str(template.pk))
    with page.expect_navigation():
        page.click(".template-picker button[type=submit]")
    assert page.url.endswith(f"/jobs/new/?template={template.pk}")
    assert page.input_value("#id_name") == "resnet-imagenet"
    assert page.is_checked(f"input[name=mounts][value='{data.pk}']")
    assert not page.is_checked(f"input[name=mounts][value='{scratch.pk}']")
    assert page.input_value("#id_env_text") == "EPOCHS=3"
    shot(page, "job-submit-from-template")
    assert Job.objects.count() == 0
    with page.expect_navigation():
        page.click("form button.submit")
    job = Job.objects.get()
    assert page.url.endswith(f"/jobs/{job.pk}/")
    assert "resnet-imagenet" in page.inner_text("h1")
    shot(page, "job-from-template")
    shown = page.request.get(f"{page.base}/api/v1/jobs/{job.pk}/").json()
    assert shown["mounts"] == [{"name": "imagenet", "mount_path": "/data/imagenet", "read_only": True}]
    assert shown["env"] == [{"name": "EPOCHS", "value": "3"}]
    assert job.submitted_by == world.users["pa1_member"] and job.mounts[0]["host_path"] == "/srv/pa1/imagenet"

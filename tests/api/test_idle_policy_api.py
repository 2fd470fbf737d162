"""A project's idle-policy override (DESIGN §16, docs/scheduling.md "Idle policy"):
``/api/v1/projects/{id}/idle-policy/`` — GET for whoever sees the project, PUT/DELETE for platform
admins, bad input a 400 naming the field with nothing changed — and the admin page where the
centre's and the classes' rows are edited."""

import pytest
from django.test import Client
from django.urls import reverse

from jobs.models import IdlePolicy
from tests import factories as fx

pytestmark = pytest.mark.django_db


def _url(project):
    return reverse("api:project-idle-policy", args=[project.pk])


def test_a_platform_admin_sets_changes_and_clears_a_projects_override(world, api):
    client = api(world.users["platform"])
    r = client.get(_url(world.pa1))
    assert r.status_code == 200 and r.json()["override"] is None
    centre = r.json()["centre"]
    r = client.put(_url(world.pa1), {"idle_minutes": 30, "dev_action": "warn"}, format="json")
    assert r.status_code == 200, r.content
    # Left out: the centre's values.
    assert r.json()["override"] == {**centre, "idle_minutes": 30, "dev_action": "warn"}
    r = client.put(_url(world.pa1), {"grace_minutes": 0}, format="json")
    assert r.json()["override"] == {**centre, "idle_minutes": 30, "dev_action": "warn", "grace_minutes": 0}
    assert IdlePolicy.objects.get(project=world.pa1).grace_minutes == 0
    r = client.delete(_url(world.pa1))
    assert r.status_code == 200 and r.json()["override"] is None
    assert not IdlePolicy.objects.filter(project=world.pa1).exists()


@pytest.mark.parametrize("body, field", [
    ({"threshold_pct": 0}, "threshold_pct"), ({"threshold_pct": 101}, "threshold_pct"),
    ({"idle_minutes": 4}, "idle_minutes"), ({"grace_minutes": -1}, "grace_minutes"),
    ({"idle_minutes": "soon"}, "idle_minutes"), ({"idle_minutes": True}, "idle_minutes"),
    ({"dev_action": "explode"}, "dev_action"), ({"idle_mins": 30}, "idle_mins"),
])
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(world, api, body, field):
    IdlePolicy.objects.create(project=world.pa1, idle_minutes=60)
    r = api(world.users["platform"]).put(_url(world.pa1), body, format="json")
    assert r.status_code == 400 and field in r.json(), r.content
    row = IdlePolicy.objects.get(project=world.pa1)
    assert (row.threshold_pct, row.idle_minutes, row.grace_minutes, row.dev_action) == (5, 60, 60, "stop")


@pytest.mark.parametrize("persona, read, write", [
    ("platform", 200, 200), ("auditor", 200, 403), ("a_admin", 200, 403), ("pa1_admin", 200, 403),
    ("pa1_member", 200, 403), ("b_admin", 404, 404), ("pb_member", 404, 404), ("outsider", 404, 404),
])
def test_who_reads_and_who_writes(world, api, persona, read, write):
    client = api(world.users[persona])
    assert client.get(_url(world.pa1)).status_code == read
    assert client.put(_url(world.pa1), {"idle_minutes": 30}, format="json").status_code == write
    assert client.delete(_url(world.pa1)).status_code == write
    assert IdlePolicy.objects.filter(project=world.pa1).exists() is False


def test_the_admin_page_edits_a_projects_override_beside_the_classes(world):
    page = Client(HTTP_ACCEPT_LANGUAGE="en")  # the message is read in English below
    page.force_login(world.users["platform"])
    prio = fx.priority("training", 100, True)
    add = reverse("admin:jobs_idlepolicy_add")
    form = {"threshold_pct": 5, "idle_minutes": 45, "grace_minutes": 10, "dev_action": "warn",
            "training_action": "warn", "inference_action": "off"}
    both = page.post(add, {**form, "priority_class": prio.pk, "project": world.pa1.pk})
    assert both.status_code == 200 and "one priority class or one project, not both" in both.content.decode()
    assert not IdlePolicy.objects.filter(project=world.pa1).exists()
    done = page.post(add, {**form, "project": world.pa1.pk})
    assert done.status_code == 302, done.content.decode()[:2000]
    assert IdlePolicy.objects.get(project=world.pa1).idle_minutes == 45
    listing = page.get(reverse("admin:jobs_idlepolicy_changelist")).content.decode()
    assert world.pa1.code in listing

"""A native Slurm array (``sbatch --array``, DESIGN §11 and §17) on a real cluster, started for this
module as tests/backends/test_slurm_external.py starts its own: each task (``123_4``) is imported as
one external job with its index, all of them tasks of one array in the portal — the record of the
array's still-pending tasks included, which gets its index when it starts — and the array page and
API list them."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.clusters.backends.slurm import FINISHED
from jobs.models import Job, JobArray, JobKind
from jobs.native.backends.slurm_native import array_task
from jobs.native.native_slurm import import_slurm
from tests.backends.test_slurm import _sh
from tests.backends.test_slurm_external import portal, site, slurm  # noqa: F401 - the fixtures
from tests.waiting import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def test_the_array_id_of_a_display_id():
    assert array_task("123_4") == ("123", 4)
    assert array_task("123_[5-9%2]") == ("123", None)
    assert array_task("123") == ("", None) and array_task("123+0") == ("", None)


def _tasks_ended(site, array_id: str) -> list[str] | None:  # noqa: F811
    out = _sh(["sacct", "-X", "-P", "-n", "-j", array_id, "-o", "JobID,State,End"], site.env).stdout
    lines = [line.split("|") for line in out.splitlines() if line]
    done = [display for display, state, end in lines if state.split()[0] in FINISHED and end != "Unknown"]
    return done if len(done) == 4 else None


def test_a_native_array_is_imported_one_record_per_task(slurm, portal, client):  # noqa: F811
    cluster, _f, pe, _pp = portal
    array_id = slurm.sbatch("-J", "sweep", "--array=0-3%2", seconds=2)
    import_slurm(cluster)  # while pending or running: the tasks seen so far join the array
    assert JobArray.objects.filter(cluster=cluster, backend_id=array_id).exists()
    wait_until(lambda: _tasks_ended(slurm, array_id), f"the 4 tasks of {array_id} ended", interval=0.5)
    import_slurm(cluster)

    array = JobArray.objects.get(cluster=cluster, backend_id=array_id)
    tasks = list(array.tasks.order_by("array_index"))
    assert [t.array_index for t in tasks] == [0, 1, 2, 3]
    assert len({t.backend_id for t in tasks}) == 4  # one record per task, each its own Slurm id
    assert all(t.kind == JobKind.EXTERNAL and t.project == pe and t.state == "succeeded" for t in tasks)
    assert (array.size, array.project, array.name) == (4, pe, "sweep")
    assert Job.objects.filter(cluster=cluster, name__startswith="sweep").count() == 4

    again = import_slurm(cluster)  # idempotent
    assert (again.get("created", 0), JobArray.objects.filter(cluster=cluster).count()) == (0, 1)

    client.force_login(slurm_admin())
    body = client.get(reverse("api:array-detail", args=[array.pk])).json()
    assert [t["index"] for t in body["tasks"]] == [0, 1, 2, 3] and body["backend_id"] == array_id
    assert body["states"] == {"succeeded": 4}
    page = client.get(f"/arrays/{array.pk}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert f"Slurm array job {array_id}" in page and "Cancel all unfinished tasks" not in page


def slurm_admin():
    from tests import factories as fx

    return fx.platform_admin()

"""scripts/gpupool_cli.py ``submit --array``, ``--dependency`` and ``array`` against a live portal:
the jobs the portal made checked in the database, a bad spec and a foreign dependency printed as
the portal's refusal with exit status 1."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.utils import translation

from jobs.models import Job, JobArray, JobDependency
from tests import factories as fx
from tests.docs.test_cli import run, token_for

pytestmark = pytest.mark.django_db(transaction=True)

SUBMIT = ("submit", "--project", "pa1", "--flavor", "F", "--gpus", "1", "--priority", "training",
          "--image", "img:1", "--max-runtime", "3600")


def test_an_array_and_a_dependency_from_the_cli(portal, cli, capsys):
    _world, url = portal
    key = token_for(cli, capsys, url, "pa1_member")
    code, out, err = run(cli, capsys, url, *SUBMIT, "--name", "sweep", "--array", "0-9%2", token=key)
    assert code == 0, err
    array = JobArray.objects.get()
    tasks = list(array.tasks.order_by("array_index"))
    assert (array.size, array.max_running, [t.array_index for t in tasks]) == (10, 2, list(range(10)))
    jobs = f"jobs {tasks[0].pk}–{tasks[-1].pk}"
    assert out.strip() == f"array {array.pk} sweep: 10 tasks, at most 2 running at once ({jobs})"

    code, out, err = run(cli, capsys, url, *SUBMIT, "--name", "after",
                         "--dependency", f"afterok:{tasks[0].pk}", token=key)
    assert code == 0, err
    [dep] = JobDependency.objects.all()
    assert (dep.condition, dep.depends_on_id, dep.job.name) == ("after_ok", tasks[0].pk, "after")

    code, out, err = run(cli, capsys, url, "--json", "array", str(array.pk), "--cancel", token=key)
    assert code == 0 and json.loads(out)["cancelled"] == 10
    assert set(array.tasks.values_list("state", flat=True)) == {"cancelled"}
    code, out, err = run(cli, capsys, url, "array", str(array.pk), token=key)
    assert code == 0 and out.splitlines()[0] == f"array {array.pk} sweep [0-9%2]: cancelled 10"


def test_the_cli_prints_the_portals_refusals(portal, cli, capsys):
    world, url = portal
    key = token_for(cli, capsys, url, "pa1_member")
    foreign = fx.submit(world.pb, world.F, gpus=1, name="theirs")
    before = Job.objects.count()
    code, _out, err = run(cli, capsys, url, *SUBMIT, "--name", "bad", "--array", "5-2", token=key)
    with translation.override(settings.LANGUAGE_CODE):  # the CLI sends no Accept-Language
        empty = translation.gettext(
            "The range %(r)s is empty: its end is before its start, or its step is 0.") % {"r": "5-2"}
        unseen = translation.gettext("Job %(n)d does not exist or you cannot see it.") % {"n": foreign.pk}
    assert code == 1 and "400" in err and empty in err
    code, _out, err = run(cli, capsys, url, *SUBMIT, "--name", "bad",
                          "--dependency", f"after_ok:{foreign.pk}", token=key)
    assert code == 1 and unseen in err
    assert Job.objects.count() == before

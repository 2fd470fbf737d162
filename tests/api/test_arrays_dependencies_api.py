"""Arrays and dependencies (DESIGN §17) through the API on PostgreSQL: the 400s that change nothing
(a bad array spec, a cycle, a job the submitter cannot see), the array's cap as the scheduler
enforces it, cancel all, dependencies held back and cancelled, and tenancy (another tenant's array
is a 404)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs import workflows
from jobs.models import Job, JobArray, JobDependency, JobEvent
from jobs.scheduling.cycle import schedule_once
from jobs.services import job_transition
from jobs.states import JobState
from tests import factories as fx

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(world, api):
    fx.priority("training", 100)
    return api(world.users["pa1_member"])


def _body(world, **extra) -> dict:
    return {"name": "sweep", "project": world.pa1.pk, "kind": "training", "flavor": "F",
            "priority": "training", "image": "pytorch:2", "workers": 1, "gpus_per_worker": 1,
            "max_runtime_seconds": 3600, **extra}


def _rows():
    return (Job.objects.count(), JobArray.objects.count(), JobDependency.objects.count(),
            JobEvent.objects.count())


def _submit(client, world, **extra):
    return client.post(reverse("api:job-list"), _body(world, **extra), format="json")


@pytest.mark.parametrize(
    "spec, words",
    [
        ("5-2", "is empty"),
        ("0-99%0", "at least 1"),
        ("0-5000", "At most 1000 tasks"),
        ("0-3,2", "appears twice"),
        ("0-200000", "up to 99999"),
        ("a-b", "such as 0-99%10"),
    ],
)
def test_a_bad_array_spec_is_a_400_that_changes_nothing(world, member, spec, words):
    before = _rows()
    response = _submit(member, world, array=spec)
    assert response.status_code == 400, response.content
    assert words in " ".join(response.json()["array"])
    assert _rows() == before


def test_an_array_makes_one_job_per_index_and_its_cap_holds_in_the_scheduler(world, member):
    response = _submit(member, world, array="0-9%3")
    assert response.status_code == 201, response.content
    first = response.json()
    array = JobArray.objects.get(pk=first["array"])
    assert (array.size, array.max_running, first["array_index"]) == (10, 3, 0)
    assert sorted(array.tasks.values_list("array_index", flat=True)) == list(range(10))
    # 16 GPUs free and quota for 4 in pa1: the cap (3), not the quota, is what binds.
    schedule_once()
    schedule_once()
    holding = array.tasks.filter(state=JobState.ADMITTED)
    assert sorted(holding.values_list("array_index", flat=True)) == [0, 1, 2]
    waiting = array.tasks.get(array_index=3)
    explain = member.get(reverse("api:job-explain", args=[waiting.pk])).json()
    assert explain["reason"] == "array_cap"
    assert "array cap of 3 running tasks" in explain["text"]
    # One ends: exactly one more (the next index) is admitted.
    task0 = array.tasks.get(array_index=0)
    assert job_transition(task0, JobState.FAILED, reason="node failure")
    schedule_once()
    admitted = array.tasks.filter(state=JobState.ADMITTED)
    assert sorted(admitted.values_list("array_index", flat=True)) == [1, 2, 3]

    body = member.get(reverse("api:array-detail", args=[array.pk])).json()
    assert body["states"] == {"admitted": 3, "failed": 1, "queued": 6}
    assert [t["index"] for t in body["tasks"]] == list(range(10))


def test_cancel_all_cancels_the_tasks_not_yet_finished(world, member):
    first = _submit(member, world, array="0-4%2").json()
    array = JobArray.objects.get(pk=first["array"])
    schedule_once()
    done = array.tasks.get(array_index=0)
    assert job_transition(done, JobState.RUNNING, reason="started")
    assert job_transition(done, JobState.SUCCEEDED, reason="completed")
    response = member.post(reverse("api:array-cancel", args=[array.pk]))
    assert response.status_code == 200, response.content
    assert response.json()["cancelled"] == 4
    states = dict(array.tasks.values_list("array_index", "state"))
    assert states[0] == "succeeded"  # finished: left as it is
    assert all(states[i] == "cancelled" for i in range(1, 5)), states  # undispatched: cancelled at once
    events = JobEvent.objects.filter(job__array=array, to_state="cancelled")
    assert set(events.values_list("reason", flat=True)) == {"array cancelled by user"}


def test_another_tenants_array_is_a_404(world, member, api):
    first = _submit(member, world, array="0-1").json()
    outsider = api(world.users["pb_member"])
    assert outsider.get(reverse("api:array-detail", args=[first["array"]])).status_code == 404
    assert outsider.post(reverse("api:array-cancel", args=[first["array"]])).status_code == 404
    assert Job.objects.filter(array_id=first["array"], state="queued").count() == 2


def test_a_dependency_on_a_job_the_submitter_cannot_see_is_a_400(world, member, api):
    fx.priority("training", 100)
    foreign = fx.submit(world.pb, world.F, gpus=1, name="theirs")
    before = _rows()
    response = _submit(member, world, dependencies=[{"condition": "after_ok", "job": foreign.pk}])
    assert response.status_code == 400, response.content
    assert f"Job {foreign.pk} does not exist or you cannot see it" in response.json()["dependencies"][0]
    missing = _submit(member, world, dependencies=[{"condition": "after_ok", "job": 10**9}])
    assert missing.json()["dependencies"][0].replace(str(10**9), "N") == response.json()["dependencies"][
        0].replace(str(foreign.pk), "N")  # the same words: nothing tells a foreign job from a missing one
    assert _rows() == before


def test_a_cycle_is_a_400_that_changes_nothing(world, member):
    a = _submit(member, world, name="a").json()["id"]
    b = _submit(member, world, name="b", dependencies=[{"condition": "after_ok", "job": a}]).json()["id"]
    c = _submit(member, world, name="c", dependencies=[{"condition": "after_any", "job": b}]).json()["id"]
    before = _rows()
    url = reverse("api:job-dependencies", args=[a])
    response = member.post(url, {"dependencies": [{"condition": "after_ok", "job": c}]}, format="json")
    assert response.status_code == 400, response.content
    assert f"#{a} → #{c} → #{b} → #{a}" in response.json()["dependencies"][0]
    selfish = member.post(url, {"dependencies": [{"condition": "after_ok", "job": a}]}, format="json")
    assert selfish.status_code == 400
    assert _rows() == before
    assert member.get(url).json() == []


def test_a_dependent_waits_for_its_job_and_is_cancelled_when_after_ok_fails(world, member):
    first = _submit(member, world, name="first").json()["id"]
    then = _submit(member, world, name="then", dependencies=[{"condition": "after_ok", "job": first}])
    then = then.json()["id"]
    other = _submit(member, world, name="other", dependencies=[{"condition": "after_not_ok", "job": first}])
    other = other.json()["id"]
    schedule_once()
    assert Job.objects.get(pk=first).state == "admitted"
    assert Job.objects.get(pk=then).state == "queued"  # 15 GPUs free, quota left: held back all the same
    explain = member.get(reverse("api:job-explain", args=[then])).json()
    assert explain["reason"] == "dependency"
    assert f"It waits for job #{first}" in explain["text"]
    assert explain["start_estimate"]["unknown_reason"] == "dependency"  # no forecast places it
    assert job_transition(Job.objects.get(pk=first), JobState.FAILED, reason="node failure")
    schedule_once()
    dependent = Job.objects.get(pk=then)
    assert dependent.state == "cancelled"
    event = dependent.events.get(to_state="cancelled")
    assert event.reason == f"dependency after_ok on job {first} can no longer be met: it is failed"
    assert Job.objects.get(pk=other).state == "admitted"  # after_not_ok: met by the failure


def test_after_ok_on_a_failed_job_is_refused_at_submission(world, member):
    first = Job.objects.get(pk=_submit(member, world, name="first").json()["id"])
    assert job_transition(first, JobState.CANCELLED, reason="cancelled by user")
    before = _rows()
    response = _submit(member, world, dependencies=[{"condition": "after_ok", "job": first.pk}])
    assert response.status_code == 400
    assert "can never be met" in response.json()["dependencies"][0]
    assert _rows() == before


def test_the_dependency_text_of_the_command_line_reads_slurm_names_too():
    deps = workflows.parse_dependencies("afterok:12:13,after_any:14")
    assert [(d.condition, d.job_id) for d in deps] == [("after_ok", 12), ("after_ok", 13), ("after_any", 14)]


def test_a_released_job_no_longer_explains_itself_by_its_dependency(world, member):
    first = _submit(member, world, name="first").json()["id"]
    then = _submit(member, world, name="then", dependencies=[{"condition": "after_any", "job": first}])
    then = then.json()["id"]
    schedule_once()  # caches why "then" waits, as the engine's answers are cached
    url = reverse("api:job-explain", args=[then])
    assert member.get(url).json()["reason"] == "dependency"
    assert job_transition(Job.objects.get(pk=first), JobState.CANCELLED, reason="cancelled by user")
    # No cycle yet: the cached "dependency" answer is stale and not given; the engine's is.
    assert member.get(url).json()["reason"] == "admissible"
    schedule_once()
    assert Job.objects.get(pk=then).state == "admitted"


def test_a_template_keeps_an_array_checks_it_and_submits_it(world, member):
    values = {"kind": "training", "flavor": "F", "priority": "training", "image": "pytorch:2",
              "gpus_per_worker": 1, "max_runtime_seconds": 3600}
    url = reverse("api:jobtemplate-list")
    before = _rows()
    bad = member.post(url, {"name": "bad", "project": world.pa1.pk, "values": {**values, "array": "5-2"}},
                      format="json")
    assert bad.status_code == 400 and "is empty" in str(bad.json()), bad.content
    assert _rows() == before
    body = {"name": "sweep", "project": world.pa1.pk, "values": {**values, "array": "0-3%2"}}
    made = member.post(url, body, format="json")
    assert made.status_code == 201, made.content
    submitted = member.post(reverse("api:jobtemplate-submit", args=[made.json()["id"]]), {"name": "sweep"},
                            format="json")
    assert submitted.status_code == 201, submitted.content
    array = JobArray.objects.get(pk=submitted.json()["array"])
    assert (array.spec, array.size, array.max_running) == ("0-3%2", 4, 2)


@pytest.mark.parametrize("job", [2**63, "9" * 5000, -1, True, None, "12a"])
def test_a_dependency_that_names_no_job_is_a_400(world, member, job):
    before = _rows()
    response = _submit(member, world, dependencies=[{"condition": "after_ok", "job": job}])
    assert response.status_code == 400, response.content
    assert "such as after_ok:12" in response.json()["dependencies"][0]
    first = _submit(member, world, name="first").json()["id"]
    url = reverse("api:job-dependencies", args=[first])
    assert member.post(url, {"dependencies": [{"condition": "after_ok", "job": job}]},
                       format="json").status_code == 400
    assert Job.objects.count() == before[0] + 1 and JobDependency.objects.count() == before[2]

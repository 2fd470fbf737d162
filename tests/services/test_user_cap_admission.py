"""Per-user caps inside a project (issue 34 item 2) on PostgreSQL: 50 submissions at once by one
user and two scheduling cycles racing never admit beyond the cap; another user of the project is
not held back; the waiting job's explain names the cap in the reader's language; the caps are set
through the project API by the department's admin with a clear 400 on bad values."""

import threading

import pytest
from django.db import close_old_connections, connection
from django.utils import translation

from jobs.models import Job
from jobs.scheduling.cycle import explain_job, schedule_once
from jobs.scheduling.explaining import for_reader
from jobs.states import HOLDING
from portal.models import Project
from tests import factories as fx

pytestmark = pytest.mark.django_db(transaction=True)


def _in_threads(target, args: list) -> list:
    barrier = threading.Barrier(len(args))
    errors = []

    def run(arg):
        try:
            barrier.wait(timeout=60)  # a hang guard: all start together
            target(arg)
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=run, args=(a,)) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return errors


def _held_gpus(user) -> int:
    return sum(j.workers * j.gpus_per_worker
               for j in Job.objects.filter(submitted_by=user, state__in=[s.value for s in HOLDING]))


def test_fifty_concurrent_submissions_never_pass_the_users_gpu_cap(world):
    Project.objects.filter(pk=world.pb.pk).update(user_gpu_cap=4, user_running_jobs_cap=None)
    alice, bob = world.users["platform"], world.users["b_admin"]

    def submit(k):
        fx.job_submit(actor=alice, project=world.pb, name=f"sweep-{k}", kind="training", flavor=world.F,
                      priority_class=fx.priority(), image="pytorch:2.3", workers=1, gpus_per_worker=1,
                      max_runtime_seconds=3600)

    assert _in_threads(submit, list(range(50))) == []
    assert _in_threads(lambda _: schedule_once(), [0, 1]) == []  # two cycles race: one lock
    schedule_once()
    assert _held_gpus(alice) == 4  # the pool has 16: only the cap stops her
    bob_job = fx.job_submit(actor=bob, project=world.pb, name="bob", kind="training", flavor=world.F,
                            priority_class=fx.priority(), image="pytorch:2.3", workers=1, gpus_per_worker=2,
                            max_runtime_seconds=3600)
    schedule_once()
    assert Job.objects.get(pk=bob_job.pk).state in {s.value for s in HOLDING}  # not held back
    waiting = Job.objects.filter(submitted_by=alice, state="queued").first()
    with translation.override("en"):
        (explain,) = for_reader([explain_job(waiting)], alice)
    assert explain["reason"] == "user_cap"
    assert explain["numbers"] == {"cap": 4, "usage": 4, "request": 1}
    assert "per-user cap of 4 GPUs in" in explain["text"], explain


def test_the_running_jobs_cap_counts_jobs_not_gpus(world):
    Project.objects.filter(pk=world.pb.pk).update(user_running_jobs_cap=2)
    alice = fx.platform_admin()  # who fx.submit submits as
    for k in range(4):
        fx.submit(world.pb, world.F, gpus=1, name=f"j{k}")
    schedule_once()
    assert Job.objects.filter(submitted_by=alice, state__in=[s.value for s in HOLDING]).count() == 2
    with translation.override("zh-hans"):
        (explain,) = for_reader([explain_job(Job.objects.filter(state="queued").first())], alice)
    text = explain["text"]
    assert "2" in text and "上限" in text, text


def test_caps_are_set_through_the_project_api_with_clear_errors(world, api):
    client = api(world.users["b_admin"])
    url = f"/api/v1/projects/{world.pb.pk}/"
    for bad in (0, -1, "many", 10**7, 1.5):
        answer = client.patch(url, {"user_gpu_cap": bad}, format="json")
        assert answer.status_code == 400 and "user_gpu_cap" in answer.json(), (bad, answer.content)
    assert Project.objects.get(pk=world.pb.pk).user_gpu_cap is None  # nothing changed
    answer = client.patch(url, {"user_gpu_cap": 16, "user_running_jobs_cap": 3}, format="json")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["user_gpu_cap"], answer.json()["user_running_jobs_cap"]) == (16, 3)
    member = api(world.users["pb_member"]).patch(url, {"user_gpu_cap": 64}, format="json")
    assert member.status_code in (403, 404)
    assert Project.objects.get(pk=world.pb.pk).user_gpu_cap == 16

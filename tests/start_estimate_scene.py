"""A queue with start estimates (issue 24), shared by the page and API tests: training jobs of
the persona world's ``pb`` on flavor F (16 GPUs), two 8-GPU jobs with a 1 h limit running from
``now`` and two waiting for them, the forecast refreshed once."""

from django.utils import timezone

from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from jobs.scheduling.start_estimates import start_estimates_refresh
from jobs.services import job_submit


def submit_training(world, prio, n: int, *, first: int = 0, gpus: int = 8, runtime: int = 3600) -> list[Job]:
    """``n`` training jobs of ``pb`` named ``e-<first + k>``, queued."""
    return [
        job_submit(actor=world.users["pb_member"], project=world.pb, name=f"e-{first + k}", kind="training",
                   flavor=world.F, priority_class=prio, image="img", gpus_per_worker=gpus,
                   max_runtime_seconds=runtime)
        for k in range(n)
    ]


def two_running_two_waiting(world, prio):
    """(now, the two waiting jobs, the two admitted ones), in submission order."""
    jobs = submit_training(world, prio, 4)
    now = timezone.now().replace(microsecond=0)
    schedule_once(now)
    assert start_estimates_refresh(now) == 2
    rows = list(Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk"))
    return now, [j for j in rows if j.state == "queued"], [j for j in rows if j.state == "admitted"]

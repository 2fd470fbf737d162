"""``POST /api/v1/jobs/`` as the submission API tests send it: one job of F in project pa1 unless
changed, what a submission writes, and a refusal that must name one field and write nothing."""

from django.urls import reverse

from jobs.models import Job, JobEvent
from portal.models import ApprovalRequest


def post_job(api, world, user="pa1_member", **changes):
    body = {
        "name": "job",
        "project": world.pa1.pk,
        "kind": "training",
        "flavor": "F",
        "priority": "training",
        "image": "pytorch:2.3",
        "workers": 1,
        "gpus_per_worker": 1,
        "max_runtime_seconds": 3600,
        **changes,
    }
    return api(world.users[user]).post(reverse("api:job-list"), body, format="json")


def written() -> tuple[int, int, int]:
    return Job.objects.count(), JobEvent.objects.count(), ApprovalRequest.objects.count()


def refused(response, field) -> str:
    """The 400's message on ``field``, its only field; nothing was written."""
    assert response.status_code == 400, response.content
    body = response.json()
    assert list(body) == [field], body
    assert written() == (0, 0, 0)
    return " ".join(body[field])

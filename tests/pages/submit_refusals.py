"""What a refused submission form looks like, shared by the submission pages' tests."""

from jobs.models import Job, JobEvent


def assert_refused_on(response, field: str) -> None:
    """The form came back (200) with an error on ``field``, shown beside it, and nothing was written."""
    assert response.status_code == 200
    form = response.context["form"]
    assert field in form.errors, form.errors
    assert f'id="id_{field}-error"' in response.content.decode()
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0

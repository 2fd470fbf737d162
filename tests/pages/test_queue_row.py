"""The queue table's and the job list's row tags render what their templates did: the row
templates they replaced are kept here as the reference, and both render the same rows — every
live state, a job of the viewer's and of someone else, explanations with and without numbers or
with markup in them, shared GPUs — in both languages."""

from datetime import timedelta

import pytest
from django.template import Context, Template
from django.utils import timezone, translation

from jobs.models import Job
from jobs.scheduling.start_estimates import StartEstimate
from portal.models import Project, User
from tests import factories as fx

pytestmark = pytest.mark.django_db

REFERENCE = """{% load i18n jobs_ui %}{% for row in rows %}{% with job=row.job %}
    <tr>
      <td class="num">{{ row.position|default:"—" }}</td>
      <td><a href="{% url 'job-detail' job.pk %}">{{ job.name }}</a> <small class="muted">#{{ job.pk }}</small>{% if job.submitted_by_id == user.pk %} <small class="muted">({% translate "mine" %})</small>{% endif %}</td>
      <td><code>{{ job.project.code }}</code></td>
      <td>{{ job.flavor.name }}</td>
      <td class="num">{{ job|devices }}</td>
      <td>{{ job.priority_class.name }} <small class="muted">{{ job.priority_class.value }}</small></td>
      <td>{% state_badge job.state %}</td>
      <td class="why">{% if job.state == "queued" %}{% if row.explain %}<span title="{{ row.explain.text }}">{{ row.explain.reason|reason_label }}</span>{% if row.explain.numbers %}<small>{% for key, value in row.explain.numbers.items %}{{ key|number_label }} {{ value|floatformat:"-3" }}{% if not forloop.last %} · {% endif %}{% endfor %}</small>{% endif %}{% else %}<a href="{% url 'job-detail' job.pk %}">{% translate "see the job" %}</a>{% endif %}{% elif job.state == "pending_approval" %}{% translate "Waiting for approval" %}{% elif job.state == "admitted" %}{% translate "Starting on the cluster" %}{% endif %}</td>
      <td class="start">{% start_estimate row.start %}</td>
      <td>{% if job.state == "running" and job.started_at %}{{ job.started_at|timesince:now }}{% else %}{{ job.submitted_at|timesince:now }}{% endif %}</td>
    </tr>
  {% endwith %}{% endfor %}"""  # noqa: E501 - the template as it was
TAG = "{% load jobs_ui %}{% for row in rows %}\n    {% queue_row row %}\n  {% endfor %}"
LIST_REFERENCE = """{% load i18n jobs_ui %}{% for job in page %}
    <tr>
      <td class="num"><a href="{% url 'job-detail' job.pk %}">{{ job.pk }}</a></td>
      <td><a href="{% url 'job-detail' job.pk %}">{{ job.name }}</a></td>
      <td><code>{{ job.project.code }}</code></td>
      <td>{{ job.get_kind_display }}</td>
      <td>{{ job.flavor.name }}</td>
      <td class="num">{{ job|devices }}</td>
      <td>{{ job.priority_class.name }}</td>
      <td>{% state_badge job.state %}</td>
      <td><time datetime="{{ job.submitted_at|date:'c' }}">{{ job.submitted_at|date:"Y-m-d H:i" }}</time></td>
      <td>{{ job.submitted_by }}</td>
    </tr>
  {% endfor %}"""
LIST_TAG = "{% load jobs_ui %}{% for job in page %}\n    {% job_list_row job %}\n{% endfor %}"


def _rows():
    whole, shared = fx.flavor("A100"), fx.flavor("L40", shareable=True)
    fx.nodes(whole, 1)  # a flavor without nodes takes no jobs (issue 18 item 4)
    fx.nodes(shared, 1)
    project = fx.project("p1", fx.department("A"))
    Project.objects.filter(pk=project.pk).update(code="p&1")  # markup the cells must escape
    viewer, other = User.objects.create(username="viewer"), User.objects.create(username="other")
    now = timezone.now()
    jobs = []
    for k, (state, f, milli, who) in enumerate([
        ("queued", whole, None, viewer), ("queued", shared, 250, other), ("queued", whole, None, other),
        ("pending_approval", whole, None, viewer), ("admitted", shared, 500, other),
        ("running", whole, None, viewer), ("running", whole, None, other),
    ]):
        job = fx.submit(project, f, gpus=1, name=f"j{k}", gpu_milli=milli)
        started = now - timedelta(hours=k) if state == "running" and k == 5 else None
        Job.objects.filter(pk=job.pk).update(
            state=state, submitted_by=who, started_at=started, name=f"j<{k}>",
            gpus_per_worker=1 if milli else 4,
            submitted_at=now - timedelta(days=k, minutes=7 * k),
        )
        jobs.append(Job.objects.select_related("project", "flavor", "priority_class").get(pk=job.pk))
    explains = [
        {"reason": "quota", "message": "m", "text": 'over "quota" <&>',
         "numbers": {"usage": 7.5, "quota": 8, "request": 0.25}},
        {"reason": "capacity", "message": "", "numbers": {}},
        None, None, None, None, None,
    ]
    positions = [3, 1200, None, None, None, None, None]
    starts = [StartEstimate(now + timedelta(hours=2), None, now), StartEstimate(None, "unlimited", now),
              None, StartEstimate(None, "approval", now), None, None, None]
    rows = [{"job": j, "position": p, "explain": e, "start": s}
            for j, p, e, s in zip(jobs, positions, explains, starts, strict=True)]
    return rows, viewer, now


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_row_tag_renders_what_the_template_did(language):
    rows, viewer, now = _rows()
    context = {"rows": rows, "user": viewer, "now": now}
    with translation.override(language):
        expected = Template(REFERENCE).render(Context(context))
        got = Template(TAG).render(Context(context))
    assert got.split() == expected.split()
    assert got.count("<tr>") == 7 and "j&lt;0&gt;" in got and "p&amp;1" in got and "&lt;&amp;&gt;" in got


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_job_list_row_tag_renders_what_the_template_did(language):
    rows, _viewer, _now = _rows()
    page = [row["job"] for row in rows]
    with translation.override(language):
        expected = Template(LIST_REFERENCE).render(Context({"page": page}))
        got = Template(LIST_TAG).render(Context({"page": page}))
    assert got.split() == expected.split()
    assert got.count("<tr>") == 7 and "j&lt;0&gt;" in got and "p&amp;1" in got

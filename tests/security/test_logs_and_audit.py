"""No secret in the logs, and the audit records cannot be changed through the app or the admin."""

from __future__ import annotations

import logging

import pytest
from django.contrib import admin
from django.test import Client

from billing.models import MonthClose, Statement, StatementLine, UsageRecord
from jobs.models import JobEvent, RuleChangeEvent
from portal.models import ApprovalAudit
from portal.security import RedactSecretsFilter, redact
from tests import factories as fx

pytestmark = pytest.mark.django_db

PASSWORD = "pw-pa1_member"  # tests/conftest.py's persona password


def test_login_token_api_and_task_paths_log_no_secret(world, api, caplog, settings):
    settings.SECRET_KEY = "known-secret-key-for-the-log-test-0123456789abcdefghijklmnop"
    settings.GPUPOOL = {**settings.GPUPOOL, "PROMETHEUS_URL": "http://metrics:prom-pass-77@127.0.0.1:9"}
    caplog.set_level(logging.DEBUG)
    client = Client()
    client.post("/accounts/login/", {"username": "pa1_member", "password": "wrong-pass-123"})
    client.post("/accounts/login/", {"username": "pa1_member", "password": PASSWORD})
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    token = api(None).post("/api/v1/auth/token/", {"username": "pa1_member", "password": PASSWORD}).json()
    key = token["token"]
    member = api(world.users["pa1_member"])
    member.get("/api/v1/jobs/")
    member.get("/api/v1/jobs/999999/")  # a 404 is logged by django.request
    member.post("/api/v1/jobs/", {"name": "Bad!"}, format="json")  # a 400 too
    fx.priority("training", 100)
    job = fx.submit(world.pa1, world.F, gpus=1, name="logjob")
    member.get(f"/api/v1/jobs/{job.pk}/utilisation/")  # Prometheus unreachable, with a password
    from jobs.clusters import tasks

    tasks.poll_metrics.apply()  # the Celery task path, in process
    text = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert caplog.records, "nothing was logged: the test would prove nothing"
    for secret in (settings.SECRET_KEY, PASSWORD, "wrong-pass-123", key, session, "prom-pass-77"):
        assert secret not in text


def test_the_filter_redacts_tokens_passwords_and_url_credentials():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%s", ("placeholder",), None)
    record.args = ("Authorization: Token 0123456789abcdef0123 password=hunter2 "
                   "postgresql://app:s3cret@db/x sessionid=abcd1234efgh",)
    RedactSecretsFilter().filter(record)
    message = record.getMessage()
    for secret in ("0123456789abcdef0123", "hunter2", "s3cret", "abcd1234efgh"):
        assert secret not in message
    assert "postgresql://app:[redacted]@db/x" in message and redact("nothing here") == "nothing here"


AUDIT = [JobEvent, ApprovalAudit, UsageRecord, MonthClose, Statement, StatementLine, RuleChangeEvent]


@pytest.mark.parametrize("model", AUDIT, ids=lambda m: m.__name__)
def test_the_admin_offers_no_change_or_delete_of_audit_records(world, model, rf):
    model_admin = admin.site._registry.get(model)
    if model_admin is None:
        return  # not in the admin at all: nothing to edit there
    request = rf.get("/admin/")
    request.user = world.users["platform"]
    request.user.is_superuser = request.user.is_staff = True
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)
    assert not model_admin.has_add_permission(request)


def test_posts_to_the_admin_change_and_delete_urls_are_refused(world):
    fx.priority("training", 100)
    job = fx.submit(world.pa1, world.F, gpus=1, name="audited")
    event = JobEvent.objects.filter(job=job).first()
    admin_user = world.users["platform"]
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client = Client()
    client.force_login(admin_user)
    before = list(JobEvent.objects.values_list("id", "reason", "to_state"))
    for url in (f"/admin/jobs/jobevent/{event.pk}/change/", f"/admin/jobs/jobevent/{event.pk}/delete/"):
        response = client.post(url, {"reason": "rewritten", "post": "yes"})
        assert response.status_code == 403, (url, response.status_code)
    assert list(JobEvent.objects.values_list("id", "reason", "to_state")) == before


def test_no_api_operation_rewrites_the_audit(world, api):
    fx.priority("training", 100)
    job = fx.submit(world.pa1, world.F, gpus=1, name="audited")
    platform = api(world.users["platform"])
    before = JobEvent.objects.count()
    for method in ("put", "patch", "delete"):
        response = getattr(platform, method)(f"/api/v1/jobs/{job.pk}/events/", {"reason": "x"}, format="json")
        assert response.status_code in (403, 404, 405), (method, response.status_code)
    for url in ("/api/v1/statements/1/", "/api/v1/approvals/1/", f"/api/v1/jobs/{job.pk}/"):
        for method in ("put", "patch", "delete"):
            assert getattr(platform, method)(url, {}, format="json").status_code in (403, 404, 405)
    assert JobEvent.objects.count() == before

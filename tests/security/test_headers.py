"""Security headers: a Content-Security-Policy on every HTML page (no inline script or style in
our templates), nosniff, a referrer policy, DENY framing; HSTS only behind TLS in production."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["/", "/jobs/", "/jobs/new/", "/jobs/queue/", "/quotas/", "/approvals/", "/reports/", "/admin/"]


def _directives(header: str) -> dict[str, str]:
    return dict(part.strip().split(" ", 1) for part in header.split(";"))


@pytest.mark.parametrize("path", PAGES)
def test_every_html_page_carries_the_policy_and_the_headers(world, page_client, path):
    response = page_client("platform").get(path)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    policy = _directives(response["Content-Security-Policy"])
    assert policy["default-src"] == "'self'" and policy["script-src"] == "'self'"
    assert policy["style-src"] == "'self' 'unsafe-inline'"  # plotly's own <style>; docs/reliability.md
    assert policy["frame-ancestors"] == "'none'"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Frame-Options"] == "DENY"
    assert "Strict-Transport-Security" not in response  # plain HTTP: HSTS only over TLS


def test_the_login_page_and_errors_carry_it_too(world, page_client):
    assert "Content-Security-Policy" in page_client(None).get("/accounts/login/")
    assert "Content-Security-Policy" in page_client("platform").get("/jobs/999999/")  # 404 page


def test_item12_the_api_docs_keep_the_sites_policy(world, page_client):
    """Swagger UI comes from our static files now: no page widens the policy (issue 18 item 12)."""
    docs = page_client("platform").get("/api/docs/")["Content-Security-Policy"]
    assert docs == page_client("platform").get("/jobs/")["Content-Security-Policy"]
    assert _directives(docs)["script-src"] == "'self'"


def test_templates_have_no_inline_script_handlers_or_styles():
    offenders = []
    for template in (ROOT / "templates").rglob("*.html"):
        text = template.read_text()
        if re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text) or re.search(r"\son[a-z]+=", text):
            offenders.append(f"{template.name}: script")
        if re.search(r"\sstyle=", text) or "<style" in text:
            offenders.append(f"{template.name}: style")
    assert not offenders, offenders


def test_hsts_behind_tls_with_production_settings():
    """A production process (its own settings module) answers HSTS to a request the proxy says
    came over https, redirects plain http, and takes the numbers from the environment."""
    code = (
        "import django; django.setup();"
        "from django.test import Client; c = Client();"
        "r = c.get('/api/v1/me/', HTTP_X_FORWARDED_PROTO='https');"
        "print(r.status_code, r.get('Strict-Transport-Security'));"
        "r = c.get('/api/v1/me/');"
        "print(r.status_code, r.get('Location'))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings.production",
        SECRET_KEY="q7Z!m2#Lp9$wX4&rT8^yB3*nK6(cV1)hJ5-dF0+gS" * 2,
        ALLOWED_HOSTS="testserver",
        GPUPOOL_METRICS_TOKEN="headers-test-metrics-token",
        SECURE_HSTS_SECONDS="600",
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    lines = out.stdout.strip().splitlines()
    # No static manifest outside a built image: an API URL (401/403 without a token) stands in.
    assert re.fullmatch(r"40[13] max-age=600; includeSubDomains; preload", lines[0]), out.stdout + out.stderr
    assert lines[1] == "301 https://testserver/api/v1/me/", out.stdout + out.stderr

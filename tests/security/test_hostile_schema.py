"""Hostile values generated from the OpenAPI schema (issue 32 items 19–21): every field of every
write operation's body, and every typed query parameter of every operation, gets the values that
the held-out probe found to be 500s, one field at a time, as a platform admin of the demo centre
(``seed_demo``, plus the few objects it has none of), on real objects for ``{id}`` paths:

* a JSON number beyond a double (``1e999``) in any number field — ids above all (item 19);
* a lone surrogate (``"\\ud800"``) in any string field — choice fields above all, whose error
  echoes the value (item 20);
* year 1 in any date or date-time field or parameter, with an offset east of UTC whose instant
  falls before year 1 (item 21).

The fields come from the schema (``drf_spectacular``'s generator, as ``/api/schema/`` serves it):
a new endpoint, field or parameter is covered without editing this test. Each answer must be a
4xx; a 5xx fails with the exception the app raised. A write operation whose body has fields and
that answers 404 for every id tried was not reached: the test fails and names it (give the demo
centre, or ``_objects_the_demo_lacks``, an object of that kind)."""

from __future__ import annotations

import json
import os
import sys
import traceback
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.core.signals import got_request_exception
from django.test import Client
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator

from portal.models import Department, User, Webhook, WebhookKind
from portal.tokens import api_token_create

pytestmark = [pytest.mark.fuzz, pytest.mark.slow]

WRITES = ("post", "put", "patch")
SENTINEL = "@@hostile@@"
# (name, the kinds of field it goes into, the raw JSON that replaces the field's value)
BODY_VALUES = [
    ("huge number", {"number"}, "1e999"),
    ("huge negative number", {"number"}, "-1e999"),
    ("lone surrogate", {"string", "choice"}, '"\\ud800"'),
    ("year 1", {"date-time"}, '"0001-01-01T00:00:00+08:00"'),
    ("year 1", {"date"}, '"0001-01-01"'),
]
QUERY_VALUES = [
    ("huge number", {"number"}, "1e999"),
    ("year 1", {"date-time"}, "0001-01-01T00:00:00+08:00"),
    ("year 1", {"date"}, "0001-01-01"),
]
IDS_PER_PATH = 1


# ---- the generator: fields from the schema -----------------------------------------------------


class Schema:
    def __init__(self, document: dict):
        self.document = document
        self.components = document["components"]["schemas"]

    def resolve(self, node: dict) -> dict:
        seen = 0
        while "$ref" in node and seen < 20:
            node, seen = self.components[node["$ref"].rsplit("/", 1)[-1]], seen + 1
        return node

    def kind(self, node: dict) -> str | None:
        """number, string, choice, date, date-time, object, array — or None (anything goes)."""
        node = self.resolve(node)
        variants = node.get("oneOf") or node.get("anyOf") or node.get("allOf")
        if variants:
            kinds = {self.kind(v) for v in variants} - {None}
            return "choice" if "choice" in kinds else next(iter(sorted(kinds)), None)
        if "enum" in node:
            return "choice"
        kind = node.get("type")
        if kind in ("integer", "number"):
            return "number"
        if kind == "string":
            return node.get("format") if node.get("format") in ("date", "date-time") else "string"
        return kind

    def properties(self, node: dict) -> dict[str, Any]:
        """An object's properties, those of its ``allOf`` / ``oneOf`` / ``anyOf`` parts merged."""
        node = self.resolve(node)
        found = dict(node.get("properties") or {})
        for part in node.get("allOf") or node.get("oneOf") or node.get("anyOf") or []:
            found.update(self.properties(part))
        return found

    def fields(self, node: dict, path: tuple[str, ...] = ()):
        """(path, kind) of every leaf a body can hold: nested objects' fields by their path, an
        array's items as ``[]``."""
        for name, child in sorted(self.properties(node).items()):
            if self.resolve(child).get("readOnly"):
                continue
            kind = self.kind(child)
            if kind == "object" and self.properties(child):
                yield from self.fields(child, (*path, name))
            elif kind == "array":
                items = self.resolve(child).get("items") or {}
                item_kind = self.kind(items)
                if item_kind == "object" and self.properties(items):
                    yield from self.fields(items, (*path, name, "[]"))
                elif item_kind:
                    yield (*path, name, "[]"), item_kind
            elif kind:
                yield (*path, name), kind

    def operations(self):
        for path, item in sorted(self.document["paths"].items()):
            for method, operation in sorted(item.items()):
                if method in ("get", *WRITES):
                    yield method, path, operation

    def body_fields(self, operation: dict) -> list[tuple[tuple[str, ...], str]]:
        content = (operation.get("requestBody") or {}).get("content") or {}
        schema = (content.get("application/json") or {}).get("schema")
        return list(self.fields(schema)) if schema else []

    def query_fields(self, operation: dict) -> list[tuple[str, str]]:
        found = []
        for parameter in operation.get("parameters") or []:
            if parameter.get("in") == "query":
                kind = self.kind(parameter.get("schema") or {})
                if kind:
                    found.append((parameter["name"], kind))
        return found


def _body(path: tuple[str, ...]) -> str:
    """The JSON text of a body holding the sentinel at ``path`` (``[]``: inside a list)."""
    value: Any = SENTINEL
    for part in reversed(path):
        value = [value] if part == "[]" else {part: value}
    return json.dumps(value)


def hostile_bodies(schema: Schema, operation: dict):
    """(what, field, raw JSON body) for one write operation: every field × every value that fits."""
    for path, kind in schema.body_fields(operation):
        for name, kinds, raw in BODY_VALUES:
            if kind in kinds:
                yield name, ".".join(path), _body(path).replace(json.dumps(SENTINEL), raw)


def hostile_queries(schema: Schema, operation: dict):
    for parameter, kind in schema.query_fields(operation):
        for name, kinds, raw in QUERY_VALUES:
            if kind in kinds:
                yield name, parameter, {parameter: raw}


# ---- running it --------------------------------------------------------------------------------


@dataclass
class Findings:
    errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    reached: set[tuple[str, str]] = field(default_factory=set)
    tried: set[tuple[str, str]] = field(default_factory=set)
    calls: int = 0

    def on_exception(self, sender, request, **kwargs):
        exc_type, exc, tb = sys.exc_info()
        ours = [f for f in traceback.extract_tb(tb) if "site-packages" not in f.filename]
        where = f"{ours[-1].filename.rsplit('/', 2)[-2:]}:{ours[-1].lineno}" if ours else "?"
        self.exceptions.append(f"{exc_type.__name__}: {str(exc)[:120]} at {where}")

    def record(self, label: str, what: str, response, *, refused: bool = True) -> None:
        """A 5xx is a failure; so is a write that accepted the value (``refused``). A query
        parameter a list does not use may be ignored."""
        self.calls += 1
        if response.status_code >= 500:
            raised = "; ".join(self.exceptions) or response.content[:120].decode(errors="replace")
            self.errors.append(f"{label} — {what}: {response.status_code} {raised}")
        elif refused and response.status_code < 400:
            self.errors.append(f"{label} — {what}: accepted ({response.status_code})")
        self.exceptions.clear()


def _ids(client: Client, path: str) -> list[int]:
    """Ids of objects the admin can see, from the list above ``{id}`` (none: the op is unreachable)."""
    response = client.get(path.split("{id}")[0])
    if response.status_code != 200:
        return []
    body = response.json()
    rows = body.get("results", []) if isinstance(body, dict) else body
    return [row["id"] for row in rows if isinstance(row, dict) and "id" in row][:IDS_PER_PATH]


def _objects_the_demo_lacks(admin: User) -> None:
    """One object for each kind with a write endpoint that the demo centre does not create."""
    from billing.models import ManualAdjustment
    from jobs.native.models import ExternalSource
    from quotas.models import Cluster

    Webhook.objects.create(user=admin, kind=WebhookKind.WECOM, name="probe", url="https://hooks.example.com/x")
    ExternalSource.objects.create(cluster=Cluster.objects.first(), kind="slurm_account", name="probe")
    ManualAdjustment.objects.create(
        department=Department.objects.first(), kind="credit", amount=Decimal("1.00"), reason="probe",
        proposed_by=User.objects.exclude(pk=admin.pk).first(), proposed_at=timezone.now(),
    )


def _exercise(client: Client, schema: Schema, findings: Findings) -> None:
    for method, path, operation in schema.operations():
        label = f"{method.upper()} {path}"
        bodies = list(hostile_bodies(schema, operation)) if method in WRITES else []
        queries = list(hostile_queries(schema, operation))
        if not bodies and not queries:
            continue
        ids = _ids(client, path) if "{id}" in path else [None]
        for pk in ids:
            url = path.replace("{id}", str(pk))
            for what, name, raw in bodies:
                findings.tried.add((label, name))
                response = client.generic(method.upper(), url, raw, content_type="application/json")
                findings.record(label, f"{what} in {name} (id {pk})", response)
                if response.status_code != 404:
                    findings.reached.add((label, name))
            for what, name, params in queries:
                response = client.get(url, params) if method == "get" else client.generic(
                    method.upper(), f"{url}?{'&'.join(f'{k}={v}' for k, v in params.items())}", "{}",
                    content_type="application/json")
                findings.record(label, f"{what} in ?{name} (id {pk})", response, refused=False)


@pytest.fixture
def demo_admin(django_db_blocker, db):
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115 - closed at exit
    admin = User.objects.get(username="admin")
    _objects_the_demo_lacks(admin)
    return admin


def test_item19_20_21_generated_hostile_values_are_a_400_on_every_operation(demo_admin):
    token = api_token_create(actor=demo_admin, name="hostile-schema").secret
    client = Client(HTTP_AUTHORIZATION=f"Token {token}", HTTP_ACCEPT_LANGUAGE="en",
                    raise_request_exception=False)
    schema = Schema(SchemaGenerator().get_schema(request=None, public=True))
    findings = Findings()
    got_request_exception.connect(findings.on_exception)
    try:
        _exercise(client, schema, findings)
    finally:
        got_request_exception.disconnect(findings.on_exception)
    unreached = sorted(f"{label}: {name}" for label, name in findings.tried - findings.reached)
    assert findings.calls > 300, findings.calls  # the whole schema, not one that failed to load
    assert not findings.errors, f"{len(findings.errors)} failures:\n" + "\n".join(findings.errors)
    assert not unreached, "never past a 404 (no object to try): " + ", ".join(unreached)


def test_the_generator_sees_the_fields_the_probe_named():
    """The schema walk finds the id, choice and date-time fields of the probe's findings."""
    schema = Schema(SchemaGenerator().get_schema(request=None, public=True))
    fields = {
        (method, path): dict(schema.body_fields(op)) for method, path, op in schema.operations()
    }
    assert fields[("post", "/api/v1/jobs/")][("project",)] == "number"
    assert fields[("post", "/api/v1/jobs/")][("kind",)] == "choice"
    assert fields[("post", "/api/v1/jobs/")][("autoscale", "cooldown_seconds")] == "number"
    assert fields[("post", "/api/v1/memberships/")][("role",)] == "choice"
    assert fields[("post", "/api/v1/webhooks/")][("topics", "[]")] == "choice"
    assert fields[("post", "/api/v1/approvals/bulk-decide/")][("ids", "[]")] == "number"
    assert fields[("post", "/api/v1/projects/{id}/move/")][("at",)] == "date-time"
    queries = {
        path: dict(schema.query_fields(op)) for method, path, op in schema.operations() if method == "get"
    }
    assert queries["/api/v1/history/export/"]["since"] == "date-time"

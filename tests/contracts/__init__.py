"""What other programs rely on, recorded: Celery task names (beat, ``portal.enqueue`` callers and
messages in flight name them), model tables (raw SQL, triggers and the database itself name them),
URL paths and names, and the API's path set. Moving code between apps changes none of them;
``tests/test_architecture.py`` compares the live values with the recorded ones.

When a change of one of them is intended, record anew and review the diff of the JSON files:

    .venv/bin/python -m tests.contracts
"""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = {
    "task_names": HERE / "task_names.json",
    "tables": HERE / "tables.json",
    "urls": HERE / "urls.json",
    "api_paths": HERE / "api_paths.json",
}
OUR_APPS = ("portal", "quotas", "jobs", "clusters", "native", "whatif", "billing")
# A sample value per path converter: reversing a name needs arguments of the right shape.
SAMPLE_ARGS = {
    "int": 7, "str": "x", "slug": "x-1", "path": "a/b", "uuid": "12345678-1234-5678-1234-567812345678"
}


def task_names() -> list[str]:
    from portal.celery import app

    app.loader.import_default_modules()
    return sorted(name for name in app.tasks if not name.startswith("celery."))


def tables() -> dict[str, str]:
    """Model name → table, for every model of our apps. Keyed by the model's name, not its app
    label, so a model that changes app must keep its table to match."""
    from django.apps import apps

    found = {}
    for model in apps.get_models(include_auto_created=True):
        if model._meta.app_label in OUR_APPS:
            found[model._meta.object_name] = model._meta.db_table
    return dict(sorted(found.items()))


def _named_patterns(patterns, prefix="", namespace=""):
    from django.urls import URLPattern, URLResolver

    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from _named_patterns(pattern.url_patterns, route, inner)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield f"{namespace}{pattern.name}", route, pattern.callback


def _view_name(callback) -> str:
    view = getattr(callback, "view_class", None) or getattr(callback, "cls", None) or callback
    return view.__name__


def urls() -> dict[str, dict[str, str]]:
    """URL name → its route, the path ``reverse()`` gives with sample arguments, and the view's
    name (so the same page stays behind the same name)."""
    from django.urls import reverse

    found = {}
    for name, route, callback in _named_patterns(_resolver().url_patterns):
        if name.startswith("admin:"):
            continue  # Django's own admin: its names follow the registered models
        kwargs = {key: SAMPLE_ARGS[conv] for conv, key in re.findall(r"<(?:(\w+):)?(\w+)>", route)
                  for conv in [conv or "str"]}
        found[name] = {"route": route, "path": reverse(name, kwargs=kwargs), "view": _view_name(callback)}
    return dict(sorted(found.items()))


def _resolver():
    from django.urls import get_resolver

    return get_resolver()


def api_paths() -> list[str]:
    """The path set of the OpenAPI schema (``/api/schema/``), with each path's methods."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    return sorted(f"{method.upper()} {path}" for path, item in schema["paths"].items() for method in item)


def current() -> dict:
    return {"task_names": task_names(), "tables": tables(), "urls": urls(), "api_paths": api_paths()}


def recorded(name: str):
    return json.loads(FILES[name].read_text())


def record() -> None:
    for name, value in current().items():
        FILES[name].write_text(json.dumps(value, indent=1, ensure_ascii=False, sort_keys=True) + "\n")


"""What the deploy tests share: the rendered manifests, the environment variables the code reads,
and smoke checks of the commands the manifests and the compose file run."""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.deploy.kustomize import render

ROOT = Path(__file__).resolve().parent.parent.parent
KUSTOMIZE = {
    "base": ROOT / "deploy/kubernetes/base",
    "demo": ROOT / "deploy/kubernetes/overlays/demo",
    "jobs": ROOT / "deploy/kubernetes/jobs",
}
ENV_READ = re.compile(
    r"""env_(?:str|int|bool|list)\(\s*"([A-Z0-9_]+)"|os\.environ(?:\.get\(|\[)"([A-Z0-9_]+)"""
)
APP_DIRS = ("portal", "quotas", "jobs", "billing")
# A Django process with production settings, whatever the test run's own switches are.
DROPPED_ENV = (
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "DJANGO_SETTINGS_MODULE",
    "CELERY_QUEUE",
    "GPUPOOL_METRICS_TOKEN",
    "GPUPOOL_METRICS_ALLOW_NETWORKS",
    "GPUPOOL_TRUSTED_PROXIES",
)


@cache
def rendered(name: str) -> tuple[dict, ...]:
    return tuple(render(KUSTOMIZE[name]))


def objects(name: str) -> list[dict]:
    return copy.deepcopy(list(rendered(name)))


def find(objs: list[dict], kind: str, name: str) -> dict:
    [obj] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


@cache
def variables_the_code_reads() -> frozenset[str]:
    names = {"DJANGO_SETTINGS_MODULE"}  # read by Django itself (manage.py, wsgi, celery set defaults)
    for app in APP_DIRS:
        for path in (ROOT / app).rglob("*.py"):
            for match in ENV_READ.finditer(path.read_text()):
                names.add(match[1] or match[2])
    return frozenset(names)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need_or_fail(what: str) -> None:
    """Missing tooling skips locally but fails under CI, where .ci/run must provide it."""
    if in_ci():
        pytest.fail(f"{what} is required under CI")
    pytest.skip(f"{what} not available")


def production_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env.update(extra)
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.production")
    return env


def run(command: list[str], env: dict[str, str], timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


# -- commands


def shell_steps(command: list[str]) -> list[list[str]]:
    """``sh -c "a && b"`` is two commands; anything else is one."""
    if command[:2] == ["sh", "-c"]:
        script = re.sub(r">\s*/dev/null", "", command[2])
        script = re.sub(r"^until (.*?); do .*?; done$", r"\1", script.strip())
        return [shlex.split(step) for step in script.split("&&")]
    return [command]


def management_commands() -> set[str]:
    from django.core.management import get_commands

    return set(get_commands())


def static_problem(step: list[str]) -> str | None:
    """What is wrong with a command that can be checked without running it (None: fine; gunicorn
    needs a run, see ``smoke``)."""
    program = step[0]
    if program == "python" and step[1:2] == ["manage.py"]:
        return None if step[2] in management_commands() else f"no management command {step[2]!r}"
    if program == "python" and step[1:2] == ["-m"]:
        return None if importlib.util.find_spec(step[2]) else f"no module {step[2]!r}"
    if program == "celery":
        return _celery_problem(step)
    if program == "gunicorn":
        return None
    return f"unexpected program {program!r}"


def _celery_problem(step: list[str]) -> str | None:
    """``celery -A portal <sub>``: the app module holds a Celery app, and <sub> is a command."""
    from celery import Celery
    from celery.app.utils import find_app
    from celery.bin.celery import celery as cli

    if step[1:2] != ["-A"] or len(step) < 4:
        return f"celery without -A APP SUBCOMMAND: {step}"
    try:
        app = find_app(step[2])  # how `celery -A` itself resolves it
    except (AttributeError, ImportError):
        app = None
    if not isinstance(app, Celery):
        return f"{step[2]} has no Celery app"
    return None if step[3] in cli.commands else f"no celery command {step[3]!r}"


def smoke(step: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """What only a run can prove: gunicorn loads the WSGI app it names (--check-config imports
    it, and with it the production settings) and accepts every option given."""
    assert step[0] == "gunicorn", step
    return run([str(Path(sys.executable).parent / "gunicorn"), "--check-config", *step[1:]], env)

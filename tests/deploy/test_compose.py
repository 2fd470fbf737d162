"""docker-compose.yml (the single-host trial) and the Dockerfile, checked without a Docker daemon
or registry: every service's command exists in this code base (the ones only a run can prove are
run), its environment holds only variables the code reads and is accepted by the production
settings, dependencies and ordering are right, and exactly one beat runs."""

from __future__ import annotations

import re
import shutil
import sys

import pytest
import yaml

from tests.deploy.helpers import (
    ROOT,
    objects,
    production_env,
    run,
    shell_steps,
    static_problem,
    variables_the_code_reads,
)
from tests.deploy.kustomize import containers

pytestmark = pytest.mark.deploy

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
OURS = {name: s for name, s in SERVICES.items() if s.get("image") == "gpupool:local"}


def test_the_trial_runs_every_part():
    assert set(SERVICES) == {
        "postgres",
        "redis",
        "simulator",
        "migrate",
        "seed",
        "web",
        "worker",
        "beat",
        "prometheus",
    }
    assert set(OURS) == {"simulator", "migrate", "seed", "web", "worker", "beat"}
    assert all(s["build"] == "." for s in OURS.values())  # the Dockerfile at the root
    assert SERVICES["web"]["ports"] == ["8000:8000"]
    assert SERVICES["prometheus"]["profiles"] == ["monitoring"]


def test_dependencies_exist_and_wait_for_what_they_need():
    for name, service in SERVICES.items():
        needs = service.get("depends_on", {})
        assert set(needs) <= set(SERVICES), name
    for name in ("web", "worker", "beat", "seed"):
        migrated = SERVICES[name]["depends_on"].get("migrate") or SERVICES[name]["depends_on"]["seed"]
        assert migrated == {"condition": "service_completed_successfully"}, name
    assert SERVICES["migrate"]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    for one_shot in ("migrate", "seed"):
        assert SERVICES[one_shot]["restart"] == "no"


def test_one_beat_and_the_web_healthcheck_asks_healthz():
    beats = [n for n, s in OURS.items() if s["command"][:4] == ["celery", "-A", "portal", "beat"]]
    assert beats == ["beat"] and "deploy" not in SERVICES["beat"]  # no replicas
    check = " ".join(SERVICES["web"]["healthcheck"]["test"])
    assert "http://127.0.0.1:8000/healthz" in check
    for name in set(OURS) - {"web"}:
        assert OURS[name]["healthcheck"] == {"disable": True}, name  # the image's check is the web's


def test_the_environment_holds_only_variables_the_code_reads():
    env = OURS["web"]["environment"]
    assert all(s["environment"] == env for s in OURS.values())  # one anchor for all
    assert set(env) - variables_the_code_reads() == set()
    assert {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ALLOWED_HOSTS"} <= set(env)
    # Prometheus scrapes web:8000 with the portal's token.
    prom = yaml.safe_load((ROOT / "deploy/compose/prometheus.yml").read_text())
    [job] = [j for j in prom["scrape_configs"] if j["job_name"] == "gpupool"]
    assert job["static_configs"][0]["targets"] == ["web:8000"] and "web" in env["ALLOWED_HOSTS"].split(",")
    assert job["authorization"]["credentials"] == env["GPUPOOL_METRICS_TOKEN"]
    assert env["GPUPOOL_SIMULATOR_URL"] == "http://simulator:9400"
    assert "--port=9400" in OURS["simulator"]["command"]


def test_production_settings_accept_the_compose_environment():
    env = {k: str(v) for k, v in OURS["web"]["environment"].items()}
    result = run([sys.executable, "manage.py", "check"], production_env(env))
    assert result.returncode == 0, result.stderr


def test_every_command_exists_and_matches_the_kubernetes_ones():
    steps = [step for s in OURS.values() for step in shell_steps(s["command"])]
    assert [p for p in map(static_problem, steps) if p] == []
    # gunicorn's line is run (--check-config) by test_manifests.py; here it must be the same line.
    kube = {
        c["name"]: c["command"]
        for o in objects("demo")
        for c in containers(o)
        if c["image"].startswith("gpupool")
    }
    for name in ("web", "worker", "beat", "migrate", "seed", "simulator"):
        assert OURS[name]["command"] == kube[name], name


def test_the_dockerfile_builds_a_non_root_gunicorn_image():
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", text, re.M)
    assert stages == ["python:3.11-slim", "python:3.11-slim"]  # multi-stage, same base
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert "manage.py collectstatic --noinput" in text
    assert re.search(r"^HEALTHCHECK .*\n\s+CMD .*/healthz", text, re.M)
    cmd = re.search(r"^CMD (\[.*?\])$", text, re.M | re.S)[1].replace("\\\n", "")
    assert yaml.safe_load(cmd) == SERVICES["web"]["command"]  # the image's default is the web
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".run", "tests"} <= set(ignored)


def test_collectstatic_works_with_the_dockerfiles_build_environment(tmp_path):
    """The Dockerfile's RUN collectstatic line, with its placeholder settings, on this tree."""
    line = re.search(
        r"^RUN (SECRET_KEY=.*?)python manage.py collectstatic", (ROOT / "Dockerfile").read_text(), re.M | re.S
    )
    assignments = dict(re.findall(r"([A-Z_]+)=(\S+)", line[1]))
    assert set(assignments) == {
        "SECRET_KEY",
        "ALLOWED_HOSTS",
        "DATABASE_URL",
        "REDIS_URL",
        "GPUPOOL_METRICS_TOKEN",
    }
    # STATIC_ROOT is fixed in settings (.run/staticfiles); --dry-run proves settings load and
    # every static file is found without writing into the work tree.
    result = run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--dry-run"], production_env(assignments)
    )
    assert result.returncode == 0, result.stderr
    assert "static files copied" in result.stdout


def test_docker_compose_config_when_docker_compose_exists():
    docker = shutil.which("docker")
    probe = run([docker, "compose", "version"], production_env({})) if docker else None
    if (probe is None or probe.returncode != 0) and shutil.which("docker-compose") is None:
        pytest.skip("no docker compose plugin (the structural checks above still run)")
    command = [docker, "compose"] if probe and probe.returncode == 0 else ["docker-compose"]
    result = run([*command, "-f", "docker-compose.yml", "config", "--quiet"], production_env({}))
    assert result.returncode == 0, result.stderr

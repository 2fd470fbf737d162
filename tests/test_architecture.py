"""Structure rules of STYLE.md that a test can hold: pure cores import no Django, imports
point one way (portal ← quotas ← jobs ← billing), and the tree is ruff clean."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Modules that must run without Django: fed snapshots and `now`, deciding only.
PURE_MODULES = [
    "quotas.effective",
    "quotas.validation",
    "quotas.admission",
    "quotas.queues",
    "jobs.placement",
    "jobs.scheduler",
    "billing.pricing",
    "jobs.replay.trace",
    "jobs.replay.csvtrace",
    "jobs.replay.spec",
    "jobs.replay.sim",
    "jobs.replay.metrics",
    "jobs.replay.alibaba",
    "jobs.replay.packing",
]
FORBIDDEN_IN_PURE = ("django", "rest_framework", "celery", "portal", "psycopg", "redis")


def _module_path(name: str) -> Path:
    base = ROOT / name.replace(".", "/")
    return base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_core_module_imports_no_django(module):
    if not _module_path(module).exists():
        pytest.skip(f"{module} is not written yet")
    probe = (
        "import sys, importlib; importlib.import_module(sys.argv[1]); "
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN_IN_PURE!r}); "
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, module],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert result.returncode == 0, f"{module} pulls in {result.stdout.strip()} {result.stderr[-500:]}"


LAYERS = ["portal", "quotas", "jobs", "billing"]
# Only the URL configuration and the dashboard compose every app.
COMPOSERS = {"portal/urls.py", "portal/dashboard.py"}


def _imported_top_levels(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module.split(".")[0], node.lineno


def test_imports_point_one_way():
    wrong = []
    for rank, app in enumerate(LAYERS):
        above = set(LAYERS[rank + 1 :])
        for path in (ROOT / app).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel in COMPOSERS or "/migrations/" in rel:
                continue
            wrong += [
                f"{rel}:{line} imports {mod}" for mod, line in _imported_top_levels(path) if mod in above
            ]
    assert wrong == []


def test_ruff_is_clean():
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run([str(ruff), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]

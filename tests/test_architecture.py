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
    "quotas.lending",
    "quotas.validation",
    "quotas.admission",
    "quotas.queues",
    "quotas.yunikorn",
    "quotas.slurm_accounts",
    "jobs.placement",
    "jobs.autoscale_decision",
    "jobs.scheduler",
    "jobs.engine.fifo",
    "jobs.forecast",
    "jobs.backends.external",
    "jobs.backends.slurm_native",
    "jobs.backends.k8s_native",
    "jobs.backends.slurm_env",
    "jobs.backends.logfile",
    "quotas.resource_quota",
    "billing.pricing",
    "billing.forecast",
    "jobs.replay.trace",
    "jobs.replay.csvtrace",
    "jobs.replay.spec",
    "jobs.replay.sim",
    "jobs.replay.limits",
    "jobs.replay.fidelity",
    "jobs.replay.metrics",
    "jobs.replay.alibaba",
    "jobs.replay.packing",
    "jobs.replay.policy",
    "jobs.advisor.space",
    "jobs.advisor.objective",
    "jobs.advisor.study",
    "jobs.advisor.scenario",
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


# Pure modules inside a package whose __init__ starts Django's world (portal's loads Celery): loaded
# from their file, so only their own imports count.
PURE_FILES = ["portal/ldap_entries.py", "portal/webhook_formats.py"]


@pytest.mark.parametrize("path", PURE_FILES)
def test_pure_file_imports_no_django(path):
    probe = (
        "import sys, runpy; runpy.run_path(sys.argv[1]); "
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN_IN_PURE!r}); "
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(ROOT / path)], cwd="/", capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin"}, timeout=60,
    )
    assert result.returncode == 0, f"{path} pulls in {result.stdout.strip()} {result.stderr[-500:]}"


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


# --- item 21 of issue 18: the way down is one-way inside each app too -------------------------

APP_PACKAGES = ("portal", "quotas", "jobs", "billing")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_modules() -> dict[str, Path]:
    """Every module of the apps but migrations and management commands (entry points nothing
    imports)."""
    return {
        _module_name(path): path
        for app in APP_PACKAGES
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts and "management" not in path.parts
    }


def _import_targets(module: str, path: Path, known: dict[str, Path]):
    """The project modules ``module`` imports, at the top or inside a function alike (a lazy
    import is still a dependency: it only hides the circle from Python)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name


def _import_graph() -> dict[str, set[str]]:
    known = _project_modules()
    return {module: set(_import_targets(module, path, known)) for module, path in known.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_item21_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_item21_no_modules_import_each_other_in_a_circle():
    assert _circles(_import_graph()) == []


def test_item21_tasks_are_leaves_nothing_imports():
    """Celery tasks are entry points: work is enqueued by name (``portal.enqueue``), so no
    module imports a ``tasks`` module (Celery's own autodiscovery aside)."""
    graph = _import_graph()
    importers = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if target.endswith(".tasks") and module != "portal.celery"
    )
    assert importers == []


# --- issue 31: what other programs rely on does not move with the code ---------------------------
# Recorded in tests/contracts/*.json (``python -m tests.contracts`` records them anew).


def test_celery_task_names_are_the_recorded_ones():
    from tests import contracts

    assert contracts.task_names() == contracts.recorded("task_names")


def test_every_model_keeps_its_recorded_table():
    """A model that changes app keeps its table by an explicit ``db_table``; without it Django
    would name a new one (``whatif_advisorsearch``) and this fails."""
    from tests import contracts

    assert contracts.tables() == contracts.recorded("tables")


def test_every_url_name_reverses_to_its_recorded_path():
    from tests import contracts

    assert contracts.urls() == contracts.recorded("urls")


def test_the_api_schema_has_the_recorded_paths():
    from tests import contracts

    assert contracts.api_paths() == contracts.recorded("api_paths")

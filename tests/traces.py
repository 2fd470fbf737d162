"""The public traces some tests read (jobs.whatif.replay.paths: ``$GPUPOOL_TRACES_DIR``, or a
``shared/traces`` folder beside the checkout). Without them such a test skips on a developer
machine and fails under CI (``CI`` set), as the component fixtures do (tests/browser/conftest.py,
tests/ldap_server.py, tests/backends/test_slurm.py): CI provides the traces, so a missing folder
there is a broken run, not tests quietly left out (issue 32 item 14)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs.whatif.replay.paths import ENV, alibaba_dir


def need(path: Path) -> Path:
    """``path``, or a skip (a failure under CI) naming it and how to point at the traces."""
    if not path.exists():
        message = f"trace not present: {path} (set {ENV})"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def openb() -> Path:
    """The openb folder (Alibaba GPU 2023): ``csv/`` with the pod and node lists. Looked up when
    the test runs, so ``GPUPOOL_TRACES_DIR`` set for the run is the one used."""
    return need(alibaba_dir() / "csv").parent

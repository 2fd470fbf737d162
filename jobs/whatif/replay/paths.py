"""Where the public GPU-cluster traces are read from (pure: no Django).

The traces are large public data sets that are never copied into the repository; they sit in a
``shared`` folder beside the checkout (``../shared/traces``). A clone elsewhere — CI's, an
operator's — points at them with ``GPUPOOL_TRACES_DIR``, or keeps a ``shared/traces`` folder
beside itself or beside any folder above it (a clone at ``/srv/ci/gpupool`` finds
``/srv/ci/shared/traces`` and ``/srv/shared/traces``). Nothing here names one machine's path.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the project root (manage.py's folder)
ENV = "GPUPOOL_TRACES_DIR"
ALIBABA_2023 = "alibaba-gpu-v2023"


def traces_dir(environ: dict[str, str] | None = None, root: Path = ROOT) -> Path:
    """The traces folder: ``$GPUPOOL_TRACES_DIR`` when set (even if missing, so a typo shows as a
    missing file rather than another folder silently used), else the first ``shared/traces``
    beside the project root or beside one of its ancestors; else ``../shared/traces``."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV):
        return Path(environ[ENV]).expanduser()
    for folder in root.parents:
        candidate = folder / "shared" / "traces"
        if candidate.is_dir():
            return candidate
    return root.parent / "shared" / "traces"


def alibaba_dir() -> Path:
    """The Alibaba GPU 2023 trace (``csv/`` with the openb files, ``fgd-expected-results/``)."""
    return traces_dir() / ALIBABA_2023


def published_fgd_csv() -> Path:
    """The FGD paper's published allocation table (analysis_allo_discrete.csv)."""
    return alibaba_dir() / "fgd-expected-results" / "analysis_allo_discrete.csv"

"""Item 20 of issue 18: trace locations come from a setting or from beside the checkout, never
from one machine's absolute path."""

from __future__ import annotations

import re
from pathlib import Path

from jobs.whatif.replay.paths import ENV, ROOT, traces_dir

PRODUCT = ("portal", "quotas", "jobs", "billing", "bench", "scripts")


def test_item20_traces_dir_is_taken_from_the_environment(tmp_path):
    assert traces_dir({ENV: str(tmp_path / "elsewhere")}) == tmp_path / "elsewhere"


def test_item20_traces_dir_is_found_beside_a_clone_or_above_it(tmp_path):
    clone = tmp_path / "ci" / "runs" / "gpupool"
    clone.mkdir(parents=True)
    assert traces_dir({}, root=clone) == tmp_path / "ci" / "runs" / "shared" / "traces"  # default
    (tmp_path / "ci" / "shared" / "traces").mkdir(parents=True)
    assert traces_dir({}, root=clone) == tmp_path / "ci" / "shared" / "traces"
    (tmp_path / "ci" / "runs" / "shared" / "traces").mkdir(parents=True)
    assert traces_dir({}, root=clone) == tmp_path / "ci" / "runs" / "shared" / "traces"  # nearest


def test_item20_no_product_code_names_a_machines_absolute_path():
    pattern = re.compile(r"""["'](/work|/home|/root|/tmp)/""")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in PRODUCT
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_item20_a_clone_elsewhere_reads_the_same_traces(tmp_path, monkeypatch):
    """What an operator's clone does: point the environment at the traces, read the default
    folder through it."""
    from jobs.whatif.replay import paths

    monkeypatch.setenv(ENV, str(tmp_path))
    assert paths.alibaba_dir() == tmp_path / "alibaba-gpu-v2023"
    assert paths.published_fgd_csv() == Path(tmp_path, "alibaba-gpu-v2023", "fgd-expected-results",
                                              "analysis_allo_discrete.csv")

"""Item 20 of issue 18: trace locations come from a setting or from beside the checkout, never
from one machine's absolute path. Item 14 of issue 32: tests that need the traces fail under CI
when they are missing (tests/traces.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.whatif.replay.paths import ENV, ROOT, traces_dir
from tests.traces import need

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


TRACE_TESTS = (
    "tests/replay/test_alibaba.py",
    "tests/replay/test_packing.py::test_published_table_and_random_policy_on_the_real_trace",
)


def test_item14_tests_without_the_traces_fail_under_ci(tmp_path):
    """Issue 32 item 14: the trace tests skipped whenever the traces were missing — under CI too,
    where a wrong ``GPUPOOL_TRACES_DIR`` then passed the run with the replay untested. A run of
    those tests with the variable pointing at nothing, as CI would run them."""
    missing = tmp_path / "no-traces-here"
    env = os.environ | {ENV: str(missing), "CI": "true"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", *TRACE_TESTS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    summary = run.stdout.strip().splitlines()[-1]
    assert run.returncode != 0 and "skipped" not in summary, summary
    assert f"trace not present: {missing}" in run.stdout


def test_item14_without_ci_a_missing_trace_skips(tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="trace not present"):
        need(tmp_path / "nothing")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="trace not present"):
        need(tmp_path / "nothing")
    assert need(tmp_path) == tmp_path

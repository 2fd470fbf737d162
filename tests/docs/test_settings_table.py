"""The operator guide's settings table names every environment variable the code reads, so a new
setting cannot ship undocumented."""

from __future__ import annotations

import re

from .conftest import ROOT

READERS = re.compile(r"""env_(?:str|int|bool|list)\(\s*["']([A-Z][A-Z0-9_]+)["']""")
ENVIRON = re.compile(r"""os\.environ(?:\.get|\.setdefault)?[\[(]\s*["']([A-Z][A-Z0-9_]+)["']""")
NOT_SETTINGS = {"PATH", "HOME"}  # passed through to Slurm commands, not configuration


def variables_read() -> set[str]:
    sources = [
        *ROOT.glob("portal/**/*.py"),
        *ROOT.glob("quotas/**/*.py"),
        *ROOT.glob("jobs/**/*.py"),
        *ROOT.glob("billing/**/*.py"),
        ROOT / "scripts" / "devenv.py",
    ]
    found = set()
    for path in sources:
        text = path.read_text()
        found |= set(READERS.findall(text)) | set(ENVIRON.findall(text))
    return found - NOT_SETTINGS


def test_every_environment_variable_is_in_the_operator_guide():
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    table = guide.split("## Settings", 1)[1].split("\n## ", 1)[0]
    names = variables_read()
    assert {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "TIME_ZONE"} <= names  # the scan works
    missing = sorted(n for n in names if f"`{n}`" not in table)
    assert not missing, f"add these to the settings table of docs/operator-guide.md: {missing}"

"""The docs say only true things about the code's names: every relative link and anchor, every
`manage.py <command>`, `make <target>`, `/api/v1/…` path, portal URL and repository path that
docs/*.md and README.md mention exists."""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from pathlib import Path

import pytest
from django.core.management import get_commands
from django.urls import Resolver404, get_resolver, resolve

from .conftest import ROOT

DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
GUIDES = [
    ROOT / "docs" / n
    for n in (
        "user-guide.md",
        "user-guide.zh-hans.md",
        "admin-guide.md",
        "admin-guide.zh-hans.md",
        "operator-guide.md",
    )
]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
MANAGE = re.compile(r"manage\.py[ \t]+([a-z_]+)")
MAKE = re.compile(r"(?<![\w-])make[ \t]+([a-z][\w-]*)")
API_PATH = re.compile(r"/api/v1/[^\s`'\")\]|,;]*")
LOCAL_URL = re.compile(r"https?://(?:127\.0\.0\.1|localhost):\d+(/[\w\-./{}<>$~%?=&#:]*)", re.A)
REPO_PATH = re.compile(
    r"^(?:scripts|docs|deploy|bench|jobs|billing|portal|quotas|tests|templates|static)/[\w./-]+$"
)
PLACEHOLDER = re.compile(r"^(?:\{[^}]*\}|<[^>]*>|\$\w+|\$\{\w+\}|ID|N|\d+)$")


def text_of(path: Path) -> str:
    return path.read_text()


def without_code(text: str) -> str:
    return CODE_SPAN.sub("", FENCE.sub("", text))


def code_of(text: str) -> str:
    return "\n".join([*FENCE.findall(text), *CODE_SPAN.findall(text)])


def github_anchor(heading: str) -> str:
    heading = heading.strip().lower()
    kept = "".join(c for c in heading if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


@cache
def anchors_of(path: Path) -> frozenset[str]:
    found, seen = set(), {}
    for line in FENCE.sub("", text_of(path)).splitlines():
        if line.startswith("#"):
            base = github_anchor(line.lstrip("#"))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def portal_path(raw: str) -> str | None:
    """A documented URL path with its placeholders ({id}, <id>, $JOB_ID, 42) made concrete."""
    path = re.split(r"[?#]", raw, maxsplit=1)[0].rstrip(".:")
    if "…" in path or "..." in path:
        path = path.split("…")[0].split("...")[0]
        path = path[: path.rfind("/") + 1]
    parts = ["1" if PLACEHOLDER.match(p) else p for p in path.split("/")]
    return "/".join(parts)


def resolves(path: str) -> bool:
    try:
        resolve(path)
    except Resolver404:
        return False
    return True


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_relative_links_and_anchors_exist(doc):
    broken = []
    for target in LINK.findall(without_code(text_of(doc))):
        if re.match(r"^[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        exists = dest.exists()
        if not exists or (anchor and dest.suffix == ".md" and anchor not in anchors_of(dest)):
            broken.append(target)
    assert not broken, f"{rel(doc)}: broken links {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_management_commands_and_make_targets_exist(doc):
    text = text_of(doc)
    commands = set(get_commands())
    targets = set(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", (ROOT / "Makefile").read_text(), re.M))
    unknown = sorted({c for c in MANAGE.findall(text) if c not in commands})
    assert not unknown, f"{rel(doc)}: no such management command {unknown}"
    missing = sorted({t for t in MAKE.findall(code_of(text)) if t not in targets})
    assert not missing, f"{rel(doc)}: no such make target {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_api_paths_resolve(doc):
    paths = {portal_path(p) for p in API_PATH.findall(text_of(doc))}
    unknown = sorted(p for p in paths if p not in ("/api/v1/", "/api/v1") and not resolves(p))
    assert not unknown, f"{rel(doc)}: no such API path {unknown}"


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_local_urls_exist(doc):
    text = text_of(doc)
    unknown = sorted({p for p in map(portal_path, LOCAL_URL.findall(text)) if p and not resolves(p)})
    assert not unknown, f"{rel(doc)}: no such page {unknown}"


# The topic docs also cite upstream projects' scripts and migrations by short name; the guides and
# the two READMEs name only files of this repository.
@pytest.mark.parametrize("doc", [*GUIDES, ROOT / "docs" / "README.md", ROOT / "README.md"], ids=rel)
def test_repository_paths_in_the_guides_exist(doc):
    text = text_of(doc)
    files = {t.rstrip(".,:") for t in CODE_SPAN.findall(text) if REPO_PATH.match(t.rstrip(".,:"))}
    absent = sorted(f for f in files if not any(ch in f for ch in "*<{") and not (ROOT / f).exists())
    assert not absent, f"{rel(doc)}: no such file or folder {absent}"


def first_segments() -> set[str]:
    return {str(p.pattern).split("/")[0] for p in get_resolver().url_patterns} - {""}


@pytest.mark.parametrize("doc", GUIDES, ids=rel)
def test_the_pages_the_guides_name_exist(doc):
    """Backticked paths such as `/jobs/queue/` in the guides are portal pages."""
    assert doc.exists(), f"{rel(doc)} is missing"
    roots = first_segments()
    named = {t for t in CODE_SPAN.findall(text_of(doc)) if re.match(r"^/[a-z]", t)}
    pages = {portal_path(t) for t in named if t.strip("/").split("/")[0] in roots}
    assert len(pages) >= 2, f"{rel(doc)}: the check found only {sorted(pages)}"
    unknown = sorted(p for p in pages if not resolves(p))
    assert not unknown, f"{rel(doc)}: no such page {unknown}"

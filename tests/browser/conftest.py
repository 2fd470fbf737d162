"""Browser tests: Playwright drives Debian's Chromium (no browser download) against a live
server on the test database. Screenshots land in ``test-artifacts/screenshots/``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.waiting import TIMEOUT

CHROMIUM = os.environ.get("GPUPOOL_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _missing(message: str):
    # In CI a missing browser fails the run; on a developer machine it skips the group.
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def _sync_orm_beside_playwright():
    # Playwright's sync API keeps an event loop in this thread; the ORM calls a test makes between
    # page actions are ordinary synchronous calls, so Django's async-context guard stands down —
    # for as long as Playwright runs (the variable is read at every ORM call). Session-scoped and
    # set up before the browser: it must outlive the test database's teardown (the flush after a
    # transactional test), which runs after every function-scoped fixture is gone.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        yield


@pytest.fixture(scope="session")
def chromium(_sync_orm_beside_playwright):
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        _missing(f"{CHROMIUM} not found (.ci/run installs Debian's chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[test]')")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def browser_for(chromium, live_server):
    """``browser_for(user, lang="en")`` → a Playwright page logged in as ``user`` through the
    real login form, in its own browser context (own cookies)."""
    contexts, violations = [], []

    def make(user, password: str, lang: str = "en"):
        context = chromium.new_context(
            viewport={"width": 1280, "height": 900}, locale=lang, timezone_id="Asia/Shanghai"
        )
        # A hang guard, not a speed bound (tests/waiting.py): htmx's polls and page loads on a
        # loaded machine may take many times their usual time.
        context.set_default_timeout(TIMEOUT * 1000)
        contexts.append(context)
        page = context.new_page()
        # The Content-Security-Policy (portal/security.py) must not block anything our pages need.
        page.on("console", lambda msg: "Content Security Policy" in msg.text and violations.append(msg.text))
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("input[name=username]", user.username)
        page.fill("input[name=password]", password)
        page.click("article.login button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        page.base = live_server.url
        return page

    yield make
    for context in contexts:
        context.close()
    assert not violations, violations


@pytest.fixture
def shot():
    """``shot(page, name)`` saves a full-page screenshot and returns its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take

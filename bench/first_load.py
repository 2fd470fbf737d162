"""First load of the dashboard in a real browser, with a cold cache: what plotly.js costs.

The demo centre (``seed_demo``) is served by a real server on a scratch database
(bench/scratchdb.py) — ``--mode demo``: ``manage.py runserver`` with the dev settings, as `make
demo` served before it moved to gunicorn (static files uncompressed, the worst case); ``--mode
production``: ``collectstatic`` with WhiteNoise's ``CompressedManifestStaticFilesStorage`` and
gunicorn, as the Docker image runs it (hashed names, gzip, long cache). Debian's Chromium
(Playwright) signs in as ``admin`` in a fresh context for every run (nothing cached), opens the
dashboard and waits until its plotly chart is drawn. ``--mbps`` / ``--latency-ms`` emulate a network
link (Chrome DevTools Protocol); 0 is the loopback as it is.

Prints one JSON object: per run and as medians, the dashboard's load event (``load_ms``, from
the navigation's start) and the moment the chart's SVG exists (``chart_ms``), and the bytes of
plotly.js on the wire (``plotly_transfer_bytes``) and decoded (``plotly_decoded_bytes``), and of
the whole page (``page_transfer_bytes``). Needs DATABASE_URL and REDIS_URL.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scratchdb import scratch_django  # noqa: E402

CHROMIUM = os.environ.get("GPUPOOL_CHROMIUM", "/usr/bin/chromium")
PRODUCTION_SETTINGS = """
from portal.settings.dev import *  # noqa: F403
DEBUG = False
STATIC_ROOT = {static_root!r}
WHITENOISE_USE_FINDERS = False
STORAGES = {{
    "default": {{"BACKEND": "django.core.files.storage.FileSystemStorage"}},
    "staticfiles": {{"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"}},
}}
"""
MEASURE = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const resources = performance.getEntriesByType("resource");
  const plotly = resources.find((r) => /\\/vendor\\/plotly[^/]*\\.js$/.test(new URL(r.name).pathname));
  return {
    load_ms: nav.loadEventEnd - nav.startTime,
    chart_ms: window.__chartAt,
    plotly_transfer_bytes: plotly ? plotly.transferSize : null,
    plotly_decoded_bytes: plotly ? plotly.decodedBodySize : null,
    page_transfer_bytes: nav.transferSize + resources.reduce((sum, r) => sum + r.transferSize, 0),
  };
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_up(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url + "/healthz", timeout=2)
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the server did not come up")


def _server(mode: str, env: dict, tmp: Path, port: int) -> subprocess.Popen:
    python = sys.executable
    if mode == "demo":
        env["DJANGO_SETTINGS_MODULE"] = "portal.settings.dev"
        cmd = [python, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    else:
        settings = PRODUCTION_SETTINGS.format(static_root=str(tmp / "static"))
        (tmp / "first_load_settings.py").write_text(settings)
        env["PYTHONPATH"] = f"{tmp}{os.pathsep}{env.get('PYTHONPATH', '')}"
        env["DJANGO_SETTINGS_MODULE"] = "first_load_settings"
        subprocess.run(
            [python, "manage.py", "collectstatic", "--noinput", "-v0"], env=env, cwd=ROOT, check=True
        )
        cmd = [python, "-m", "gunicorn", "portal.wsgi:application", f"--bind=127.0.0.1:{port}", "-w", "2"]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _one_run(browser, base: str, password: str, mbps: float, latency_ms: float) -> dict:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en")
    try:
        page = context.new_page()
        # Signed in on a page without charts (the dashboard would warm the cache): the next
        # navigation, to the dashboard, is the one measured.
        page.goto(base + "/accounts/login/?next=/notifications/")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", password)
        page.click("article.login button[type=submit]")
        page.wait_for_url(base + "/notifications/")
        if mbps:
            cdp = context.new_cdp_session(page)
            cdp.send("Network.enable")
            cdp.send(
                "Network.emulateNetworkConditions",
                {
                    "offline": False,
                    "latency": latency_ms,
                    "downloadThroughput": mbps * 1e6 / 8,
                    "uploadThroughput": mbps * 1e6 / 8,
                },
            )
        page.add_init_script(
            "new MutationObserver((_, obs) => { if (document.querySelector('.chart .main-svg')) {"
            " window.__chartAt = performance.now(); obs.disconnect(); } })"
            ".observe(document, {childList: true, subtree: true});"
        )
        page.goto(base + "/", wait_until="load")
        page.wait_for_selector(".chart .main-svg", timeout=120_000)
        return page.evaluate(MEASURE)
    finally:
        context.close()


def _median(runs: list[dict], key: str):
    values = [r[key] for r in runs if r[key] is not None]
    return round(statistics.median(values), 1) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["demo", "production"], default="production")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--mbps", type=float, default=0, help="emulated link speed; 0: loopback as is")
    parser.add_argument("--latency-ms", type=float, default=0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with scratch_django(settings="portal.settings.dev") as url, tempfile.TemporaryDirectory() as tmp:
        from django.core.management import call_command

        from portal.demo import DEMO_PASSWORD

        call_command("seed_demo", verbosity=0)
        port = _free_port()
        env = {**os.environ, "DATABASE_URL": url}
        server = _server(args.mode, env, Path(tmp), port)
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_up(base, server)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
                link = (args.mbps, args.latency_ms)
                runs = [_one_run(browser, base, DEMO_PASSWORD, *link) for _ in range(args.repeat)]
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(
        json.dumps(
            {
                "mode": args.mode,
                "mbps": args.mbps,
                "latency_ms": args.latency_ms,
                "runs": len(runs),
                "load_ms_p50": _median(runs, "load_ms"),
                "chart_ms_p50": _median(runs, "chart_ms"),
                "plotly_transfer_bytes": runs[-1]["plotly_transfer_bytes"],
                "plotly_decoded_bytes": runs[-1]["plotly_decoded_bytes"],
                "page_transfer_bytes": runs[-1]["page_transfer_bytes"],
                "per_run": runs,
            }
        )
    )


if __name__ == "__main__":
    main()

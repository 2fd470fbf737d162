"""The portal's fetch of a simulated dev job's page is bounded (jobs/clusters/views_logs.py): GET only, a
page type, a size cap, no redirects followed, sandboxed — against a real HTTP server."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jobs.clusters import views_logs

BIG = b"<p>" + b"x" * views_logs.PROXY_MAX_BYTES + b"</p>"


class _Upstream(BaseHTTPRequestHandler):
    def do_GET(self):
        answers = {
            "/page": (200, "text/html; charset=utf-8", b"<h1>notebook</h1><script>alert(1)</script>"),
            "/big": (200, "text/html", BIG),
            "/json": (200, "application/json", b"{}"),
            "/gone": (404, "text/html", b"no"),
        }
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/page")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status, kind, body = answers[self.path]
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


@pytest.fixture
def upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_page_is_passed_through_sandboxed(upstream):
    response = views_logs._proxied(upstream + "/page")
    assert response.status_code == 200 and response["Content-Type"] == "text/html; charset=utf-8"
    assert response.content == b"<h1>notebook</h1><script>alert(1)</script>"
    # Its script runs, if at all, in an opaque origin: no portal cookie, no portal page.
    assert response["Content-Security-Policy"].split(";")[0] == "sandbox"
    assert response["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/big", "more than 1024 KiB"),
        ("/json", "not a page (application/json)"),
        ("/gone", "HTTP 404"),
        ("/redirect", "HTTP 302"),
    ],
)
def test_what_is_not_a_small_page_is_refused(english, upstream, path, why):
    with pytest.raises(views_logs._ProxyRefused, match=rf"^{why.replace('(', '.').replace(')', '.')}$"):
        views_logs._proxied(upstream + path)


def test_nobody_listening_is_refused(upstream):
    with pytest.raises(views_logs._ProxyRefused):
        views_logs._proxied("http://127.0.0.1:1/")

"""Issue 18 item 12: /api/docs/ works without internet. Swagger UI comes from the pinned
drf-spectacular-sidecar through our own static files (WhiteNoise), never a CDN's ``@latest``;
every URL the page references is same-origin and answers. The rendering in a real browser with
the network cut off is tests/browser/test_api_docs.py."""

from __future__ import annotations

import re
import tomllib
from html.parser import HTMLParser
from importlib.metadata import version
from pathlib import Path

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


class _References(HTMLParser):
    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


def _references(html: str) -> list[str]:
    parser = _References()
    parser.feed(html)
    return parser.urls


@pytest.mark.parametrize("persona", [None, "pa1_member"])
def test_item12_the_docs_page_references_only_same_origin_assets_that_are_served(world, persona):
    client = Client()
    if persona:
        client.force_login(world.users[persona])
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    urls = _references(html)
    assert len(urls) >= 4, urls  # favicon, stylesheet, the bundle, the preset, the start-up script
    assert not re.search(r"https?://|//cdn", html), html
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        body = b"".join(asset.streaming_content) if asset.streaming else asset.content
        assert len(body) > 0, url
    script = client.get(next(u for u in urls if u.startswith("/api/docs/?script")))
    text = script.content.decode()
    assert "/api/schema/" in text and not re.search(r"https?://", text)


def test_item12_swagger_ui_is_the_pinned_sidecar():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [pin] = [d for d in deps if d.startswith("drf-spectacular-sidecar==")]
    assert pin.split("==")[1] == version("drf-spectacular-sidecar")

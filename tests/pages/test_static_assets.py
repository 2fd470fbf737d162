"""plotly.js: the smaller official bundle, every trace type our charts draw in it, and served the
way production serves it — hashed name, gzip, a year of cache (issue 18, item 17)."""

import ast
import gzip
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.templatetags.static import static
from django.test import Client

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "static" / "vendor" / "plotly-cartesian-4.1.1.min.js"
CHART_MODULES = ("jobs/charts.py", "billing/charts.py", "billing/whatif.py")


def _traces_drawn() -> set[str]:
    """The trace types the figure code builds: every ``go.<Trace>(…)`` call."""
    found = set()
    for module in CHART_MODULES:
        for node in ast.walk(ast.parse((ROOT / module).read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "go"
                and node.func.attr not in ("Figure", "Layout")
            ):
                found.add(node.func.attr.lower())
    return found


def test_item17_the_bundle_is_the_smaller_one_and_has_every_trace_the_charts_draw():
    text = BUNDLE.read_text(encoding="utf-8")
    assert text.startswith("/**\n* plotly.js (cartesian - minified) v4.1.1")
    registered = set(re.findall(r'moduleType:"trace",name:"([a-z0-9]+)"', text))
    drawn = _traces_drawn()
    assert drawn == {"scatter", "bar", "heatmap", "box"}  # a new trace type must be checked here
    assert drawn <= registered
    assert BUNDLE.stat().st_size < 1_600_000  # the full bundle was 4,815,814 bytes
    assert not (ROOT / "static" / "vendor" / "plotly-4.1.1.min.js").exists()
    license_text = (ROOT / "static" / "vendor" / "plotly-LICENSE.txt").read_text()
    assert license_text.startswith("MIT License\n\nCopyright (c) 2016-2024 Plotly")  # as the dist ships it


def test_item17_production_serves_plotly_hashed_gzipped_and_cached_for_a_year(tmp_path, settings, world):
    # What the Docker image does: collectstatic with WhiteNoise's compressed manifest storage.
    settings.DEBUG = False
    settings.STATIC_ROOT = tmp_path
    settings.WHITENOISE_USE_FINDERS = False
    settings.STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    call_command("collectstatic", "--noinput", verbosity=0)
    url = static("vendor/plotly-cartesian-4.1.1.min.js")
    assert re.fullmatch(r"/static/vendor/plotly-cartesian-4\.1\.1\.min\.[0-9a-f]{12}\.js", url)
    client = Client()  # a new handler: WhiteNoise reads the settings above
    response = client.get(url, HTTP_ACCEPT_ENCODING="gzip, deflate, br")
    assert response.status_code == 200 and response["Content-Encoding"] == "gzip"
    assert response["Cache-Control"] == "max-age=315360000, public, immutable"
    body = b"".join(response.streaming_content)
    assert len(body) < 550_000 and gzip.decompress(body) == BUNDLE.read_bytes()
    client.force_login(world.users["platform"])
    assert f'src="{url}"' in client.get("/", HTTP_ACCEPT_LANGUAGE="en").content.decode()

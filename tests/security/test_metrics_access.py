"""Issue 18 item 11: /metrics (its labels name departments) answers only the scraper — with the
Bearer token, compared in constant time, or from an allowed network, where the client address is
the trusted-proxy-aware one (behind the ingress, REMOTE_ADDR is the ingress, inside every
cluster network). Production refuses to start with neither: tests/test_settings.py."""

from __future__ import annotations

from ipaddress import ip_network

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

TOKEN = "scrape-token-0123456789"
INGRESS = "10.0.0.1"


@pytest.fixture
def metrics_settings(settings):
    def apply(token: str = "", networks: tuple = (), proxies: int = 0):
        settings.GPUPOOL = {
            **settings.GPUPOOL,
            "METRICS_TOKEN": token,
            "METRICS_ALLOW_NETWORKS": tuple(ip_network(n) for n in networks),
        }
        settings.TRUSTED_PROXIES = proxies

    return apply


def _scrape(remote="127.0.0.1", **headers):
    return Client().get("/metrics", REMOTE_ADDR=remote, **headers).status_code


def test_item11_with_a_token_only_the_bearer_of_it_is_answered(world, metrics_settings):
    metrics_settings(token=TOKEN)
    assert _scrape() == 403
    assert _scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}x") == 403
    assert _scrape(HTTP_AUTHORIZATION=f"Token {TOKEN}") == 403
    assert _scrape(HTTP_AUTHORIZATION="Bearer é\xff") == 403  # non-ASCII: a 403, not a 500
    assert _scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}") == 200


def test_item11_with_networks_only_the_networks_are_answered(world, metrics_settings):
    metrics_settings(networks=("10.0.0.0/8", "2001:db8::/32"))
    assert _scrape("10.42.0.7") == 200
    assert _scrape("2001:db8::5") == 200
    assert _scrape("203.0.113.7") == 403
    assert _scrape("203.0.113.7", HTTP_X_FORWARDED_FOR="10.0.0.5") == 403  # no trusted proxy: ignored


def test_item11_behind_the_ingress_the_network_check_sees_the_real_client(world, metrics_settings):
    metrics_settings(networks=("10.0.0.0/8",), proxies=1)
    # An outsider through the ingress: REMOTE_ADDR is the ingress (inside 10/8), the client is not.
    assert _scrape(INGRESS, HTTP_X_FORWARDED_FOR="10.0.0.5, 203.0.113.7") == 403
    assert _scrape(INGRESS, HTTP_X_FORWARDED_FOR="10.3.3.3") == 200  # an in-cluster client via the ingress
    assert _scrape("10.42.0.9") == 200  # Prometheus scraping the pod directly


def test_item11_token_or_network_either_is_enough(world, metrics_settings):
    metrics_settings(token=TOKEN, networks=("10.0.0.0/8",))
    assert _scrape("10.1.1.1") == 200
    assert _scrape("203.0.113.7", HTTP_AUTHORIZATION=f"Bearer {TOKEN}") == 200
    assert _scrape("203.0.113.7") == 403

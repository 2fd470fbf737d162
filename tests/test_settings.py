"""Settings come from the environment through typed helpers; production fails fast."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_int, parse_database_url, parse_networks, redis_urls

ROOT = Path(__file__).resolve().parent.parent


def test_database_url_with_host_port_and_credentials():
    cfg = parse_database_url("postgresql://app:s%40cret@db.example:6543/gpupool?sslmode=require")
    assert (cfg["USER"], cfg["PASSWORD"], cfg["HOST"], cfg["PORT"], cfg["NAME"]) == (
        "app",
        "s@cret",
        "db.example",
        "6543",
        "gpupool",
    )
    assert cfg["OPTIONS"] == {"sslmode": "require"}


def test_database_url_from_pgserver_uses_the_socket_directory():
    cfg = parse_database_url("postgresql://postgres:@/postgres?host=/srv/run/pgdata")
    assert cfg["HOST"] == "/srv/run/pgdata" and cfg["NAME"] == "postgres" and cfg["OPTIONS"] == {}


def test_non_postgres_database_url_is_refused():
    with pytest.raises(ImproperlyConfigured):
        parse_database_url("mysql://root@localhost/x")


def test_redis_urls_for_tcp_and_unix_sockets():
    assert redis_urls("redis://127.0.0.1:6379/2") == ("redis://127.0.0.1:6379/2",) * 2
    assert redis_urls("unix:///tmp/r.sock") == ("redis+socket:///tmp/r.sock", "unix:///tmp/r.sock")
    with pytest.raises(ImproperlyConfigured):
        redis_urls("http://nope")


def test_typed_helpers_reject_garbage(monkeypatch):
    monkeypatch.setenv("X_BOOL", "maybe")
    monkeypatch.setenv("X_INT", "ten")
    with pytest.raises(ImproperlyConfigured):
        env_bool("X_BOOL", False)
    with pytest.raises(ImproperlyConfigured):
        env_int("X_INT", 1)
    monkeypatch.setenv("X_BOOL", "on")
    assert env_bool("X_BOOL", False) is True


def _production(env_extra: dict, *args: str):
    # A production process starts from a clean slate: none of the test run's own switches.
    dropped = (
        "SECRET_KEY",
        "ALLOWED_HOSTS",
        "DJANGO_ALLOW_ASYNC_UNSAFE",
        "GPUPOOL_METRICS_TOKEN",
        "GPUPOOL_METRICS_ALLOW_NETWORKS",
        "GPUPOOL_TRUSTED_PROXIES",
    )
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update({"DJANGO_SETTINGS_MODULE": "portal.settings.production", **env_extra})
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_production_refuses_to_start_without_a_secret_key():
    result = _production({"ALLOWED_HOSTS": "gpupool.example"}, "check")
    assert result.returncode != 0 and "Set the environment variable SECRET_KEY" in result.stderr


def test_production_refuses_a_weak_secret_key_and_missing_hosts():
    weak = _production({"SECRET_KEY": "short", "ALLOWED_HOSTS": "gpupool.example"}, "check")
    assert weak.returncode != 0 and "at least 50 characters" in weak.stderr
    no_hosts = _production({"SECRET_KEY": "k" * 64}, "check")
    assert no_hosts.returncode != 0 and "ALLOWED_HOSTS" in no_hosts.stderr


STRONG_KEY = "q7Z!m2#Lp9$wX4&rT8^yB3*nK6(cV1)hJ5-dF0+gS" * 2
REQUIRED = {"SECRET_KEY": STRONG_KEY, "ALLOWED_HOSTS": "gpupool.example"}


def test_production_settings_pass_the_deploy_check():
    result = _production(
        {**REQUIRED, "GPUPOOL_METRICS_TOKEN": "k8s-secret-metrics-token-1234"},
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
    )
    assert result.returncode == 0, result.stderr + result.stdout


def test_default_time_zone_and_languages(settings):
    assert os.environ.get("TIME_ZONE", "Asia/Shanghai") == settings.TIME_ZONE
    assert [code for code, _ in settings.LANGUAGES] == ["zh-hans", "en"]
    assert settings.USE_TZ is True


def test_item11_production_refuses_to_start_with_metrics_open_to_everyone():
    result = _production(REQUIRED, "check")
    assert result.returncode != 0
    assert "Set GPUPOOL_METRICS_TOKEN" in result.stderr and "GPUPOOL_METRICS_ALLOW_NETWORKS" in result.stderr


@pytest.mark.parametrize(
    "metrics",
    [
        {"GPUPOOL_METRICS_TOKEN": "k8s-secret-metrics-token-1234"},
        {"GPUPOOL_METRICS_ALLOW_NETWORKS": "10.0.0.0/8, 127.0.0.1, fd00::/8"},
    ],
)
def test_item11_production_starts_with_a_metrics_token_or_allowed_networks(metrics):
    result = _production({**REQUIRED, **metrics}, "check")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"GPUPOOL_METRICS_TOKEN": "CHANGE-ME"}, "GPUPOOL_METRICS_TOKEN must be at least 16 characters"),
        ({"GPUPOOL_METRICS_ALLOW_NETWORKS": "10.0.0.0/8,lan"}, "'lan' is not an address or network"),
        ({"GPUPOOL_METRICS_TOKEN": "k" * 20, "GPUPOOL_TRUSTED_PROXIES": "-1"}, "GPUPOOL_TRUSTED_PROXIES"),
    ],
)
def test_item11_production_refuses_a_weak_token_and_malformed_networks(metrics, message):
    result = _production({**REQUIRED, **metrics}, "check")
    assert result.returncode != 0 and message in result.stderr, result.stderr[-500:]


def test_item11_networks_parse_into_ip_networks():
    nets = parse_networks("X", ["10.0.0.0/8", "127.0.0.1", "10.1.2.3/8"])
    assert [str(n) for n in nets] == ["10.0.0.0/8", "127.0.0.1/32", "10.0.0.0/8"]
    with pytest.raises(ImproperlyConfigured, match="X: 'nope'"):
        parse_networks("X", ["nope"])

def _check_with(extra: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.test", **extra}
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_item6_runtime_maxima_are_checked_at_start_up(monkeypatch):
    monkeypatch.setenv("X_INT", "3000")
    with pytest.raises(ImproperlyConfigured, match="between 0 and 2160"):
        env_int("X_INT", 0, min_value=0, max_value=2160)
    shorter = _check_with({"GPUPOOL_MAX_RUNTIME_HOURS_DEV": "12"})  # below the 24 h dev lifetime
    assert shorter.returncode != 0 and "GPUPOOL_DEV_LIFETIME_SECONDS is longer" in shorter.stderr
    negative = _check_with({"GPUPOOL_MAX_RUNTIME_HOURS_TRAINING": "-5"})
    assert negative.returncode != 0 and "GPUPOOL_MAX_RUNTIME_HOURS_TRAINING='-5'" in negative.stderr
    assert _check_with({"GPUPOOL_MAX_RUNTIME_HOURS_DEV": "24"}).returncode == 0


def _settings_value(extra: dict, expr: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GPUPOOL_AUTH_BACKENDS"}
    env.update({"DJANGO_SETTINGS_MODULE": "portal.settings.test", **extra})
    code = f"import django; django.setup(); from django.conf import settings as s; print(repr(({expr})))"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_issue21_auth_backends_setting_chooses_the_backends_and_the_ldap_beat():
    default = _settings_value({}, "s.AUTHENTICATION_BACKENDS, 'ldap-sync' in s.CELERY_BEAT_SCHEDULE")
    # The OIDC backend is always listed: it acts only on its own callback, and only with "oidc" on.
    assert default.stdout.strip() == (
        "(['django.contrib.auth.backends.ModelBackend', 'portal.oidc.OIDCBackend'], False)"
    ), default.stderr
    both = _settings_value({"GPUPOOL_AUTH_BACKENDS": "ldap,local",
                            "GPUPOOL_LDAP_SYNC_INTERVAL_SECONDS": "120"},
                           "s.AUTHENTICATION_BACKENDS, s.CELERY_BEAT_SCHEDULE['ldap-sync']['schedule']")
    assert both.stdout.strip() == (
        "(['django.contrib.auth.backends.ModelBackend', 'portal.ldap_auth.DirectoryLDAPBackend',"
        " 'portal.oidc.OIDCBackend'], 120)"
    ), both.stderr  # local first, whatever the order written: break-glass admins never wait on LDAP
    oidc = _settings_value({"GPUPOOL_AUTH_BACKENDS": "local,oidc", "GPUPOOL_OIDC_ISSUER": "https://idp.example",
                            "GPUPOOL_OIDC_CLIENT_ID": "gpupool"}, "s.OIDC['ENABLED']")
    assert oidc.stdout.strip() == "True", oidc.stderr
    unknown = _check_with({"GPUPOOL_AUTH_BACKENDS": "local,kerberos"})
    assert unknown.returncode != 0 and "GPUPOOL_AUTH_BACKENDS: unknown ['kerberos']" in unknown.stderr

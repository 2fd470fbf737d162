"""A real OpenID Connect provider for the tests: deploy/oidc/provider.mjs (npm's certified
``oidc-provider``) started on a free port, with accounts a test can change while it runs (the
provider reads its accounts file at every request) and a signing key the test knows, so it can
make tokens the provider would have made (expired ones) and tokens it never made (forged ones).

Import the fixtures into a test module: ``from tests.oidc_provider import oidc_provider``."""

from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urljoin

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.waiting import TIMEOUT

ROOT = Path(__file__).resolve().parents[1]
PROVIDER_DIR = ROOT / "deploy" / "oidc"
CLIENT_ID = "gpupool"
CLIENT_SECRET = "test-client-secret-" + "x" * 24
KID = "test-signing-key"

ALICE = {
    "password": "alice-pw",
    "disabled": False,
    "claims": {
        "sub": "2f6b1c7e-alice", "preferred_username": "alice", "email": "alice@centre.example",
        "email_verified": True, "name": "Alice Chen", "unix_name": "alice1",
        "groups": ["gpu-users", "vision-lab"],
    },
}


def new_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Provider:
    def __init__(self, workdir: Path, redirect_bases: list[str], backchannel_logout_uri: str = ""):
        self.workdir = workdir
        self.key = new_rsa_key()
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key))
        jwk.pop("key_ops", None)  # PyJWT writes ["sign"]: the provider could not verify its own hints
        jwk.update(kid=KID, alg="RS256", use="sig")
        client = {
            "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
            "redirect_uris": [f"{b}/oidc/callback/" for b in redirect_bases],
            "post_logout_redirect_uris": [f"{b}/accounts/login/" for b in redirect_bases],
            "token_endpoint_auth_method": "client_secret_post",
            # offline_access (asked with prompt=consent) gives a refresh token: the account check's.
            "grant_types": ["authorization_code", "refresh_token"],
        }
        if backchannel_logout_uri:
            client.update(backchannel_logout_uri=backchannel_logout_uri,
                          backchannel_logout_session_required=True)
        (workdir / "config.json").write_text(json.dumps({
            "clients": [client], "jwks": {"keys": [jwk]}, "cookie_keys": [secrets.token_hex(16)],
        }))
        self.accounts_path = workdir / "accounts.json"
        self.accounts = {"alice": json.loads(json.dumps(ALICE))}
        self.save_accounts()
        self.log = open(workdir / "provider.log", "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            ["node", str(PROVIDER_DIR / "provider.mjs"), "--port", "0",
             "--config", str(workdir / "config.json"), "--accounts", str(self.accounts_path), "--test-hooks"],
            stdout=subprocess.PIPE, stderr=self.log, text=True,
        )
        self.issuer = self._read_issuer()

    def _read_issuer(self) -> str:
        # The first stdout line is the issuer, printed once the port is bound (a hang guard only).
        ready, _, _ = select.select([self.process.stdout], [], [], TIMEOUT)
        line = self.process.stdout.readline().strip() if ready else ""
        if not line.startswith("http://"):
            self.stop()
            log = (self.workdir / "provider.log").read_text()
            raise RuntimeError(f"the OIDC provider did not start: {log}")
        return line

    def save_accounts(self) -> None:
        tmp = self.accounts_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.accounts))
        os.replace(tmp, self.accounts_path)  # the provider never reads half a file

    def change(self, name: str, *, disabled: bool | None = None, **claims) -> None:
        account = self.accounts[name]
        if disabled is not None:
            account["disabled"] = disabled
        account["claims"].update(claims)
        self.save_accounts()

    def next_id_token(self, token: str) -> None:
        """The next token response carries ``token`` as its ID token (the test's man in the middle)."""
        response = requests.post(f"{self.issuer}/__test/next-id-token", data={"id_token": token}, timeout=30)
        response.raise_for_status()

    def id_token(self, *, key=None, alg: str = "RS256", kid: str = KID, **overrides) -> str:
        """An ID token as the provider would sign it (``key`` None), or with another key/alg."""
        now = int(time.time())
        claims = {"iss": self.issuer, "aud": CLIENT_ID, "sub": ALICE["claims"]["sub"], "iat": now,
                  "exp": now + 600, **overrides}
        signing_key = self.key if key is None else key
        return jwt.encode(claims, signing_key, algorithm=alg, headers={"kid": kid})

    def logout_token(self, *, key=None, alg: str = "RS256", kid: str = KID, drop: tuple[str, ...] = (),
                     **overrides) -> str:
        """A back-channel logout token as the provider would sign it (``key`` None), or forged;
        ``drop`` names claims to leave out."""
        now = int(time.time())
        claims = {"iss": self.issuer, "aud": CLIENT_ID, "sub": ALICE["claims"]["sub"], "iat": now,
                  "exp": now + 600, "jti": secrets.token_hex(8),
                  "events": {"http://schemas.openid.net/event/backchannel-logout": {}}, **overrides}
        for name in drop:
            claims.pop(name, None)
        signing_key = self.key if key is None else key
        return jwt.encode(claims, signing_key, algorithm=alg, headers={"kid": kid, "typ": "logout+jwt"})

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=TIMEOUT)
        self.process.stdout.close()
        self.log.close()


def _missing(message: str):
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def oidc_provider(tmp_path):
    """``oidc_provider(*redirect_bases, backchannel_logout_uri="")`` → a running :class:`Provider`
    whose client redirects to those bases (default: the Django test client's ``http://testserver``)
    and, when given, is told of ended sessions at ``backchannel_logout_uri``."""
    if not shutil.which("node") or not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        _missing("node or deploy/oidc/node_modules missing (bash deploy/oidc/install.sh; .ci/run does it)")
    started: list[Provider] = []

    def start(*redirect_bases: str, backchannel_logout_uri: str = "") -> Provider:
        workdir = tmp_path / f"oidc-{len(started)}"
        workdir.mkdir()
        provider = Provider(workdir, list(redirect_bases) or ["http://testserver"], backchannel_logout_uri)
        started.append(provider)
        return provider

    yield start
    for provider in started:
        provider.stop()


def portal_settings(settings, provider: Provider, **overrides) -> None:
    """Points the portal at ``provider`` (the ``settings`` fixture undoes it after the test)."""
    settings.OIDC = {
        **settings.OIDC, "ENABLED": True, "ISSUER": provider.issuer, "CLIENT_ID": CLIENT_ID,
        "CLIENT_SECRET": CLIENT_SECRET, "SCOPES": "openid email profile groups",
        "UNIX_NAME_CLAIM": "unix_name",
        **overrides,
    }


def to_portal(browser: requests.Session, response: requests.Response, portal: str = "http://testserver"):
    """Follows the provider's redirects as a browser would; the URL it sends back to the portal
    (``portal``), or its last page."""
    while response.is_redirect:
        location = urljoin(response.url, response.headers["Location"])
        if location.startswith(portal):
            return location
        response = browser.get(location, allow_redirects=False, timeout=30)
    return response

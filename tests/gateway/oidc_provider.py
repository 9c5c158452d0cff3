"""Runs scripts/oidc/provider.js (panva's oidc-provider) and drives its login form with httpx."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import httpx

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "oidc" / "provider.js"
GATEWAY_BASE = "http://testserver.local"  # TestClient warns about a host without a dot
CLIENT_ID, CLIENT_SECRET = "enclave", "enclave-test-secret"
OTHER_CLIENT_ID, OTHER_CLIENT_SECRET = "other-app", "other-test-secret"
USERS = {
    "alice": {"email": "alice@example.test", "name": "Alice", "groups": ["research-team"]},
    "bob": {"email": "bob@example.test", "name": "Bob", "groups": ["legal", "enclave-admins"]},
    # In no department until an admin maps her group (the admin console's e2e test).
    "carol": {"email": "carol@example.test", "name": "Carol", "groups": ["quality-team"]},
}


@dataclass(frozen=True)
class RunningProvider:
    issuer: str


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def run_provider(gateway_base: str = GATEWAY_BASE) -> Iterator[RunningProvider]:
    """The IdP, with clients whose redirect URIs are on ``gateway_base``."""
    port = _free_port()
    clients = [
        {
            "client_id": client_id,
            "client_secret": secret,
            "redirect_uris": [f"{gateway_base}/auth/callback"],
            "post_logout_redirect_uris": [f"{gateway_base}/"],
        }
        for client_id, secret in (
            (CLIENT_ID, CLIENT_SECRET),
            (OTHER_CLIENT_ID, OTHER_CLIENT_SECRET),
        )
    ]
    env = {
        "OIDC_PORT": str(port),
        "OIDC_CLIENTS": json.dumps(clients),
        "OIDC_USERS": json.dumps(USERS),
    }
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    proc = subprocess.Popen(
        ["node", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        issuer = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(
                    issuer + "/.well-known/openid-configuration", timeout=1
                ).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    output = proc.stdout.read() if proc.stdout else ""
                    raise RuntimeError(f"oidc-provider did not start:\n{output}") from None
                time.sleep(0.1)
        yield RunningProvider(issuer)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def sign_in_at_provider(authorization_url: str, login: str) -> str:
    """Follows the IdP from the authorization URL through its login form; returns the URL
    it sends the browser back to (the gateway's callback, with code and state)."""
    with httpx.Client(timeout=10) as browser:
        url = authorization_url
        for _ in range(10):
            if url.startswith(GATEWAY_BASE):
                return url
            response = browser.get(url)
            if response.status_code == 200 and "<form" in response.text:
                action = re.search(r'<form[^>]*action="([^"]+)"', response.text)
                assert action is not None, response.text
                # The form's hidden fields (which prompt it answers) plus the credentials.
                hidden = dict(
                    re.findall(r'type="hidden" name="([^"]+)" value="([^"]*)"', response.text)
                )
                fields = {**hidden, "login": login, "password": "any"}
                response = browser.post(urljoin(url, action.group(1)), data=fields)
            assert response.is_redirect, (response.status_code, response.text[:500])
            url = urljoin(url, response.headers["location"])
    raise RuntimeError("the provider did not send the browser back")

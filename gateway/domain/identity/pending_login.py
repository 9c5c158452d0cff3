"""The browser's half of an OIDC login in flight: state, nonce and PKCE verifier.

Kept in a short-lived HttpOnly cookie, HMAC-signed with the server secret, so the callback
can check that the ``state`` coming back is the one this browser was sent off with.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import asdict, dataclass

LOGIN_COOKIE = "enclave_login"
LOGIN_TTL_SECONDS = 600


@dataclass(frozen=True, slots=True)
class PendingLogin:
    state: str
    nonce: str
    code_verifier: str
    expires_at: int

    @classmethod
    def new(cls) -> PendingLogin:
        return cls(
            secrets.token_urlsafe(32),
            secrets.token_urlsafe(32),
            secrets.token_urlsafe(48),  # 64 characters: within PKCE's 43..128
            int(time.time()) + LOGIN_TTL_SECONDS,
        )


def _sign(secret_key: str, payload: bytes) -> str:
    digest = hmac.new(secret_key.encode(), b"login:" + payload, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def encode(secret_key: str, pending: PendingLogin) -> str:
    # No "=" padding: it would make the cookie value need quoting.
    payload = base64.urlsafe_b64encode(json.dumps(asdict(pending)).encode()).rstrip(b"=")
    return payload.decode() + "." + _sign(secret_key, payload)


def decode(secret_key: str, cookie: str) -> PendingLogin | None:
    """The pending login, or None if the cookie is missing, forged or stale."""
    if not cookie.isascii():  # ours are base64url; anything else is forged (and would
        return None  # make compare_digest raise TypeError)
    payload, _, signature = cookie.partition(".")
    if not payload or not hmac.compare_digest(signature, _sign(secret_key, payload.encode())):
        return None
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        pending = PendingLogin(**json.loads(raw))
    except (ValueError, TypeError):
        return None
    return pending if pending.expires_at > time.time() else None

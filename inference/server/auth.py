"""Bearer-token check for the worker's API (the gateway's internal token)."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

# /health, /ready and /metrics stay open: probes and Prometheus carry no token, and they
# say nothing about anyone's prompts.
PROTECTED_PREFIXES = ("/v1/", "/tokenize", "/detokenize")


def needs_auth(path: str) -> bool:
    return path.startswith(PROTECTED_PREFIXES)


def bearer_token(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


def is_authorized(headers: Iterable[tuple[bytes, bytes]], api_key: str) -> bool:
    token = bearer_token(headers)
    # compare_digest: the time taken must not reveal how much of the key matched.
    return token is not None and hmac.compare_digest(token.encode(), api_key.encode())

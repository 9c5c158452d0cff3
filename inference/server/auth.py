"""Bearer-token check for the worker's API (the gateway's internal token).

Deny by default: every path needs the token except the probes in :data:`OPEN_PATHS`. A
list of protected prefixes would miss any spelling of a route that the router still
reaches (``//v1/completions``, a trailing slash, a percent-encoded letter); a short list of
open paths, compared after normalising, cannot be widened that way.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from urllib.parse import unquote

# /health, /ready and /metrics stay open: probes and Prometheus carry no token, and they
# say nothing about anyone's prompts.
OPEN_PATHS = frozenset({"/health", "/ready", "/metrics"})
_SLASHES = re.compile(r"/{2,}")


def normalised_path(path: str) -> str:
    """Percent-decoded, repeated slashes collapsed, no trailing slash (``/`` stays ``/``)."""
    collapsed = _SLASHES.sub("/", unquote(path))
    return collapsed.rstrip("/") or "/"


def needs_auth(path: str) -> bool:
    return normalised_path(path) not in OPEN_PATHS


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
    # compare_digest: the time taken must not reveal how much of the key matched. Bytes on
    # both sides (latin-1 for the header, as it came): str operands must be ASCII.
    return token is not None and hmac.compare_digest(
        token.encode("latin-1"), api_key.encode("utf-8")
    )

"""API key strings: ``sk-enc-`` plus 256 random bits, stored only as an HMAC-SHA256."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "sk-enc-"
DISPLAY_LENGTH = len(KEY_PREFIX) + 6


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(secret_key: str, key: str) -> str:
    """Keyed, fast and deterministic: one indexed lookup, useless without the server secret."""
    return hmac.new(secret_key.encode(), key.encode(), hashlib.sha256).hexdigest()


def display_prefix(key: str) -> str:
    return key[:DISPLAY_LENGTH]


def looks_like_key(value: str) -> bool:
    return value.startswith(KEY_PREFIX) and 20 < len(value) < 200

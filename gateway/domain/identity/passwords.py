"""Break-glass admin passwords: argon2id hashes, generated passwords."""

from __future__ import annotations

import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError


def password_hasher() -> PasswordHasher:
    return PasswordHasher()  # argon2id with the library's current recommended cost


def generate_password() -> str:
    return secrets.token_urlsafe(18)


def verify_password(hasher: PasswordHasher, stored_hash: str | None, password: str) -> bool:
    if not stored_hash:
        # Spend the same time as a real check so a missing account is not observable.
        hasher.hash(password)
        return False
    try:
        return hasher.verify(stored_hash, password)
    except (VerificationError, InvalidHashError):
        return False

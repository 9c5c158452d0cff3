"""The server secret: configured in production, generated once and kept in data_dir otherwise."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

from gateway.private_files import private_dir
from gateway.settings import Settings, SettingsError, env_name

SECRET_FILE = "secret_key"


def resolve_secret_key(settings: Settings) -> str:
    if settings.secret_key:
        return settings.secret_key
    if settings.mode == "production":
        raise SettingsError(f"{env_name('secret_key')} is required in production mode")
    return _load_or_create(settings.data_dir / SECRET_FILE)


def _load_or_create(path: Path) -> str:
    """The secret in ``path``, generated there first when absent.

    Written to a private temporary file and hard-linked into place: the link either
    succeeds with the whole secret in it or fails because another process linked first, so
    a process starting beside another never reads a half-written (or empty) secret.
    """
    with contextlib.suppress(FileNotFoundError):
        return _read(path)
    private_dir(path.parent)
    value = secrets.token_urlsafe(48)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(value + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return _read(path)
    finally:
        os.unlink(temporary)
    return value


def _read(path: Path) -> str:
    value = path.read_text().strip()
    if not value:
        raise SettingsError(f"{path} is empty: delete it to generate a new secret, or set it")
    return value

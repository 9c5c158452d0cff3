"""Secrets from the environment or from a file: ``VAR=value`` or ``VAR_FILE=/run/secrets/x``.

The one helper both processes read their secrets through (the gateway's settings object
and the worker's ``--api-key-env``), the convention of the official Postgres and Redis
images: a container orchestrator mounts each secret as a file, and the variable names it.
Standard library only, so the gateway can import it without loading the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

FILE_SUFFIX = "_FILE"


class SecretFileError(ValueError):
    """Both forms are given, or the file cannot be read or is empty; names the variable."""


def secret_from_env(environ: Mapping[str, str], var: str) -> str | None:
    """``environ[var]``, or the text of the file ``environ[var + "_FILE"]`` names.

    The file is read once, here; one trailing newline (``\\n`` or ``\\r\\n``) is stripped,
    as ``echo secret > file`` writes one. None when neither variable is set.
    """
    file_var = var + FILE_SUFFIX
    value = environ.get(var)
    path = environ.get(file_var)
    if path is None:
        return value
    if value is not None:
        raise SecretFileError(f"{var} and {file_var} are both set; give one of them")
    if not path:
        raise SecretFileError(f"{file_var} is set but empty; it must name a file")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise SecretFileError(f"{file_var}: cannot read {path}: {reason}") from None
    if text.endswith("\n"):
        text = text[:-1]
        if text.endswith("\r"):
            text = text[:-1]
    if not text:
        raise SecretFileError(f"{file_var}: the file {path} is empty")
    return text

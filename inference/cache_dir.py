"""Where the worker keeps what it can rebuild but would rather not: the start-up caches.

Two things live there, each under its own folder and each keyed so that it can never be
used stale: ``weights/`` holds a GGUF model's prepared weights (dequantized, in the
engine's layout) as safetensors, ``kernels/`` the compiled C kernels. Deleting the folder
is always safe: the next start rebuilds what it needs (and is as slow as a first start).

The folder: ``--cache-dir``, else ``$INFERENCE_CACHE_DIR``, else ``$XDG_CACHE_HOME/enclave``
(``~/.cache/enclave``). ``--no-cache``, or ``INFERENCE_CACHE_DIR=off``, turns both off.
The gateway's embedded worker uses ``<data dir>/cache`` unless the gateway's own
environment sets ``INFERENCE_CACHE_DIR``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

ENV = "INFERENCE_CACHE_DIR"
OFF = frozenset({"", "off", "0", "none", "false", "no"})


def default_cache_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The cache folder the environment asks for; None when it turns caching off."""
    value = environ.get(ENV)
    if value is not None:
        return None if value.strip().lower() in OFF else Path(value).expanduser()
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "enclave"


def private_subdir(cache_dir: Path, name: str) -> Path:
    """``cache_dir/name``, both created 0700 if missing (the cache holds a copy of the
    model's weights; and the gateway would otherwise tighten its data directory's
    ``cache`` with a warning at its next start)."""
    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = cache_dir / name
    path.mkdir(mode=0o700, exist_ok=True)
    return path

"""Where a worker's start-up time goes: named phases, timed where they run, logged at INFO.

A user waits for the whole start at every restart, so each part of it is timed where it
happens (the GGUF's metadata, dequantizing the weights, the prepared-weights cache, the
oneDNN prepack, the KV pool, the C kernels...) instead of guessed from outside. Each phase
logs one line as it ends, and the worker logs every phase's total as one JSON line once
it is ready (`log_ready`): ``python -m inference bench startup`` reads that line.

Phases may nest (the kernels are built while the device profile is chosen): a phase's
time is its own, without the phases that ran inside it, so the times add up to the whole.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

log = logging.getLogger("inference.startup")

# What `log_ready` writes before its JSON; the benchmark looks for it.
READY_MARK = "start-up phases "


def process_age_s() -> float | None:
    """Seconds since this process started (Linux's /proc), None where that is unknown."""
    try:
        stat = Path("/proc/self/stat").read_text(encoding="ascii")
        uptime = float(Path("/proc/uptime").read_text(encoding="ascii").split()[0])
        # Field 22 (starttime, in clock ticks after boot) counts from after the command's ")".
        started_ticks = int(stat.rpartition(")")[2].split()[19])
        return max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


class StartupPhases:
    """Phase name -> seconds spent in it (its own time), accumulated over the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = {}
        self._local = threading.local()  # per thread: the stack of open phases' child time

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        stack: list[float] = self._local.__dict__.setdefault("stack", [])
        stack.append(0.0)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            children = stack.pop()
            if stack:
                stack[-1] += elapsed
            self.add(name, elapsed - children)

    def add(self, name: str, seconds: float, *, quiet: bool = False) -> None:
        """``quiet``: record without a log line (before logging is set up)."""
        with self._lock:
            self._seconds[name] = self._seconds.get(name, 0.0) + seconds
        if not quiet:
            log.info("start-up: %s took %.3f s", name, seconds)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {name: round(seconds, 4) for name, seconds in self._seconds.items()}

    def log_ready(self) -> None:
        """One JSON line: every phase, and the process's age now (``ready_s``)."""
        age = process_age_s()
        summary = {"ready_s": None if age is None else round(age, 3), **self.snapshot()}
        log.info("%s%s", READY_MARK, json.dumps(summary))


PHASES = StartupPhases()


def phase(name: str) -> AbstractContextManager[None]:
    """``with phase("kv_cache"): ...``: time a part of this process's start."""
    return PHASES.phase(name)

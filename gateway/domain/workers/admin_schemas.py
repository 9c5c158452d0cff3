"""What the admin's workers view answers (`/api/admin/workers`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from gateway.domain.workers.health import UpstreamState


class WorkerLoad(msgspec.Struct, frozen=True):
    """The worker's own /metrics at ``scraped_at``; a field is None when the worker did not
    report it (a worker still loading has no engine figures)."""

    requests_waiting: int | None
    requests_running: int | None
    kv_cache_usage: float | None  # 0 to 1
    # Generated tokens per second between this scrape and an earlier one (None at first).
    generation_tokens_per_s: float | None
    # Prompt tokens found in the prefix cache per token looked up, since the worker started.
    prefix_cache_hit_rate: float | None
    scraped_at: datetime


class WorkerRead(msgspec.Struct, frozen=True):
    """One worker of the gateway's pool. ``index`` names it in drain and restart (its
    place in the pool, fixed for the gateway's life); ``supervised``: the gateway runs it
    (the embedded worker), so it can restart it."""

    index: int
    url: str
    healthy: bool
    state: UpstreamState
    draining: bool
    supervised: bool
    restarting: bool
    reloading: bool  # a weight swap (POST .../reload) is under way
    reload_error: str  # why the last weight swap failed; empty when it did not
    models: list[str]
    max_model_len: dict[str, int]
    in_flight: int
    last_error: str
    # How often the supervisor brought a crashed worker back (supervised workers only).
    crash_restarts: int | None
    load: WorkerLoad | None
    load_error: str  # why ``load`` is None; empty otherwise


class WorkersRead(msgspec.Struct, frozen=True):
    workers: list[WorkerRead]


class WorkerReload(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A weight swap: the supervised worker moves to ``model`` (a checkpoint directory or
    file on the gateway's machine), served as ``name`` (default: the path's stem)."""

    model: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
    name: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")] | None = (
        None
    )
    # Where memory holds one model only: stop the old worker first (a gap answered 503).
    one_at_a_time: bool = False

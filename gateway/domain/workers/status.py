"""What `/api/status` says about the models: which can answer now, which are loading.

Built from the pool's memory of its last checks, without I/O: a model is "ready" when a
healthy worker lists it, "loading" when none does but one that listed it last said (on
/ready) that it is loading or the gateway holds it while pinning assistants' prompts on it,
else "unavailable". ``in_flight`` sums the requests the
gateway has running on the workers that list the model (a worker serving two models
counts its requests under both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import msgspec

from gateway.domain.workers.pool import WorkerPool

ModelState = Literal["ready", "loading", "unavailable"]


class ModelStatus(msgspec.Struct):
    id: str
    state: ModelState
    in_flight: int


class StatusRead(msgspec.Struct):
    """``starting`` is true until some worker has listed its models (the embedded worker
    still loading at startup): until then ``models`` is empty, not "nothing exists"."""

    starting: bool
    models: list[ModelStatus]


def model_status(pool: WorkerPool, allowed: Callable[[str], bool]) -> StatusRead:
    upstreams = pool.upstreams
    models = []
    for model in pool.known_models():
        if not allowed(model):
            continue
        serving = [u for u in upstreams if model in u.models]
        state: ModelState = "unavailable"
        if any(u.routable for u in serving):
            state = "ready"
        elif any(u.state == "loading" or (u.healthy and u.warming) for u in serving):
            state = "loading"
        models.append(ModelStatus(model, state, sum(u.in_flight for u in serving)))
    return StatusRead(starting=not pool.ever_listed, models=models)

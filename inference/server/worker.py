"""Worker: what every handler needs, the engine (once loaded) and the worker's state."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inference.engine.async_engine import AsyncEngine
from inference.server.errors import APIError
from inference.server.metrics import WorkerMetrics
from inference.server.settings import ServerSettings

if TYPE_CHECKING:
    from inference.engine.llm_engine import LLMEngine


MAX_TENANT_WEIGHT = 1000  # the gateway's departments.scheduling_weight is 1..1000
_DECIMAL = re.compile(r"[0-9]{1,4}(\.[0-9]{1,6})?")


@dataclass(frozen=True, slots=True)
class Tenant:
    """Who the engine shares itself between: ``weight`` is this tenant's share relative to
    the others' (2 is admitted twice as often as 1 while both wait)."""

    name: str
    weight: float = 1.0


def _weight_of(header: str | None) -> float:
    if header is None:
        return 1.0
    text = header.strip()
    # A plain decimal only: float() would also take "nan", "1e3" and "1_000".
    weight = float(text) if _DECIMAL.fullmatch(text) else 0.0
    if not 1 <= weight <= MAX_TENANT_WEIGHT:
        raise APIError(
            f"X-Enclave-Tenant-Weight must be a number from 1 to {MAX_TENANT_WEIGHT}, "
            f"got {header[:32]!r}",
            param="X-Enclave-Tenant-Weight",
        )
    return weight


class Worker:
    """Loading, then ready, then (on SIGTERM) draining. Handlers call :meth:`accept`."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.created = int(time.time())
        self.engine: LLMEngine | None = None
        self.async_engine: AsyncEngine | None = None
        self.load_error: str | None = None
        self.draining = False
        self.metrics = WorkerMetrics(settings.served_model_name, lambda: self.engine)

    @property
    def ready(self) -> bool:
        return self.async_engine is not None and not self.draining

    def attach(self, engine: LLMEngine) -> None:
        """Start serving ``engine`` (an LLMEngine); call from the event loop."""
        async_engine = AsyncEngine(engine, on_finish=self.metrics.observe_request)
        async_engine.start()
        self.engine = engine
        self.async_engine = async_engine

    def require_engine(self) -> AsyncEngine:
        self.loaded()
        if self.async_engine is None:  # never: attach() sets both in one callback
            raise APIError("The model is loading", status=503, headers=self._retry())
        return self.async_engine

    def loaded(self) -> LLMEngine:
        """The engine; 503 while it loads (or if loading failed)."""
        if self.engine is None:
            reason = f"failed to load: {self.load_error}" if self.load_error else "loading"
            raise APIError(f"The model is {reason}", status=503, headers=self._retry())
        return self.engine

    def accept(self, model: str | None) -> AsyncEngine:
        """Admission for a generation request: the right model, not draining, queue room."""
        async_engine = self.require_engine()
        if self.draining:
            self.metrics.observe_rejection(503)
            raise APIError("The server is shutting down", status=503, headers=self._retry())
        self.check_model(model)
        limit = self.settings.max_queue
        if limit is not None:
            waiting = self.loaded().scheduler.num_waiting + async_engine.num_pending_adds
            if waiting >= limit:
                self.metrics.observe_rejection(503)
                raise APIError(
                    f"The server is overloaded: {waiting} requests are waiting "
                    f"(--max-queue {limit}); retry later",
                    status=503,
                    code="overloaded",
                    headers=self._retry(),
                )
        return async_engine

    def check_model(self, model: str | None) -> None:
        name = self.settings.served_model_name
        if model is not None and model != name:
            self.metrics.observe_rejection(400)
            raise APIError(
                f"The model `{model}` does not exist; this worker serves `{name}`",
                param="model",
                code="model_not_found",
            )

    def tenant_of(self, header: str | None, weight_header: str | None = None) -> Tenant:
        """From X-Enclave-Tenant and X-Enclave-Tenant-Weight (absent: ``default``, 1)."""
        name = (header or "").strip() or "default"
        if len(name) > self.settings.max_tenant_length:
            raise APIError(
                f"X-Enclave-Tenant is longer than {self.settings.max_tenant_length} characters",
                param="X-Enclave-Tenant",
            )
        return Tenant(name, _weight_of(weight_header))

    def _retry(self) -> dict[str, str]:
        return {"Retry-After": str(self.settings.retry_after_s)}

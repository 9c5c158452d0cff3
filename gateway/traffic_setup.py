"""Assembling the proxy's parts from settings: pool, limiter, tracer, embedded worker."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider

from gateway.domain.limits.factory import build_limiter
from gateway.domain.proxy.traffic import Traffic
from gateway.domain.workers.pool import WorkerPool
from gateway.domain.workers.supervisor import WorkerSupervisor
from gateway.domain.workers.worker_token import embedded_worker_token
from gateway.settings import Settings
from gateway.state import GatewayState
from gateway.tracing import RequestTracing, build_tracer_provider


def embedded_supervisor(settings: Settings) -> WorkerSupervisor:
    """The worker the embedded default starts for itself on ``ENCLAVE_MODEL``."""
    return WorkerSupervisor(
        Path(settings.model),
        settings.worker_port,
        embedded_worker_token(settings),
        log_dir=settings.data_dir,
        extra_args=settings.worker_arg_list,
        extra_env_names=settings.worker_env_names,
        cache_dir=(settings.data_dir / "cache").resolve(),
    )


def build_traffic(
    settings: Settings,
    state: GatewayState,
    supervisor: WorkerSupervisor | None,
    tracer_provider: TracerProvider | None,
) -> Traffic:
    token = (
        embedded_worker_token(settings) if settings.mode == "embedded" else settings.worker_token
    )
    urls = [*settings.worker_urls, *([supervisor.url] if supervisor else [])]
    pool = WorkerPool(urls, token, interval=settings.health_interval_ms / 1000)
    provider = tracer_provider or build_tracer_provider(settings)
    return Traffic.build(
        settings,
        pool,
        build_limiter(settings, state.redis),
        RequestTracing(provider),
        token,
        supervisor,
    )

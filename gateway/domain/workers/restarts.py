"""Each restart of a supervised worker, recorded: a counter on the gateway's /metrics
(``enclave_gateway_worker_restarts_total{reason}``) and, for the restarts the gateway
decides itself (``crash``, ``start_failed``), an audit record ``worker.restarted`` by the
actor ``system``. An admin's restart is counted too (``admin``); its audit record is the
admin's own ``worker.restart``."""

from __future__ import annotations

from gateway.domain.audit.actions import SYSTEM, action_entry
from gateway.domain.audit.writer import AuditWriter
from gateway.domain.proxy.metrics import GatewayMetrics
from gateway.domain.workers.supervisor import Restart, WorkerSupervisor


def record_restarts(
    supervisor: WorkerSupervisor, metrics: GatewayMetrics, audit: AuditWriter
) -> None:
    def recorded(restart: Restart) -> None:
        metrics.worker_restarts.labels(restart.reason).inc()
        if restart.reason == "admin":
            return
        details = {"reason": restart.reason, "exit": restart.exit, "backoff_s": restart.backoff_s}
        entry = action_entry(
            SYSTEM, "worker.restarted", "worker", restart.url, status_code=200, extra=details
        )
        audit.submit(entry)

    supervisor.restart_listeners.append(recorded)

"""A crashed supervised worker comes back by itself: a real tiny worker is killed, the
supervisor restarts it, the next request succeeds, and /metrics and the audit log show it."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from tests.gateway.admin.conftest import Console
from tests.gateway.admin.test_workers import admin_records, supervised, tiny_checkpoint, until

__all__ = ["supervised", "tiny_checkpoint"]  # fixtures used here


def _chat(console: Console, key: str) -> Any:
    return console.client.post(
        "/v1/chat/completions",
        json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        headers={"authorization": f"Bearer {key}"},
    )


def _restarts(console: Console) -> dict[str, float]:
    text = console.client.get("/metrics").text
    prefix = "enclave_gateway_worker_restarts_total{reason="
    return {
        line[len(prefix) + 1 : line.index('"}')]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def test_a_killed_worker_is_restarted_counted_and_audited(supervised: Console) -> None:
    client = supervised.client
    supervisor = client.app.state.traffic.supervisor
    pool = client.app.state.traffic.pool
    until(lambda: supervisor.running and pool.models(), bool, timeout=90)
    key = supervised.api_key()
    assert _chat(supervised, key).status_code == 200
    assert _restarts(supervised) == {}
    first = supervisor.pid

    os.kill(first, signal.SIGKILL)
    until(lambda: supervisor.restarts, lambda n: n == 1, timeout=60)
    assert supervisor.pid not in (None, first)
    until(lambda: pool.models(), lambda models: models == ["tiny"], timeout=30)
    reply = _chat(supervised, key)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] is not None

    assert _restarts(supervised) == {"crash": 1.0}
    [record] = admin_records(supervised, "worker.")
    assert (record["action"], record["target_id"]) == ("worker.restarted", supervisor.url)
    assert record["user_email"] == "system" and record["user_id"] is None
    details = json.loads(record["details"])
    assert details == {"reason": "crash", "exit": "killed by SIGKILL", "backoff_s": 0.2}

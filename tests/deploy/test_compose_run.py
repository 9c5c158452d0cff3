"""The compose file run without Docker: the cpu profile's migrate, worker and gateway
services' own commands and variables, started here against the test Postgres and Redis.

Mapped: service names to 127.0.0.1 (Postgres and Redis to the test services), ports to
free ones, /run/secrets/* to the files docker/make-secrets.sh writes (the database and
Redis URLs rewritten to the test services), the demo model to a tiny random checkpoint.
Everything else is taken from compose.yaml as docker-compose resolves it.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.deploy import compose_model as cm
from tests.deploy.compose_run import (
    Mapping,
    base_environment,
    free_port,
    local_url,
    metric_names,
    wait_healthy,
)
from tests.gateway.postgres import fresh_postgres
from tests.inference.checkpoints import make_checkpoint

DASHBOARD = cm.ROOT / "docker" / "grafana" / "dashboards" / "enclave.json"


@pytest.fixture
def database(database_url: str) -> Iterator[str]:
    with fresh_postgres(database_url, prefix="enclave_compose") as url:
        yield url


def _dashboard_metrics() -> set[str]:
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    return set(re.findall(r"\b(?:enclave_gateway|inference)_[a-z_]+\b", " ".join(exprs)))


def test_the_cpu_profile_runs_as_declared(tmp_path: Path, database: str, redis_url: str) -> None:
    services = cm.active(cm.resolved("cpu"), ["cpu"])
    migrate, gateway, worker = services["migrate"], services["gateway"], services["worker-cpu"]
    files = cm.make_secrets(tmp_path / "secrets")
    files["database_url"].write_text(
        local_url(files["database_url"].read_text().strip(), database, "postgres", 5432, "/enclave")
    )
    files["redis_url"].write_text(
        local_url(files["redis_url"].read_text().strip(), redis_url, "redis", 6379, "/0") + "\n"
    )
    model = cm.option(worker["command"], "--model")
    gateway_port, worker_port = free_port(), free_port()
    mapping = Mapping(
        hosts={"worker:8100": f"127.0.0.1:{worker_port}"},
        ports={"8000": str(gateway_port), "8100": str(worker_port)},
        paths={
            **{
                cm.secret_target(service, name): str(files[name])
                for service in (gateway, worker)
                for name in cm.secrets_of(service)
            },
            "/var/lib/enclave": str(tmp_path / "data"),
            model: str(make_checkpoint("smollm2", tmp_path / "model")),
        },
    )
    gateway_env = {**base_environment(), **mapping.environment(gateway["environment"])}
    assert mapping.environment(migrate["environment"]) == mapping.environment(
        gateway["environment"]
    )

    # The one-shot migration job exits 0 (the gateway waits for exactly that).
    done = subprocess.run(
        mapping.command(migrate["command"]),
        env=gateway_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "latest revision" in done.stdout

    logs = {name: tmp_path / f"{name}.log" for name in ("worker", "gateway")}
    worker_env = {**base_environment(), **mapping.environment(worker["environment"])}
    processes = {
        "worker": (mapping.command(worker["command"]), worker_env, worker),
        "gateway": (mapping.command(gateway["command"]), gateway_env, gateway),
    }
    running: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, (argv, env, _) in processes.items():
            with logs[name].open("wb") as log:
                running[name] = subprocess.Popen(
                    argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path
                )
        for name, (_, _, service) in processes.items():
            check = mapping.healthcheck(service["healthcheck"]["test"])
            wait_healthy(name, check, running[name], logs[name], timeout=90)
        # Every mapping found what it expected: compose.yaml still says what this test maps.
        for rules in (mapping.hosts, mapping.paths, mapping.ports):
            assert not set(rules) - mapping.used

        # A key from the gateway's admin CLI, run as `docker compose exec gateway` would.
        admin = [*mapping.command(["enclave"]), "admin"]
        for argv in (["create-department", "--slug", "compose", "Compose"],):
            step = subprocess.run([*admin, *argv], env=gateway_env, capture_output=True, text=True)
            assert step.returncode == 0, step.stderr
        made = subprocess.run(
            [*admin, "create-key", "compose", "--name", "compose-run"],
            env=gateway_env,
            capture_output=True,
            text=True,
        )
        assert made.returncode == 0, made.stderr
        key = made.stdout.strip()
        assert key.startswith("sk-enc-")

        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{gateway_port}/v1", api_key=key, max_retries=0
        )
        deadline = time.monotonic() + 30
        models: list[str] = []
        while not models and time.monotonic() < deadline:  # the pool's first health check
            models = [m.id for m in client.models.list().data]
            time.sleep(0.2 if not models else 0)
        assert models, "the gateway lists no model from its worker"
        reply = client.chat.completions.create(
            model=models[0], messages=[{"role": "user", "content": "Hello"}], max_tokens=8
        )
        assert reply.usage is not None and reply.usage.completion_tokens > 0
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(
                base_url=f"http://127.0.0.1:{gateway_port}/v1", api_key="sk-enc-wrong"
            ).models.list()

        # Every metric the Grafana dashboard plots is one these processes export.
        exported = set()
        for port in (gateway_port, worker_port):
            page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
            exported |= metric_names(page.text)
        assert _dashboard_metrics() and not _dashboard_metrics() - exported
    finally:
        for process in running.values():
            process.terminate()
        for process in running.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()

"""`enclave bench gateway`: what the gateway adds on top of calling a worker directly.

A fast fake worker runs in one process, the real gateway (auth, limits, audit on) in
another, and the load generator here. The same load runs straight at the fake worker and
then through the gateway, side by side in one run, so the difference is the gateway's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from gateway.bench.fake_upstream import MODEL, FakeUpstream
from gateway.bench.load import LoadResult, http_request, run_load
from gateway.bench.report import emit
from gateway.ports import free_port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--concurrency", type=int, default=50, help="streams at once")
    parser.add_argument("--requests", type=int, default=500, help="requests per run")
    parser.add_argument("--chunks", type=int, default=64, help="SSE events per stream")
    parser.add_argument(
        "--interval-ms",
        type=float,
        default=20.0,
        help="between a stream's events, like a model at 50 tokens/s (0: all at once)",
    )
    parser.add_argument("--database-url", default="", help="Postgres (default: SQLite)")
    parser.add_argument("--redis-url", default="", help="Redis (default: in-process limiter)")
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="gateway processes (ENCLAVE_PROCESSES; more than one needs Postgres and Redis)",
    )
    parser.add_argument("--output", type=Path, help="also write the JSON here")


def run(args: argparse.Namespace) -> int:
    if args.concurrency < 1 or args.requests < args.concurrency:
        print("enclave: --requests must be at least --concurrency (>= 1)", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as data_dir:
        report = asyncio.run(_bench(args, Path(data_dir)))
    return emit(report, load_before, args.output)


def _serve_fake(port_queue: Any, chunks: int, interval: float) -> None:
    async def main() -> None:
        upstream = FakeUpstream(chunks, interval=interval)
        port_queue.put(await upstream.start())
        await asyncio.Event().wait()

    asyncio.run(main())


async def _bench(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    ports = ctx.Queue()
    fake = ctx.Process(
        target=_serve_fake, args=(ports, args.chunks, args.interval_ms / 1000), daemon=True
    )
    fake.start()
    fake_port = ports.get(timeout=30)
    env, key = await asyncio.to_thread(_prepare_gateway, data_dir, fake_port, args)
    gateway, gateway_port = await asyncio.to_thread(_start_gateway, env)
    try:
        body = json.dumps(
            {
                "model": MODEL,
                "stream": True,
                "max_tokens": args.chunks,
                "messages": [{"role": "user", "content": "hello"}],
            }
        ).encode()
        path = "/v1/chat/completions"
        direct_request = http_request(path, body, {"authorization": "Bearer bench"})
        gateway_request = http_request(path, body, {"authorization": f"Bearer {key}"})
        stagger = args.chunks * args.interval_ms / 1000  # about one stream's length
        load = {"concurrency": args.concurrency, "total": args.requests, "stagger": stagger}
        # Warm both (connections, caches), then measure each in turn, twice, interleaved.
        await run_load(
            "127.0.0.1",
            fake_port,
            direct_request,
            concurrency=args.concurrency,
            total=args.concurrency * 2,
        )
        await run_load(
            "127.0.0.1",
            gateway_port,
            gateway_request,
            concurrency=args.concurrency,
            total=args.concurrency * 2,
        )
        direct, through = LoadResult(), LoadResult()
        cpu_before = _cpu_seconds(gateway.pid)
        for _ in range(2):
            _merge(direct, await run_load("127.0.0.1", fake_port, direct_request, **load))
            _merge(through, await run_load("127.0.0.1", gateway_port, gateway_request, **load))
        cpu_after = _cpu_seconds(gateway.pid)
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
        fake.terminate()
    report = _report(args, direct, through)
    if cpu_before is not None and cpu_after is not None:
        # What the gateway process burned per request it served (while the direct runs are
        # on it idles), the cost behind the latency: on a shared machine it is CPU the
        # load generator and the worker do not get.
        report["gateway"]["cpu_ms_per_request"] = round(
            (cpu_after - cpu_before) * 1000 / len(through.latencies), 3
        )
    return report


def _prepare_gateway(
    data_dir: Path, fake_port: int, args: argparse.Namespace
) -> tuple[dict[str, str], str]:
    from gateway import admin_tasks
    from gateway.settings import Settings

    env = {
        **os.environ,
        "ENCLAVE_DATA_DIR": str(data_dir),
        "ENCLAVE_WORKERS": f"http://127.0.0.1:{fake_port}",
        "ENCLAVE_WORKER_TOKEN": "bench",
        "ENCLAVE_LOG_FORMAT": "json",
        "ENCLAVE_PORT": str(free_port()),
    }
    if args.database_url:
        env["ENCLAVE_DATABASE_URL"] = args.database_url
    if args.redis_url:
        env["ENCLAVE_REDIS_URL"] = args.redis_url
    if args.processes != 1:
        env["ENCLAVE_PROCESSES"] = str(args.processes)
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("ENCLAVE_")})
    admin_tasks.migrate_database(settings)
    slug = f"bench-{int(time.time())}"
    asyncio.run(admin_tasks.create_department(settings, "Bench", slug))
    key = asyncio.run(admin_tasks.create_key(settings, slug, "bench", None, None))
    # Limits on, high enough never to refuse: the checks run on every request.
    asyncio.run(
        admin_tasks.set_quota(
            settings,
            slug,
            requests_per_minute=10_000_000,
            tokens_per_minute=10**12,
            concurrent_requests=100_000,
            daily_token_quota=10**15,
            monthly_token_quota=10**15,
        )
    )
    return env, key


def _start_gateway(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    port = int(env["ENCLAVE_PORT"])
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the gateway exited: {process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process, port
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("the gateway did not start within 60 s")


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a running process and its children (the gateway processes
    a supervisor started), from Linux's /proc; None elsewhere."""
    total = 0.0
    found = False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if stat.parent.name == str(pid) or fields[1] == str(pid):
            found = True
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total if found else None


def _merge(into: LoadResult, part: LoadResult) -> None:
    into.latencies += part.latencies
    into.first_bytes += part.first_bytes
    into.elapsed += part.elapsed
    for status, count in part.statuses.items():
        into.statuses[status] = into.statuses.get(status, 0) + count


def _summary(result: LoadResult) -> dict[str, Any]:
    ms = sorted(x * 1000 for x in result.latencies)
    return {
        "requests": len(ms),
        "statuses": {str(k): v for k, v in sorted(result.statuses.items())},
        "requests_per_s": round(len(ms) / result.elapsed, 1),
        "latency_ms_p50": round(statistics.median(ms), 3),
        "latency_ms_p99": round(ms[int(len(ms) * 0.99) - 1], 3),
        "first_event_ms_p50": round(statistics.median(result.first_bytes) * 1000, 3),
        "first_event_ms_p99": round(sorted(result.first_bytes)[int(len(ms) * 0.99) - 1] * 1000, 3),
    }


def _report(args: argparse.Namespace, direct: LoadResult, through: LoadResult) -> dict[str, Any]:
    d, g = _summary(direct), _summary(through)
    what = "first_event" if args.interval_ms else "latency"
    return {
        "benchmark": "gateway",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "setup": {
            "concurrency": args.concurrency,
            "requests_per_run": args.requests * 2,
            "chunks_per_stream": args.chunks,
            "ms_between_chunks": args.interval_ms,
            "arrivals": "connections start spread over one stream's length (closed loop)",
            "database": "postgres" if args.database_url else "sqlite",
            "limiter": "redis" if args.redis_url else "in-process",
            "gateway_processes": args.processes,
            "path": "API key auth + limits + audit + SSE pass-through",
        },
        "direct": d,
        "gateway": g,
        # Paced streams last as long as the worker paces them, so what the gateway adds shows
        # in the wait for the first event; all-at-once streams show it in the whole request.
        "added_ms": {
            "measured_on": "first event" if args.interval_ms else "whole request",
            "p50": round(g[f"{what}_ms_p50"] - d[f"{what}_ms_p50"], 3),
            "p99": round(g[f"{what}_ms_p99"] - d[f"{what}_ms_p99"], 3),
        },
        "throughput_ratio": round(g["requests_per_s"] / d["requests_per_s"], 3),
        "target": "p50 added latency under 2 ms at 50 concurrent streams",
    }

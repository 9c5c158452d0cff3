"""`python -m inference bench startup`: how long a worker takes to start, phase by phase.

Starts ``python -m inference serve`` on a model (the demo GGUF by default) once per run,
polls it until /ready answers 200 and /v1/models lists the model, and reads the phases the
worker logs once ready (inference/startup.py: imports, the GGUF's metadata, the weights,
the prepared-weights cache, the prepack, the KV pool, the C kernels...). Runs share one
cache directory (a new temporary one unless ``--cache-dir``): ``cold`` finds it empty and
fills it, ``warm`` is the next start, which finds it full; ``nocache`` runs with
``--no-cache``. ``--gateway`` adds runs of ``python -m gateway serve`` (the embedded
default, as ``make run`` starts it) to the moment its worker pool lists the model.

Prints JSON. The OS page cache is not dropped between runs (that needs root): ``cold`` is
cold for Enclave's own caches, not for the disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from inference.bench.machine import cpu_model
from inference.startup import READY_MARK

DEMO_MODEL = Path(".enclave/models/SmolLM2-135M-Instruct.Q4_1.gguf")
RUN_KINDS = ("cold", "warm", "nocache")
POLL_S = 0.05


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=str(DEMO_MODEL), help="default: the demo GGUF")
    parser.add_argument(
        "--runs",
        default="cold,warm",
        help=f"comma-separated, in order: {', '.join(RUN_KINDS)} (default: cold,warm)",
    )
    parser.add_argument(
        "--cache-dir", help="the runs' cache directory (default: a new temporary one)"
    )
    parser.add_argument(
        "--gateway",
        action="store_true",
        help="also start the gateway (embedded default) cold and warm, to the model listed",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per start")
    parser.add_argument("--output", help="also write the JSON to this file")
    parser.add_argument(
        "--worker-arg",
        action="append",
        default=[],
        help="one more argument for the worker (repeatable), e.g. --worker-arg=--dtype=float32",
    )
    parser.set_defaults(run=run)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Output:
    """A child's output lines, read in a thread, each with when it arrived."""

    def __init__(self, process: subprocess.Popen[str], started: float) -> None:
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(process, started), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen[str], started: float) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append((time.perf_counter() - started, line.rstrip("\n")))

    def first(self, needle: str) -> tuple[float, str] | None:
        return next(((at, line) for at, line in list(self.lines) if needle in line), None)

    def tail(self, count: int = 20) -> str:
        return "\n".join(line for _, line in self.lines[-count:])


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=2.0) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_worker(
    model: str, cache_dir: Path | None, extra: list[str], timeout: float
) -> dict[str, Any]:
    """One start of the worker: seconds to /ready, to the model listed, and its phases."""
    port = _free_port()
    name = Path(model).stem
    command = [
        *(sys.executable, "-m", "inference", "serve", "--model", model),
        *("--port", str(port), "--served-model-name", name),
        *(["--cache-dir", str(cache_dir)] if cache_dir is not None else ["--no-cache"]),
        *extra,
    ]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    output = _Output(process, started)
    base = f"http://127.0.0.1:{port}"
    first_answer = ready = listed = None
    try:
        while listed is None:
            elapsed = time.perf_counter() - started
            if process.poll() is not None or elapsed > timeout:
                raise RuntimeError(f"the worker did not start:\n{output.tail()}")
            status, _ = _get(f"{base}/health")
            if status == 200 and first_answer is None:
                first_answer = elapsed
            if status == 200 and _get(f"{base}/ready")[0] == 200:
                ready = ready or time.perf_counter() - started
                status, body = _get(f"{base}/v1/models")
                if status == 200 and name in [card.get("id") for card in body["data"]]:
                    listed = time.perf_counter() - started
                    break
            time.sleep(POLL_S)
        deadline = time.perf_counter() + 10
        while output.first(READY_MARK) is None and time.perf_counter() < deadline:
            time.sleep(POLL_S)
    finally:
        _stop(process)
    found = output.first(READY_MARK)
    phases = json.loads(found[1].partition(READY_MARK)[2]) if found else {}
    worker_ready = phases.pop("ready_s", None)
    return {
        "health_s": _round(first_answer),
        "ready_s": _round(ready),
        "listed_s": _round(listed),
        "worker_ready_s": worker_ready,  # the worker's own age when it logged the phases
        "phases_s": phases,
        "phases_total_s": round(sum(phases.values()), 3),
    }


def run_gateway(model: str, data_dir: Path, timeout: float) -> dict[str, Any]:
    """One start of ``python -m gateway serve`` (embedded) to its pool listing the model."""
    env = {
        **os.environ,
        "ENCLAVE_DATA_DIR": str(data_dir),
        "ENCLAVE_MODEL": str(Path(model).resolve()),
        "ENCLAVE_PORT": str(_free_port()),
        "ENCLAVE_WORKER_PORT": str(_free_port()),
        "ENCLAVE_LOG_FORMAT": "json",
    }
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        env=env,
    )
    output = _Output(process, started)
    try:
        while (healthy := output.first('"worker healthy"')) is None:
            if process.poll() is not None or time.perf_counter() - started > timeout:
                raise RuntimeError(f"the gateway's worker did not come up:\n{output.tail()}")
            time.sleep(POLL_S)
    finally:
        _stop(process)
    starting = output.first('"worker starting"')
    return {
        "worker_spawned_s": _round(starting[0]) if starting else None,
        "listed_s": _round(healthy[0]),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def run(args: argparse.Namespace) -> int:
    kinds = [kind.strip() for kind in args.runs.split(",") if kind.strip()]
    unknown = [kind for kind in kinds if kind not in RUN_KINDS]
    if unknown:
        raise ValueError(f"unknown run {unknown[0]!r}; use {', '.join(RUN_KINDS)}")
    if not Path(args.model).exists():
        raise FileNotFoundError(f"--model {args.model}: no such file (scripts/fetch-demo-model.sh)")
    own_dir = args.cache_dir is None
    cache_dir = Path(args.cache_dir or tempfile.mkdtemp(prefix="enclave-bench-cache-"))
    report: dict[str, Any] = {
        "benchmark": "startup",
        "model": str(args.model),
        "model_bytes": Path(args.model).stat().st_size,
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "worker_args": args.worker_arg,
        # Other work on the machine slows every phase: the 1-minute load average at the start.
        "load_average": round(os.getloadavg()[0], 2),
        "runs": {},
    }
    try:
        for kind in kinds:
            directory = None if kind == "nocache" else cache_dir
            result = run_worker(args.model, directory, args.worker_arg, args.timeout)
            report["runs"][kind] = result
            print(f"{kind}: listed in {result['listed_s']} s", file=sys.stderr)
        if args.gateway:
            data_dir = Path(tempfile.mkdtemp(prefix="enclave-bench-data-"))
            try:
                for kind in ("gateway_cold", "gateway_warm"):
                    report["runs"][kind] = run_gateway(args.model, data_dir, args.timeout)
                    print(f"{kind}: {report['runs'][kind]}", file=sys.stderr)
            finally:
                shutil.rmtree(data_dir, ignore_errors=True)
    finally:
        if own_dir:
            shutil.rmtree(cache_dir, ignore_errors=True)
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    return 0

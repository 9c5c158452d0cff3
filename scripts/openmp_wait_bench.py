"""How a CPU worker fares beside other busy processes, under OpenMP wait settings: JSON.

For each setting (an environment assignment, or none), it starts `python -m inference
serve` on the model, quiet and then beside ``--busy`` processes spinning on the CPU, and
times through the OpenAI API one long prompt (``--words`` words, 32 tokens out, twice)
and a 128-token answer to a short one (twice). Prints one JSON document.

    .venv/bin/python scripts/openmp_wait_bench.py \\
        --model .enclave/models/SmolLM2-135M-Instruct.Q4_1.gguf --setting "" \\
        --setting GOMP_SPINCOUNT=300000 --setting OMP_WAIT_POLICY=passive

An empty setting is the worker's own default (`inference/openmp.py`: GOMP_SPINCOUNT=3000
unless the environment names a wait policy); GOMP_SPINCOUNT=300000 is libgomp's default.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from inference.bench.machine import cpu_model  # noqa: E402 (after the path)


def spin() -> None:
    while True:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(model: str, setting: str, words: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    if setting:
        name, _, value = setting.partition("=")
        env[name] = value
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "inference", "serve", "--model", model, "--port", str(port),
         "--insecure-no-auth", "--no-enable-prefix-caching"],
        env={**env, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", timeout=600)
        for _ in range(300):
            try:
                served = client.models.list().data[0].id
                break
            except openai.APIConnectionError:
                time.sleep(0.5)
        long_prompt = " ".join(f"word{i}" for i in range(words))
        result: dict[str, Any] = {"long_prompt_s": [], "decode_128_s": []}
        for i in range(2):
            started = time.perf_counter()
            reply = client.chat.completions.create(
                model=served, messages=[{"role": "user", "content": f"{i} {long_prompt}"}],
                max_tokens=32, temperature=0, extra_body={"ignore_eos": True},
            )  # fmt: skip
            result["long_prompt_s"].append(round(time.perf_counter() - started, 2))
            result["prompt_tokens"] = reply.usage.prompt_tokens if reply.usage else None
        for _ in range(2):
            started = time.perf_counter()
            client.chat.completions.create(
                model=served, messages=[{"role": "user", "content": "Tell me a story."}],
                max_tokens=128, temperature=0, extra_body={"ignore_eos": True},
            )  # fmt: skip
            result["decode_128_s"].append(round(time.perf_counter() - started, 2))
        return result
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--setting", action="append", default=[], help='e.g. "" or X=Y')
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--words", type=int, default=700)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "benchmark": "openmp-wait",
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "busy_processes": args.busy,
        "quiet": {},
        "beside_busy": {},
    }
    for setting in args.setting or [""]:
        report["quiet"][setting or "default"] = measure(args.model, setting, args.words)
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for process in spinners:
        process.start()
    try:
        for setting in args.setting or [""]:
            report["beside_busy"][setting or "default"] = measure(args.model, setting, args.words)
    finally:
        for process in spinners:
            process.terminate()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

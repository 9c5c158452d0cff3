"""`python -m inference bench serve`: load a running worker with Poisson arrivals.

Prompts are random words (mixed lengths, optionally behind a shared prefix, the way a
long system prompt is shared); outputs run to an exact length (``ignore_eos``). Prints
JSON: request and token throughput, and p50/p90/p99 of TTFT, inter-token latency and
end-to-end latency, measured on the client from the SSE stream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

_WORDS = (
    "bore", "tolerance", "gauge", "inspect", "drawing", "torque", "flange", "weld", "shaft",
    "bearing", "housing", "surface", "finish", "thread", "pitch", "datum", "fixture", "batch",
    "lot", "sample", "defect", "cause", "action", "report", "review", "operator", "supplier",
    "material", "hardness", "coating", "micrometer", "caliper",
)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8100")
    parser.add_argument("--model", help="default: the worker's only model")
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--request-rate", type=float, default=math.inf, help="req/s (inf: all)")
    parser.add_argument("--min-input-words", type=int, default=16)
    parser.add_argument("--max-input-words", type=int, default=256)
    parser.add_argument("--min-output-len", type=int, default=16)
    parser.add_argument("--max-output-len", type=int, default=128)
    parser.add_argument("--prefix-words", type=int, default=0, help="words shared by all")
    parser.add_argument(
        "--max-concurrency", type=int, help="at most this many in flight (default: no limit)"
    )
    parser.add_argument("--api-key-env", metavar="VAR", help="bearer token from this variable")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    parser.add_argument("--output", help="also write the JSON to this file")
    parser.set_defaults(run=run)


@dataclass
class RequestResult:
    ok: bool
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft: float | None = None
    itls: list[float] = field(default_factory=list)
    e2e: float = 0.0
    error: str | None = None


def make_workload(args: argparse.Namespace) -> list[tuple[str, int]]:
    rng = random.Random(args.seed)
    prefix = " ".join(rng.choice(_WORDS) for _ in range(args.prefix_words))
    workload = []
    for _ in range(args.num_prompts):
        words = rng.randint(args.min_input_words, args.max_input_words)
        body = " ".join(rng.choice(_WORDS) for _ in range(words))
        prompt = f"{prefix} {body}" if prefix else body
        workload.append((prompt, rng.randint(args.min_output_len, args.max_output_len)))
    return workload


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _summary_ms(values: list[float]) -> dict[str, float | None]:
    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 3)

    mean = sum(values) / len(values) if values else None
    return {
        "mean": ms(mean),
        "p50": ms(percentile(values, 50)),
        "p90": ms(percentile(values, 90)),
        "p99": ms(percentile(values, 99)),
    }


async def _one(client: Any, model: str, prompt: str, max_tokens: int) -> RequestResult:
    payload = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    result = RequestResult(ok=False)
    last = started
    try:
        async with client.stream("POST", "/v1/completions", json=payload) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                now = time.perf_counter()
                if chunk.get("usage"):
                    result.prompt_tokens = chunk["usage"]["prompt_tokens"]
                    result.output_tokens = chunk["usage"]["completion_tokens"]
                if any(c.get("text") for c in chunk.get("choices", [])):
                    if result.ttft is None:
                        result.ttft = now - started
                    else:
                        result.itls.append(now - last)
                    last = now
        result.ok = True
    except Exception as exc:  # a failed request is counted, not fatal to the run
        result.error = f"{type(exc).__name__}: {exc}"
    result.e2e = time.perf_counter() - started
    return result


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    import httpx

    headers = {}
    if args.api_key_env:
        headers["Authorization"] = f"Bearer {os.environ[args.api_key_env]}"
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(
        base_url=args.base_url, headers=headers, timeout=args.timeout, limits=limits
    ) as client:
        model = args.model
        if model is None:
            listed = (await client.get("/v1/models")).raise_for_status().json()
            model = listed["data"][0]["id"]
        workload = make_workload(args)
        rng = random.Random(args.seed + 1)
        slots = asyncio.Semaphore(args.max_concurrency or len(workload))

        async def limited(prompt: str, max_tokens: int) -> RequestResult:
            async with slots:
                return await _one(client, model, prompt, max_tokens)

        tasks = []
        started = time.perf_counter()
        for prompt, max_tokens in workload:
            tasks.append(asyncio.create_task(limited(prompt, max_tokens)))
            if math.isfinite(args.request_rate):
                await asyncio.sleep(rng.expovariate(args.request_rate))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - started
    done = [r for r in results if r.ok]
    output_tokens = sum(r.output_tokens for r in done)
    prompt_tokens = sum(r.prompt_tokens for r in done)
    return {
        "model": model,
        "num_prompts": args.num_prompts,
        "request_rate": args.request_rate if math.isfinite(args.request_rate) else "inf",
        "max_concurrency": args.max_concurrency,
        "prefix_words": args.prefix_words,
        "completed": len(done),
        "failed": len(results) - len(done),
        "errors": sorted({r.error for r in results if r.error})[:5],
        "duration_s": round(duration, 3),
        "total_prompt_tokens": prompt_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": round(len(done) / duration, 3),
        "output_token_throughput": round(output_tokens / duration, 3),
        "total_token_throughput": round((prompt_tokens + output_tokens) / duration, 3),
        "ttft_ms": _summary_ms([r.ttft for r in done if r.ttft is not None]),
        "itl_ms": _summary_ms([x for r in done for x in r.itls]),
        "e2e_ms": _summary_ms([r.e2e for r in done]),
    }


def run(args: argparse.Namespace) -> int:
    if args.num_prompts < 1:
        raise ValueError("--num-prompts must be at least 1")
    if args.request_rate <= 0:
        raise ValueError("--request-rate must be positive")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise ValueError("--max-concurrency must be at least 1")
    for low, high in (("min_input_words", "max_input_words"), ("min_output_len", "max_output_len")):
        if not 1 <= getattr(args, low) <= getattr(args, high):
            raise ValueError(f"need 1 <= --{low.replace('_', '-')} <= --{high.replace('_', '-')}")
    report = asyncio.run(_run(args))
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w") as out:
            out.write(text + "\n")
    return 0 if report["failed"] == 0 else 1

"""`enclave bench shift-change`: twenty people of one department ask at once, right after
the worker starts, with the department's long manual in front of every question.

Each variant starts a fresh appliance (embedded: SQLite, in-process limiter, the gateway
starting its worker on the model), waits until the model is listed, and lets ``--users``
requests arrive spread evenly over ``--window-s`` seconds, as a shift change brings them:

- ``plain``: each request carries the manual as its own system prompt, as people would
  paste it without assistants. The first pays the whole prefill; the rest hit the prefix
  cache once the first has registered its blocks.
- ``assistant``: the manual is a department assistant's prompt and requests name the
  assistant. The gateway warmed (prefilled and pinned) it when the worker became ready,
  before listing the model, so every request, the first included, finds it cached.

With ``--burst N`` each variant also runs a second time as ``<variant>+burst``: another
department sends N long requests at once while the users arrive (see shift_burst.py).

Printed per variant: time to first token (each request's, and p50/p95), the prompt and
cached tokens each request's usage reports, and how many were served from a warm prefix
(cached tokens covering the manual's full blocks), and each user's tokens/s after the
first token. Run it on an idle machine: the numbers
are CPU time on a shared box.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from gateway.bench import shift_burst
from gateway.bench.report import emit
from gateway.ports import free_port

VARIANTS = ("plain", "assistant")
SLUG = "quality-manual"
# Each user's question: different per user, so only the manual is shared.
QUESTION = "Shift {n}: what must an operator check before starting a batch on machine {n}?"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model file or directory (default: the demo model)")
    parser.add_argument("--users", type=int, default=20, help="requests in the window")
    parser.add_argument("--window-s", type=float, default=10.0, help="they arrive over this")
    parser.add_argument(
        "--manual-chars", type=int, default=10_200, help="the manual's length (~2,200 tokens)"
    )
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per answer")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated: {', '.join(VARIANTS)}"
    )
    shift_burst.add_arguments(parser)
    parser.add_argument("--output", type=Path, help="also write the JSON here")
    parser.add_argument(
        "--logs", type=Path, help="a folder for each variant's gateway log (default: none)"
    )


def run(args: argparse.Namespace) -> int:
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        print(f"enclave: --variants takes {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    if args.users < 1 or args.window_s < 0 or args.max_tokens < 1 or args.manual_chars < 100:
        print("enclave: --users and --max-tokens must be >= 1, --window-s >= 0", file=sys.stderr)
        return 2
    if args.burst < 0 or args.burst_max_tokens < 1 or args.burst_chars < 100:
        print("enclave: --burst must be >= 0, --burst-max-tokens >= 1", file=sys.stderr)
        return 2
    model = Path(args.model) if args.model else _demo_model()
    if not model.exists():
        print(f"enclave: no model at {model} (run scripts/fetch-demo-model.sh)", file=sys.stderr)
        return 2
    if args.logs is not None:
        try:
            args.logs.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            print(f"enclave: --logs {args.logs}: {error.strerror or error}", file=sys.stderr)
            return 2
    load_before = os.getloadavg()[0]
    manual = manual_text(args.manual_chars)
    results = {}
    bursts = [0, args.burst] if args.burst > 0 else [0]
    for variant in variants:
        for burst in bursts:
            name = f"{variant}+burst" if burst else variant
            with tempfile.TemporaryDirectory() as data_dir:
                results[name] = asyncio.run(
                    _variant(variant, args, model, manual, Path(data_dir), burst)
                )
    return emit(_report(args, model, results), load_before, args.output)


def manual_text(chars: int) -> str:
    """A quality manual of about ``chars`` characters, from the engine benchmarks' fixed
    passages (plain strings: importing them loads no torch)."""
    from inference.bench.passages import PASSAGES

    sections = list(PASSAGES.values())
    parts: list[str] = []
    total = 0
    n = 0
    while total < chars:
        section = f"Section {n + 1}.\n{sections[n % len(sections)]}"
        parts.append(section)
        total += len(section) + 2
        n += 1
    return "\n\n".join(parts)[:chars].rstrip()


def _demo_model() -> Path:
    from gateway.settings import Settings

    return Path(Settings().model)


async def _variant(
    variant: str,
    args: argparse.Namespace,
    model: Path,
    manual: str,
    data_dir: Path,
    burst: int,
) -> dict[str, Any]:
    env, key, burst_key = await asyncio.to_thread(
        _prepare, variant, model, manual, data_dir, burst > 0
    )
    started = time.perf_counter()
    log_name = f"{variant}+burst.log" if burst else f"{variant}.log"
    log = open(args.logs / log_name, "wb") if args.logs else subprocess.DEVNULL  # noqa: SIM115
    gateway = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{env['ENCLAVE_PORT']}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=600) as client:
            headers = {"authorization": f"Bearer {key}"}
            served = await _listed(client, headers, gateway)
            ready_s = time.perf_counter() - started
            name = SLUG if variant == "assistant" else served
            requests = [
                _ask(
                    client, headers, variant, name, manual, n, args, i * args.window_s / args.users
                )
                for n, i in zip(range(1, args.users + 1), range(args.users), strict=True)
            ]
            text = manual_text(args.burst_chars)
            others = [
                shift_burst.send(client, burst_key, served, text, k, args.burst_max_tokens)
                for k in range(1, burst + 1)
            ]
            answers = await asyncio.gather(*requests, *others)
    finally:
        gateway.terminate()
        gateway.wait(timeout=60)
        if not isinstance(log, int):
            log.close()
    summary = _summary(answers[: args.users], ready_s)
    if burst:
        summary["burst"] = shift_burst.summary(answers[args.users :])
    return summary


def _prepare(
    variant: str, model: Path, manual: str, data_dir: Path, burst: bool
) -> tuple[dict[str, str], str, str]:
    from gateway import admin_tasks
    from gateway.settings import Settings

    env = {
        **os.environ,
        "ENCLAVE_DATA_DIR": str(data_dir),
        "ENCLAVE_MODEL": str(model),
        "ENCLAVE_PORT": str(free_port()),
        "ENCLAVE_WORKER_PORT": str(free_port()),
        "ENCLAVE_LOG_FORMAT": "json",
    }
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("ENCLAVE_")})
    admin_tasks.migrate_database(settings)
    asyncio.run(admin_tasks.create_department(settings, "Quality", "quality"))
    key = asyncio.run(admin_tasks.create_key(settings, "quality", "shift", None, None))
    if variant == "assistant":
        asyncio.run(_create_assistant(settings, manual))
    burst_key = ""
    if burst:
        asyncio.run(admin_tasks.create_department(settings, "Sales", shift_burst.SLUG))
        burst_key = asyncio.run(
            admin_tasks.create_key(settings, shift_burst.SLUG, "burst", None, None)
        )
    return env, key, burst_key


async def _create_assistant(settings: Any, manual: str) -> None:
    """The department's assistant, written as the admin API writes it (version 1)."""
    from sqlalchemy import select

    from gateway import admin_tasks
    from gateway.db.models import Assistant, AssistantVersion, Department

    async with admin_tasks.transaction(settings) as db:
        department = (
            await db.execute(select(Department).where(Department.slug == "quality"))
        ).scalar_one()
        assistant = Assistant(
            id=uuid.uuid4(),
            department_id=department.id,
            slug=SLUG,
            name="Quality manual",
            is_default=True,
            current_version=1,
        )
        db.add(assistant)
        await db.flush()
        db.add(AssistantVersion(assistant_id=assistant.id, version=1, system_prompt=manual))


async def _listed(client: httpx.AsyncClient, headers: dict[str, str], gateway: Any) -> str:
    """Wait until the gateway lists a model (the worker is up and, with assistants, warm);
    its name."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if gateway.poll() is not None:
            raise RuntimeError(f"the gateway exited with {gateway.returncode}")
        try:
            response = await client.get("/v1/models", headers=headers)
            models = [m["id"] for m in response.json().get("data", []) if m["id"] != SLUG]
            if response.status_code == 200 and models:
                return str(models[0])
        except (httpx.HTTPError, ValueError):
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("no model was listed within 600 s")


async def _ask(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    variant: str,
    model: str,
    manual: str,
    n: int,
    args: argparse.Namespace,
    delay: float,
) -> dict[str, Any]:
    await asyncio.sleep(delay)
    messages = [{"role": "user", "content": QUESTION.format(n=n)}]
    if variant == "plain":
        messages.insert(0, {"role": "system", "content": manual})
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    ttft: float | None = None
    usage: dict[str, Any] = {}
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as reply:
        if reply.status_code != 200:
            return {
                "user": n,
                "status": reply.status_code,
                "error": (await reply.aread()).decode()[:300],
            }
        async for line in reply.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if (
                ttft is None
                and chunk.get("choices")
                and chunk["choices"][0]["delta"].get("content")
            ):
                ttft = time.perf_counter() - started
            usage = chunk.get("usage") or usage
    details = usage.get("prompt_tokens_details") or {}
    total = time.perf_counter() - started
    after_first = usage.get("completion_tokens", 0) - 1
    return {
        "user": n,
        "status": 200,
        "ttft_s": round(ttft, 3) if ttft is not None else None,
        "prompt_tokens": usage.get("prompt_tokens"),
        "cached_tokens": details.get("cached_tokens", 0),
        # Decode speed as the user sees it: tokens after the first over the time they took.
        "tokens_per_s": (
            round(after_first / (total - ttft), 1)
            if ttft is not None and after_first > 0 and total > ttft
            else None
        ),
    }


def _summary(answers: list[dict[str, Any]], ready_s: float) -> dict[str, Any]:
    ok = [a for a in answers if a["status"] == 200 and a["ttft_s"] is not None]
    ttfts = sorted(a["ttft_s"] for a in ok)
    # The manual's share of each prompt: what every request shares, in full blocks.
    shared = min((a["prompt_tokens"] for a in ok), default=0) - 40
    warm = [a for a in ok if a["cached_tokens"] >= shared > 0]
    return {
        "start_to_listed_s": round(ready_s, 2),
        "requests": len(answers),
        "ok": len(ok),
        "ttft_p50_s": round(statistics.median(ttfts), 3) if ttfts else None,
        "ttft_p95_s": round(_percentile(ttfts, 0.95), 3) if ttfts else None,
        "first_request": answers[0],
        "served_from_warm_prefix": len(warm),
        "tokens_per_s_per_user_p50": (
            statistics.median(speeds)
            if (speeds := [a["tokens_per_s"] for a in ok if a.get("tokens_per_s")])
            else None
        ),
        "per_request": answers,
    }


def _percentile(values: list[float], q: float) -> float:
    index = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[index]


def _report(args: argparse.Namespace, model: Path, results: dict[str, Any]) -> dict[str, Any]:
    from inference.bench.machine import cpu_model

    return {
        "benchmark": "shift-change",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": {
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "setup": {
            "model": model.name,
            "users": args.users,
            "window_s": args.window_s,
            "manual_chars": args.manual_chars,
            "max_tokens": args.max_tokens,
            "burst": args.burst,
            "burst_chars": args.burst_chars,
            "burst_max_tokens": args.burst_max_tokens,
        },
        "variants": results,
    }

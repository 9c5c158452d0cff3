"""The shift-change benchmark's second phase: another department's burst.

While the first department's users arrive, a second department (``sales``, its own key,
so the gateway names it to the worker as its own tenant) sends ``--burst`` long requests
at once, at the start of the window. Each carries its own long prompt: the department's
contract text with the request's case number first, so no two share a cached prefix and
every one is a full prefill. What the first department's users see during it is the
number that matters (their TTFT); the burst's own requests are summarised too, to show
they all finish.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import httpx

SLUG = "sales"
CASE = "Case {k} of the sales department: review the contract below and list its risks.\n\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--burst",
        type=int,
        default=0,
        help="also run each variant while another department sends this many long "
        "requests at once (0: no burst run)",
    )
    parser.add_argument(
        "--burst-chars",
        type=int,
        default=10_200,
        help="each burst request's prompt length in characters (~2,200 tokens)",
    )
    parser.add_argument("--burst-max-tokens", type=int, default=64, help="tokens per burst answer")


def prompt(text: str, k: int) -> str:
    """Burst request ``k``'s prompt: its own case line, then the shared text."""
    return CASE.format(k=k) + text


async def send(
    client: httpx.AsyncClient, key: str, model: str, text: str, k: int, max_tokens: int
) -> dict[str, Any]:
    """One burst request, streamed; its TTFT, total time and usage."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt(text, k)}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"authorization": f"Bearer {key}"}
    started = time.perf_counter()
    ttft: float | None = None
    usage: dict[str, Any] = {}
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as reply:
        if reply.status_code != 200:
            return {"case": k, "status": reply.status_code}
        async for line in reply.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices")
            if ttft is None and choices and choices[0]["delta"].get("content"):
                ttft = time.perf_counter() - started
            usage = chunk.get("usage") or usage
    return {
        "case": k,
        "status": 200,
        "ttft_s": None if ttft is None else round(ttft, 3),
        "total_s": round(time.perf_counter() - started, 3),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
    }


def summary(answers: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [a for a in answers if a["status"] == 200 and a["ttft_s"] is not None]
    ttfts = sorted(a["ttft_s"] for a in ok)
    return {
        "requests": len(answers),
        "ok": len(ok),
        "prompt_tokens_each": ok[0]["prompt_tokens"] if ok else None,
        "cached_tokens_total": sum(a["cached_tokens"] for a in ok),
        "ttft_p50_s": round(statistics.median(ttfts), 3) if ttfts else None,
        "ttft_max_s": ttfts[-1] if ttfts else None,
        "last_finished_s": max((a["total_s"] for a in ok), default=None),
    }

"""One health check of one worker: is it ready, and which models does it serve?

/ready says whether the worker takes requests now (503 while loading or draining);
/v1/models, called with the internal token, names its models and proves the token is the
one it expects, so a misconfigured token shows up as an unhealthy worker with a clear
reason rather than as 401s on every forwarded request. Its cards also carry each model's
context length (``max_model_len``, as vLLM and our worker report it), which bounds the
tokens the gateway reserves for a request that sets no max_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

# A check that takes longer than this counts as a failure: a worker that slow to answer
# a probe would be no better with real traffic.
CHECK_TIMEOUT_S = 2.0


# What the last check found, in a word, for `/api/status` (not parsed from the message):
# "unknown" before the first check, "error" for a worker that answers but not as it should
# (a refused token, a bad model list). "loading" covers a worker's own "starting".
UpstreamState = Literal["unknown", "ready", "loading", "draining", "failed", "unreachable", "error"]
_READY_STATES: dict[str, UpstreamState] = {
    "loading": "loading",
    "starting": "loading",
    "draining": "draining",
    "failed": "failed",
}


class CheckFailed(Exception):
    """The worker is not fit to take requests; the message says why, for logs and admins."""

    def __init__(self, message: str, state: UpstreamState = "error") -> None:
        super().__init__(message)
        self.state: UpstreamState = state


@dataclass(frozen=True, slots=True)
class Listing:
    """What a healthy worker's /v1/models says: its model ids, sorted, and the context
    length of those whose card gives one."""

    models: tuple[str, ...]
    max_model_len: dict[str, int] = field(default_factory=dict)


async def probe(
    client: httpx.AsyncClient, url: str, token: str, *, timeout: float = CHECK_TIMEOUT_S
) -> Listing:
    """The models ``url`` serves, or :class:`CheckFailed`."""
    try:
        ready = await client.get(f"{url}/ready", timeout=timeout)
        if ready.status_code != 200:
            status = _status_of(ready)
            state = _READY_STATES.get(status, "error") if ready.status_code == 503 else "error"
            raise CheckFailed(f"/ready answered {ready.status_code} ({status})", state)
        listed = await client.get(
            f"{url}/v1/models", headers={"Authorization": f"Bearer {token}"}, timeout=timeout
        )
    except httpx.TimeoutException:
        raise CheckFailed(f"no answer within {timeout:g} s", "unreachable") from None
    except httpx.TransportError as exc:
        raise CheckFailed(f"unreachable: {type(exc).__name__}: {exc}", "unreachable") from None
    if listed.status_code == 401:
        raise CheckFailed("/v1/models refused the worker token (401): check ENCLAVE_WORKER_TOKEN")
    if listed.status_code != 200:
        raise CheckFailed(f"/v1/models answered {listed.status_code}")
    return _listing(listed)


def _status_of(response: httpx.Response) -> str:
    try:
        return str(response.json().get("status", "unknown"))
    except (ValueError, AttributeError):
        return "not JSON"


def _listing(response: httpx.Response) -> Listing:
    try:
        cards = response.json()["data"]
        ids = tuple(sorted({str(card["id"]) for card in cards}))
    except (ValueError, KeyError, TypeError):
        raise CheckFailed("/v1/models did not answer an OpenAI model list") from None
    if not ids:
        raise CheckFailed("/v1/models lists no model")
    lengths = {str(card["id"]): length for card in cards if (length := _context_of(card))}
    return Listing(ids, lengths)


def _context_of(card: Any) -> int | None:
    """A card's positive integer max_model_len; anything else (absent, 0 from a worker
    still loading, a float) counts as unknown, so the default reservation applies."""
    length = card.get("max_model_len") if isinstance(card, dict) else None
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        return None
    return length

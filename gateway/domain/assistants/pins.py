"""The workers' prefix pins, as the warmer calls them: POST and DELETE /v1/internal/prefixes.

Every failure (the worker's refusal such as 409 ``pin_capacity_exceeded``, its 5xx, a worker
that cannot be reached) is a `PinFailed` with a sentence an admin can read; nothing else
escapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

PATH = "/v1/internal/prefixes"


class PinFailed(Exception):
    """A pin or unpin that did not happen; the message says why."""


@dataclass(frozen=True, slots=True)
class Pinned:
    id: str
    num_tokens: int | None
    pinned_tokens: int | None


async def pin(
    client: httpx.AsyncClient, worker: str, token: str, message: dict[str, str], model: str
) -> Pinned:
    """Pin ``message`` (a system message) in ``worker``'s prefix cache for ``model``."""
    body = {"messages": [message], "model": model}
    try:
        response = await client.post(worker + PATH, json=body, headers=_auth(token))
    except httpx.HTTPError as exc:
        raise PinFailed(f"the worker {worker} is unreachable: {type(exc).__name__}") from None
    if response.status_code != 200:
        raise PinFailed(_refusal(worker, response))
    try:
        data = response.json()
        return Pinned(str(data["id"]), _count(data, "num_tokens"), _count(data, "pinned_tokens"))
    except (ValueError, KeyError, TypeError):
        raise PinFailed(f"the worker {worker} answered a pin without its id") from None


async def unpin(client: httpx.AsyncClient, worker: str, token: str, prefix_id: str) -> None:
    """Unpin ``prefix_id`` on ``worker``; one the worker does not know (404) is unpinned."""
    try:
        response = await client.delete(f"{worker}{PATH}/{prefix_id}", headers=_auth(token))
    except httpx.HTTPError as exc:
        raise PinFailed(f"the worker {worker} is unreachable: {type(exc).__name__}") from None
    if response.status_code not in (200, 404):
        raise PinFailed(_refusal(worker, response))


def _auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _refusal(worker: str, response: httpx.Response) -> str:
    """The worker's error, in words: its OpenAI error message and code when it sent one."""
    message, code = response.text[:300], None
    try:
        error: Any = response.json().get("error")
        if isinstance(error, dict):
            message = str(error.get("message") or message)[:300]
            code = error.get("code")
    except (ValueError, AttributeError):
        pass
    label = f"{response.status_code} {code}" if code else str(response.status_code)
    return f"the worker {worker} answered {label}: {message}"


def _count(data: dict[str, Any], name: str) -> int | None:
    value = data.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None

"""One health check of one worker: is it ready, and which models does it serve?

/ready says whether the worker takes requests now (503 while loading or draining);
/v1/models, called with the internal token, names its models and proves the token is the
one it expects, so a misconfigured token shows up as an unhealthy worker with a clear
reason rather than as 401s on every forwarded request.
"""

from __future__ import annotations

import httpx

# A check that takes longer than this counts as a failure: a worker that slow to answer
# a probe would be no better with real traffic.
CHECK_TIMEOUT_S = 2.0


class CheckFailed(Exception):
    """The worker is not fit to take requests; the message says why, for logs and admins."""


async def probe(
    client: httpx.AsyncClient, url: str, token: str, *, timeout: float = CHECK_TIMEOUT_S
) -> tuple[str, ...]:
    """The model ids ``url`` serves, or :class:`CheckFailed`."""
    try:
        ready = await client.get(f"{url}/ready", timeout=timeout)
        if ready.status_code != 200:
            raise CheckFailed(f"/ready answered {ready.status_code} ({_status_of(ready)})")
        listed = await client.get(
            f"{url}/v1/models", headers={"Authorization": f"Bearer {token}"}, timeout=timeout
        )
    except httpx.TimeoutException:
        raise CheckFailed(f"no answer within {timeout:g} s") from None
    except httpx.TransportError as exc:
        raise CheckFailed(f"unreachable: {type(exc).__name__}: {exc}") from None
    if listed.status_code == 401:
        raise CheckFailed("/v1/models refused the worker token (401): check ENCLAVE_WORKER_TOKEN")
    if listed.status_code != 200:
        raise CheckFailed(f"/v1/models answered {listed.status_code}")
    return _model_ids(listed)


def _status_of(response: httpx.Response) -> str:
    try:
        return str(response.json().get("status", "unknown"))
    except (ValueError, AttributeError):
        return "not JSON"


def _model_ids(response: httpx.Response) -> tuple[str, ...]:
    try:
        cards = response.json()["data"]
        ids = tuple(sorted({str(card["id"]) for card in cards}))
    except (ValueError, KeyError, TypeError):
        raise CheckFailed("/v1/models did not answer an OpenAI model list") from None
    if not ids:
        raise CheckFailed("/v1/models lists no model")
    return ids

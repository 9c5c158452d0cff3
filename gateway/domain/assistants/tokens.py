"""How many tokens a system prompt is: counted by a healthy worker's POST /tokenize.

The text goes as the proxy sends it, a chat's system message (the model's chat template
wraps it), with no generation prompt after it: the count is the prefix an assistant's
requests begin with. The worker is asked with the internal token, on the pool's HTTP
client; no worker up is a ConnectionError (503), a model no worker lists a ValueError (400).
"""

from __future__ import annotations

import httpx

from gateway.domain.assistants.schemas import TokenCount
from gateway.domain.proxy.traffic import Traffic
from gateway.domain.workers.pool import NoUpstream

TOKENIZE_TIMEOUT_S = 30.0


async def count_tokens(traffic: Traffic, text: str, model: str | None) -> TokenCount:
    pool = traffic.pool
    served = pool.models()
    name = model or (served[0] if served else None)
    if name is None:
        raise ConnectionError("no worker is up to count tokens; try again when one is")
    try:
        upstream = pool.pick(name, None)
    except NoUpstream as exc:
        if exc.known:
            raise ConnectionError(str(exc)) from None
        raise ValueError(str(exc)) from None
    body = {
        "model": name,
        "messages": [{"role": "system", "content": text}],
        "add_generation_prompt": False,
    }
    headers = {"Authorization": f"Bearer {traffic.worker_token}"}
    try:
        with pool.lease(upstream):
            reply = await pool.client.post(
                f"{upstream.url}/tokenize", json=body, headers=headers, timeout=TOKENIZE_TIMEOUT_S
            )
    except httpx.HTTPError as exc:
        raise ConnectionError(f"the worker did not answer: {type(exc).__name__}") from None
    if reply.status_code == 400:  # the text itself (the worker's chat template refused it)
        raise ValueError(f"the worker could not count this text: {_message(reply)}")
    if reply.status_code != 200:
        raise ConnectionError(f"the worker could not count tokens ({reply.status_code})")
    try:
        count = int(reply.json()["count"])
    except (ValueError, KeyError, TypeError):
        raise ConnectionError("the worker's /tokenize answer has no count") from None
    return TokenCount(tokens=count, model=name)


def _message(reply: httpx.Response) -> str:
    try:
        return str(reply.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return "no reason given"

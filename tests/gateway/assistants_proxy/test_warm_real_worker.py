"""The warmer against a real worker on a tiny random model: the pin is made, its token count
stored, and the assistant's first request hits the pinned prefix."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import openai

from gateway.domain.assistants.warming import PrefixWarmer
from tests.gateway.assistants_proxy.support import add_assistant, prompt_tokens, served_gateway
from tests.inference.server.conftest import API_KEY


def test_a_real_worker_pins_the_assistant_and_its_first_request_hits_the_pin(
    tmp_path: Path, worker: str
) -> None:
    with served_gateway(tmp_path, [worker], token=API_KEY) as gateway:
        key = gateway.key("quality")
        prompt = "You check batches for the quality desk. " * 6
        desk = asyncio.run(add_assistant(gateway.settings, "quality", "qa-desk", prompt))
        warm: PrefixWarmer = gateway.app.state.gateway.warmer
        warm.request_sync()
        deadline = time.monotonic() + 30
        while (status := warm.status(desk)) is None or status.state == "pending":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert status.state == "warm", status.error
        assert status.worker == worker and status.num_tokens and status.pinned_tokens
        assert asyncio.run(prompt_tokens(gateway.settings, desk)) == {1: status.num_tokens}
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
        messages: Any = [{"role": "user", "content": "Batch 7?"}]
        reply = client.chat.completions.create(model="qa-desk", messages=messages, max_tokens=2)
        assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
        cached = reply.usage.prompt_tokens_details.cached_tokens or 0
        assert cached >= status.pinned_tokens  # the first request already hits the pin

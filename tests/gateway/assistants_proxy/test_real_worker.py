"""An assistant's request end to end: a served gateway in front of a real worker on a tiny
random model, which must accept the rewritten body and count the system message."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.gateway.assistants_proxy.support import add_assistant
from tests.gateway.traffic.conftest import running_gateway
from tests.inference.server.conftest import MODEL


def test_a_real_worker_answers_an_assistants_rewritten_request(tmp_path: Path, worker: str) -> None:
    with running_gateway(tmp_path, [worker]) as gateway:
        key = gateway.department("quality")
        prompt = "You check batches. " * 8
        sampling = {"max_tokens": 3, "temperature": 0.0}
        asyncio.run(
            add_assistant(gateway.settings, "quality", "qa-desk", prompt, sampling=sampling)
        )
        client = gateway.client(key)
        messages: Any = [{"role": "user", "content": "Batch 7?"}]
        plain = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=3)
        reply = client.chat.completions.with_raw_response.create(model="qa-desk", messages=messages)
        assert reply.headers["x-enclave-assistant"] == "qa-desk; version=1"
        answer = reply.parse()
        assert answer.model == MODEL and answer.usage is not None and plain.usage is not None
        assert answer.usage.completion_tokens <= 3  # the assistant's max_tokens applied
        # The worker was sent the system message: its prompt is longer by it.
        assert answer.usage.prompt_tokens > plain.usage.prompt_tokens + 8

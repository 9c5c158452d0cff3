"""SSE framing, stream deltas, bearer checks and the metrics registry, without a model."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from inference.engine.async_engine import RequestTiming
from inference.outputs import CompletionOutput
from inference.server.auth import is_authorized, needs_auth
from inference.server.cursor import StreamCursor
from inference.server.metrics import WorkerMetrics
from inference.server.protocol import ChatChunkChoice, ChatCompletionChunk, ChatDelta
from inference.server.streaming import DONE, sse_event


def test_sse_event_is_one_data_line_and_a_blank_line() -> None:
    chunk = ChatCompletionChunk(
        id="chatcmpl-1",
        created=1,
        model="m",
        choices=[ChatChunkChoice(index=0, delta=ChatDelta(content="hé\n"))],
    )
    event = sse_event(chunk)
    assert event.startswith(b"data: {") and event.endswith(b"}\n\n")
    assert event.count(b"\n") == 2  # the newline in the content is escaped inside the JSON
    payload = json.loads(event[len(b"data: ") :])
    assert payload["object"] == "chat.completion.chunk"
    assert payload["choices"][0]["delta"] == {"content": "hé\n"}  # role left out, not null
    assert "usage" not in payload
    assert DONE == b"data: [DONE]\n\n"
    with_usage = ChatCompletionChunk(id="c", created=1, model="m", choices=[], usage=None)
    assert json.loads(sse_event(with_usage)[6:])["usage"] is None


def test_characters_that_split_lines_are_escaped() -> None:
    # U+0085, U+2028 and U+2029 are line breaks to str.splitlines(); a random model emits them.
    text = "a\x85b\u2028c\u2029d"
    event = sse_event({"text": text})
    assert event.decode().splitlines() == [event.decode()[:-2], ""]  # one data line, a blank
    assert json.loads(event[len(b"data: ") :])["text"] == text


def test_cursor_sends_only_what_is_new() -> None:
    cursor = StreamCursor()
    first = cursor.advance(0, CompletionOutput(0, "Hel", [1, 2]))
    assert first is not None and first.text == "Hel" and first.text_offset == 0
    assert cursor.advance(0, CompletionOutput(0, "Hel", [1, 2])) is None
    last = cursor.advance(0, CompletionOutput(0, "Hello", [1, 2, 3], finish_reason="stop"))
    assert last is not None and (last.text, last.text_offset, last.finish_reason) == (
        "lo",
        3,
        "stop",
    )
    assert cursor.advance(0, CompletionOutput(0, "Hello", [1, 2, 3], finish_reason="stop")) is None


def test_bearer_auth() -> None:
    good = [(b"authorization", b"Bearer s3cret")]
    assert is_authorized(good, "s3cret")
    assert not is_authorized([(b"authorization", b"Bearer s3cre")], "s3cret")
    assert not is_authorized([(b"authorization", b"Basic s3cret")], "s3cret")
    assert not is_authorized([], "s3cret")
    assert needs_auth("/v1/chat/completions") and needs_auth("/tokenize")
    assert not needs_auth("/health") and not needs_auth("/metrics")


def test_metrics_registry_is_per_worker_and_counts_requests() -> None:
    first, second = WorkerMetrics("m", lambda: None), WorkerMetrics("m", lambda: None)
    timing = RequestTiming("r", "quality", arrival=0.0, queue_time=0.01, time_to_first_token=0.2)
    timing.inter_token_latencies = [0.05, 0.07]
    timing.end_to_end, timing.num_prompt_tokens, timing.num_generated_tokens = 0.4, 11, 3
    timing.finish_reason = "stop"
    first.observe_request(timing)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(first.render().decode())
        for s in family.samples
    }
    tenant = (("model", "m"), ("tenant", "quality"))
    assert samples[("inference_prompt_tokens_total", tenant)] == 11
    assert samples[("inference_generation_tokens_total", tenant)] == 3
    by_reason = (("finish_reason", "stop"), *tenant)
    assert samples[("inference_requests_total", by_reason)] == 1
    assert samples[("inference_time_to_first_token_seconds_count", tenant)] == 1
    assert samples[("inference_inter_token_latency_seconds_count", (("model", "m"),))] == 2
    assert b"inference_prompt_tokens_total{" not in second.render()

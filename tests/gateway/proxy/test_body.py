"""What the gateway reads off a request body: the checked fields and the reservation."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.domain.proxy.body import DEFAULT_COMPLETION_RESERVATION, ApiRequest, parse
from gateway.domain.proxy.openai_errors import ApiError
from gateway.domain.proxy.request_params import MAX_PROMPTS

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
TEXT = {"model": "m", "prompt": "hello"}


def chat(**fields: Any) -> ApiRequest:
    return parse("chat.completions", msgspec.json.encode({**CHAT, **fields}))


def text(**fields: Any) -> ApiRequest:
    return parse("completions", msgspec.json.encode({**TEXT, **fields}))


def refused(endpoint: str, raw: bytes) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(endpoint, raw)
    assert caught.value.status == 400 and caught.value.reason == "bad_request"
    return caught.value


@pytest.mark.parametrize("name", ["n", "best_of", "max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize(
    "value",
    # As JSON text: 1e20 and 2.0 decode as floats, the first one as a (huge) int.
    ["100000000000000000000", "1e20", "2.0", "true", "0", "-1", '"2"', "[2]"],
)
def test_counts_must_be_integers_in_range(name: str, value: str) -> None:
    raw = b'{"model": "m", "messages": [], "%s": %s}' % (name.encode(), value.encode())
    error = refused("chat.completions", raw)
    assert error.param == name
    assert f"{name} must be an integer from 1 to" in error.message


def test_count_ranges_are_the_workers() -> None:
    assert chat(n=128, best_of=128, max_tokens=2**31 - 1).n == 128
    assert refused("chat.completions", msgspec.json.encode({**CHAT, "n": 129})).param == "n"
    error = refused("chat.completions", msgspec.json.encode({**CHAT, "max_tokens": 2**31}))
    assert error.param == "max_tokens"
    assert chat(n=None).n == 1  # null is "not given"; the worker has its own say on it


def test_best_of_counts_as_sequences() -> None:
    assert chat(n=2, best_of=5, max_tokens=10).n == 5
    assert chat(n=3, max_tokens=10).n == 3


def test_the_limit_the_worker_obeys_is_the_one_reserved() -> None:
    """Chat prefers max_completion_tokens; the legacy endpoint has no such field."""
    assert chat(max_tokens=100, max_completion_tokens=7).max_tokens == 7
    assert chat(max_tokens=100, max_completion_tokens=None).max_tokens == 100
    assert text(max_tokens=100, max_completion_tokens=7).max_tokens == 100
    assert text(max_completion_tokens=7).max_tokens is None
    # ...but a bad value is refused wherever it is.
    raw = msgspec.json.encode({**TEXT, "max_completion_tokens": 1e20})
    assert refused("completions", raw).param == "max_completion_tokens"


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([], "non-empty"),
        ({"text": "x"}, "non-empty list"),
        (7, "non-empty list"),
        (["a", 5], "list of token-id lists"),
        ([[1, 2], [3, "x"]], "list of token-id lists"),
        ([True, False], "list of token-id lists"),
        (["p"] * (MAX_PROMPTS + 1), f"at most {MAX_PROMPTS} prompts"),
    ],
)
def test_bad_prompts_are_refused(prompt: Any, message: str) -> None:
    error = refused("completions", msgspec.json.encode({**TEXT, "prompt": prompt}))
    assert error.param == "prompt" and message in error.message


def test_every_prompt_of_a_batch_is_reserved_n_times() -> None:
    single = text(prompt="The operator", max_tokens=5, n=2)
    (estimate,) = single.prompt_estimates()
    assert single.reserved_tokens(None) == estimate + 5 * 2
    batch = text(prompt=["The operator"] * 40, max_tokens=5, n=2)
    assert batch.prompt_estimates() == [estimate] * 40
    assert batch.reserved_tokens(None) == 40 * (estimate + 5 * 2)
    assert batch.estimated_prompt_tokens() == 40 * estimate


def test_token_id_prompts_count_their_ids() -> None:
    one = text(prompt=[5, 6, 7, 8], max_tokens=3)
    assert one.prompt_estimates() == [4] and one.reserved_tokens(None) == 4 + 3
    assert one.affinity_key() == text(prompt=[1, 2, 3, 4]).affinity_key()  # routable, too
    several = text(prompt=[[5, 6], [7, 8, 9], "abc"], max_tokens=3, n=4)
    assert several.prompt_estimates() == [2, 3, 1 + 8]
    assert several.reserved_tokens(None) == (2 + 12) + (3 + 12) + (9 + 12)
    # The largest batch at the largest counts stays far below what a counter holds.
    biggest = text(prompt=[[1]] * MAX_PROMPTS, max_tokens=2**31 - 1, n=128)
    assert biggest.reserved_tokens(None) < 2**53


def test_the_context_length_bounds_each_sequence() -> None:
    request = chat(n=3)
    (prompt,) = request.prompt_estimates()
    assert request.reserved_tokens(None) == prompt + DEFAULT_COMPLETION_RESERVATION * 3
    assert request.reserved_tokens(512) == prompt + (512 - prompt) * 3
    # A max_tokens past the context is bounded by it (the worker refuses it anyway).
    assert chat(max_tokens=100_000).reserved_tokens(512) == prompt + 512
    assert chat(max_tokens=100).reserved_tokens(512) == prompt + 100
    # A prompt longer than the context still reserves a token per sequence.
    long = text(prompt=list(range(600)))
    assert long.reserved_tokens(512) == 600 + 1

"""SamplingParams rejects invalid values with the field's name in the message."""

from __future__ import annotations

import pytest

from inference.sampling import SamplingParams


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("temperature", -0.1),
        ("temperature", float("nan")),
        ("n", 0),
        ("top_k", -2),
        ("min_p", 1.5),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -3.0),
        ("repetition_penalty", 0.0),
        ("max_tokens", 0),
        ("min_tokens", -1),
        ("logprobs", 21),
        ("prompt_logprobs", -1),
        ("stop_token_ids", [-1]),
        ("logit_bias", {1: 101.0}),
    ],
)
def test_invalid_value_names_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})  # type: ignore[arg-type]


def test_valid_defaults_and_stop_string_normalised() -> None:
    params = SamplingParams(temperature=0, stop="END")  # type: ignore[arg-type]
    assert params.greedy and params.stop == ["END"]
    assert SamplingParams(min_tokens=5, max_tokens=4 + 1).min_tokens == 5
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(min_tokens=5, max_tokens=4)

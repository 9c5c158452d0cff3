"""Reading config.json into ArchConfig, in both transformers 4 and 5 layouts."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from inference.model.arch import ArchConfig
from inference.model.layers.rotary import rope_inverse_frequencies

BASE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 100,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}
LLAMA3 = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def test_defaults() -> None:
    config = ArchConfig.from_hf_config(BASE)
    assert (config.num_kv_heads, config.head_dim) == (4, 16)
    assert config.rope_scaling is None and config.rope_theta == 10000.0
    assert not config.attention_bias and not config.qk_norm


def test_rope_in_transformers4_and_5_layouts_agree() -> None:
    old = ArchConfig.from_hf_config(
        {**BASE, "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", **LLAMA3}}
    )
    new = ArchConfig.from_hf_config(
        {**BASE, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", **LLAMA3}}
    )
    legacy_key = ArchConfig.from_hf_config(
        {**BASE, "rope_theta": 500000.0, "rope_scaling": {"type": "llama3", **LLAMA3}}
    )
    assert old == new == legacy_key
    assert new.rope_theta == 500000.0
    assert new.rope_scaling == {"rope_type": "llama3", **LLAMA3}


def test_family_flags() -> None:
    qwen2 = ArchConfig.from_hf_config(
        {
            **BASE,
            "architectures": ["Qwen2ForCausalLM"],
            "sliding_window": 4096,
            "use_sliding_window": False,
        }
    )
    assert qwen2.attention_bias and qwen2.sliding_window is None
    qwen3 = ArchConfig.from_hf_config({**BASE, "architectures": ["Qwen3ForCausalLM"]})
    assert qwen3.qk_norm
    mistral = ArchConfig.from_hf_config(
        {**BASE, "architectures": ["MistralForCausalLM"], "sliding_window": 4096}
    )
    assert mistral.sliding_window == 4096


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"architectures": ["GPTNeoXForCausalLM"]}, "GPTNeoXForCausalLM.*LlamaForCausalLM"),
        ({"architectures": None}, "unsupported architecture None"),
        ({"num_attention_heads": None}, "bad value"),
        ({"num_key_value_heads": 3}, "multiple of num_kv_heads"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type 'yarn'"),
    ],
)
def test_bad_configs(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ArchConfig.from_hf_config({**BASE, **change})


def test_missing_field_is_named() -> None:
    cfg = dict(BASE)
    del cfg["vocab_size"]
    with pytest.raises(ValueError, match="vocab_size"):
        ArchConfig.from_hf_config(cfg)


def test_llama3_scaling_keeps_high_and_divides_low_frequencies() -> None:
    plain = rope_inverse_frequencies(128, 500000.0, None)
    scaled = rope_inverse_frequencies(128, 500000.0, {"rope_type": "llama3", **LLAMA3})
    wavelength = 2 * torch.pi / plain
    high = wavelength < 8192 / 4
    low = wavelength > 8192 / 1
    assert torch.equal(scaled[high], plain[high])
    torch.testing.assert_close(scaled[low], plain[low] / 8)
    middle = ~(high | low)
    assert middle.any()
    assert bool(((scaled[middle] < plain[middle]) & (scaled[middle] > plain[middle] / 8)).all())
    linear = rope_inverse_frequencies(128, 500000.0, {"rope_type": "linear", "factor": 2.0})
    torch.testing.assert_close(linear, plain / 2)

"""read_gguf on the demo model against transformers' own GGUF loading of the same file."""

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from inference.model.loader.gguf import GGUFCheckpoint, read_gguf

REPO_ROOT = Path(__file__).resolve().parents[3]

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces,\ttabs\t\tand\r\nnewlines\n\n\n",
    "I'm sure they'll say we've done it; you'd agree?",
    "Pi is 3.14159265, 2**64 = 18446744073709551616, call 555-0199 x 1000000",
    "def fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    'for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } // "dot"',
    "naïve café, Straße, Ελληνικά, русский, 東京都, 한국어, مرحبا, हिन्दी",
    "emoji: 🤖🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷",
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n",
    "<|endoftext|><repo_name>enclave<file_sep>main.py",
    "",
]


@pytest.fixture(scope="module")
def demo_path() -> Path:
    script = REPO_ROOT / "scripts" / "fetch-demo-model.sh"
    result = subprocess.run([str(script)], check=True, capture_output=True, text=True)
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def checkpoint(demo_path: Path) -> GGUFCheckpoint:
    start = time.perf_counter()
    opened = read_gguf(demo_path)
    print(f"\nread_gguf({demo_path.name}): {time.perf_counter() - start:.2f} s")
    return opened


@pytest.fixture(scope="module")
def our_tensors(checkpoint: GGUFCheckpoint) -> dict[str, torch.Tensor]:
    start = time.perf_counter()
    tensors = dict(checkpoint.tensors)
    print(f"\ndequantizing all {len(tensors)} tensors: {time.perf_counter() - start:.2f} s")
    return tensors


@pytest.fixture(scope="module")
def reference_state(demo_path: Path) -> Iterator[dict[str, torch.Tensor]]:
    model = AutoModelForCausalLM.from_pretrained(demo_path.parent, gguf_file=demo_path.name)
    yield model.state_dict()
    del model


@pytest.fixture(scope="module")
def reference_tokenizer(demo_path: Path) -> Any:
    return AutoTokenizer.from_pretrained(demo_path.parent, gguf_file=demo_path.name)


def test_hf_config_matches_transformers(checkpoint: GGUFCheckpoint, demo_path: Path) -> None:
    reference = AutoConfig.from_pretrained(demo_path.parent, gguf_file=demo_path.name)
    ours = checkpoint.hf_config
    fields = [
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "max_position_embeddings",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "attention_bias",
        "mlp_bias",
        "hidden_act",
        "model_type",
    ]
    for field in fields:
        assert ours[field] == getattr(reference, field), field
    assert ours["rope_theta"] == reference.rope_parameters["rope_theta"]
    assert ours["rope_parameters"]["rope_type"] == reference.rope_parameters["rope_type"]
    assert ours["rope_scaling"] is None
    assert ours["architectures"] == ["LlamaForCausalLM"]
    assert checkpoint.generation_config["eos_token_id"] == reference.eos_token_id


def test_every_tensor_equals_transformers(
    our_tensors: dict[str, torch.Tensor],
    reference_state: dict[str, torch.Tensor],
    checkpoint: GGUFCheckpoint,
) -> None:
    # transformers materializes the tied lm_head; the file has none, so neither do we.
    assert set(reference_state) - set(our_tensors) == {"lm_head.weight"}
    assert set(our_tensors) <= set(reference_state)
    assert len(our_tensors) == checkpoint.num_tensors
    for name, tensor in our_tensors.items():
        expected = reference_state[name]
        assert tensor.dtype == torch.float32 and tensor.shape == expected.shape, name
        torch.testing.assert_close(tensor, expected, rtol=0, atol=1e-6, msg=name)


def test_tokenizer_encodes_like_transformers(
    checkpoint: GGUFCheckpoint, reference_tokenizer: Any
) -> None:
    for text in TEXTS:
        ours = checkpoint.tokenizer.encode(text).ids
        assert ours == reference_tokenizer.encode(text), text
        assert checkpoint.tokenizer.decode(ours, skip_special_tokens=False) == (
            reference_tokenizer.decode(ours)
        )
        assert checkpoint.tokenizer.decode(ours, skip_special_tokens=True) == (
            reference_tokenizer.decode(ours, skip_special_tokens=True)
        )


def test_special_tokens_and_template_match_transformers(
    checkpoint: GGUFCheckpoint, reference_tokenizer: Any
) -> None:
    config = checkpoint.tokenizer_config
    assert config["chat_template"] == reference_tokenizer.chat_template
    for role in ("bos", "eos", "unk", "pad"):
        token = config[f"{role}_token"]
        assert token == getattr(reference_tokenizer, f"{role}_token"), role
        token_id = checkpoint.tokenizer.token_to_id(token)
        assert token_id == getattr(reference_tokenizer, f"{role}_token_id"), role
    assert config["add_bos_token"] is False
    assert checkpoint.tokenizer.get_vocab_size() == len(reference_tokenizer)

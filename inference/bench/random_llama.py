"""Random Llama checkpoints of real models' shapes, for benchmarks on a machine that
reaches no model hub: a bf16 Hugging Face directory with a word-level tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m": {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "rope_theta": 100000.0,
    },
    "llama-1b": {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "rope_theta": 500000.0,
    },
    "tiny": {  # --quick on a CPU
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 512,
        "rope_theta": 10000.0,
    },
}


def build_random_llama(directory: Path, shape: dict[str, Any], device: Any) -> None:
    """A bf16 Hugging Face directory: random weights and a word-level tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        **{k: v for k, v in shape.items() if k != "rope_theta"},
        rope_parameters={"rope_type": "default", "rope_theta": shape["rope_theta"]},
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    with torch.device(device):  # random init on the GPU: seconds, not minutes
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    # One word per id, so any generated id decodes.
    vocab = {f"t{i}": i for i in range(shape["vocab_size"])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "t1", "eos_token": "t2", "unk_token": "t0"})
    )
    del model

"""Tiny random checkpoints of every supported family, built with transformers.

Each is a float32 Hugging Face directory (safetensors, config.json, a byte-level BPE
tokenizer trained in-process to the model's vocabulary, tokenizer_config.json with a ChatML
template, generation_config.json). Weights are drawn wider than transformers' default and
norm weights and biases are randomised too, so a wrongly loaded tensor changes the logits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    MistralConfig,
    PretrainedConfig,
    Qwen2Config,
    Qwen3Config,
)

ARCHITECTURES = ["llama", "llama3", "mistral", "qwen2", "qwen3", "smollm2"]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CORPUS = (
    "The quick brown fox jumps over the lazy dog. Quality manuals describe every "
    "inspection step in detail. A nonconformance report names the part, the defect, the "
    "cause and the corrective action. The operator measures the bore, records the value and "
    "signs the sheet. Engineers review the drawing, the tolerance and the material before "
    "the parts ship to the customer. "
)

COMMON: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 384,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "initializer_range": 0.1,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "pad_token_id": PAD_ID,
    "tie_word_embeddings": False,
}


def plain_rope(theta: float) -> dict[str, Any]:
    return {"rope_type": "default", "rope_theta": theta}


def _config(kind: str) -> PretrainedConfig:
    if kind == "llama":
        return LlamaConfig(**COMMON, rope_parameters=plain_rope(10000.0))
    if kind == "llama3":
        scaling = {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,  # small, so every band is exercised
        }
        return LlamaConfig(
            **{**COMMON, "num_hidden_layers": 3},
            rope_parameters={"rope_theta": 500000.0, **scaling},
        )
    if kind == "mistral":
        # head_dim 32 with 4 heads: q/o projections wider than hidden.
        return MistralConfig(
            **{**COMMON, "num_key_value_heads": 1}, head_dim=32, sliding_window=4096
        )
    if kind == "qwen2":
        return Qwen2Config(**COMMON, rope_parameters=plain_rope(1e6))
    if kind == "qwen3":
        return Qwen3Config(**COMMON, head_dim=16, rope_parameters=plain_rope(1e6))
    if kind == "smollm2":
        # 6 heads over 2 KV heads (group of 3, like SmolLM2's 9/3), tied embeddings.
        overrides = {"hidden_size": 96, "num_attention_heads": 6, "tie_word_embeddings": True}
        return LlamaConfig(**{**COMMON, **overrides}, rope_parameters=plain_rope(1e5))
    raise ValueError(f"unknown checkpoint kind {kind!r}; known: {ARCHITECTURES}")


def train_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level BPE with the special tokens first, at most `vocab_size` entries."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([CORPUS] * 10, trainer)
    return tokenizer


def _write_tokenizer(directory: Path, vocab_size: int, max_length: int) -> None:
    tokenizer = train_tokenizer(vocab_size)
    for token_id, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != token_id:
            raise RuntimeError(f"special token {token} did not get id {token_id}")
    tokenizer.save(str(directory / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL_TOKENS[BOS_ID],
        "eos_token": SPECIAL_TOKENS[EOS_ID],
        "pad_token": SPECIAL_TOKENS[PAD_ID],
        "unk_token": SPECIAL_TOKENS[PAD_ID],
        "chat_template": CHATML_TEMPLATE,
        "model_max_length": max_length,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))


def make_checkpoint(
    kind: str, directory: Path, *, seed: int = 0, max_position_embeddings: int | None = None
) -> Path:
    """Write a tiny random `kind` checkpoint into `directory` and return the directory;
    ``max_position_embeddings`` widens its context (a long system prompt's tests)."""
    config = _config(kind)
    if max_position_embeddings is not None:
        config.max_position_embeddings = max_position_embeddings
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.1)
            elif "norm" in name:
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    generation_config = {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}
    (directory / "generation_config.json").write_text(json.dumps(generation_config, indent=2))
    _write_tokenizer(directory, config.vocab_size, config.max_position_embeddings)
    return directory


def claim_token(directory: Path, text: str, *, special: bool) -> int:
    """Give the id of the vocabulary's last merge to ``text`` as an added token (the tiny
    vocabulary is full and the model's width fixed), as real tokenizers have their tool
    markers: Mistral's [TOOL_CALLS] special, Qwen's <tool_call> not. Returns the id."""
    path = directory / "tokenizer.json"
    document = json.loads(path.read_text())
    model = document["model"]
    left, right = model["merges"].pop()
    token_id = int(model["vocab"].pop(left + right))
    document["added_tokens"].append(
        {"id": token_id, "content": text, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": special}
    )  # fmt: skip
    path.write_text(json.dumps(document))
    return token_id

"""The engine's tokenizer as llguidance sees it.

llguidance reads a Hugging Face ``tokenizers`` JSON document directly, and the engine's
tokenizer is one (from tokenizer.json, or built from a GGUF file's metadata), so the adapter
is the serialised backend plus the vocabulary width and end-of-sequence ids.
"""

from __future__ import annotations

import llguidance

from inference.text.tokenizer import Tokenizer


def ll_tokenizer(tokenizer: Tokenizer, vocab_size: int) -> llguidance.LLTokenizer:
    """``vocab_size``: the model's logit width (it may exceed the tokenizer's own count:
    padded embeddings); masks have ``ceil(vocab_size / 32)`` words."""
    eos = sorted(tokenizer.eos_token_ids)
    width = max(vocab_size, tokenizer.vocab_size)
    try:
        return llguidance.LLTokenizer(
            tokenizer.backend.to_str(), n_vocab=width, eos_token=eos or None
        )
    except Exception as exc:  # the Rust side raises a bare ValueError/Exception
        raise ValueError(f"llguidance cannot read this tokenizer: {exc}") from exc

"""What the speculative decoding tests share: repetitive prompts, a float32 LLM, greedy
sampling, the tokens of outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inference import LLM, SamplingParams

# Repetitive prompts: the n-gram proposer finds their n-grams again and again.
PROMPTS = [
    "the operator measures the bore, the operator measures the bore, the operator measures",
    "a b c d e a b c d e a b c d e a b",
    "quality manuals describe every inspection step. quality manuals describe",
    "hello",
]


def make_llm(path: Path, **kwargs: Any) -> LLM:
    """A float32 engine on a tiny checkpoint (greedy identity is exact in float32 only)."""
    options: dict[str, Any] = {
        "dtype": "float32",
        "max_model_len": 256,
        "kv_cache_memory_bytes": 8 << 20,
        "progress": False,
    }
    options.update(kwargs)
    return LLM(str(path), **options)


def greedy(max_tokens: int = 48, **kw: Any) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, **kw)


def tokens(outputs: list[Any]) -> list[list[int]]:
    return [list(c.token_ids) for o in outputs for c in o.outputs]

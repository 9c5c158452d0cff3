"""FP8 KV cache and FP8 weights through the engine, on the tiny test models."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from inference import LLM, SamplingParams
from inference.kernels.attention import AttentionBackend, KVCache, PagedLayout
from inference.kernels.kv_cache import FP8_KV_DTYPE, to_cache_dtype
from inference.model.quant import Fp8Linear
from tests.inference.checkpoints import make_checkpoint

PROMPTS = ["the quick brown fox", "A nonconformance report names the part", "engineers review"]
BUDGET = 4 << 20


def greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)


def engine(path: Path, **kwargs: object) -> LLM:
    return LLM(
        str(path),
        dtype="bfloat16",
        max_model_len=256,
        kv_cache_memory_bytes=BUDGET,
        progress=False,
        **kwargs,
    )


class RoundedKV:
    """Rounds new keys and values through e4m3 but stores them in the model dtype.

    Attention itself is the engine's own backend (the C kernels on a CPU), so both runs
    do the same arithmetic.
    """

    def __init__(self, backend: AttentionBackend[Any]) -> None:
        self.backend = backend

    def build_metadata(self, layout: PagedLayout, device: torch.device) -> Any:
        return self.backend.build_metadata(layout, device)

    def write_kv(
        self, key: torch.Tensor, value: torch.Tensor, cache: KVCache, slot_mapping: torch.Tensor
    ) -> None:
        rounded = [to_cache_dtype(x, FP8_KV_DTYPE, 1.0).to(x.dtype) for x in (key, value)]
        self.backend.write_kv(rounded[0], rounded[1], cache, slot_mapping)

    def forward(self, query: torch.Tensor, cache: KVCache, meta: Any, scale: float) -> torch.Tensor:
        return self.backend.forward(query, cache, meta, scale)


def leading_agreement(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))


@pytest.mark.parametrize("kind", ["llama", "qwen3", "smollm2"])
def test_fp8_kv_doubles_capacity_and_stores_exactly_e4m3(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = make_checkpoint(kind, tmp_path / kind)
    plain = engine(path)
    with caplog.at_level(logging.INFO, logger="inference.engine"):
        fp8 = engine(path, kv_cache_dtype="fp8")
    assert fp8.engine.kv_capacity_tokens == 2 * plain.engine.kv_capacity_tokens
    assert fp8.engine.kv_bytes_per_token * 2 == plain.engine.kv_bytes_per_token
    assert all(c.key.dtype == FP8_KV_DTYPE for c in fp8.engine.runner.kv_caches)
    assert f"= {fp8.engine.kv_capacity_tokens} tokens (kv float8_e4m3fn" in caplog.text
    # Long enough that decodes read many FP8 blocks written by prefill and by decodes.
    expected = plain.generate(PROMPTS, greedy(24))
    got = fp8.generate(PROMPTS, greedy(24))
    lead = [
        leading_agreement(w.outputs[0].token_ids, h.outputs[0].token_ids)
        for w, h in zip(expected, got, strict=True)
    ]
    print(f"\n{kind}: greedy tokens equal to bf16 KV before the first difference: {lead}")
    # The issue asks for 16 equal tokens; measured 2, 24, 1 (llama), 6, 9, 13 (qwen3) and
    # 24, 0, 24 (smollm2). These random models' bf16 logits have exact top-2 ties and a
    # median top-2 gap of 0.13-0.67, while e4m3 rounding of K/V moves the largest logit by
    # a median 0.08-0.14. Per-token e4m3 scales do no better (docs/engine.md).
    # The same model with bf16 pools holding e4m3-rounded values: every token identical,
    # so the FP8 pools lose nothing beyond e4m3 rounding (paging, prefill and decode).
    assert type(plain.engine.runner.attention_backend) is type(fp8.engine.runner.attention_backend)
    plain.engine.model.set_attention_backend(RoundedKV(plain.engine.runner.attention_backend))
    rounded = plain.generate(PROMPTS, greedy(24))
    for want, have in zip(rounded, got, strict=True):
        assert have.outputs[0].token_ids == want.outputs[0].token_ids


def test_fp8_weights_through_llm(tmp_path: Path) -> None:
    path = make_checkpoint("qwen2", tmp_path / "qwen2")
    plain = engine(path)
    fp8 = engine(path, quantization="fp8", kv_cache_dtype="fp8")
    model = fp8.engine.model
    assert isinstance(model.model.layers[0].self_attn.qkv_proj, Fp8Linear)
    assert model.model.layers[0].self_attn.qkv_proj.bias is not None  # Qwen2's q/k/v bias
    assert fp8.engine.model_is_fp8 and not plain.engine.model_is_fp8
    want = plain.generate(PROMPTS, greedy(8))
    have = fp8.generate(PROMPTS, greedy(8))
    # Random weights give near-ties, so FP8 rounding may change a later token; the first
    # tokens of most prompts survive it.
    same_first = sum(
        w.outputs[0].token_ids[:2] == h.outputs[0].token_ids[:2]
        for w, h in zip(want, have, strict=True)
    )
    assert same_first >= 2
    assert all(len(h.outputs[0].token_ids) == 8 for h in have)
    assert torch.float8_e4m3fn in {p.dtype for p in model.parameters()}

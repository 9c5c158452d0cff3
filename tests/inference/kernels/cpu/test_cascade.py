"""Prefill chunks after a shared cached prefix, through the cascade, against the torch path."""

from __future__ import annotations

import pytest
import torch

import inference.kernels.cpu.backend as backend_module
from inference.kernels.attention import TorchAttentionBackend
from inference.kernels.cpu.backend import (
    CASCADE_MIN_TOKENS,
    CpuAttentionBackend,
    build_cpu_metadata,
)
from inference.kernels.cpu.build import load_kv_store, load_paged_decode
from inference.kernels.cpu.cascade import fold
from inference.kernels.kv_cache import FP8_KV_DTYPE

from ..paged_case import assert_close_bf16, make_case

CPU = torch.device("cpu")

POOLS = {"bf16": torch.bfloat16, "fp8": FP8_KV_DTYPE, "f32": torch.float32}


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("group", [1, 3])
@pytest.mark.parametrize("head_dim", [64, 40])
def test_chunks_after_a_shared_prefix_match_the_torch_path(
    head_dim: int, group: int, pool: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three chunks right after 5 shared blocks, a chunk with more of its own context
    cached and a decode, in the same step. With 64-wide heads the chunk kernel takes every
    chunk; with 40 (not a multiple of 16), on a processor whose build has no chunk kernel
    (no AVX-512), or in bf16 where torch's attention uses AMX, the three take the cascade."""
    contexts = [(80, 20), (80, 33), (80, 16), (95, 10), (100, 1)]
    dtype = torch.float32 if pool == "f32" else torch.bfloat16
    case = make_case(
        contexts,
        group=group,
        num_kv_heads=2,
        head_dim=head_dim,
        block_size=16,
        dtype=dtype,
        pool_dtype=POOLS[pool],
        shared_blocks=5,
    )
    assert build_cpu_metadata(case.layout, CPU).prefill_shared_blocks == 5
    assert CASCADE_MIN_TOKENS <= 5 * 16
    scale = head_dim**-0.5
    expected = case.attend(TorchAttentionBackend(), scale)
    cascades: list[int] = []
    real = backend_module.shared_prefix_attention

    def counted(queries: torch.Tensor, *args: object) -> tuple[torch.Tensor, torch.Tensor]:
        cascades.append(queries.shape[0])
        return real(queries, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(backend_module, "shared_prefix_attention", counted)
    library = load_paged_decode()
    chosen = CpuAttentionBackend(library, load_kv_store())
    actual = case.attend(chosen, scale)
    bf16_in_torch = chosen.bf16_prefill_in_torch and dtype == torch.bfloat16
    kernel_takes = head_dim == 64 and library.paged_prefill_available() and not bf16_in_torch
    assert cascades == ([] if kernel_takes else [20 + 33 + 16])
    if pool == "f32":
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    else:
        assert_close_bf16(actual, expected)


def test_chunks_sharing_nothing_take_the_chunk_kernel() -> None:
    case = make_case(
        [(40, 20), (40, 20)],
        group=2,
        num_kv_heads=1,
        head_dim=16,
        block_size=16,
        dtype=torch.float32,
        pool_dtype=torch.float32,
    )
    assert build_cpu_metadata(case.layout, CPU).prefill_shared_blocks == 0
    scale = 0.25
    expected = case.attend(TorchAttentionBackend(), scale)
    actual = case.attend(CpuAttentionBackend(load_paged_decode(), load_kv_store()), scale)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_fold_is_softmax_over_the_union() -> None:
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(5, 3, 40, generator=gen)  # (queries, heads, keys)
    values = torch.randn(40, 8, generator=gen)
    whole = scores.softmax(-1) @ values

    def part(keys: slice) -> tuple[torch.Tensor, torch.Tensor]:
        return scores[..., keys].softmax(-1) @ values[keys], scores[..., keys].logsumexp(-1)

    folded = fold(*part(slice(0, 25)), *part(slice(25, 40)))
    torch.testing.assert_close(folded, whole, rtol=1e-5, atol=1e-6)

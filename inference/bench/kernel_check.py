"""The Triton kernels against the torch path on one device, on random ragged paged batches.

The CPU tests (tests/inference/kernels/triton/) run the same comparison under triton's
interpreter; this module is what `scripts/gpu_check.sh` runs on a real GPU, where the
compiled kernels (tensor-core dots, the GPU's own float8 rounding) are what is checked.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Callable
from typing import Any

import torch

from inference.kernels.attention import TorchAttentionBackend, paged_layout
from inference.kernels.kv_cache import FP8_KV_DTYPE, KVCache

BF16_TOLERANCE = 2e-2  # max error over the output's largest magnitude
FP8_SCALES = (0.05, 0.04)


def _contexts(block_size: int, seed: int) -> list[tuple[int, int]]:
    """(cached, new) per sequence: block-boundary cases plus a few random ones."""
    b = block_size
    fixed = [(0, b + 1), (b - 1, 1), (b, 1), (b + 3, b - 3), (3 * b + 5, 1), (0, 5)]
    gen = torch.Generator().manual_seed(seed)
    extra = [
        (
            int(torch.randint(0, 300, (1,), generator=gen)),
            int(torch.randint(1, 80, (1,), generator=gen)),
        )
        for _ in range(3)
    ]
    return fixed + extra


def check_case(
    device: torch.device,
    *,
    group: int,
    block_size: int,
    fp8: bool,
    head_dim: int,
    num_kv_heads: int,
    seed: int,
    contexts: list[tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """Write K/V with both backends, attend with both, and report the differences."""
    from inference.kernels.triton.backend import TritonAttentionBackend

    contexts = contexts or _contexts(block_size, seed)
    gen = torch.Generator().manual_seed(seed)
    dtype = torch.bfloat16
    pool_dtype = FP8_KV_DTYPE if fp8 else dtype
    num_blocks = sum(-(-(c + n) // block_size) for c, n in contexts) + 2
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_scale, v_scale = FP8_SCALES if fp8 else (1.0, 1.0)

    def new_cache() -> KVCache:
        pools = [torch.zeros(shape, dtype=pool_dtype, device=device) for _ in range(2)]
        return KVCache(*pools, k_scale=k_scale, v_scale=v_scale)

    expected_cache, triton_cache = new_cache(), new_cache()
    torch_path, triton = TorchAttentionBackend(), TritonAttentionBackend()
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables, new_slots, starts, seq_lens, queries = [], [], [0], [], []
    for cached, new in contexts:
        length = cached + new
        table = [order.pop() for _ in range(-(-length // block_size))]
        k, v = (
            torch.randn(length, num_kv_heads, head_dim, generator=gen).to(device, dtype)
            for _ in range(2)
        )
        slots = torch.tensor(
            [table[p // block_size] * block_size + p % block_size for p in range(length)],
            device=device,
        )
        torch_path.write_kv(k, v, expected_cache, slots)
        triton.write_kv(k, v, triton_cache, slots)
        queries.append(torch.randn(new, num_kv_heads * group, head_dim, generator=gen))
        tables.append(table)
        new_slots.append(slots[cached:])
        starts.append(starts[-1] + new)
        seq_lens.append(length)
    block_tables = torch.zeros(len(tables), max(map(len, tables)), dtype=torch.int64)
    for row, table in enumerate(tables):
        block_tables[row, : len(table)] = torch.tensor(table)
    layout = paged_layout(torch.cat(new_slots).cpu(), starts, seq_lens, block_tables, block_size)
    query = torch.cat(queries).to(device, dtype)
    scale = head_dim**-0.5
    # Counted in integers: a float mean of millions of ones on CUDA is not exactly 1.0.
    unequal = [
        int((got.view(torch.uint8) != want.view(torch.uint8)).sum())
        for got, want in zip(triton_cache, expected_cache, strict=True)
    ]
    written = [
        1.0 - count / pool.numel() for count, pool in zip(unequal, triton_cache, strict=True)
    ]
    differing = write_differences(triton_cache, expected_cache)
    before = [pool.clone() for pool in expected_cache]
    # Attention is compared on one cache, so that a write difference does not hide in it.
    torch_meta = torch_path.build_metadata(layout, torch.device(device))
    triton_meta = triton.build_metadata(layout, torch.device(device))
    expected = torch_path.forward(query, expected_cache, torch_meta, scale).float()
    actual = triton.forward(query, expected_cache, triton_meta, scale).float()
    error = float((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-6))
    # Attention only reads the pools: a byte changed here is a write out of bounds.
    untouched = all(
        bool(torch.equal(pool.view(torch.uint8), kept.view(torch.uint8)))
        for pool, kept in zip(expected_cache, before, strict=True)
    )
    result = {
        "case": f"group={group} block={block_size} kv={'fp8' if fp8 else 'bf16'} d={head_dim}",
        "seqs": len(contexts),
        "tokens": starts[-1],
        "rel_error": round(error, 6),
        "kv_bytes_equal": round(min(written), 4),
        "pools_untouched_by_attention": untouched,
        # Both divide in float32 and round once: every byte written must match.
        "ok": error < BF16_TOLERANCE and not any(unequal) and untouched,
    }
    if differing:
        result["kv_differences"] = differing
    return result


def write_differences(
    got: tuple[torch.Tensor, torch.Tensor], want: tuple[torch.Tensor, torch.Tensor], limit: int = 4
) -> list[dict[str, Any]]:
    """The first few values the two writes stored differently, per pool: where and what."""
    found: list[dict[str, Any]] = []
    for name, a, b in zip(("key", "value"), got, want, strict=True):
        unequal = (a.view(torch.uint8) != b.view(torch.uint8)).nonzero()
        for index in unequal[:limit].tolist():
            found.append(
                {
                    "pool": name,
                    "count": int(unequal.shape[0]),
                    "block_offset_head_dim": index,
                    "triton": float(a[tuple(index)].float()),
                    "torch": float(b[tuple(index)].float()),
                }
            )
    return found


def check_grouped_fp8_matmul(
    device: torch.device, *, tokens: int, out_features: int, in_features: int, group_size: int
) -> dict[str, Any]:
    """The grouped FP8 matmul (bf16 activations) against its torch path."""
    from inference.kernels.triton.fp8_matmul import grouped_fp8_matmul
    from inference.model.quant.fp8_math import grouped_fp8_linear, quantize_weight_fp8

    gen = torch.Generator().manual_seed(tokens + out_features)
    weight = torch.randn(out_features, in_features, generator=gen).to(device)
    q, scale = quantize_weight_fp8(weight, group_size)
    x = torch.randn(tokens, in_features, generator=gen).to(device, torch.bfloat16)
    expected = grouped_fp8_linear(x, q, scale, group_size).float()
    actual = grouped_fp8_matmul(x, q, scale, group_size).float()
    error = float((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-6))
    return {
        "case": f"fp8 matmul {out_features}x{in_features} g={group_size}",
        "seqs": 0,
        "tokens": tokens,
        "rel_error": round(error, 6),
        "kv_bytes_equal": None,
        "ok": error < BF16_TOLERANCE,
    }


def run_kernel_checks(device: torch.device, *, quick: bool) -> list[dict[str, Any]]:
    """GQA 1, 3 and 8 x block sizes 16 and 32 x bf16 and fp8 KV, and the grouped FP8
    matmul at decode and prefill sizes (quick: a tiny subset). A case that raises (a
    kernel that does not compile, say) is reported as failed with its error; the rest run.
    """
    if quick:
        cases = [
            _run(check_grouped_fp8_matmul, device, tokens=3, out_features=40, in_features=48,
                 group_size=16)
        ]  # fmt: skip
        for fp8 in (False, True):
            contexts = [(0, 17), (15, 1), (16, 1), (19, 5)]
            cases.append(
                _run(check_case, device, group=3, block_size=16, fp8=fp8, head_dim=16,
                     num_kv_heads=1, seed=1, contexts=contexts)
            )  # fmt: skip
        return cases
    results = []
    for seed, (group, block_size, fp8) in enumerate(
        itertools.product((1, 3, 8), (16, 32), (False, True))
    ):
        results.append(
            _run(
                check_case,
                device,
                group=group,
                block_size=block_size,
                fp8=fp8,
                head_dim=128 if seed % 2 else 64,
                num_kv_heads=8 if group == 1 else 4,
                seed=seed,
            )
        )
    for tokens, (out_features, in_features, group_size) in itertools.product(
        (1, 300), ((49152, 576, 16), (4096, 2048, 128), (1000, 200, 128))
    ):
        results.append(
            _run(
                check_grouped_fp8_matmul,
                device,
                tokens=tokens,
                out_features=out_features,
                in_features=in_features,
                group_size=group_size,
            )
        )
    return results


def _run(check: Callable[..., dict[str, Any]], device: torch.device, **case: Any) -> dict[str, Any]:
    """One check's result, or a failed one that names the case and the error."""
    try:
        return check(device, **case)
    except Exception as error:
        traceback.print_exc()
        described = ", ".join(f"{k}={v}" for k, v in case.items() if k != "contexts")
        return {
            "case": f"{check.__name__}({described})",
            "seqs": None,
            "tokens": None,
            "rel_error": None,
            "kv_bytes_equal": None,
            "ok": False,
            "error": f"{type(error).__name__}: {error}"[:2000],
        }

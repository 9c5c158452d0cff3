"""``x @ W.T`` for an e4m3 weight with a scale per row and group of input columns.

The weight of a grouped `Fp8Linear` (the vocabulary-sized output projection, block-wise
checkpoints) is (N, K) e4m3 with float32 scales (N, ceil(K / GROUP_K)). Dequantizing it
in torch before the matmul would read and write it several times over in wider types; here
each program reads its tile of e4m3 bytes once, scales it in registers and multiplies on
the tensor cores in the activations' dtype, accumulating in float32.

One program computes one (BLOCK_M, BLOCK_N) tile of the output; the K loop runs over
BLOCK_K columns, each column's scale read from its group (any group size, ragged last
group included). The dequantized tile is rounded to the activations' dtype before the
dot, as the torch path (`grouped_fp8_linear`) rounds the dequantized weight.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inference.kernels.triton.decode_attention import dot_operands


@triton.jit
def _round_to_bf16(x):
    """Round float32 ``x`` to the nearest bfloat16 value (ties to even), kept in float32.

    Done by hand so that the cast after it is exact: triton's interpreter truncates a
    float32 -> bfloat16 cast where a GPU rounds to nearest.
    """
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536  # keep the top 16 bits
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _grouped_fp8_matmul_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_sn,
    stride_ym,
    GROUP_K: tl.constexpr,
    GROUPS_PER_TILE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    IS_BF16: tl.constexpr,
):
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = m < M
    n_mask = n < N
    rows = m.to(tl.int64)
    cols = n.to(tl.int64)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_mask = k < K
        x = tl.load(
            x_ptr + rows[:, None] * stride_xm + k[None, :],
            mask=m_mask[:, None] & k_mask[None, :],
            other=0.0,
        )
        w_mask = n_mask[:, None] & k_mask[None, :]
        w = tl.load(w_ptr + cols[:, None] * stride_wn + k[None, :], mask=w_mask, other=0.0)
        if GROUPS_PER_TILE > 0:
            # Whole groups in the tile: their (BLOCK_N, GROUPS_PER_TILE) scales, one load
            # each, spread over their columns in registers.
            g = k0 // GROUP_K + tl.arange(0, GROUPS_PER_TILE)
            scale = tl.load(
                s_ptr + cols[:, None] * stride_sn + g[None, :],
                mask=n_mask[:, None] & (g * GROUP_K < K)[None, :],
                other=0.0,
            )
            w = tl.reshape(w.to(tl.float32), (BLOCK_N, GROUPS_PER_TILE, GROUP_K))
            w = tl.reshape(w * scale[:, :, None], (BLOCK_N, BLOCK_K))
        else:  # a group wider than the tile: each column's scale read by its index
            scale = tl.load(
                s_ptr + cols[:, None] * stride_sn + (k // GROUP_K)[None, :],
                mask=w_mask,
                other=0.0,
            )
            w = w.to(tl.float32) * scale
        if IS_BF16:
            w = _round_to_bf16(w)
        w = w.to(x_ptr.dtype.element_ty).to(DOT_DTYPE)
        acc += tl.dot(x.to(DOT_DTYPE), tl.trans(w), input_precision=DOT_PRECISION)
    tl.store(
        y_ptr + rows[:, None] * stride_ym + n[None, :],
        acc.to(y_ptr.dtype.element_ty),
        mask=m_mask[:, None] & n_mask[None, :],
    )


def groups_per_tile(group_size: int, block_k: int) -> int:
    """How many whole groups a K tile holds when they tile it exactly, else 0: the kernel
    then reads each column's scale. Both counts are powers of two (the kernel reshapes
    the tile into groups, and triton's shapes are powers of two)."""
    if group_size > block_k or block_k % group_size or group_size & (group_size - 1):
        return 0
    count = block_k // group_size
    return count if count & (count - 1) == 0 else 0


def default_tiles(group_size: int, rows: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K) for `rows` tokens, from timings on an H200
    (docs/benchmarks/gpu-fp8-grouped-matmul-h200-2026-12-04.json).

    16 token rows (the least a dot takes) for decode-sized batches, 64 for prefills, where
    each weight tile is then read once per 64 tokens. K tiles hold whole groups where a
    group is a power of two up to 256 columns, so that scales are read once per group (a
    group of 128 read column by column took 58 us against 8 for a 4096x2048 weight at
    one token); then 32 output rows a tile at decode sizes, 64 otherwise.
    """
    block_m = 16 if rows <= 16 else 64
    block_k = 64
    if 64 < group_size <= 256 and group_size & (group_size - 1) == 0:
        block_k = group_size
    block_n = 32 if block_k > 64 and rows <= 64 else 64
    return block_m, block_n, block_k


def grouped_fp8_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    group_size: int,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
) -> torch.Tensor:
    """x (..., K) in float32/float16/bfloat16, weight (N, K) e4m3, scale (N, ceil(K / group))
    float32 -> (..., N) in x's dtype. Tiles left as None are `default_tiles`."""
    if weight.dtype != torch.float8_e4m3fn or weight.dim() != 2:
        raise ValueError(f"weight must be 2-D float8_e4m3fn, got {weight.dtype} {weight.dim()}-D")
    num_out, k_dim = weight.shape
    groups = triton.cdiv(k_dim, group_size)
    if scale.shape != (num_out, groups) or scale.dtype != torch.float32:
        raise ValueError(
            f"scale must be float32 ({num_out}, {groups}), got {scale.dtype} {tuple(scale.shape)}"
        )
    if x.shape[-1] != k_dim:
        raise ValueError(f"x has {x.shape[-1]} features, the weight {k_dim}")
    if weight.stride(1) != 1 or scale.stride(1) != 1:
        raise ValueError("weight and scale rows must be contiguous")
    dot_dtype, dot_precision = dot_operands(x)
    x2 = x.reshape(-1, k_dim)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    out = torch.empty(x2.shape[0], num_out, dtype=x.dtype, device=x.device)
    default_m, default_n, default_k = default_tiles(group_size, x2.shape[0])
    block_m, block_n, block_k = block_m or default_m, block_n or default_n, block_k or default_k
    if x2.shape[0] > 0:
        grid = (triton.cdiv(x2.shape[0], block_m), triton.cdiv(num_out, block_n))
        _grouped_fp8_matmul_kernel[grid](
            x2,
            weight,
            scale,
            out,
            x2.shape[0],
            num_out,
            k_dim,
            x2.stride(0),
            weight.stride(0),
            scale.stride(0),
            out.stride(0),
            GROUP_K=group_size,
            GROUPS_PER_TILE=groups_per_tile(group_size, block_k),
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            BLOCK_K=block_k,
            DOT_DTYPE=dot_dtype,
            DOT_PRECISION=dot_precision,
            IS_BF16=x.dtype == torch.bfloat16,
        )
    return out.reshape(*x.shape[:-1], num_out)

"""Attention for prefill chunks over a cached prefix, read through the block table (varlen).

A sequence's chunk is its last ``qlen`` context positions; its queries attend causally to
the chunk and to everything before it (the cached prefix, or earlier chunks of the same
prompt), all read from the paged pools. Its own keys were written by `reshape_and_cache`
before this runs, so the chunk needs no separate K/V input.

One program takes BLOCK_Q query tokens of one sequence for all the query heads of one KV
head (GQA: the group's heads are rows of the same tile, so each K/V tile is loaded once
for the group) and walks the keys up to its last query's position in tiles of BLOCK_N with
an online softmax (FlashAttention 2 style); keys past a query's position are masked.
FP8 pools are read as in `decode_attention`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inference.kernels.triton.decode_attention import LOG2E, dot_operands


@triton.jit
def _chunk_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    query_start_ptr,
    seq_idx_ptr,
    out_ptr,
    k_scale_ptr,
    v_scale_ptr,
    softmax_scale,
    block_size,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_bt,
    stride_cb,
    stride_cs,
    stride_ch,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_FP8: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    i = tl.program_id(0)  # index among the chunks
    tile = tl.program_id(1)
    kv_head = tl.program_id(2)
    seq = tl.load(seq_idx_ptr + i).to(tl.int64)
    q_start = tl.load(query_start_ptr + seq)
    q_len = tl.load(query_start_ptr + seq + 1) - q_start
    if tile * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    prefix = seq_len - q_len

    # Row r of the tile is query token tile * BLOCK_Q + r // BLOCK_G of the chunk, for query
    # head r % BLOCK_G of this KV head's group: the group shares every K/V tile loaded.
    r = tl.arange(0, BLOCK_Q * BLOCK_G)
    token = tile * BLOCK_Q + r // BLOCK_G
    g = r % BLOCK_G
    d = tl.arange(0, BLOCK_D)
    r_mask = (token < q_len) & (g < GROUP)
    d_mask = d < HEAD_DIM
    rows = (q_start + token).to(tl.int64)
    heads = kv_head * GROUP + g
    q_offsets = rows[:, None] * stride_qt + heads[:, None] * stride_qh + d[None, :]
    q = tl.load(q_ptr + q_offsets, mask=r_mask[:, None] & d_mask[None, :], other=0.0).to(DOT_DTYPE)
    query_pos = prefix + token
    qk_scale = softmax_scale * LOG2E
    if IS_FP8:
        qk_scale = qk_scale * tl.load(k_scale_ptr)

    running_max = tl.full([BLOCK_Q * BLOCK_G], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([BLOCK_Q * BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q * BLOCK_G, BLOCK_D], dtype=tl.float32)
    table = block_tables_ptr + seq * stride_bt
    kv_end = tl.minimum(seq_len, prefix + (tile + 1) * BLOCK_Q)  # past the tile's last query
    for n0 in range(0, kv_end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        n_mask = n < kv_end
        block = tl.load(table + n // block_size, mask=n_mask, other=0).to(tl.int64)
        slot = block * stride_cb + (n % block_size) * stride_cs + kv_head * stride_ch
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(k_cache_ptr + slot[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_cache_ptr + slot[:, None] + d[None, :], mask=kv_mask, other=0.0)
        k = k.to(DOT_DTYPE)
        v = v.to(DOT_DTYPE)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        visible = n_mask[None, :] & (n[None, :] <= query_pos[:, None])
        scores = tl.where(visible, scores, float("-inf"))
        # Every real query sees key 0 in the first tile, so its max is finite from then on.
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        correction = tl.exp2(running_max - new_max)
        probs = tl.exp2(scores - new_max[:, None])
        running_sum = running_sum * correction + tl.sum(probs, axis=1)
        acc = acc * correction[:, None] + tl.dot(
            probs.to(DOT_DTYPE), v, input_precision=DOT_PRECISION
        )
        running_max = new_max

    out = acc / tl.maximum(running_sum, 1e-30)[:, None]  # padding rows: 0, not 0 / 0
    if IS_FP8:
        out = out * tl.load(v_scale_ptr)
    tl.store(
        out_ptr + rows[:, None] * stride_ot + heads[:, None] * stride_oh + d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=r_mask[:, None] & d_mask[None, :],
    )


def chunk_attention(
    query: torch.Tensor,
    out: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_idx: torch.Tensor,
    softmax_scale: float,
    *,
    max_query_len: int,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    block_m: int = 64,
    block_n: int = 64,
) -> None:
    """Attend the chunks of sequences ``seq_idx`` and write their rows of ``out`` (T, Hq, D).

    Sequence ``s`` owns query rows ``query_start_loc[s] : query_start_loc[s + 1]``, the last
    positions of its ``seq_lens[s]``-token context; ``max_query_len`` bounds those lengths.
    """
    num_chunks = seq_idx.shape[0]
    if num_chunks == 0:
        return
    num_heads, head_dim = query.shape[1], query.shape[2]
    num_kv_heads, block_size = key_cache.shape[2], key_cache.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads do not group over {num_kv_heads}")
    if query.stride(-1) != 1 or out.stride(-1) != 1 or not key_cache.is_contiguous():
        raise ValueError("query, out and the pools must be contiguous in head_dim")
    is_fp8 = key_cache.dtype == torch.float8_e4m3fn
    if is_fp8 and (k_scale is None or v_scale is None):
        raise ValueError("an FP8 KV pool needs k_scale and v_scale")
    k_scale_arg = k_scale if k_scale is not None else seq_lens
    v_scale_arg = v_scale if v_scale is not None else seq_lens
    dot_dtype, dot_precision = dot_operands(query)
    group = num_heads // num_kv_heads
    block_g = triton.next_power_of_2(group)
    block_q = max(block_m // block_g, 1)  # tokens per tile: block_m rows in all
    grid = (num_chunks, triton.cdiv(max_query_len, block_q), num_kv_heads)
    _chunk_kernel[grid](
        query,
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        query_start_loc,
        seq_idx,
        out,
        k_scale_arg,
        v_scale_arg,
        softmax_scale,
        block_size,
        query.stride(0),
        query.stride(1),
        out.stride(0),
        out.stride(1),
        block_tables.stride(0),
        key_cache.stride(0),
        key_cache.stride(1),
        key_cache.stride(2),
        GROUP=group,
        HEAD_DIM=head_dim,
        BLOCK_D=triton.next_power_of_2(head_dim),
        BLOCK_G=block_g,
        BLOCK_Q=block_q,
        BLOCK_N=block_n,
        IS_FP8=is_fp8,
        DOT_DTYPE=dot_dtype,
        DOT_PRECISION=dot_precision,
    )

"""Paged attention for decodes: one query token per sequence, K/V read through the block table.

One program takes one sequence, one KV head and one split of the context. The query heads
that share the KV head (the GQA group) are the rows of one tile, so each key is loaded
once per group, and the scores are a small matmul. Keys and values are read token by token
from wherever their blocks lie in the pool (no gather copy). The softmax is online over
tiles of BLOCK_N tokens.

Long contexts at a small batch leave most of the GPU idle if one program walks the whole
context, so the context is cut into splits (flash-decoding): each split writes its
unnormalised output with its running max and sum, and a second kernel combines them. With
one split the first kernel writes the output itself. How many splits is planned for the
step's longest context; each sequence then cuts its own context into that many, in whole
tiles, so a short one still spreads over several programs. The number of splits is a runtime
argument, not a compile-time one: it changes with the batch and the longest context, and
each new value of a constexpr compiles the kernel again (on a GPU, a stall of a second or
so in the middle of serving); only whether there are splits, and the combining kernel's
tile (a power of two), are compiled in.

FP8 pools: keys and values are upcast from e4m3 (exact in bf16); the key scale folds into
the softmax scale and the value scale into the output.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # softmax in base 2: exp2 is one instruction


@triton.jit
def _decode_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    seq_idx_ptr,
    rows_ptr,
    out_ptr,
    part_acc_ptr,
    part_max_ptr,
    part_sum_ptr,
    k_scale_ptr,
    v_scale_ptr,
    softmax_scale,
    num_splits,
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
    BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
    IS_FP8: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    i = tl.program_id(0)  # index among the decodes
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq = tl.load(seq_idx_ptr + i).to(tl.int64)
    row = tl.load(rows_ptr + i).to(tl.int64)
    seq_len = tl.load(seq_lens_ptr + seq)
    # Each sequence spreads its own context over the splits, whole tiles each (see
    # `split_length`): a short context next to a long one, or under a CUDA graph planned
    # for the longest context there may be, still uses every split it can.
    split_len = tl.cdiv(tl.cdiv(seq_len, BLOCK_N), num_splits) * BLOCK_N
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    g_mask = g < GROUP
    d_mask = d < HEAD_DIM
    heads = kv_head * GROUP + g
    q = tl.load(
        q_ptr + row * stride_qt + heads[:, None] * stride_qh + d[None, :],
        mask=g_mask[:, None] & d_mask[None, :],
        other=0.0,
    ).to(DOT_DTYPE)
    qk_scale = softmax_scale * LOG2E  # exp2 below
    if IS_FP8:
        qk_scale = qk_scale * tl.load(k_scale_ptr)

    running_max = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    table = block_tables_ptr + seq * stride_bt
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        n_mask = n < end
        block = tl.load(table + n // block_size, mask=n_mask, other=0).to(tl.int64)
        slot = block * stride_cb + (n % block_size) * stride_cs + kv_head * stride_ch
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(k_cache_ptr + slot[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_cache_ptr + slot[:, None] + d[None, :], mask=kv_mask, other=0.0)
        k = k.to(DOT_DTYPE)
        v = v.to(DOT_DTYPE)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        scores = tl.where(n_mask[None, :], scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        correction = tl.exp2(running_max - new_max)
        probs = tl.exp2(scores - new_max[:, None])
        running_sum = running_sum * correction + tl.sum(probs, axis=1)
        acc = acc * correction[:, None] + tl.dot(
            probs.to(DOT_DTYPE), v, input_precision=DOT_PRECISION
        )
        running_max = new_max

    out_mask = g_mask[:, None] & d_mask[None, :]
    if not SPLIT:
        out = acc / tl.maximum(running_sum, 1e-30)[:, None]  # an empty (padding) row gives 0
        if IS_FP8:
            out = out * tl.load(v_scale_ptr)
        tl.store(
            out_ptr + row * stride_ot + heads[:, None] * stride_oh + d[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=out_mask,
        )
    else:
        # Partials are (num_decodes, num_heads, num_splits[, BLOCK_D]) float32, contiguous.
        num_heads = tl.num_programs(1) * GROUP
        part = (i * num_heads + heads) * num_splits + split
        tl.store(part_max_ptr + part, running_max, mask=g_mask)
        tl.store(part_sum_ptr + part, running_sum, mask=g_mask)
        tl.store(part_acc_ptr + part[:, None] * BLOCK_D + d[None, :], acc, mask=out_mask)


@triton.jit
def _combine_splits_kernel(
    rows_ptr,
    out_ptr,
    part_acc_ptr,
    part_max_ptr,
    part_sum_ptr,
    v_scale_ptr,
    num_splits,
    stride_ot,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
    IS_FP8: tl.constexpr,
):
    i = tl.program_id(0)
    head = tl.program_id(1)
    row = tl.load(rows_ptr + i).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    s_mask = s < num_splits
    part = (i * tl.num_programs(1) + head) * num_splits + s
    split_max = tl.load(part_max_ptr + part, mask=s_mask, other=float("-inf"))
    split_sum = tl.load(part_sum_ptr + part, mask=s_mask, other=0.0)
    acc = tl.load(
        part_acc_ptr + part[:, None] * BLOCK_D + d[None, :], mask=s_mask[:, None], other=0.0
    )
    top = tl.max(split_max, axis=0)
    top = tl.where(top == float("-inf"), 0.0, top)  # every split empty: a padding row
    weight = tl.exp2(split_max - top)  # empty splits weigh 0
    total = tl.sum(split_sum * weight, axis=0)
    out = tl.sum(acc * weight[:, None], axis=0) / tl.maximum(total, 1e-30)
    if IS_FP8:
        out = out * tl.load(v_scale_ptr)
    tl.store(
        out_ptr + row * stride_ot + head * stride_oh + d,
        out.to(out_ptr.dtype.element_ty),
        mask=d < HEAD_DIM,
    )


_TL_DTYPES = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


def dot_operands(query: torch.Tensor) -> tuple[tl.dtype, str]:
    """(operand dtype, input precision) of the kernels' matmuls for queries like ``query``.

    float32 stays exact (no TF32). On a CPU tensor the kernel can only be running under
    the interpreter, whose dot multiplies bfloat16's raw bits; bf16 is taken through
    float32 there, while a GPU multiplies it on tensor cores.
    """
    if query.dtype not in _TL_DTYPES:
        raise ValueError(f"attention needs float32, float16 or bfloat16 queries, got {query.dtype}")
    if query.dtype == torch.float32 or (
        query.dtype == torch.bfloat16 and query.device.type != "cuda"
    ):
        return tl.float32, "ieee"
    return _TL_DTYPES[query.dtype], "tf32"


def plan_splits(
    num_decodes: int, num_kv_heads: int, max_seq_len: int, block_n: int, target_programs: int
) -> int:
    """How many splits: enough programs to fill the GPU, no more than the longest has tiles.

    ``target_programs`` is how many programs keep the device busy (a few per SM).
    """
    tiles = triton.cdiv(max(max_seq_len, 1), block_n)
    want = max(1, min(tiles, target_programs // max(num_decodes * num_kv_heads, 1)))
    # No split left empty for the longest context: its splits are `split_length` long.
    return triton.cdiv(tiles, triton.cdiv(tiles, want))


def split_length(seq_len: int, num_splits: int, block_n: int) -> int:
    """Tokens per split of one sequence's context, as the kernel computes it."""
    return triton.cdiv(triton.cdiv(seq_len, block_n), num_splits) * block_n


def paged_decode_attention(
    query: torch.Tensor,
    out: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    seq_idx: torch.Tensor,
    rows: torch.Tensor,
    softmax_scale: float,
    *,
    max_seq_len: int,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    block_n: int = 64,
    target_programs: int = 512,
) -> None:
    """Attend the decode rows of ``query`` (T, Hq, D) and write them into ``out`` (T, Hq, D).

    Decode ``i`` is sequence ``seq_idx[i]`` of the batch (its row of ``block_tables`` and
    ``seq_lens``, whose context it attends in full) and token row ``rows[i]`` of query/out.
    ``max_seq_len`` bounds every decode's context: it decides how many splits there are (a
    CUDA graph passes the largest it may ever see), and each decode spreads its own context
    over them. A sequence of length 0 gets zeros.
    """
    num_decodes = seq_idx.shape[0]
    if num_decodes == 0:
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
    group = num_heads // num_kv_heads
    block_d = triton.next_power_of_2(head_dim)
    dot_dtype, dot_precision = dot_operands(query)
    num_splits = plan_splits(num_decodes, num_kv_heads, max_seq_len, block_n, target_programs)
    if num_splits > 1:
        part_max = torch.empty(
            num_decodes, num_heads, num_splits, dtype=torch.float32, device=query.device
        )
        part_sum = torch.empty_like(part_max)
        part_acc = torch.empty(
            num_decodes, num_heads, num_splits, block_d, dtype=torch.float32, device=query.device
        )
    else:
        part_max = part_sum = part_acc = out  # never touched with one split
    k_scale_arg = k_scale if k_scale is not None else seq_lens
    v_scale_arg = v_scale if v_scale is not None else seq_lens
    _decode_kernel[(num_decodes, num_kv_heads, num_splits)](
        query,
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        seq_idx,
        rows,
        out,
        part_acc,
        part_max,
        part_sum,
        k_scale_arg,
        v_scale_arg,
        softmax_scale,
        num_splits,
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
        BLOCK_G=max(16, triton.next_power_of_2(group)),  # tl.dot wants 16 rows or more
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_N=block_n,
        SPLIT=num_splits > 1,
        IS_FP8=is_fp8,
        DOT_DTYPE=dot_dtype,
        DOT_PRECISION=dot_precision,
    )
    if num_splits > 1:
        _combine_splits_kernel[(num_decodes, num_heads)](
            rows,
            out,
            part_acc,
            part_max,
            part_sum,
            v_scale_arg,
            num_splits,
            out.stride(0),
            out.stride(1),
            HEAD_DIM=head_dim,
            BLOCK_D=block_d,
            BLOCK_S=triton.next_power_of_2(num_splits),
            IS_FP8=is_fp8,
        )

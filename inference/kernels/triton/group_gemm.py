"""``x @ W.T`` for a group-quantized weight (`inference/model/quant/group_math.py`) on CUDA.

The weight stays packed: each program reads its tile of 4- or 8-bit codes and the tile's
groups' float16 scales and offsets once, widens them in registers to ``scale * code +
offset`` in float32 (exact: a code times a float16 scale has at most 19 significant bits),
rounds to the activations' dtype as the torch path's `dequantize(weight, x.dtype)` does,
and multiplies on the tensor cores with a float32 accumulator. A bf16 layer therefore
reads a quarter (4-bit) or half (8-bit) of the bytes its unquantized weight would.

4-bit blocks keep llama.cpp's nibble order (byte ``i`` of a 16-byte block: column ``i``
low, ``16 + i`` high). Rather than interleave the nibbles back into column order, the
kernel permutes K: the low nibbles of a tile's bytes meet the activations of their
columns in one dot, the high nibbles in a second. Groups are whole multiples of 32
columns, so a group's bytes are contiguous and a tile of either half splits into whole
groups (or lies inside one) the same way the tile of columns does.

A decode step has 1-16 rows of activations, so output tiles alone leave most of a GPU
idle (SmolLM2's 960x576 projection is 30 tiles of 32 rows). There K is split too
(`plan_split_k`): each split writes float32 partial sums and a second small kernel adds
them in a fixed order and rounds once, so results do not depend on timing (atomic adds
would). Larger batches run one plain tile per program over the whole of K.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inference.kernels.triton.decode_attention import dot_operands
from inference.kernels.triton.fp8_matmul import _round_to_bf16
from inference.model.quant.group_math import BLOCK, GroupQuantized, padded_cols

# Up to this many rows of activations (decode batches) K may be split across programs.
SPLIT_K_MAX_ROWS = 16
# At most this many splits: past it the partial sums cost more than the parallelism pays.
MAX_SPLIT_K = 16
# Programs per multiprocessor that keep a GPU's memory system busy on a small layer.
PROGRAMS_PER_SM = 4
# Under the interpreter (no GPU) a few programs are plenty.
CPU_TARGET_PROGRAMS = 8


@triton.jit
def _widen(codes, scale, offset, BLOCK_N: tl.constexpr, GROUPS: tl.constexpr, WIDTH: tl.constexpr):
    """Codes (BLOCK_N, GROUPS * WIDTH) -> ``scale * code + offset`` in float32, each run
    of WIDTH columns taking its group's (BLOCK_N, GROUPS) scale and offset."""
    # code -> float exactly without an integer-to-float conversion (an eighth of the
    # float rate on Hopper): the code as the low mantissa bits of 2**23, minus 2**23.
    as_float = (codes.to(tl.int32) | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0
    w = tl.reshape(as_float, (BLOCK_N, GROUPS, WIDTH))
    w = w * scale[:, :, None] + offset[:, :, None]
    return tl.reshape(w, codes.shape)


@triton.jit
def _accumulate(acc, x_ptr, rows, m_mask, k, K, stride_xm, w, DOT_DTYPE: tl.constexpr,
                DOT_PRECISION: tl.constexpr, ROUND_BF16: tl.constexpr):  # fmt: skip
    """acc + x[rows, k] @ w.T, w (BLOCK_N, len(k)) float32 rounded to x's dtype first;
    columns k past K (the padding of the last block) read zero activations."""
    x = tl.load(
        x_ptr + rows[:, None] * stride_xm + k[None, :],
        mask=m_mask[:, None] & (k < K)[None, :],
        other=0.0,
    )
    if ROUND_BF16:  # under the interpreter, whose own cast truncates
        w = _round_to_bf16(w)
    w = w.to(x_ptr.dtype.element_ty).to(DOT_DTYPE)
    return acc + tl.dot(x.to(DOT_DTYPE), tl.trans(w), input_precision=DOT_PRECISION)


@triton.jit
def _group_gemm_kernel(
    x_ptr,
    c_ptr,
    s_ptr,
    o_ptr,
    y_ptr,
    M,
    N,
    K,
    code_bytes,
    num_groups,
    k_tiles,
    tiles_per_split,
    stride_xm,
    stride_cn,
    stride_sn,
    stride_on,
    stride_ym,
    stride_ysplit,
    BITS: tl.constexpr,
    GROUP: tl.constexpr,
    GROUPS_PER_TILE: tl.constexpr,
    WIDTH: tl.constexpr,  # columns a scale covers in a tile: BLOCK_K // GROUPS_PER_TILE
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    ROUND_BF16: tl.constexpr,  # round to bf16 by hand before the cast (interpreter)
):
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(2)
    m_mask = m < M
    n_mask = n < N
    rows = m.to(tl.int64)
    cols = n.to(tl.int64)
    first = split * tiles_per_split
    last = tl.minimum(first + tiles_per_split, k_tiles)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for tile in range(first, last):
        k0 = tile * BLOCK_K
        g = (k0 + tl.arange(0, GROUPS_PER_TILE) * WIDTH) // GROUP
        g_mask = n_mask[:, None] & (g < num_groups)[None, :]
        scale = tl.load(s_ptr + cols[:, None] * stride_sn + g[None, :], mask=g_mask, other=0.0)
        offset = tl.load(o_ptr + cols[:, None] * stride_on + g[None, :], mask=g_mask, other=0.0)
        scale = scale.to(tl.float32)
        offset = offset.to(tl.float32)
        if BITS == 4:
            j = tl.arange(0, BLOCK_K // 2)
            byte = k0 // 2 + j
            codes = tl.load(
                c_ptr + cols[:, None] * stride_cn + byte[None, :],
                mask=n_mask[:, None] & (byte < code_bytes)[None, :],
                other=0,
            )
            # Byte j of the tile holds column 32 * (j // 16) + j % 16 low, 16 more high.
            low_k = k0 + (j // 16) * 32 + j % 16
            w = _widen(codes & 15, scale, offset, BLOCK_N, GROUPS_PER_TILE, WIDTH // 2)
            acc = _accumulate(acc, x_ptr, rows, m_mask, low_k, K, stride_xm, w,
                              DOT_DTYPE, DOT_PRECISION, ROUND_BF16)  # fmt: skip
            w = _widen(codes >> 4, scale, offset, BLOCK_N, GROUPS_PER_TILE, WIDTH // 2)
            acc = _accumulate(acc, x_ptr, rows, m_mask, low_k + 16, K, stride_xm, w,
                              DOT_DTYPE, DOT_PRECISION, ROUND_BF16)  # fmt: skip
        else:
            k = k0 + tl.arange(0, BLOCK_K)
            codes = tl.load(
                c_ptr + cols[:, None] * stride_cn + k[None, :],
                mask=n_mask[:, None] & (k < code_bytes)[None, :],
                other=0,
            )
            w = _widen(codes, scale, offset, BLOCK_N, GROUPS_PER_TILE, WIDTH)
            acc = _accumulate(acc, x_ptr, rows, m_mask, k, K, stride_xm, w,
                              DOT_DTYPE, DOT_PRECISION, ROUND_BF16)  # fmt: skip
    # y is the output (one split) or this split's float32 partial sums.
    tl.store(
        y_ptr + split * stride_ysplit + rows[:, None] * stride_ym + n[None, :],
        acc.to(y_ptr.dtype.element_ty),
        mask=m_mask[:, None] & n_mask[None, :],
    )


@triton.jit
def _sum_splits_kernel(p_ptr, y_ptr, total, num_splits, BLOCK: tl.constexpr):
    """y (total,) = the sum over splits of p (num_splits, total), in split order."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < total
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in range(num_splits):
        acc += tl.load(p_ptr + s * total + i, mask=mask, other=0.0)
    tl.store(y_ptr + i, acc.to(y_ptr.dtype.element_ty), mask=mask)


def groups_per_tile(group_size: int, block_k: int) -> int:
    """Groups a K tile of ``block_k`` columns spans: several whole ones (a power of two of
    them: triton's shapes are), or 1 when the tile lies inside one group. ValueError for a
    tile that would cut a group elsewhere."""
    if block_k < BLOCK or block_k & (block_k - 1):
        raise ValueError(f"a K tile is a power of two of at least {BLOCK} columns, not {block_k}")
    if group_size % block_k == 0:
        return 1
    count = block_k // group_size
    if block_k % group_size or count & (count - 1):
        raise ValueError(f"a K tile of {block_k} columns does not hold groups of {group_size}")
    return count


def k_tile(group_size: int, want: int) -> int:
    """The widest K tile up to ``want`` that holds whole groups or lies inside one (32
    columns always does: groups are multiples of 32)."""
    block_k = want
    while block_k > BLOCK:
        try:
            groups_per_tile(group_size, block_k)
            return block_k
        except ValueError:
            block_k //= 2
    return BLOCK


def default_tiles(group_size: int, rows: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K) for ``rows`` tokens: 16 rows (the least a dot takes) and
    narrow 32-row weight tiles with long K tiles at decode sizes, as `fp8_gemv` found best
    on an H200; 64x64 tiles for prefills, where each weight tile serves 64 tokens. Not yet
    timed on a GPU for this kernel: `inference/bench/group_gemm_check.py` measures them."""
    if rows <= SPLIT_K_MAX_ROWS:
        return 16, 32, k_tile(group_size, 128)
    return 64, 64, k_tile(group_size, 64)


def plan_split_k(base_programs: int, k_tiles: int, target_programs: int) -> int:
    """Splits of K so that ``base_programs`` output tiles become about ``target_programs``
    programs, none of them empty (the count is then whatever the tiles per split give)."""
    want = max(1, min(MAX_SPLIT_K, k_tiles, target_programs // max(base_programs, 1)))
    return triton.cdiv(k_tiles, triton.cdiv(k_tiles, want))


def _target_programs(device: torch.device) -> int:
    if device.type == "cuda":
        return PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count
    return CPU_TARGET_PROGRAMS


def group_quant_matmul(
    x: torch.Tensor,
    weight: GroupQuantized,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    split_k: int | None = None,
) -> torch.Tensor:
    """x (..., cols) float32/float16/bfloat16 -> (..., rows) in x's dtype: ``x @ w.T`` for
    w = `dequantize(weight)`. Tiles left as None are `default_tiles`; ``split_k`` None
    plans the splits for up to SPLIT_K_MAX_ROWS rows (1: K whole, as for more rows)."""
    num_out, k_dim = weight.shape
    if x.shape[-1] != k_dim:
        raise ValueError(f"x has {x.shape[-1]} features, the weight {k_dim}")
    codes, scale, offset = weight.codes, weight.scale, weight.offset
    if codes.stride(1) != 1 or scale.stride(1) != 1 or offset.stride(1) != 1:
        raise ValueError("the codes, scales and offsets must have contiguous rows")
    dot_dtype, dot_precision = dot_operands(x)
    x2 = x.reshape(-1, k_dim)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    rows = x2.shape[0]
    out = torch.empty(rows, num_out, dtype=x.dtype, device=x.device)
    if rows == 0:
        return out.reshape(*x.shape[:-1], num_out)
    default_m, default_n, default_k = default_tiles(weight.group_size, rows)
    block_m, block_n, block_k = block_m or default_m, block_n or default_n, block_k or default_k
    per_tile = groups_per_tile(weight.group_size, block_k)
    k_tiles = triton.cdiv(padded_cols(k_dim), block_k)
    base = triton.cdiv(rows, block_m) * triton.cdiv(num_out, block_n)
    if split_k is None:
        split_k = 1
        if rows <= SPLIT_K_MAX_ROWS:
            split_k = plan_split_k(base, k_tiles, _target_programs(x.device))
    tiles_per_split = triton.cdiv(k_tiles, max(1, min(split_k, k_tiles)))
    split_k = triton.cdiv(k_tiles, tiles_per_split)
    target = out
    if split_k > 1:
        target = torch.empty(split_k, rows, num_out, dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(num_out, block_n), split_k)
    _group_gemm_kernel[grid](
        x2,
        codes,
        scale,
        offset,
        target,
        rows,
        num_out,
        k_dim,
        codes.shape[1],
        scale.shape[1],
        k_tiles,
        tiles_per_split,
        x2.stride(0),
        codes.stride(0),
        scale.stride(0),
        offset.stride(0),
        num_out,
        rows * num_out,
        BITS=weight.bits,
        GROUP=weight.group_size,
        GROUPS_PER_TILE=per_tile,
        WIDTH=block_k // per_tile,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        DOT_DTYPE=dot_dtype,
        DOT_PRECISION=dot_precision,
        # A GPU's cast rounds to nearest itself; by hand it took a sixth of the loop's
        # instructions (sm_90 PTX), which may bound this kernel (not yet timed).
        ROUND_BF16=x.dtype == torch.bfloat16 and x.device.type != "cuda",
    )
    if split_k > 1:
        total = rows * num_out
        _sum_splits_kernel[(triton.cdiv(total, 1024),)](target, out, total, split_k, BLOCK=1024)
    return out.reshape(*x.shape[:-1], num_out)

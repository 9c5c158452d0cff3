"""GGUF K-quants (Q4_K, Q5_K, Q6_K) repacked at load into group_math's layout.

A K-quant super-block holds 256 values of one row under a float16 ``d`` (and ``dmin``),
with a small integer scale per sub-block. Our layout has one float16 scale and offset per
32 columns, so each tensor is rewritten once, as it is read (a few uint8 arrays the size
of a chunk of its codes, never a float copy of the model):

- Q4_K, 8 sub-blocks of 32, ``w = d*sc*q - dmin*m`` with 6-bit sc, m and 4-bit q: 4-bit
  codes q (their nibbles reordered into our block), scale d*sc, offset -dmin*m;
- Q5_K, the same with 5-bit q: 8-bit codes q (0..31);
- Q6_K, 16 sub-blocks of 16, ``w = d*sc*(q - 32)`` with int8 sc and 6-bit q: two
  sub-blocks share one of our groups, so they are requantized to 8-bit codes under the
  larger sub-block's step: S = d*sc/4, offset -128*S. That sub-block's values are codes
  4*(q - 32) + 128, exact but for S's rounding; the other's land within S/2 (an eighth of
  the larger step). Min/max codes over the 32 values (`quantize_groups`) have the same
  worst case but leave no value exact: on real Q6_K tensors their RMS error was 17%
  larger (docs/engine.md). Q6_K builds a float32 copy of the rows it repacks.

A tensor is repacked a chunk of rows at a time as its layer copies it
(`gguf_quant.lazy_group_quantized`), so these copies are a chunk's, not a tensor's.

d*sc and dmin*m (and S) are rounded to float16: Q4_K and Q5_K values are within
2**-11 * (|d*sc*q| + |dmin*m|) of gguf's own dequantizing, not bit-exact.
"""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType, ReaderTensor

from inference.model.quant.group_math import BLOCK, GroupQuantized

SUPER_BLOCK = 256
# type -> (bits, bytes a super-block)
K_TYPES = {
    GGMLQuantizationType.Q4_K: (4, 144),
    GGMLQuantizationType.Q5_K: (8, 176),
    GGMLQuantizationType.Q6_K: (8, 210),
}


def super_blocks(tensor: ReaderTensor, block_bytes: int) -> tuple[np.ndarray, int]:
    """The tensor's bytes as (rows, super-blocks a row, block_bytes), and its columns."""
    cols, rows = (int(dim) for dim in tensor.shape.tolist())  # GGUF lists the fastest first
    if cols % SUPER_BLOCK:
        raise ValueError(
            f"GGUF tensor {tensor.name!r} has {cols} columns, not whole blocks "
            f"of {SUPER_BLOCK} (a K-quant row is whole super-blocks)"
        )
    data = np.asarray(tensor.data).view(np.uint8).reshape(-1)
    blocks = rows * (cols // SUPER_BLOCK)
    if data.size != blocks * block_bytes:
        raise ValueError(
            f"GGUF tensor {tensor.name!r} holds {data.size} bytes, not {blocks} blocks"
        )
    return data.reshape(rows, cols // SUPER_BLOCK, block_bytes), cols


def _half(raw: np.ndarray) -> np.ndarray:
    """Two bytes a block (rows, n, 2) -> their float16 as float32 (rows, n, 1)."""
    return np.ascontiguousarray(raw).view(np.float16).astype(np.float32)


def _scales_and_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K's 12 bytes (rows, n, 12) -> 6-bit sub-scales and minimums (rows, n, 8).

    Bytes 0-3 hold sub-blocks 0-3's scales and 4-7 their minimums in their low 6 bits;
    sub-blocks 4-7 keep their low 4 bits in bytes 8-11 (scale low nibble, minimum high)
    and their top 2 bits in the spare top bits of bytes 0-3 (scales) and 4-7 (minimums).
    """
    first, second, third = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    scales = np.concatenate([first & 0x3F, (third & 0x0F) | ((first >> 6) << 4)], axis=-1)
    mins = np.concatenate([second & 0x3F, (third >> 4) | ((second >> 6) << 4)], axis=-1)
    return scales, mins


def _to_float16(values: np.ndarray, name: str, what: str) -> torch.Tensor:
    """float32 (rows, n, k) -> float16 (rows, n*k); ValueError where float16 overflows."""
    rows = values.shape[0]
    with np.errstate(over="ignore"):  # refused just below
        halves = values.astype(np.float16).reshape(rows, -1)
    if not np.isfinite(halves).all():
        raise ValueError(f"GGUF tensor {name!r} has {what} beyond float16's range")
    return torch.from_numpy(halves)


def _scale_offset(raw: np.ndarray, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K/Q5_K's per-32 scale d*sc and offset -dmin*m (float32 products, as gguf)."""
    scales, mins = _scales_and_mins(raw[..., 4:16])
    scale = _half(raw[..., 0:2]) * scales.astype(np.float32)
    offset = -(_half(raw[..., 2:4]) * mins.astype(np.float32))
    return _to_float16(scale, name, "scales"), _to_float16(offset, name, "minimums")


def _nibble_codes(qs: np.ndarray) -> np.ndarray:
    """Q4_K's 128 bytes (rows, n, 128) -> our 4-bit codes (rows, n*128).

    Q4_K stores a super-block as 4 runs of 32 bytes: a run's low nibbles are one
    sub-block's 32 values in order, its high nibbles the next sub-block's. Our block is
    16 bytes, byte i holding column i (low) and column 16 + i (high).
    """
    runs = qs.reshape(*qs.shape[:2], 4, 2, 16)  # (rows, n, run, first/second half, 16)
    first, second = runs[..., 0, :], runs[..., 1, :]
    low = (first & 0x0F) | (second << 4)  # the run's low-nibble sub-block
    high = (first >> 4) | (second & 0xF0)  # its high-nibble one
    return np.stack([low, high], axis=3).reshape(qs.shape[0], -1)


def _low_nibbles_and_bits(qs: np.ndarray, qh: np.ndarray) -> np.ndarray:
    """Q5_K's 128 + 32 bytes -> 5-bit values (rows, n*256), one a byte, in column order.

    The low 4 bits are laid out as Q4_K's; bit j of qh's byte i is the fifth bit of
    sub-block j's value i.
    """
    runs = qs.reshape(*qs.shape[:2], 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(2, 1)
    low = (runs & 0x0F).reshape(*qs.shape[:2], 8, 32)
    fifth = (qh[:, :, None, :] >> np.arange(8, dtype=np.uint8).reshape(8, 1)) & 1
    return (low | (fifth << 4)).reshape(qs.shape[0], -1)


def _q6_values(raw: np.ndarray) -> np.ndarray:
    """Q6_K's 6-bit values minus 32 (rows, n, 16, 16) int8, sub-block by sub-block.

    Each half of a super-block (128 values) has 64 bytes of low nibbles (values 0-63 in
    the low nibbles, 64-127 in the high) and 32 bytes of top bits (two bits for each of
    values i, 32 + i, 64 + i, 96 + i in a byte i, lowest pair first).
    """
    rows, n = raw.shape[:2]
    nibbles = raw[..., 0:128].reshape(rows, n, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(2, 1)
    ql = (nibbles & 0x0F).reshape(rows, n, 2, 4, 32)
    shifts = np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)
    qh = (raw[..., 128:192].reshape(rows, n, 2, 1, 32) >> shifts) & 0x03
    centred = (ql | (qh << 4)).astype(np.int8) - np.int8(32)
    return centred.reshape(rows, n, 16, 16)


def _repack_q6_k(raw: np.ndarray, cols: int, name: str) -> GroupQuantized:
    rows, n = raw.shape[:2]
    sub_scales = raw[..., 192:208].view(np.int8).astype(np.float32)  # (rows, n, 16)
    step = _half(raw[..., 208:210]) * sub_scales  # d*sc, float32 as gguf computes it
    values = step[..., None] * _q6_values(raw).astype(np.float32)  # (rows, n, 16, 16)
    pairs = step.reshape(rows, n, 8, 2)
    # Each group of 32 takes its larger sub-block's step (sign kept) over 4; where the two
    # steps are opposite (s and -s), their values are the multiples -32s..32s, and over 2
    # keeps all of them within the 256 codes.
    larger = np.take_along_axis(pairs, np.abs(pairs).argmax(axis=-1)[..., None], axis=-1)
    opposite = (pairs[..., :1] == -pairs[..., 1:]) & (pairs[..., :1] != 0)
    with np.errstate(over="ignore"):  # refused just below
        scale = np.where(opposite, larger / 2, larger / 4).astype(np.float16)  # (rows, n, 8, 1)
    if not np.isfinite(scale).all():
        raise ValueError(f"GGUF tensor {name!r} has scales beyond float16's range")
    divisor = np.where(scale == 0, np.float32(1), scale.astype(np.float32))
    grouped = values.reshape(rows, n, 8, 32)
    codes = np.clip(np.rint(grouped / divisor) + 128, 0, 255).astype(np.uint8)
    offset = scale * np.float16(-128)  # a power of two times S: exact
    return GroupQuantized(
        torch.from_numpy(codes.reshape(rows, -1)),
        torch.from_numpy(np.ascontiguousarray(scale.reshape(rows, -1))),
        torch.from_numpy(np.ascontiguousarray(offset.reshape(rows, -1))),
        8,
        BLOCK,
        cols,
    )


def repack_k_rows(
    raw: np.ndarray, *, qtype: GGMLQuantizationType, cols: int, name: str
) -> GroupQuantized:
    """Some rows of a Q4_K/Q5_K/Q6_K matrix, their super-blocks (rows, n, bytes) as
    `super_blocks` views them, in our layout (group 32). Every step is row-local, so a
    tensor repacked a chunk of rows at a time is the tensor repacked whole."""
    bits = K_TYPES[qtype][0]
    if qtype == GGMLQuantizationType.Q6_K:
        return _repack_q6_k(raw, cols, name)
    scale, offset = _scale_offset(raw, name)
    if qtype == GGMLQuantizationType.Q4_K:
        codes = _nibble_codes(raw[..., 16:144])
    else:
        codes = _low_nibbles_and_bits(raw[..., 48:176], raw[..., 16:48])
    return GroupQuantized(torch.from_numpy(codes), scale, offset, bits, BLOCK, cols)

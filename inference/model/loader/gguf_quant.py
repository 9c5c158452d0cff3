"""GGUF matrices kept quantized: their blocks as `GroupQuantized` (group_math.py's layout).

A Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 block of 32 values is a float16 scale ``d`` (and for Q4_1 and
Q5_1 a float16 minimum ``m``) and its codes. Q4_0, Q4_1 and Q8_0 codes are already in our
layout, so no code is rewritten:

- Q4_0: ``d * (q - 8)``, q 4 bits: scale d, offset -8d;
- Q4_1: ``d * q + m``: scale d, offset m;
- Q8_0: ``d * q``, q a signed byte: code q + 128 (its top bit flipped), offset -128d;
- Q5_0 and Q5_1: as Q4_0 (offset -16d) and Q4_1, with a fifth bit per value in a 32-bit
  mask: widened to 8-bit codes (0..31).

Every offset is exact in float16 (a power of two times d), and ``scale * code + offset``
in float32 gives each value exactly as gguf's own dequantizing does. The K-quants (Q4_K,
Q5_K, Q6_K) are repacked, close but not bit-exact: gguf_kquant.py.

Every conversion is row-local, so a loader hands a layer `lazy_group_quantized`: the
tensor converted a chunk of rows at a time as the layer copies it from the file's map.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch
from gguf import GGMLQuantizationType, ReaderTensor

from inference.model.loader.gguf_kquant import K_TYPES, repack_k_rows, super_blocks
from inference.model.quant.group_lazy import LazyGroupQuantized
from inference.model.quant.group_math import BLOCK, GroupQuantized

Q = GGMLQuantizationType
# type -> (bits kept, bytes a block, whether a float16 minimum follows the scale)
BLOCK_TYPES = {
    Q.Q4_0: (4, 18, False),
    Q.Q4_1: (4, 20, True),
    Q.Q5_0: (8, 22, False),
    Q.Q5_1: (8, 24, True),
    Q.Q8_0: (8, 34, False),
}


def kept_format(tensor: ReaderTensor) -> tuple[int, int] | None:
    """(bits, group size) a tensor keeps when loaded quantized, or None (dequantized)."""
    qtype = GGMLQuantizationType(tensor.tensor_type)
    if len(tensor.shape) != 2:
        return None
    if qtype in BLOCK_TYPES:
        return BLOCK_TYPES[qtype][0], BLOCK
    if qtype in K_TYPES:
        return K_TYPES[qtype][0], BLOCK
    return None


def _fifth_bits(raw: np.ndarray, at: int) -> np.ndarray:
    """Q5_0/Q5_1's little-endian 32-bit mask at byte ``at`` -> bit i of value i, each
    shifted to 16 (rows, blocks, 32)."""
    mask = np.unpackbits(raw[:, :, at : at + 4], axis=2, bitorder="little")
    return mask << 4


def lazy_group_quantized(
    tensor: ReaderTensor, release: Callable[[int, int], None] | None = None
) -> LazyGroupQuantized:
    """The tensor in our layout, read from the file's map a chunk of rows at a time;
    ValueError (now, before any is read) for another type or a bad size. ``release(start,
    length)``: lets go of the file's bytes there once a chunk of them is copied."""
    qtype = GGMLQuantizationType(tensor.tensor_type)
    kept = kept_format(tensor)
    if kept is None:
        raise ValueError(f"GGUF tensor {tensor.name!r} ({qtype.name}) is not kept quantized")
    if qtype in K_TYPES:
        raw, cols = super_blocks(tensor, K_TYPES[qtype][1])
        convert = functools.partial(repack_k_rows, qtype=qtype, cols=cols, name=tensor.name)
    else:
        cols = int(tensor.shape[0])  # GGUF lists the fastest first
        raw = _blocks(tensor, cols)
        convert = functools.partial(_block_rows, qtype=qtype, cols=cols)
    row_bytes = raw.shape[1] * raw.shape[2]
    drop = None
    if release is not None:
        offset = tensor.data_offset

        def drop(start: int, stop: int) -> None:
            release(offset + start * row_bytes, (stop - start) * row_bytes)

    return LazyGroupQuantized(
        rows=raw.shape[0], cols=cols, bits=kept[0], group_size=kept[1], row_bytes=row_bytes,
        read_rows=lambda start, stop: convert(raw[start:stop]), release_rows=drop,
    )  # fmt: skip


def group_quantized(tensor: ReaderTensor) -> GroupQuantized:
    """The whole tensor in our layout; ValueError for another type or a bad size."""
    return lazy_group_quantized(tensor).materialize()


def _blocks(tensor: ReaderTensor, cols: int) -> np.ndarray:
    """The tensor's bytes as (rows, blocks a row, bytes a block): a view of the map."""
    qtype = GGMLQuantizationType(tensor.tensor_type)
    block_bytes = BLOCK_TYPES[qtype][1]
    if cols % BLOCK:
        raise ValueError(f"GGUF tensor {tensor.name!r} has {cols} columns, not whole blocks")
    rows = int(tensor.shape[1])
    data = np.asarray(tensor.data).view(np.uint8).reshape(-1)
    blocks = rows * (cols // BLOCK)
    if data.size != blocks * block_bytes:
        raise ValueError(
            f"GGUF tensor {tensor.name!r} holds {data.size} bytes, not {blocks} blocks"
        )
    return data.reshape(rows, cols // BLOCK, block_bytes)


def _block_rows(raw: np.ndarray, *, qtype: GGMLQuantizationType, cols: int) -> GroupQuantized:
    """Some rows' blocks (rows, blocks, bytes), read from the map, as our layout."""
    bits, _, has_min = BLOCK_TYPES[qtype]
    rows = raw.shape[0]
    # np.array copies (always): every array below is the process's own, out of the map.
    scale = np.array(raw[:, :, 0:2]).view(np.float16).reshape(rows, -1)
    header = 4 if has_min else 2
    if qtype in (Q.Q5_0, Q.Q5_1):
        nibbles = raw[:, :, header + 4 :]  # byte i: value i low, value 16 + i high
        low = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=2)
        codes = (low | _fifth_bits(raw, header)).reshape(rows, -1)
    else:
        codes = np.array(raw[:, :, header:]).reshape(rows, -1)
    if has_min:
        offset = np.array(raw[:, :, 2:4]).view(np.float16).reshape(rows, -1)
    elif qtype == Q.Q8_0:
        np.bitwise_xor(codes, np.uint8(0x80), out=codes)  # signed q -> q + 128, in place
        offset = scale * np.float16(-128)
    else:
        offset = scale * np.float16(-8 if qtype == Q.Q4_0 else -16)
    return GroupQuantized(
        torch.from_numpy(codes),
        torch.from_numpy(scale),
        torch.from_numpy(np.asarray(offset, dtype=np.float16).copy()),
        bits,
        BLOCK,
        cols,
    )

"""GGUF Q4_0, Q4_1 and Q8_0 tensors kept quantized: their blocks as `GroupQuantized`.

A block of 32 values is a float16 scale ``d`` (and for Q4_1 a float16 minimum ``m``) and
its codes, which are already in group_math.py's layout, so no code is rewritten:

- Q4_0: ``d * (q - 8)``, q 4 bits: scale d, offset -8d;
- Q4_1: ``d * q + m``: scale d, offset m;
- Q8_0: ``d * q``, q a signed byte: code q + 128 (its top bit flipped), offset -128d.

Both offsets are exact in float16 (a power of two times d), and ``scale * code + offset``
in float32 gives each value exactly as gguf's own dequantizing does. The K-quants
(Q4_K, Q5_K, Q6_K: 256-value super-blocks with 6- or 8-bit sub-scales) are not kept:
they dequantize at load as before.
"""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType, ReaderTensor

from inference.model.quant.group_math import BLOCK, GroupQuantized

# type -> (bits, bytes a block, whether a float16 minimum follows the scale)
KEPT_TYPES = {
    GGMLQuantizationType.Q4_0: (4, 18, False),
    GGMLQuantizationType.Q4_1: (4, 20, True),
    GGMLQuantizationType.Q8_0: (8, 34, False),
}


def kept_format(tensor: ReaderTensor) -> tuple[int, int] | None:
    """(bits, group size) a tensor keeps when loaded quantized, or None (dequantized)."""
    qtype = GGMLQuantizationType(tensor.tensor_type)
    if qtype not in KEPT_TYPES or len(tensor.shape) != 2:
        return None
    return KEPT_TYPES[qtype][0], BLOCK


def group_quantized(tensor: ReaderTensor) -> GroupQuantized:
    """The tensor's blocks as they are; ValueError for another type or a bad size."""
    qtype = GGMLQuantizationType(tensor.tensor_type)
    if qtype not in KEPT_TYPES or len(tensor.shape) != 2:
        raise ValueError(f"GGUF tensor {tensor.name!r} ({qtype.name}) is not kept quantized")
    bits, block_bytes, has_min = KEPT_TYPES[qtype]
    cols, rows = (int(dim) for dim in tensor.shape.tolist())  # GGUF lists the fastest first
    if cols % BLOCK:
        raise ValueError(f"GGUF tensor {tensor.name!r} has {cols} columns, not whole blocks")
    data = np.asarray(tensor.data).view(np.uint8).reshape(-1)
    blocks = rows * (cols // BLOCK)
    if data.size != blocks * block_bytes:
        raise ValueError(
            f"GGUF tensor {tensor.name!r} holds {data.size} bytes, not {blocks} blocks"
        )
    raw = data.reshape(rows, cols // BLOCK, block_bytes)
    # np.array copies (always): every array below is the process's own, out of the map.
    scale = np.array(raw[:, :, 0:2]).view(np.float16).reshape(rows, -1)
    header = 4 if has_min else 2
    codes = np.array(raw[:, :, header:]).reshape(rows, -1)
    if qtype == GGMLQuantizationType.Q4_1:
        offset = np.array(raw[:, :, 2:4]).view(np.float16).reshape(rows, -1)
    elif qtype == GGMLQuantizationType.Q4_0:
        offset = scale * np.float16(-8)
    else:
        np.bitwise_xor(codes, np.uint8(0x80), out=codes)  # signed q -> q + 128, in place
        offset = scale * np.float16(-128)
    # No further copies: they would double the largest tensor's bytes at the load's peak.
    return GroupQuantized(
        torch.from_numpy(codes),
        torch.from_numpy(scale),
        torch.from_numpy(np.asarray(offset, dtype=np.float16).copy()),
        bits,
        BLOCK,
        cols,
    )

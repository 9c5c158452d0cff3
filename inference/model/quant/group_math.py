"""Group-quantized weights as numbers: the one layout every 4- and 8-bit format loads into.

A weight (rows, cols) is cut along its input columns into groups of ``group_size`` (a
multiple of 32); each row's group has a float16 ``scale`` and ``offset``, and each value
an unsigned code of ``bits`` (4 or 8) bits::

    w[r, c] = scale[r, c // group_size] * code[r, c] + offset[r, c // group_size]

computed in float32. The codes are kept in blocks of 32 columns (the last padded with
zero codes): an 8-bit block is 32 bytes, one a column; a 4-bit block is 16 bytes, byte
``i`` holding column ``i`` in its low nibble and column ``16 + i`` in its high nibble.
That is llama.cpp's Q4_0/Q4_1/Q8_0 block, so those GGUF tensors load without a change
of bits (Q4_0 ``d * (q - 8)`` is scale d, offset -8d; Q8_0's signed q is code q + 128 with
offset -128d: exact in float16 and in float32). GPTQ and AWQ ``scale * (q - zero)`` is
offset ``-scale * zero``.

`dequantize` is the reference the kernels are tested against; `quantize_groups` makes
min/max (asymmetric) codes from a float weight, for tests and for quantizing at load.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 32  # columns per block of codes; group sizes are multiples of it
BITS = (4, 8)


def padded_cols(cols: int) -> int:
    """Columns rounded up to whole blocks."""
    return -(-cols // BLOCK) * BLOCK


def code_bytes(cols: int, bits: int) -> int:
    """Bytes of codes one row of ``cols`` columns takes."""
    return padded_cols(cols) * bits // 8


def group_count(cols: int, group_size: int) -> int:
    """Groups (scales and offsets) one row of ``cols`` columns has."""
    return -(-cols // group_size)


def check_format(name: str, bits: int, group_size: int) -> None:
    """ValueError where ``bits`` and ``group_size`` are not a format a layer holds."""
    if bits not in BITS:
        raise ValueError(f"tensor {name}: {bits}-bit codes are not supported")
    if group_size <= 0 or group_size % BLOCK:
        raise ValueError(f"tensor {name}: group size {group_size} is not a multiple of 32")


@dataclass(frozen=True)
class GroupQuantized:
    """A group-quantized weight (see the module's docstring): what loaders hand to layers."""

    codes: torch.Tensor  # uint8 (rows, code_bytes(cols, bits))
    scale: torch.Tensor  # float16 (rows, groups)
    offset: torch.Tensor  # float16 (rows, groups)
    bits: int
    group_size: int
    cols: int

    @property
    def rows(self) -> int:
        return int(self.codes.shape[0])

    @property
    def shape(self) -> tuple[int, int]:
        """The weight's (rows, cols), as a float tensor of it would have."""
        return (self.rows, self.cols)

    @property
    def groups(self) -> int:
        return group_count(self.cols, self.group_size)

    def check(self, name: str) -> None:
        """ValueError if the parts do not fit together (a damaged or hostile checkpoint)."""
        check_format(name, self.bits, self.group_size)
        if self.cols <= 0 or self.codes.dim() != 2 or self.codes.dtype != torch.uint8:
            raise ValueError(f"tensor {name}: codes must be a 2-D uint8 tensor")
        if self.codes.shape[1] != code_bytes(self.cols, self.bits):
            raise ValueError(
                f"tensor {name}: {self.codes.shape[1]} bytes of codes a row, expected "
                f"{code_bytes(self.cols, self.bits)} for {self.cols} {self.bits}-bit columns"
            )
        for part in (self.scale, self.offset):
            if part.dtype != torch.float16 or tuple(part.shape) != (self.rows, self.groups):
                raise ValueError(
                    f"tensor {name}: scales and offsets must be float16 ({self.rows}, "
                    f"{self.groups}), got {part.dtype} {tuple(part.shape)}"
                )

    def select_rows(self, rows: slice | torch.Tensor) -> GroupQuantized:
        """The same weight restricted to some of its rows (a shard, or a permutation)."""
        return GroupQuantized(
            self.codes[rows], self.scale[rows], self.offset[rows],
            self.bits, self.group_size, self.cols,
        )  # fmt: skip


def unpack_codes(codes: torch.Tensor, bits: int, cols: int) -> torch.Tensor:
    """Packed codes (rows, code_bytes) -> one uint8 code a column (rows, cols)."""
    rows = codes.shape[0]
    if bits == 8:
        return codes[:, :cols]
    blocks = codes.reshape(rows, -1, BLOCK // 2)
    low, high = blocks & 0x0F, blocks >> 4
    return torch.cat((low, high), dim=2).reshape(rows, -1)[:, :cols]


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """One code a column (rows, cols), each below 2**bits -> the packed layout."""
    rows, cols = codes.shape
    padded = torch.zeros(rows, padded_cols(cols), dtype=torch.uint8, device=codes.device)
    padded[:, :cols] = codes.to(torch.uint8)
    if bits == 8:
        return padded
    blocks = padded.reshape(rows, -1, BLOCK)
    low, high = blocks[:, :, : BLOCK // 2], blocks[:, :, BLOCK // 2 :]
    return (low | (high << 4)).reshape(rows, -1)


def dequantize(weight: GroupQuantized, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The float weight (rows, cols): ``scale * code + offset`` in float32, then ``dtype``."""
    codes = unpack_codes(weight.codes, weight.bits, weight.cols).float()
    scale = weight.scale.float().repeat_interleave(weight.group_size, dim=1)[:, : weight.cols]
    offset = weight.offset.float().repeat_interleave(weight.group_size, dim=1)[:, : weight.cols]
    return (codes * scale + offset).to(dtype)


def quantize_groups(weight: torch.Tensor, bits: int, group_size: int) -> GroupQuantized:
    """Min/max codes for a float weight (rows, cols): each group's range in 2**bits steps.

    The scale and offset are rounded to float16 first and the codes chosen under the
    rounded values, so `dequantize` gives back each value within half a step.
    """
    if weight.dim() != 2:
        raise ValueError(f"expected a 2-D weight, got shape {tuple(weight.shape)}")
    if bits not in BITS or group_size <= 0 or group_size % BLOCK:
        raise ValueError(f"unsupported {bits}-bit codes in groups of {group_size}")
    rows, cols = weight.shape
    groups = -(-cols // group_size)
    w = torch.zeros(rows, groups * group_size, dtype=torch.float32, device=weight.device)
    w[:, :cols] = weight.float()
    grouped = w.reshape(rows, groups, group_size)
    # Padding columns must not widen a group's range: they take the group's first value.
    if cols % group_size:
        tail = grouped[:, -1]
        tail[:, cols % group_size :] = tail[:, :1]
    low, high = grouped.amin(dim=2), grouped.amax(dim=2)
    top = (1 << bits) - 1
    scale = ((high - low) / top).clamp_min(1e-8).half()
    offset = low.half()
    steps = (grouped - offset.float()[..., None]) / scale.float()[..., None]
    codes = steps.round().clamp(0, top).to(torch.uint8).reshape(rows, -1)[:, :cols]
    return GroupQuantized(pack_codes(codes, bits), scale, offset, bits, group_size, cols)

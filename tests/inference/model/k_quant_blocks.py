"""K-quant super-blocks built from chosen fields, following the GGUF format spec, for tests.

The gguf package cannot quantize Q4_K, Q5_K or Q6_K, so the tests pick each super-block's
fields (float16 d and dmin, sub-scales, minimums, codes) at random and pack them here;
the values those fields mean are computed from the fields directly (`values`), and gguf's
own dequantizing of the packed bytes must agree with them, which checks this packing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType

Q = GGMLQuantizationType
SUPER = 256


@dataclass(frozen=True)
class KFields:
    """One tensor's super-blocks: n = rows * super-blocks a row, in row-major order."""

    qtype: GGMLQuantizationType
    d: np.ndarray  # float16 (n,)
    dmin: np.ndarray  # float16 (n,); unused by Q6_K
    scales: np.ndarray  # (n, 8) 0..63, or Q6_K's (n, 16) int8
    mins: np.ndarray  # (n, 8) 0..63; unused by Q6_K
    q: np.ndarray  # (n, 256) codes: 0..15, 0..31 or 0..63

    def values(self, rows: int) -> np.ndarray:
        """The weight the fields mean, in float32 (rows, cols), straight from the spec."""
        d = self.d.astype(np.float32)[:, None]
        if self.qtype == Q.Q6_K:
            step = d * self.scales.astype(np.float32)  # (n, 16), one per 16 values
            w = np.repeat(step, 16, axis=1) * (self.q.astype(np.float32) - 32)
        else:
            step = np.repeat(d * self.scales.astype(np.float32), 32, axis=1)
            low = np.repeat(self.dmin.astype(np.float32)[:, None] * self.mins, 32, axis=1)
            w = step * self.q.astype(np.float32) - low
        return w.reshape(rows, -1)


def random_fields(
    qtype: GGMLQuantizationType,
    blocks: int,
    rng: np.random.Generator,
    d_range: tuple[float, float] = (1e-3, 1e-2),
) -> KFields:
    """Random fields: every code and sub-scale appears; d and dmin in ``d_range``."""
    d = rng.uniform(*d_range, blocks).astype(np.float16)
    dmin = rng.uniform(*d_range, blocks).astype(np.float16)
    if qtype == Q.Q6_K:
        scales = rng.integers(-128, 128, (blocks, 16)).astype(np.int8)
        q = rng.integers(0, 64, (blocks, SUPER), dtype=np.uint8)
        return KFields(qtype, d, dmin, scales, np.zeros((blocks, 8), np.uint8), q)
    top = 16 if qtype == Q.Q4_K else 32
    scales = rng.integers(0, 64, (blocks, 8), dtype=np.uint8)
    mins = rng.integers(0, 64, (blocks, 8), dtype=np.uint8)
    q = rng.integers(0, top, (blocks, SUPER), dtype=np.uint8)
    return KFields(qtype, d, dmin, scales, mins, q)


def _packed_scales(scales: np.ndarray, mins: np.ndarray) -> np.ndarray:
    """8 six-bit scales and minimums -> 12 bytes: sub-blocks 0-3 whole in bytes 0-7 (top
    two bits free), 4-7 as a low nibble in bytes 8-11 and their top two bits above 0-7."""
    out = np.zeros((len(scales), 12), np.uint8)
    for j in range(4):
        out[:, j] = scales[:, j] | ((scales[:, j + 4] >> 4) << 6)
        out[:, j + 4] = mins[:, j] | ((mins[:, j + 4] >> 4) << 6)
        out[:, j + 8] = (scales[:, j + 4] & 0x0F) | ((mins[:, j + 4] & 0x0F) << 4)
    return out


def _halves(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).reshape(-1, 1).view(np.uint8)


def pack(fields: KFields, rows: int) -> np.ndarray:
    """The fields as the format's bytes, (rows, bytes a row), for GGUFWriter's raw_dtype."""
    q = fields.q
    n = len(q)
    if fields.qtype == Q.Q6_K:
        ql = np.zeros((n, 128), np.uint8)
        qh = np.zeros((n, 64), np.uint8)
        for half in range(2):
            base = 128 * half
            for i in range(64):  # values base + i (low nibble) and base + 64 + i (high)
                ql[:, 64 * half + i] = (q[:, base + i] & 0x0F) | ((q[:, base + 64 + i] & 0x0F) << 4)
            for i in range(32):  # the top two bits of base + i, +32, +64, +96
                tops = [(q[:, base + 32 * k + i] >> 4) << (2 * k) for k in range(4)]
                qh[:, 32 * half + i] = tops[0] | tops[1] | tops[2] | tops[3]
        parts = [ql, qh, fields.scales.view(np.uint8), _halves(fields.d)]
    else:
        qs = np.zeros((n, 128), np.uint8)
        for run in range(4):  # sub-block 2*run in the low nibbles, 2*run + 1 in the high
            first, second = q[:, 64 * run : 64 * run + 32], q[:, 64 * run + 32 : 64 * run + 64]
            qs[:, 32 * run : 32 * run + 32] = (first & 0x0F) | ((second & 0x0F) << 4)
        parts = [
            _halves(fields.d),
            _halves(fields.dmin),
            _packed_scales(fields.scales, fields.mins),
        ]
        if fields.qtype == Q.Q5_K:
            qh = np.zeros((n, 32), np.uint8)
            for sub in range(8):  # bit `sub` of byte i: the fifth bit of sub-block sub's i
                qh |= ((q[:, 32 * sub : 32 * sub + 32] >> 4) & 1) << sub
            parts.append(qh)
        parts.append(qs)
    return np.concatenate(parts, axis=1).reshape(rows, -1)

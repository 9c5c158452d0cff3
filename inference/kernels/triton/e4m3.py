"""float32 -> float8_e4m3fn bytes, worked out in integer arithmetic inside a kernel.

The FP8 writers (`kv_write.py`, `fp8_quant.py`) store the byte this returns into a uint8
view of their e4m3 output instead of casting: a cast's rounding differs between a GPU
(ties to even) and triton's interpreter (ties up, with a carry bug), and a GPU's float
arithmetic is free to lose the sign of a zero, where torch's conversion keeps it (an H200
wrote +0 for values torch stores as -0). Bytes made here match torch's
``x.clamp(-448, 448).to(torch.float8_e4m3fn)`` on every device.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def e4m3_bits(x):
    """float32 ``x`` (already within +-448) -> its e4m3 byte, as int32 0..255: rounded to
    nearest, ties to even, a negative value keeping its sign bit even when it rounds to 0."""
    bits = x.to(tl.int32, bitcast=True)
    magnitude = tl.abs(x)
    exponent = (magnitude.to(tl.int32, bitcast=True) >> 23) & 0xFF
    exponent = tl.maximum(exponent, 127 - 6)  # below 2**-6 the spacing stays 2**-9
    step = ((exponent - 3) << 23).to(tl.float32, bitcast=True)  # 3 mantissa bits
    # 1 / step, a power of two too: multiplying by it is exact, where a GPU's float32
    # division is an approximation.
    inverse = ((257 - exponent) << 23).to(tl.float32, bitcast=True)
    magic = 12582912.0  # 1.5 * 2**23: adding and removing it rounds to an integer, RNE
    rounded = ((magnitude * inverse + magic) - magic) * step  # an e4m3 value, exactly
    rounded_bits = rounded.to(tl.int32, bitcast=True)
    rounded_exponent = (rounded_bits >> 23) & 0xFF
    # Normal (2**-6 and up): the exponent rebiased from 127 to 7, the top 3 mantissa bits.
    normal = ((rounded_exponent - 120) << 3) | ((rounded_bits >> 20) & 7)
    # Subnormal: a multiple of 2**-9 below 2**-6, so 0..7 units of it.
    subnormal = (rounded * 512.0).to(tl.int32)
    code = tl.where(rounded_exponent >= 127 - 6, normal, subnormal)
    return code | ((bits >> 24) & 0x80)  # the sign bit, zeros included

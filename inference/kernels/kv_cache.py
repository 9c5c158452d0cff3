"""One layer's paged KV cache and how an FP8 pool encodes its values.

The convention every attention backend (the torch path here, the Triton kernels) follows:

- pools are (num_blocks, block_size, num_kv_heads, head_dim) in the model dtype, or in
  float8_e4m3fn when ``kv_cache_dtype="fp8"``;
- an FP8 pool has one float32 scalar scale per layer and per pool, ``k_scale`` and
  ``v_scale`` (1.0 unless a checkpoint supplies them);
- store: ``(x.float() / scale).clamp(-448, 448).to(float8_e4m3fn)`` (one rounding; e4m3fn
  has no infinity: an unclamped overflow would become NaN); read: ``stored.to(dtype) * scale``.

The scales travel with the pools in :class:`KVCache`, so a backend reads them from the
cache it is handed and the attention interface stays as it was.
"""

from __future__ import annotations

import math
import mmap
import struct

import torch

FP8_KV_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_KV_DTYPE).max)  # 448


class KVCache(tuple[torch.Tensor, torch.Tensor]):
    """(key pool, value pool) of one layer; unpacks like the pair it is.

    ``k_scale`` / ``v_scale`` say how an FP8 pool's values are to be scaled back; for a
    pool in the model dtype they stay 1.0 and are ignored. A plain tuple of two pools is
    still accepted wherever a KVCache is read (scales 1.0).
    """

    k_scale: float
    v_scale: float

    def __new__(
        cls, key: torch.Tensor, value: torch.Tensor, *, k_scale: float = 1.0, v_scale: float = 1.0
    ) -> KVCache:
        if key.shape != value.shape or key.dtype != value.dtype:
            raise ValueError("key and value pools must have one shape and dtype")
        for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
            if not scale > 0:
                raise ValueError(f"{name} must be positive, got {scale}")
        cache = super().__new__(cls, (key, value))
        cache.k_scale = float(k_scale)
        cache.v_scale = float(v_scale)
        return cache

    @property
    def key(self) -> torch.Tensor:
        return self[0]

    @property
    def value(self) -> torch.Tensor:
        return self[1]

    @property
    def is_fp8(self) -> bool:
        return self[0].dtype == FP8_KV_DTYPE


def kv_scales(cache: tuple[torch.Tensor, torch.Tensor]) -> tuple[float, float]:
    """(k_scale, v_scale) of a cache; 1.0 for a plain tuple."""
    return getattr(cache, "k_scale", 1.0), getattr(cache, "v_scale", 1.0)


def to_cache_dtype(x: torch.Tensor, pool_dtype: torch.dtype, scale: float) -> torch.Tensor:
    """New keys or values, (T, Hkv, D) in the model dtype, encoded for a pool of `pool_dtype`."""
    if pool_dtype != FP8_KV_DTYPE:
        return x.to(pool_dtype)
    if scale != 1.0:
        # The float32 quotient x / scale, correctly rounded on every device (as the Triton
        # write's div_rn): worked in float64 and rounded once to float32, which is exact for
        # a quotient of two float32 values. Plain ``x.float() / scale`` is not: CUDA torch
        # multiplies by the reciprocal of a Python-number divisor, an ulp off at times,
        # which flipped a few e4m3 roundings against the kernel on an H200. (A bf16 quotient
        # would round twice on its way to e4m3.)
        x = (x.double() / _to_float32(scale)).float()
    return x.clamp(-FP8_MAX, FP8_MAX).to(FP8_KV_DTYPE)


def _to_float32(value: float) -> float:
    """``value`` rounded to the nearest float32, as the kernels hold a scale."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def zeroed_pool(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zero-filled KV pool, costing nothing up front on a CPU.

    ``torch.zeros`` writes every byte of a pool of gigabytes at start-up (seconds on a small
    machine, for memory most of which a short conversation never touches). A private
    anonymous mapping instead gets pages the kernel hands out already zeroed as they are
    first written, so the pool reads as zeros all the same. (Not ``calloc``: below glibc's
    mmap threshold, in a thread's arena, it clears every byte too.) Page-aligned; the
    mapping is released with the tensor.
    """
    if device.type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    element = torch.empty((), dtype=dtype).element_size()
    nbytes = math.prod(shape) * element
    mapping = mmap.mmap(
        -1,
        nbytes,
        flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
        prot=mmap.PROT_READ | mmap.PROT_WRITE,
    )
    # frombuffer keeps a reference to the mapping for as long as the tensor lives.
    return torch.frombuffer(mapping, dtype=torch.uint8).view(dtype).view(shape)

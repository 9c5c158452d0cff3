"""Write a step's new keys and values into the paged pools (vLLM's reshape_and_cache).

One program stores one token's K and V rows, all KV heads, at its flat slot
(block_id * block_size + offset). A negative slot is skipped: CUDA graphs pad a batch with
such rows. FP8 (e4m3fn) pools store ``clamp(x / scale, -448, 448)``, divided in float32,
its byte worked out by `e4m3.py`, with one scalar scale per layer and pool; reading
multiplies by it again.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inference.kernels.triton.e4m3 import e4m3_bits

FP8_MAX = 448.0  # largest finite float8_e4m3fn (kernels spell it out: jit sees no globals)


@triton.jit
def _reshape_and_cache_kernel(
    key_ptr,
    value_ptr,
    key_cache_ptr,
    value_cache_ptr,
    slot_ptr,
    k_scale_ptr,
    v_scale_ptr,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_cache_slot,
    stride_cache_head,
    NUM_HEADS: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_FP8: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot < 0:
        return
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, BLOCK_D)[None, :]
    mask = (h < NUM_HEADS) & (d < HEAD_DIM)
    k = tl.load(key_ptr + token * stride_kt + h * stride_kh + d, mask=mask)
    v = tl.load(value_ptr + token * stride_vt + h * stride_vh + d, mask=mask)
    dst = slot * stride_cache_slot + h * stride_cache_head + d
    if IS_FP8:  # the pools come as uint8 views: e4m3 bytes are stored, not cast
        k_scale = tl.load(k_scale_ptr)
        v_scale = tl.load(v_scale_ptr)
        # div_rn: IEEE division, as torch's; a GPU's plain float32 `/` is approximate.
        k = e4m3_bits(tl.clamp(tl.math.div_rn(k.to(tl.float32), k_scale), -448.0, 448.0))
        v = e4m3_bits(tl.clamp(tl.math.div_rn(v.to(tl.float32), v_scale), -448.0, 448.0))
        tl.store(key_cache_ptr + dst, k.to(tl.uint8), mask=mask)
        tl.store(value_cache_ptr + dst, v.to(tl.uint8), mask=mask)
    else:
        tl.store(key_cache_ptr + dst, k.to(key_cache_ptr.dtype.element_ty), mask=mask)
        tl.store(value_cache_ptr + dst, v.to(value_cache_ptr.dtype.element_ty), mask=mask)


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """key, value (T, Hkv, D) -> pools (num_blocks, block_size, Hkv, D) at slot_mapping (T,).

    ``k_scale`` / ``v_scale`` are one-element float32 tensors on the pools' device, needed
    for FP8 pools (a tensor, not a float, so a captured CUDA graph reads the current value).
    """
    num_tokens, num_kv_heads, head_dim = key.shape
    if value.shape != key.shape:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} differ")
    if key_cache.shape[2:] != (num_kv_heads, head_dim) or value_cache.shape != key_cache.shape:
        raise ValueError(
            f"pools {tuple(key_cache.shape)} do not hold ({num_kv_heads}, {head_dim}) heads"
        )
    if not (key_cache.is_contiguous() and value_cache.is_contiguous()):
        raise ValueError("the KV pools must be contiguous")
    if key.stride(-1) != 1 or value.stride(-1) != 1:
        raise ValueError("key and value rows must be contiguous in head_dim")
    is_fp8 = key_cache.dtype == torch.float8_e4m3fn
    if is_fp8 and (k_scale is None or v_scale is None):
        raise ValueError("an FP8 KV pool needs k_scale and v_scale")
    if num_tokens == 0:
        return
    # Pointers that are never read when the pool is not FP8.
    k_scale_arg = k_scale if k_scale is not None else slot_mapping
    v_scale_arg = v_scale if v_scale is not None else slot_mapping
    _reshape_and_cache_kernel[(num_tokens,)](
        key,
        value,
        key_cache.view(torch.uint8) if is_fp8 else key_cache,
        value_cache.view(torch.uint8) if is_fp8 else value_cache,
        slot_mapping,
        k_scale_arg,
        v_scale_arg,
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        key_cache.stride(1),
        key_cache.stride(2),
        NUM_HEADS=num_kv_heads,
        BLOCK_H=triton.next_power_of_2(num_kv_heads),
        HEAD_DIM=head_dim,
        BLOCK_D=triton.next_power_of_2(head_dim),
        IS_FP8=is_fp8,
    )

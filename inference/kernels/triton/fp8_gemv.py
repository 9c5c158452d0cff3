"""``x @ W.T`` for a few tokens and an e4m3 weight with one scale per output row.

At decode sizes an FP8 layer's ``torch._scaled_mm`` pays for a quantizing kernel before it
and picks matmul kernels sized for big batches (the GPU check measured 10 us against
bf16's 5 for a 2048x2048 layer at one token, 24 against 12 for 2048x8192). Here one
kernel reads the e4m3 weight once, widens it to the activations' dtype in registers
(exact: every e4m3 value is a bf16 value), multiplies on the tensor cores with a float32
accumulator and scales each output column by its row's scale at the end. Activations
stay in their dtype (weight-only FP8), so this is also closer to the unquantized layer
than the dynamic per-token path.

Small tiles along N keep the multiprocessors busy at one token (a 2048-row weight makes
64 programs of 32 rows); `gemv_config` picks them from timings on an H200.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inference.kernels.triton.decode_attention import dot_operands


@triton.jit
def _fp8_gemv_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_ym,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = m < M
    n_mask = n < N
    rows = m.to(tl.int64)
    cols = n.to(tl.int64)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_mask = k < K
        x = tl.load(
            x_ptr + rows[:, None] * stride_xm + k[None, :],
            mask=m_mask[:, None] & k_mask[None, :],
            other=0.0,
        )
        w = tl.load(
            w_ptr + cols[:, None] * stride_wn + k[None, :],
            mask=n_mask[:, None] & k_mask[None, :],
            other=0.0,
        )
        w = w.to(tl.float32).to(DOT_DTYPE)  # exact: e4m3 values are bf16 and fp16 values
        acc += tl.dot(x.to(DOT_DTYPE), tl.trans(w), input_precision=DOT_PRECISION)
    scale = tl.load(s_ptr + cols, mask=n_mask, other=0.0)
    tl.store(
        y_ptr + rows[:, None] * stride_ym + n[None, :],
        (acc * scale[None, :]).to(y_ptr.dtype.element_ty),
        mask=m_mask[:, None] & n_mask[None, :],
    )


def gemv_config(num_out: int, k_dim: int) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_stages), the fastest of 22 configurations timed on an H200
    at 1 and 16 tokens for the demo model's and Llama 3.2 1B's layer shapes
    (docs/benchmarks/gpu-fp8-linear-h200-2026-12-04.json): 32 output rows a program (64
    for a wide layer), K read 128 columns at a time for a narrow layer, 512 otherwise."""
    if k_dim <= 1024:
        return 32, 128, 4
    return (64, 512, 3) if num_out >= 8192 else (32, 512, 4)


def fp8_gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    *,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int = 4,
    num_stages: int | None = None,
) -> torch.Tensor:
    """x (..., K) float32/float16/bfloat16, weight (N, K) e4m3, scale (N,) float32 ->
    (..., N) in x's dtype: ``(x @ weight.T) * scale``. Meant for a few tokens (`Fp8Linear`
    sends up to 16); more run too, 16 at a time."""
    if weight.dtype != torch.float8_e4m3fn or weight.dim() != 2:
        raise ValueError(f"weight must be 2-D float8_e4m3fn, got {weight.dtype} {weight.dim()}-D")
    num_out, k_dim = weight.shape
    if scale.shape != (num_out,) or scale.dtype != torch.float32:
        raise ValueError(
            f"scale must be float32 ({num_out},), got {scale.dtype} {tuple(scale.shape)}"
        )
    if x.shape[-1] != k_dim:
        raise ValueError(f"x has {x.shape[-1]} features, the weight {k_dim}")
    if weight.stride(1) != 1 or not scale.is_contiguous():
        raise ValueError("weight rows and the scale must be contiguous")
    dot_dtype, dot_precision = dot_operands(x)
    x2 = x.reshape(-1, k_dim)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    out = torch.empty(x2.shape[0], num_out, dtype=x.dtype, device=x.device)
    default_n, default_k, default_stages = gemv_config(num_out, k_dim)
    block_n, block_k = block_n or default_n, block_k or default_k
    num_stages = num_stages or default_stages
    if x2.shape[0] > 0:
        grid = (triton.cdiv(x2.shape[0], 16), triton.cdiv(num_out, block_n))
        _fp8_gemv_kernel[grid](
            x2,
            weight,
            scale,
            out,
            x2.shape[0],
            num_out,
            k_dim,
            x2.stride(0),
            weight.stride(0),
            out.stride(0),
            BLOCK_M=16,
            BLOCK_N=block_n,
            BLOCK_K=block_k,
            DOT_DTYPE=dot_dtype,
            DOT_PRECISION=dot_precision,
            num_warps=num_warps,
            num_stages=num_stages,
        )
    return out.reshape(*x.shape[:-1], num_out)

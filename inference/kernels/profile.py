"""One device profile, chosen once when a model is put to work: which kernels it runs.

Everything that depends on the device is decided here, before the first step, and handed
to the model (`LlamaForCausalLM.use_device_profile`), which swaps the choices into its
layers: the attention backend, the fused CPU layer kernels, and the FP8 paths. The FP8
ones are probed by running them once on tiny tensors: a layer never tries a path per call
and never changes path after a failure, which a CUDA graph capture could not survive.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from inference.kernels.attention import AttentionBackend
from inference.kernels.backends import make_attention_backend
from inference.kernels.cpu.backend import CpuAttentionBackend
from inference.kernels.cpu.layers import CpuLayerKernels, load_layer_kernels

log = logging.getLogger("inference.kernels")

# torch._scaled_mm with row-wise scales needs FP8 tensor cores.
SCALED_MM_CAPABILITY = (8, 9)


@dataclass(frozen=True)
class DeviceProfile:
    """What a model on one device runs."""

    device: torch.device
    attention: AttentionBackend[Any]
    # The C kernels for norms, rotary, SiLU-and-multiply and FP8 dequantizing (CPU only,
    # with the CPU attention backend; None: torch ops).
    layer_kernels: CpuLayerKernels | None
    # torch._scaled_mm for per-row FP8 layers (CUDA 8.9+, probed).
    fp8_scaled_mm: bool
    # The grouped FP8 Triton matmul for grouped FP8 layers (CUDA, probed).
    fp8_triton: bool
    # The group-quantized (4-/8-bit) Triton matmul for GroupQuantLinear layers and a kept
    # quantized output projection (CUDA, probed).
    group_quant_triton: bool


def choose_device_profile(
    attention_backend: str, device: torch.device, dtype: torch.dtype
) -> DeviceProfile:
    """The profile for a model of activation ``dtype`` on ``device``; ``attention_backend``
    as in `make_attention_backend`."""
    attention = make_attention_backend(attention_backend, device)
    kernels = load_layer_kernels() if isinstance(attention, CpuAttentionBackend) else None
    on_cuda = device.type == "cuda"
    scaled_mm = (
        on_cuda
        and torch.cuda.get_device_capability(device) >= SCALED_MM_CAPABILITY
        and scaled_mm_runs(device, dtype)
    )
    return DeviceProfile(
        device=device,
        attention=attention,
        layer_kernels=kernels,
        fp8_scaled_mm=scaled_mm,
        fp8_triton=on_cuda and grouped_fp8_triton_runs(device, dtype),
        group_quant_triton=on_cuda and group_quant_triton_runs(device, dtype),
    )


def scaled_mm_runs(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``torch._scaled_mm`` takes what an FP8 layer passes it, on ``device``: e4m3
    operands, one float32 scale per row of each, output in ``dtype``."""
    a = torch.zeros(16, 32, dtype=torch.float8_e4m3fn, device=device)
    b = torch.zeros(16, 32, dtype=torch.float8_e4m3fn, device=device)
    try:
        torch._scaled_mm(
            a,
            b.t(),
            scale_a=torch.ones(16, 1, device=device),
            scale_b=torch.ones(1, 16, device=device),
            out_dtype=dtype,
        )
    except (RuntimeError, ValueError) as err:  # torch's checks raise either
        log.info("torch._scaled_mm unavailable here (%s): FP8 layers dequantize", err)
        return False
    return True


def grouped_fp8_triton_runs(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the grouped FP8 Triton matmul compiles and runs on ``device``."""
    try:
        from inference.kernels.triton.fp8_matmul import grouped_fp8_matmul

        x = torch.zeros(1, 32, dtype=dtype, device=device)
        q = torch.zeros(16, 32, dtype=torch.float8_e4m3fn, device=device)
        grouped_fp8_matmul(x, q, torch.ones(16, 1, device=device), 32)
    except Exception as err:  # no triton, or a GPU it cannot compile for
        log.warning("grouped FP8 Triton matmul unavailable (%s): dequantizing instead", err)
        return False
    return True


def group_quant_triton_runs(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the group-quantized Triton matmul compiles and runs on ``device``, K split
    in two (both of its kernels)."""
    try:
        from inference.kernels.triton.group_gemm import group_quant_matmul
        from inference.model.quant.group_math import GroupQuantized

        half = torch.float16
        weight = GroupQuantized(
            torch.zeros(16, 128, dtype=torch.uint8, device=device),
            torch.ones(16, 8, dtype=half, device=device),
            torch.zeros(16, 8, dtype=half, device=device),
            bits=4, group_size=32, cols=256,
        )  # fmt: skip
        group_quant_matmul(torch.zeros(1, 256, dtype=dtype, device=device), weight, split_k=2)
    except Exception as err:  # no triton, or a GPU it cannot compile for
        log.warning("group-quantized Triton matmul unavailable (%s): dequantizing instead", err)
        return False
    return True

"""Which attention backend serves a device: Triton kernels on CUDA, C kernels on the CPU.

triton is imported only when its backend is chosen, so the CPU path never pays for it.
The CPU kernels are compiled at first use; where that fails (no C compiler), "auto" falls
back to the torch path, which is always there and is the reference for both.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from inference.kernels.attention import AttentionBackend, TorchAttentionBackend

log = logging.getLogger("inference.kernels")

ATTENTION_BACKENDS = ("auto", "torch", "cpu", "triton")


def make_attention_backend(name: str, device: torch.device) -> AttentionBackend[Any]:
    """``name``: "auto" (Triton on CUDA, the C kernels on a CPU), "torch", "cpu" or "triton".

    "triton" off CUDA runs only under triton's interpreter (``TRITON_INTERPRET=1`` set
    before triton is first imported), which is how tests compare the two on a CPU.
    """
    if name not in ATTENTION_BACKENDS:
        raise ValueError(f"attention_backend must be one of {', '.join(ATTENTION_BACKENDS)}")
    if name == "torch":
        return TorchAttentionBackend()
    if name == "cpu" or (name == "auto" and device.type == "cpu"):
        return _cpu_backend(device, required=name == "cpu")
    if name == "auto" and device.type != "cuda":
        return TorchAttentionBackend()
    from inference.kernels.triton import decode_attention
    from inference.kernels.triton.backend import TritonAttentionBackend

    if device.type != "cuda" and not _interpreted(decode_attention._decode_kernel):
        raise ValueError(
            "attention_backend='triton' without CUDA needs triton's interpreter: set "
            "TRITON_INTERPRET=1 before triton is imported"
        )
    return TritonAttentionBackend()


def _interpreted(kernel: object) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


def _cpu_backend(device: torch.device, *, required: bool) -> AttentionBackend[Any]:
    from inference.kernels.cpu.backend import CpuAttentionBackend
    from inference.kernels.cpu.build import KernelBuildError, load_kv_store, load_paged_decode

    if device.type != "cpu":
        raise ValueError(f"attention_backend='cpu' needs the CPU device, not {device}")
    try:
        return CpuAttentionBackend(load_paged_decode(), load_kv_store())
    except KernelBuildError as error:
        if required:
            raise ValueError(f"attention_backend='cpu': {error}") from error
        log.warning("CPU attention kernels unavailable, using the torch path: %s", error)
        return TorchAttentionBackend()

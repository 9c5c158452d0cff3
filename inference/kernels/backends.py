"""Which attention backend serves a device: Triton kernels on CUDA, the torch path elsewhere.

triton is imported only when its backend is chosen, so the CPU path never pays for it.
"""

from __future__ import annotations

import torch

from inference.kernels.attention import AttentionBackend, TorchAttentionBackend

ATTENTION_BACKENDS = ("auto", "torch", "triton")


def make_attention_backend(name: str, device: torch.device) -> AttentionBackend:
    """``name``: "auto" (Triton on CUDA, torch elsewhere), "torch" or "triton".

    "triton" off CUDA runs only under triton's interpreter (``TRITON_INTERPRET=1`` set
    before triton is first imported), which is how tests compare the two on a CPU.
    """
    if name not in ATTENTION_BACKENDS:
        raise ValueError(f"attention_backend must be one of {', '.join(ATTENTION_BACKENDS)}")
    if name == "torch" or (name == "auto" and device.type != "cuda"):
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

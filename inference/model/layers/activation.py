"""Gated activations over a fused gate/up projection."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from inference.kernels.cpu.layers import CpuLayerKernels


def silu_and_mul(gate_up: torch.Tensor, kernels: CpuLayerKernels | None = None) -> torch.Tensor:
    """(..., 2 * n) holding [gate | up] -> (..., n) = silu(gate) * up.

    ``kernels``: the fused CPU kernel, used for the (T, 2n) tensors it takes.
    """
    if kernels is not None and gate_up.dim() == 2 and kernels.accepts(gate_up):
        return kernels.silu_and_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up

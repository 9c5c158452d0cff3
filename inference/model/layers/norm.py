"""RMSNorm, computed in float32 whatever the model dtype (as the reference models do)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from inference.kernels.cpu.layers import CpuLayerKernels


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(
            torch.ones(size, dtype=dtype, device=device), requires_grad=False
        )
        self.kernels: CpuLayerKernels | None = None  # the fused CPU kernel, where set

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., size)
        kernels = self.kernels
        if kernels is not None and x.dim() == 2 and kernels.accepts(x, self.weight):
            return kernels.rms_norm(x, self.weight, self.eps)
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)

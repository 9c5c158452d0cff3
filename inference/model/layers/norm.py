"""RMSNorm, computed in float32 whatever the model dtype (as the reference models do).

Called with a residual, it adds that first, fused into the norm as vLLM does: the decoder
layers pass (output, residual) along instead of adding and then normalising.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

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

    @overload
    def forward(self, x: torch.Tensor) -> torch.Tensor: ...

    @overload
    def forward(
        self, x: torch.Tensor, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # (..., size)
        """The norm of x; with a residual, `add_forward`."""
        if residual is not None:
            return self.add_forward(x, residual)
        kernels = self.kernels
        if kernels is not None and x.dim() == 2 and kernels.accepts(x, self.weight):
            return kernels.rms_norm(x, self.weight, self.eps)
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)

    def add_forward(
        self, x: torch.Tensor, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(the norm of x + residual, x + residual); ``residual`` may be overwritten with the
        sum (the CPU kernel writes it in place)."""
        kernels = self.kernels
        if (
            kernels is not None
            and x.dim() == 2
            and residual.is_contiguous()
            and residual.shape == x.shape
            and kernels.accepts(x, residual, self.weight)
        ):
            return kernels.add_rms_norm(x, residual, self.weight, self.eps)
        residual = residual + x
        return self.forward(residual), residual

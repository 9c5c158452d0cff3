"""Linear layers, including ones that fuse several checkpoint projections into one matmul.

A fused layer stacks its shards along the output dimension (q|k|v, gate|up), so one matmul
serves them all; `load_shard` places one checkpoint tensor into its rows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class FusedLinear(nn.Module):
    def __init__(
        self,
        in_features: int,
        shard_sizes: list[int],
        *,
        bias: bool,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__()
        if not shard_sizes or min(shard_sizes) <= 0:
            raise ValueError(f"shard sizes must be positive, got {shard_sizes}")
        self.in_features = in_features
        self.shard_sizes = list(shard_sizes)
        out = sum(shard_sizes)
        # Empty, not initialised: every weight is overwritten by the loader.
        self.weight = nn.Parameter(
            torch.empty(out, in_features, dtype=dtype, device=device), requires_grad=False
        )
        self.bias = (
            nn.Parameter(torch.empty(out, dtype=dtype, device=device), requires_grad=False)
            if bias
            else None
        )

    @property
    def num_shards(self) -> int:
        return len(self.shard_sizes)

    def shard_rows(self, shard: int) -> slice:
        start = sum(self.shard_sizes[:shard])
        return slice(start, start + self.shard_sizes[shard])

    def load_shard(self, param_name: str, shard: int, tensor: torch.Tensor, name: str) -> None:
        """Copy `tensor` (checkpoint name `name`) into rows of shard `shard` of a parameter."""
        param = self.weight if param_name == "weight" else self.bias
        if param is None or param_name not in ("weight", "bias"):
            raise ValueError(f"unexpected tensor {name}: the layer has no {param_name}")
        target = param.data[self.shard_rows(shard)]
        if tuple(tensor.shape) != tuple(target.shape):
            raise ValueError(
                f"tensor {name} has shape {tuple(tensor.shape)}, expected {tuple(target.shape)}"
            )
        target.copy_(tensor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (T, in) -> (T, sum(shards))
        return F.linear(x, self.weight, self.bias)


class Linear(FusedLinear):
    """A plain linear layer: a fused layer with one shard."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__(in_features, [out_features], bias=bias, dtype=dtype, device=device)

"""Linear layers, including ones that fuse several checkpoint projections into one matmul.

A fused layer stacks its shards along the output dimension (q|k|v, gate|up), so one matmul
serves them all; `load_shard` places one checkpoint tensor into its rows.

On a CPU, bfloat16 weights can be prepacked once loaded (`prepack_for_cpu`): oneDNN then
keeps them in its own blocked layout instead of reordering them on every call, which
makes a decode step's matmuls (a few dozen rows each) about 1.8x faster, bit for bit the
same results. A packed weight is opaque: only `forward` reads it.
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

        self.packed = False

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

    def prepack_for_cpu(self, batch_hint: int) -> None:
        """Replace the weight by oneDNN's packed copy (see `can_prepack_for_cpu`)."""
        if self.packed:
            return
        self.weight = nn.Parameter(
            pack_weight_for_cpu(self.weight, batch_hint), requires_grad=False
        )
        self.packed = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (T, in) -> (T, sum(shards))
        if self.packed:
            return linear_packed(x, self.weight, self.bias)
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


def can_prepack_for_cpu(weight: torch.Tensor) -> bool:
    """bfloat16 on a CPU whose oneDNN has bfloat16 kernels: any with AVX-512 (BW, VL, DQ),
    native with AVX-512 BF16 or AMX and emulated in float32 without them (Ice Lake)."""
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.bfloat16
        and not weight.is_mkldnn
        and torch.backends.mkldnn.is_available()
        and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    )


def pack_weight_for_cpu(weight: torch.Tensor, batch_hint: int) -> torch.Tensor:
    """A packed copy of a (out, in) weight for `linear_packed`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), batch_hint)


def linear_packed(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear with a weight from `pack_weight_for_cpu`."""
    out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return out

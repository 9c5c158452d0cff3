"""FP8 weights: a drop-in linear layer holding float8_e4m3fn weights and their scales.

A weight row r is stored as ``q[r] = w[r] / scale[r]`` in e4m3 (scale = row amax / 448),
so the matmul is ``y = (x @ q.T) * scale (+ bias)``: the scale applies to the output,
never to the weight, which stays 1 byte per parameter in memory.

A layer may instead scale groups of ``group_size`` consecutive input columns of a row
(``weight_scale`` (out, ceil(in / group_size))): finer, at 4 bytes a group. On CUDA a
Triton kernel reads its e4m3 bytes and scales them in registers; elsewhere it is
dequantized before the matmul, in slices of rows. The output projection is quantized
that way (see `apply.py` for why), and block-wise checkpoints (DeepSeek's 128x128
blocks) load that way, each block's scale repeated over its rows.

- CPU (and CUDA before compute capability 8.9): a per-row weight is upcast to the
  activation dtype on the fly, one layer at a time.
- CUDA 8.9+: ``torch._scaled_mm`` on FP8 tensor cores, with each token's activations
  quantized to e4m3 under its own scale (dynamic, per token) or under the checkpoint's
  static ``input_scale``. Whether it runs is probed once, when the device profile is
  chosen (`inference/kernels/profile.py`, `use_paths`); a layer never changes path later.
  Where Triton runs too, one kernel quantizes the activations (`fp8_quant.py`), and up to
  MAX_GEMV_TOKENS tokens of a dynamic layer take the weight-only `fp8_gemv.py` instead.

`quantize_model_fp8` (in `apply.py`) swaps every `FusedLinear` of a loaded model for an
`Fp8Linear`, the shape of gpt-fast's weight-only int8 handler. Quantizing, dequantizing
and the grouped matmul are in `fp8_math.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from inference.model.layers.linear import FusedLinear
from inference.model.quant.fp8_math import (
    FP8_DTYPE,
    FP8_MAX,
    GroupedFp8Matmul,
    quantize_rows_into,
    quantize_tokens_fp8,
    quantize_weight_fp8,
)
from inference.model.quant.group_lazy import AnyGroupQuantized

# Tokens up to which a dynamic per-row layer on CUDA runs the weight-only Triton kernel
# (`inference/kernels/triton/fp8_gemv.py`), which beat _scaled_mm at up to 16 on an H200.
MAX_GEMV_TOKENS = 16

if TYPE_CHECKING:
    from inference.kernels.cpu.layers import CpuLayerKernels


class Fp8Linear(nn.Module):
    """A `FusedLinear` whose weight is e4m3 with a float32 scale per output row (or, with
    `group_size`, per row and group of input columns).

    Same shard layout (``shard_sizes``, ``shard_rows``, ``load_shard``) as FusedLinear, so
    the weight loader and the callers that split q|k|v or gate|up need no change. Loading
    a pre-quantized checkpoint fills ``weight`` (e4m3), ``weight_scale`` (a per-tensor
    scalar spread over the shard's rows, or per-channel) and, where the checkpoint has
    static activation scales, ``input_scale`` (one scalar: the largest of the shards').
    """

    def __init__(
        self,
        in_features: int,
        shard_sizes: list[int],
        *,
        bias: bool,
        dtype: torch.dtype,
        device: torch.device | str,
        input_scale: bool = False,
        group_size: int | None = None,
        block_rows: int | None = None,
        quantize_on_load: bool = False,
    ) -> None:
        super().__init__()
        if in_features <= 0:
            raise ValueError(f"in_features must be positive, got {in_features}")
        for name, size in (("group_size", group_size), ("block_rows", block_rows)):
            if size is not None and size <= 0:
                raise ValueError(f"{name} must be positive, got {size}")
        if block_rows is not None and group_size is None:
            raise ValueError("block_rows needs a group_size (block-wise scales are grouped)")
        if not shard_sizes or min(shard_sizes) <= 0:
            raise ValueError(f"shard sizes must be positive, got {shard_sizes}")
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"activation dtype must be float32, bfloat16 or float16, got {dtype}")
        device = torch.device(device)
        self.in_features = in_features
        self.shard_sizes = list(shard_sizes)
        self.dtype = dtype
        self.group_size = group_size
        # A block-wise checkpoint's scales cover this many rows each; spread on load.
        self.block_rows = block_rows
        # Filled from a float checkpoint, each shard quantized as it arrives (its scales
        # are then computed, not read).
        self.quantize_on_load = quantize_on_load
        out = sum(shard_sizes)
        self.weight = nn.Parameter(
            torch.empty(out, in_features, dtype=FP8_DTYPE, device=device), requires_grad=False
        )
        scale_shape = (out,) if group_size is None else (out, -(-in_features // group_size))
        self.weight_scale = nn.Parameter(
            torch.ones(scale_shape, dtype=torch.float32, device=device), requires_grad=False
        )
        self.input_scale = (
            nn.Parameter(torch.zeros((), dtype=torch.float32, device=device), requires_grad=False)
            if input_scale
            else None
        )
        self.bias = (
            nn.Parameter(torch.empty(out, dtype=dtype, device=device), requires_grad=False)
            if bias
            else None
        )
        self._grouped_matmul = GroupedFp8Matmul()
        self._use_scaled_mm = False  # until a device profile says otherwise (`use_paths`)
        # Dynamic per-token activation scales before _scaled_mm: one Triton kernel where
        # the profile runs Triton, the same arithmetic in torch ops elsewhere.
        self._quantize_tokens: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] = (
            quantize_tokens_fp8
        )
        # Up to MAX_GEMV_TOKENS tokens of a dynamic per-row layer on CUDA: the weight-only
        # Triton kernel, which skips the quantizing and beats _scaled_mm at those sizes.
        self._gemv: Callable[..., torch.Tensor] | None = None

    def use_paths(self, *, scaled_mm: bool, triton: bool) -> None:
        """The device profile's FP8 paths, fixed for every later call: ``torch._scaled_mm``
        where it runs (it takes per-row weight scales only, and dimensions that are
        multiples of 16), the grouped Triton matmul for grouped scales where it runs."""
        aligned = self.in_features % 16 == 0 and self.out_features % 16 == 0
        self._use_scaled_mm = scaled_mm and self.group_size is None and aligned
        self._grouped_matmul.use_triton(triton)
        self._quantize_tokens = quantize_tokens_fp8
        self._gemv = None
        if triton:
            from inference.kernels.triton.fp8_gemv import fp8_gemv
            from inference.kernels.triton.fp8_quant import per_token_quant_fp8

            self._quantize_tokens = per_token_quant_fp8
            if self._use_scaled_mm and self.input_scale is None:
                self._gemv = fp8_gemv

    @classmethod
    def from_linear(cls, linear: FusedLinear, *, group_size: int | None = None) -> Fp8Linear:
        """Quantize a loaded FusedLinear (or Linear) into a new Fp8Linear on its device."""
        weight = linear.weight.data
        layer = cls(
            linear.in_features,
            linear.shard_sizes,
            bias=linear.bias is not None,
            dtype=weight.dtype,
            device=weight.device,
            group_size=group_size,
        )
        q, scale = quantize_weight_fp8(weight, group_size)
        layer.weight.data.copy_(q)
        layer.weight_scale.data.copy_(scale)
        if linear.bias is not None and layer.bias is not None:
            layer.bias.data.copy_(linear.bias.data)
        return layer

    @property
    def out_features(self) -> int:
        return sum(self.shard_sizes)

    @property
    def num_shards(self) -> int:
        return len(self.shard_sizes)

    def shard_rows(self, shard: int) -> slice:
        start = sum(self.shard_sizes[:shard])
        return slice(start, start + self.shard_sizes[shard])

    @property
    def checkpoint_parameters(self) -> tuple[str, ...]:
        """The parameters a checkpoint supplies: quantizing on load computes the scales."""
        if self.quantize_on_load:
            names: tuple[str, ...] = ("weight", "bias")
        else:
            names = ("weight", "weight_scale", "input_scale", "bias")
        return tuple(name for name in names if getattr(self, name) is not None)

    def load_shard(
        self, param_name: str, shard: int, tensor: torch.Tensor | AnyGroupQuantized, name: str
    ) -> None:
        """Copy checkpoint tensor `name` into shard `shard` of one of the layer's tensors
        (with ``quantize_on_load``, a float weight is quantized into the shard's rows)."""
        rows = self.shard_rows(shard)
        size = self.shard_sizes[shard]
        if param_name not in self.checkpoint_parameters:
            raise ValueError(f"unexpected tensor {name}: the layer takes no {param_name}")
        if param_name == "weight" and self.quantize_on_load:
            target = self.weight.data[rows]
            _check_shape(tensor, target.shape, name)
            quantize_rows_into(tensor, self.dtype, target, self.weight_scale.data[rows],
                               self.group_size)  # fmt: skip
        elif isinstance(tensor, AnyGroupQuantized):
            raise ValueError(f"tensor {name} is group-quantized; this FP8 layer reads e4m3")
        elif param_name == "weight":
            target = self.weight.data[rows]
            if tensor.dtype != FP8_DTYPE:
                raise ValueError(f"tensor {name} is {tensor.dtype}; an FP8 layer needs e4m3")
            _check_shape(tensor, target.shape, name)
            target.copy_(tensor)
        elif param_name == "weight_scale" and self.group_size is not None:
            groups = self.weight_scale.shape[1]
            scale = tensor.float()
            row_blocks = size if self.block_rows is None else -(-size // self.block_rows)
            if tuple(scale.shape) != (row_blocks, groups):
                raise ValueError(
                    f"tensor {name} has shape {tuple(tensor.shape)}; "
                    f"expected ({row_blocks}, {groups})"
                )
            if not bool((scale > 0).all()):
                raise ValueError(f"tensor {name} holds a scale that is not positive")
            if self.block_rows is not None:  # one row of scales per block of rows
                scale = scale.repeat_interleave(self.block_rows, dim=0)[:size]
            self.weight_scale.data[rows] = scale
        elif param_name == "weight_scale":
            scale = tensor.float()
            if scale.numel() == 1:  # per-tensor: every row of the shard shares it
                scale = scale.reshape(1).expand(size)
            elif tuple(scale.shape) in ((size,), (size, 1)):  # per-channel
                scale = scale.reshape(size)
            else:
                raise ValueError(
                    f"tensor {name} has shape {tuple(tensor.shape)}; expected a scalar, "
                    f"({size},) or ({size}, 1)"
                )
            if not bool((scale > 0).all()):
                raise ValueError(f"tensor {name} holds a scale that is not positive")
            self.weight_scale.data[rows] = scale
        elif param_name == "input_scale" and self.input_scale is not None:
            if tensor.numel() != 1:
                raise ValueError(f"tensor {name} must be a scalar, got {tuple(tensor.shape)}")
            # Fused shards share one activation: the largest scale covers them all.
            current = self.input_scale.data
            current.copy_(torch.maximum(current, tensor.float().reshape(())))
        elif param_name == "bias" and self.bias is not None:
            target = self.bias.data[rows]
            _check_shape(tensor, target.shape, name)
            target.copy_(tensor)
        else:
            raise ValueError(f"unexpected tensor {name}: the layer has no {param_name}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (T, in) -> (T, sum(shards))
        if self._use_scaled_mm:  # set by the device profile, which ran it once
            return self._forward_scaled_mm(x)
        return self._forward_dequant(x)

    @property
    def kernels(self) -> CpuLayerKernels | None:
        """The CPU's fused kernels, which dequantize the weight where set."""
        return self._grouped_matmul.kernels

    @kernels.setter
    def kernels(self, kernels: CpuLayerKernels | None) -> None:
        self._grouped_matmul.kernels = kernels

    def _forward_dequant(self, x: torch.Tensor) -> torch.Tensor:
        matmul = self._grouped_matmul
        if self.group_size is not None:
            y = matmul(x, self.weight, self.weight_scale, self.group_size)
        elif (fused := matmul.fused(x, self.weight, self.weight_scale, None)) is not None:
            y = fused
        else:
            weight = matmul.dequantize(self.weight, None, x.dtype)
            y = F.linear(x, weight) * self.weight_scale.to(x.dtype)
        return y if self.bias is None else y + self.bias

    def _forward_scaled_mm(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if self._gemv is not None and x2.shape[0] <= MAX_GEMV_TOKENS:
            y = self._gemv(x2, self.weight, self.weight_scale.reshape(-1))
            if self.bias is not None:
                y = y + self.bias
            return y.reshape(*shape[:-1], -1)
        if self.input_scale is not None:  # static: one scale for every token
            x_scale = self.input_scale.reshape(1, 1).expand(x2.shape[0], 1).contiguous()
            xq = (x2.float() / x_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
        else:  # dynamic: each token under its own scale
            xq, x_scale = self._quantize_tokens(x2)
        y = torch._scaled_mm(
            xq,
            self.weight.t(),  # (in, out), column-major as _scaled_mm wants it
            scale_a=x_scale,
            scale_b=self.weight_scale.reshape(1, -1),
            out_dtype=x.dtype,
        )
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], -1)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, shard_sizes={self.shard_sizes}, "
            f"bias={self.bias is not None}, static_input_scale={self.input_scale is not None}, "
            f"group_size={self.group_size}, block_rows={self.block_rows}"
        )


def _check_shape(tensor: torch.Tensor | AnyGroupQuantized, shape: torch.Size, name: str) -> None:
    if tuple(tensor.shape) != tuple(shape):
        raise ValueError(f"tensor {name} has shape {tuple(tensor.shape)}, expected {tuple(shape)}")


def replace_linears(
    model: nn.Module,
    wanted: Callable[[str], bool],
    make: Callable[[str, FusedLinear], nn.Module],
) -> int:
    """Swap each FusedLinear whose qualified name is `wanted` for ``make(name, it)``."""
    # Collected first: the tree is not changed while it is walked.
    targets = [
        (parent, name, f"{parent_name}.{name}".lstrip("."), child)
        for parent_name, parent in model.named_modules()
        for name, child in parent.named_children()
        if isinstance(child, FusedLinear)
    ]
    targets = [target for target in targets if wanted(target[2])]
    for parent, name, full_name, child in targets:
        setattr(parent, name, make(full_name, child))
    return len(targets)


def empty_fp8_like(
    linear: FusedLinear, *, input_scale: bool, block: tuple[int, int] | None = None
) -> Fp8Linear:
    """An Fp8Linear of `linear`'s shape and device, to be filled by a pre-quantized checkpoint.

    `block` (rows, columns): the checkpoint's weight scales are block-wise.
    """
    return Fp8Linear(
        linear.in_features,
        linear.shard_sizes,
        bias=linear.bias is not None,
        dtype=linear.weight.dtype,
        device=linear.weight.device,
        input_scale=input_scale,
        group_size=None if block is None else block[1],
        block_rows=None if block is None else block[0],
    )

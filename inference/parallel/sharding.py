"""Split a loaded model over tensor-parallel ranks (Megatron-style, two all-reduces a layer).

Each rank keeps:

- ``qkv_proj`` and ``gate_up_proj`` column-split: every fused shard (q | k | v, gate | up)
  keeps its rank's contiguous 1/N of rows, so the per-rank layer is still one fused
  matmul laid out q | k | v. Rows are whole heads, and query head h still groups with KV
  head h // group locally, since both head counts are divided by N.
- ``o_proj`` and ``down_proj`` row-split (their input columns), wrapped in `RowParallel`,
  which all-reduces the partial sums and adds the bias once, after the sum.
- everything else replicated: embeddings, lm_head (logits are computed on rank 0 only),
  the norms (Qwen3's q/k norms act per head_dim, so every rank needs the same weights).

Wrappers hold plain `FusedLinear` (or `Fp8Linear`) children, so a later pass that swaps
every FusedLinear by attribute (FP8 quantization) reaches the sharded layers too.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
from torch import nn

from inference.model.arch import ArchConfig
from inference.model.layers.linear import FusedLinear
from inference.model.llama import LlamaAttention, LlamaForCausalLM, LlamaMLP
from inference.model.quant.fp8 import Fp8Linear
from inference.model.quant.group_linear import GroupQuantWeights

AnyLinear = FusedLinear | Fp8Linear


def check_tensor_parallel(arch: ArchConfig, world: int) -> None:
    """Raise ValueError unless ``world`` ranks can split this model's heads and MLP evenly."""
    if world < 1:
        raise ValueError(f"tensor_parallel_size must be at least 1, got {world}")
    for name, value in (
        ("num_heads", arch.num_heads),
        ("num_kv_heads", arch.num_kv_heads),
        ("intermediate_size", arch.intermediate_size),
    ):
        if value % world:
            raise ValueError(
                f"{name} ({value}) is not divisible by tensor_parallel_size ({world}); "
                "each rank must hold an equal share (KV heads are not replicated)"
            )


def local_arch(arch: ArchConfig, world: int) -> ArchConfig:
    """The head counts one rank runs (what its attention and KV pool are sized by)."""
    check_tensor_parallel(arch, world)
    return dataclasses.replace(
        arch, num_heads=arch.num_heads // world, num_kv_heads=arch.num_kv_heads // world
    )


def column_rows(shard_sizes: list[int], rank: int, world: int) -> list[slice]:
    """The rows of a fused layer that ``rank`` keeps: 1/N of every shard, in shard order."""
    rows: list[slice] = []
    start = 0
    for size in shard_sizes:
        if size % world:
            raise ValueError(f"shard of {size} rows does not split over {world} ranks")
        part = size // world
        rows.append(slice(start + rank * part, start + (rank + 1) * part))
        start += size
    return rows


def column_shard(layer: AnyLinear, rank: int, world: int) -> AnyLinear:
    """A new layer holding ``rank``'s rows of every shard of ``layer`` (no communication)."""
    rows = column_rows(layer.shard_sizes, rank, world)
    local = _empty_like(layer, layer.in_features, [s // world for s in layer.shard_sizes])
    with torch.no_grad():
        for name, param in _params(layer).items():
            if name == "input_scale":  # one scalar for the whole activation
                getattr(local, name).copy_(param)
            else:  # weight, weight_scale and bias follow the output rows
                getattr(local, name).copy_(torch.cat([param[r] for r in rows]))
    return local


class RowParallel(nn.Module):
    """A layer split along its input: local partial sums, all-reduced, then the bias once.

    ``inner`` holds this rank's columns of the weight and no bias (a bias added on every
    rank would be summed N times).
    """

    def __init__(
        self, inner: AnyLinear, bias: torch.Tensor | None, group: dist.ProcessGroup | None
    ) -> None:
        super().__init__()
        self.inner = inner
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner(x)
        dist.all_reduce(out, group=self.group)
        return out if self.bias is None else out + self.bias


def row_shard(
    layer: AnyLinear, rank: int, world: int, group: dist.ProcessGroup | None
) -> RowParallel:
    """Wrap ``rank``'s input columns of ``layer`` in a `RowParallel`."""
    if layer.in_features % world:
        raise ValueError(f"{layer.in_features} input features do not split over {world} ranks")
    part = layer.in_features // world
    cols = slice(rank * part, (rank + 1) * part)
    per_scale = layer.group_size if isinstance(layer, Fp8Linear) else None
    if per_scale is not None and part % per_scale:
        raise ValueError(
            f"{part} input features per rank do not hold whole groups of {per_scale} FP8 scales"
        )
    params = _params(layer)
    inner = _empty_like(layer, part, layer.shard_sizes, bias=False)
    with torch.no_grad():
        for name, param in params.items():
            if name == "weight":
                inner.weight.copy_(param[:, cols])
            elif name == "weight_scale" and per_scale is not None:  # the rank's column groups
                groups = slice(rank * part // per_scale, (rank + 1) * part // per_scale)
                getattr(inner, name).copy_(param[:, groups])
            elif name != "bias":  # per-output-row and per-tensor scales stay whole
                getattr(inner, name).copy_(param)
    bias = params.get("bias")
    return RowParallel(inner, None if bias is None else bias.detach().clone(), group)


def shard_model(
    model: LlamaForCausalLM, rank: int, world: int, group: dist.ProcessGroup | None
) -> LlamaForCausalLM:
    """Keep ``rank``'s share of every attention and MLP layer of a loaded model, in place.

    ``group`` is where the row-parallel layers all-reduce (None: the default group).
    A ``world`` of 1 leaves the model as it is.
    """
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside a tensor-parallel group of {world}")
    check_tensor_parallel(model.config, world)
    if world == 1:
        return model
    for module in list(model.modules()):
        # add_module swaps a child by name (the class's attribute types name FusedLinear).
        if isinstance(module, LlamaAttention):
            module.add_module("qkv_proj", column_shard(_linear(module.qkv_proj), rank, world))
            module.add_module("o_proj", row_shard(_linear(module.o_proj), rank, world, group))
            module.num_heads //= world
            module.num_kv_heads //= world
        elif isinstance(module, LlamaMLP):
            gate_up = column_shard(_linear(module.gate_up_proj), rank, world)
            module.add_module("gate_up_proj", gate_up)
            module.add_module("down_proj", row_shard(_linear(module.down_proj), rank, world, group))
    return model


def _linear(module: nn.Module) -> AnyLinear:
    if isinstance(module, GroupQuantWeights):
        raise ValueError(
            "tensor parallelism does not split group-quantized layers (a GPTQ or AWQ "
            "checkpoint, or --quantization gguf); run this model with --tensor-parallel-size 1"
        )
    if not isinstance(module, FusedLinear | Fp8Linear):
        raise TypeError(f"cannot shard a {type(module).__name__}; expected a linear layer")
    return module


def _params(layer: AnyLinear) -> dict[str, torch.Tensor]:
    return {name: p.data for name, p in layer.named_parameters(recurse=False)}


def _empty_like(
    layer: AnyLinear, in_features: int, shard_sizes: list[int], *, bias: bool | None = None
) -> AnyLinear:
    """An unfilled layer of ``layer``'s kind, dtype and device with a new shape."""
    has_bias = layer.bias is not None if bias is None else bias
    device = layer.weight.device
    if isinstance(layer, Fp8Linear):
        return Fp8Linear(
            in_features,
            shard_sizes,
            bias=has_bias,
            dtype=layer.dtype,
            device=device,
            input_scale=layer.input_scale is not None,
            group_size=layer.group_size,
            block_rows=layer.block_rows,
        )
    return FusedLinear(
        in_features, shard_sizes, bias=has_bias, dtype=layer.weight.dtype, device=device
    )

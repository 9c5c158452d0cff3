"""Checkpoint names -> our (fused) parameters: the one table, and the loader that uses it."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from inference.model.layers.linear import FusedLinear
from inference.model.quant.fp8 import Fp8Linear
from inference.model.quant.fp8_embedding import Fp8Embedding
from inference.model.quant.group_lazy import AnyGroupQuantized, LazyGroupQuantized
from inference.model.quant.group_linear import GroupQuantEmbedding, GroupQuantLinear
from inference.model.quant.group_math import dequantize

# Layers whose rows are filled shard by shard through `load_shard`.
SHARDED_LINEARS = (FusedLinear, Fp8Linear, GroupQuantLinear)
# Layers that take `GroupQuantized` (or lazy) tensors (through `load_shard`).
QUANTIZED_LAYERS = (GroupQuantLinear, GroupQuantEmbedding)
# Other layers whose tensors go through their `load_shard` (which may quantize them).
LOADING_LAYERS = (*SHARDED_LINEARS, Fp8Embedding)
# FP8 layers filled from floats: GGUF blocks reach them as they are, to be dequantized a
# slice at a time (an FP8 layer reading e4m3 refuses them).
QUANTIZING_LAYERS = (Fp8Linear, Fp8Embedding)

# Checkpoint module name -> (our fused module name, shard index).
FUSED_MODULES: dict[str, tuple[str, int]] = {
    "self_attn.q_proj": ("self_attn.qkv_proj", 0),
    "self_attn.k_proj": ("self_attn.qkv_proj", 1),
    "self_attn.v_proj": ("self_attn.qkv_proj", 2),
    "mlp.gate_proj": ("mlp.gate_up_proj", 0),
    "mlp.up_proj": ("mlp.gate_up_proj", 1),
}

# Present in some checkpoints, derived by us.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def _target(name: str) -> tuple[str, int]:
    """HF parameter name -> (our parameter name, shard index; 0 for unfused)."""
    module, _, param = name.rpartition(".")
    for hf_part, (ours, shard) in FUSED_MODULES.items():
        if module.endswith("." + hf_part):
            return f"{module[: -len(hf_part)]}{ours}.{param}", shard
    return name, 0


def _expected(model: nn.Module) -> dict[tuple[str, int], str]:
    """Every (our parameter, shard) that must be loaded -> the checkpoint name it comes from."""
    inverse: dict[str, dict[int, str]] = {}
    for hf_part, (ours, shard) in FUSED_MODULES.items():
        inverse.setdefault(ours, {})[shard] = hf_part
    expected: dict[tuple[str, int], str] = {}
    for module_name, module in model.named_modules():
        supplied = getattr(module, "checkpoint_parameters", None)
        for param_name, _ in module.named_parameters(recurse=False):
            if supplied is not None and param_name not in supplied:
                continue  # computed while loading (an FP8 scale)
            full = f"{module_name}.{param_name}"
            shards = module.num_shards if isinstance(module, SHARDED_LINEARS) else 1
            for shard in range(shards):
                hf_name = full
                for ours, by_shard in inverse.items():
                    if module_name.endswith("." + ours) and shard in by_shard:
                        prefix = module_name[: -len(ours)]
                        hf_name = f"{prefix}{by_shard[shard]}.{param_name}"
                expected[(full, shard)] = hf_name
    return expected


def load_named_weights(
    model: nn.Module, weights: Iterable[tuple[str, torch.Tensor | AnyGroupQuantized]], *, tied: bool
) -> None:
    expected = _expected(model)
    modules = dict(model.named_modules())
    loaded: set[tuple[str, int]] = set()
    for name, tensor in weights:
        if name.endswith(IGNORED_SUFFIXES) or (tied and name == "lm_head.weight"):
            continue
        target, shard = _target(name)
        if (target, shard) not in expected:
            raise ValueError(f"unexpected tensor {name} in checkpoint")
        if (target, shard) in loaded:
            raise ValueError(f"tensor {name} appears twice in checkpoint")
        module_name, _, param_name = target.rpartition(".")
        module = modules[module_name]
        quantized = isinstance(tensor, AnyGroupQuantized)
        if isinstance(module, QUANTIZED_LAYERS) or (
            quantized and isinstance(module, QUANTIZING_LAYERS)
        ):
            if not isinstance(tensor, torch.Tensor):
                tensor.check(name)
            module.load_shard(param_name, shard, tensor, name)
            loaded.add((target, shard))
            continue
        if not isinstance(tensor, torch.Tensor):  # a layer kept in floats (its shards differ)
            tensor.check(name)
            tensor = dequantize(
                tensor.materialize() if isinstance(tensor, LazyGroupQuantized) else tensor
            )
        with torch.no_grad():
            if isinstance(module, LOADING_LAYERS):
                module.load_shard(param_name, shard, tensor, name)
            else:
                param = getattr(module, param_name)
                if tuple(tensor.shape) != tuple(param.shape):
                    raise ValueError(
                        f"tensor {name} has shape {tuple(tensor.shape)}, "
                        f"expected {tuple(param.shape)}"
                    )
                param.copy_(tensor)
        loaded.add((target, shard))
    missing = [hf for key, hf in expected.items() if key not in loaded]
    if missing:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        raise ValueError(f"checkpoint is missing tensors: {shown}")

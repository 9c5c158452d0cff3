"""Swap a freshly built model's layers for group-quantized ones where a checkpoint keeps
their weights quantized (a GGUF file read with ``keep_quantized``)."""

from __future__ import annotations

import torch
from torch import nn

from inference.model.layers.embedding import VocabEmbedding
from inference.model.layers.linear import FusedLinear
from inference.model.quant.fp8 import replace_linears
from inference.model.quant.group_linear import (
    GroupQuantEmbedding,
    GroupQuantLinear,
    GroupQuantWeights,
)
from inference.model.weights import _expected


def prepare_group_quant(model: nn.Module, kept: dict[str, tuple[int, int]]) -> int:
    """Replace each linear whose every shard's checkpoint tensor is in ``kept`` (HF name ->
    (bits, group size)), all in one format, and each embedding whose table is, by empty
    group-quantized layers for the loader to fill. A fused layer whose shards differ stays
    in floats (its quantized shards are dequantized as they load). Returns how many
    layers were replaced."""
    checkpoint_names = _expected(model)

    def shard_formats(name: str, linear: FusedLinear) -> set[tuple[int, int] | None]:
        return {
            kept.get(checkpoint_names[(f"{name}.weight", shard)])
            for shard in range(linear.num_shards)
        }

    linears = dict(model.named_modules())

    def wanted(name: str) -> bool:
        module = linears[name]
        formats = shard_formats(name, module) if isinstance(module, FusedLinear) else {None}
        return len(formats) == 1 and None not in formats

    def make(name: str, linear: FusedLinear) -> GroupQuantLinear:
        (kept_as,) = shard_formats(name, linear)
        assert kept_as is not None  # `wanted` let only one format through
        bits, group_size = kept_as
        return GroupQuantLinear(
            linear.in_features,
            linear.shard_sizes,
            bits=bits,
            group_size=group_size,
            bias=linear.bias is not None,
            dtype=linear.weight.dtype,
            device=linear.weight.device,
        )

    replaced = replace_linears(model, wanted, make)
    embeddings = [
        (parent, name, f"{parent_name}.{name}.weight".lstrip("."), child)
        for parent_name, parent in model.named_modules()
        for name, child in parent.named_children()
        if isinstance(child, VocabEmbedding)
    ]
    for parent, name, weight_name, child in embeddings:
        if weight_name in kept:
            bits, group_size = kept[weight_name]
            vocab, hidden = child.weight.shape
            table = GroupQuantEmbedding(
                vocab, hidden, bits=bits, group_size=group_size,
                dtype=child.weight.dtype, device=child.weight.device,
            )  # fmt: skip
            setattr(parent, name, table)
            replaced += 1
    return replaced


def kept_in_floats(model: nn.Module, kept: dict[str, tuple[int, int]]) -> set[str]:
    """The checkpoint names in ``kept`` whose layer `prepare_group_quant` left in floats
    (a fused layer whose shards differ): read from the file as floats, they are exact,
    where the kept form of a K-quant is only close."""
    modules = dict(model.named_modules())
    return {
        name
        for (target, _), name in _expected(model).items()
        if name in kept
        and not isinstance(
            modules[target.rpartition(".")[0]], GroupQuantLinear | GroupQuantEmbedding
        )
    }


def use_int8_activations(model: nn.Module, device: torch.device) -> int:
    """Let every group-quantized layer multiply few rows with int8 activations
    (`GroupQuantWeights.int8_activations`); returns how many layers. ValueError where the
    model has none, or runs on another device than the CPU (whose kernel this is)."""
    if device.type != "cpu":
        raise ValueError(f"int8 activations run on the CPU kernels, not on {device.type}")
    layers = [module for module in model.modules() if isinstance(module, GroupQuantWeights)]
    if not layers:
        raise ValueError(
            "int8 activations multiply group-quantized weights (a GGUF file with "
            "quantization 'gguf', a GPTQ or AWQ checkpoint); this model has none"
        )
    for layer in layers:
        layer.int8_activations = True
    return len(layers)

"""GPTQ and AWQ checkpoints: recognised, and loaded into group-quantized layers as they are.

config.json's ``quantization_config`` says the format (packed_format.py; an older
quantize_config.json or quant_config.json is read into it by loader/quantize_config.py);
the tensor names say which layers it covers (those with a ``qweight``;
``modules_to_not_convert`` and lm_head keep a float ``weight``). Each layer's parts
(``qweight``, ``qzeros``, ``scales``, ``g_idx``) are collected as the tensors stream and
handed on as one `GroupQuantized` ``weight``, so the weights are never held in floats.

Act-order layers permute their input columns. q|k|v (and gate|up) run as one fused layer
with one input, so their shards must share the permutation; GPTQ computes it from the
layer input's statistics, which the shards share, so they normally do. Where they do not
(or where the shards' formats differ), that fused layer is dequantized at load and stays
in floats: correct, and rare enough not to need a layer per shard.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

from inference.model.layers.linear import FusedLinear
from inference.model.loader.safetensors import read_header
from inference.model.quant.group_apply import prepare_group_quant
from inference.model.quant.group_linear import GroupQuantLinear
from inference.model.quant.group_math import GroupQuantized, dequantize
from inference.model.quant.packed_format import (
    PackedFormat,
    convert_packed,
    input_permutation,
    read_packed_format,
)
from inference.model.weights import _expected

log = logging.getLogger("inference.model")
PACKED_METHODS = ("gptq", "awq")


@dataclass
class PackedCheckpoint:
    """What a GPTQ/AWQ checkpoint holds, by checkpoint module name (``...q_proj``)."""

    fmt: PackedFormat
    parts: dict[str, frozenset[str]]  # quantized module -> the parts it has
    perms: dict[str, torch.Tensor | None]  # quantized module -> its input permutation
    # Filled by `prepare`: quantized modules whose fused layer stays in floats.
    dequantized: set[str] = field(default_factory=set)

    @property
    def merged_tensors(self) -> int:
        """How many fewer tensors `convert_tensors` yields than the files hold."""
        return sum(len(parts) - 1 for parts in self.parts.values())

    def prepare(self, model: nn.Module) -> int:
        """Swap each linear all of whose shards are quantized in one format and order for
        an empty GroupQuantLinear (with the permutation act-order needs); returns how many."""
        by_layer: dict[str, list[str]] = {}
        for (param, _shard), hf_name in _expected(model).items():
            if param.endswith(".weight"):
                by_layer.setdefault(param.removesuffix(".weight"), []).append(
                    hf_name.removesuffix(".weight")
                )
        modules = dict(model.named_modules())
        kept: dict[str, tuple[int, int]] = {}
        perms: dict[str, torch.Tensor] = {}
        for layer, shards in by_layer.items():
            quantized = [s for s in shards if s in self.parts]
            if not quantized:
                continue
            module = modules[layer]
            perm = self.perms[quantized[0]]
            same_order = all(_same_perm(self.perms[s], perm) for s in quantized)
            if (
                not isinstance(module, FusedLinear)
                or len(quantized) != len(shards)
                or (not same_order)
            ):
                self.dequantized.update(quantized)
                continue
            group_size = self.fmt.layer_group_size(module.in_features)
            kept.update({f"{s}.weight": (self.fmt.bits, group_size) for s in shards})
            if perm is not None:
                perms[layer] = perm
        unknown = set(self.parts) - {s for shards in by_layer.values() for s in shards}
        if unknown:
            raise ValueError(f"quantized tensors for unknown layers: {sorted(unknown)[:3]}")
        replaced = prepare_group_quant(model, kept)
        modules = dict(model.named_modules())
        for layer, perm in perms.items():
            target = modules[layer]
            assert isinstance(target, GroupQuantLinear)  # kept above, so replaced
            target.set_input_perm(perm)
        log.info(
            "%s checkpoint: %d layers kept quantized, %d shards dequantized (fused shards "
            "in different formats or column orders)",
            self.fmt.describe(), replaced, len(self.dequantized),
        )  # fmt: skip
        return replaced

    def convert_tensors(
        self, tensors: Iterable[tuple[str, torch.Tensor]]
    ) -> Iterator[tuple[str, torch.Tensor | GroupQuantized]]:
        """The checkpoint's tensors with each quantized layer's parts merged into one
        ``weight``: a `GroupQuantized`, or float32 where `prepare` kept the layer in floats."""
        pending: dict[str, dict[str, torch.Tensor]] = {}
        for name, tensor in tensors:
            module, _, part = name.rpartition(".")
            if module not in self.parts or part not in self.parts[module]:
                yield name, tensor
                continue
            collected = pending.setdefault(module, {})
            collected[part] = tensor
            if set(collected) != self.parts[module]:
                continue
            del pending[module]
            packed, perm = convert_packed(self.fmt, collected, module)
            if module not in self.dequantized:
                yield f"{module}.weight", packed
                continue
            weight = dequantize(packed)
            if perm is not None:  # back to the checkpoint's column order
                weight = torch.empty_like(weight).index_copy_(1, perm, weight)
            yield f"{module}.weight", weight
        if pending:
            module, collected = next(iter(pending.items()))
            missing = sorted(self.parts[module] - set(collected))
            raise ValueError(f"quantized layer {module} is missing {', '.join(missing)}")


def inspect_packed_checkpoint(
    hf_config: dict[str, Any], files: list[Path]
) -> PackedCheckpoint | None:
    """A PackedCheckpoint when the config declares GPTQ or AWQ; None for other checkpoints.
    ValueError for GPTQ/AWQ tensors without the declaration, or a declaration without them."""
    fmt = read_packed_format(hf_config.get("quantization_config"))
    located: dict[str, Path] = {}
    parts: dict[str, set[str]] = {}
    for path in files:
        for name in read_header(path):
            located[name] = path
            module, _, part = name.rpartition(".")
            if part in ("qweight", "qzeros", "scales", "g_idx"):
                parts.setdefault(module, set()).add(part)
    if fmt is None:
        if any("qweight" in found for found in parts.values()):
            raise ValueError(
                "the checkpoint has packed 'qweight' tensors (GPTQ or AWQ), but config.json "
                "declares no quantization_config with quant_method 'gptq' or 'awq' (and "
                "there is no quantize_config.json or quant_config.json)"
            )
        return None
    quantized = {m: p for m, p in parts.items() if "qweight" in p}
    if not quantized:
        raise ValueError(f"the config declares {fmt.method.upper()}, but no tensor is a qweight")
    for module, found in quantized.items():
        missing = sorted(set(fmt.parts) - found - {"g_idx"})  # g_idx may be left out
        if missing:
            raise ValueError(f"quantized layer {module} is missing {', '.join(missing)}")
    perms: dict[str, torch.Tensor | None] = {module: None for module in quantized}
    for module in (m for m, found in quantized.items() if "g_idx" in found):
        name = f"{module}.g_idx"
        with safe_open(str(located[name]), framework="pt") as f:  # small: one int a column
            perms[module] = input_permutation(f.get_tensor(name))
    return PackedCheckpoint(
        fmt,
        {m: frozenset(found & set(fmt.parts)) for m, found in quantized.items()},
        perms,
    )


def check_requested(
    quantization: str | None, checkpoint: PackedCheckpoint | None, name: str
) -> None:
    """ValueError where ``--quantization`` does not fit what the checkpoint holds."""
    if checkpoint is None:
        if quantization in PACKED_METHODS:
            raise ValueError(
                f"--quantization {quantization} loads a {quantization.upper()} checkpoint, and "
                f"{name} is not one (neither config.json nor a quantize_config.json / "
                f"quant_config.json declares quant_method {quantization!r})"
            )
        return
    held = checkpoint.fmt.describe()
    if quantization == "fp8":
        raise ValueError(
            f"{name} is already quantized ({held}); --quantization fp8 would have to "
            "dequantize it to floats first. Leave --quantization out (or use "
            f"{checkpoint.fmt.method}) to run it as it is"
        )
    if quantization is not None and quantization != checkpoint.fmt.method:
        raise ValueError(
            f"{name} holds {held}; --quantization {quantization} does not apply "
            f"(use {checkpoint.fmt.method}, or leave it out)"
        )


def _same_perm(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return torch.equal(a, b)

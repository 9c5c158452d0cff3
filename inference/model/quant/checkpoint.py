"""Pre-quantized FP8 checkpoints: recognised, and loaded as they are (never via bf16).

The layout llm-compressor / compressed-tensors and vLLM's fp8 method write: a quantized
linear's ``weight`` is float8_e4m3fn and ``weight_scale`` beside it is a per-tensor scalar
or per-channel ((out,) or (out, 1)); static activation scales add ``input_scale``. Newer
files carry KV cache scales as ``self_attn.k_scale`` / ``v_scale`` (older ones as
``k_proj.output_scale`` / ``v_proj.output_scale``). Which linears are quantized is read
from the tensors themselves, so a checkpoint that keeps some layers in bf16 loads too.

Block-wise checkpoints (vLLM / DeepSeek ``quant_method: fp8`` with ``weight_block_size``,
scales named ``weight_scale_inv``; compressed-tensors ``strategy: block`` with
``block_structure``) hold one scale per (rows x columns) block of a weight; they load into
grouped Fp8Linear layers (see fp8.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from inference.model.quant.fp8 import Fp8Linear, empty_fp8_like, replace_linears
from inference.model.weights import _target

FP8_HEADER_DTYPE = "F8_E4M3"
OTHER_FP8_HEADER_DTYPES = ("F8_E5M2",)
KV_SCALE_NAMES = {
    "self_attn.k_scale": 0,
    "self_attn.v_scale": 1,
    "self_attn.k_proj.output_scale": 0,
    "self_attn.v_proj.output_scale": 1,
}
LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# DeepSeek's name for a block-wise weight scale (it multiplies, like weight_scale).
SCALE_INV_SUFFIX = ".weight_scale_inv"


@dataclass
class Fp8Checkpoint:
    """What an FP8 checkpoint holds, in our module names (q|k|v and gate|up fused)."""

    quantized: frozenset[str]  # modules whose weights are e4m3
    static_input: frozenset[str]  # those that also have input_scale
    block: tuple[int, int] | None = None  # (rows, columns) of a block-wise scale
    # Filled while the tensors stream: layer index -> [k_scale, v_scale].
    kv_scales: dict[int, list[float]] = field(default_factory=dict)

    def prepare(self, model: nn.Module) -> int:
        """Swap the quantized modules of a freshly built model for empty Fp8Linear layers."""
        replaced = replace_linears(
            model,
            lambda name: name in self.quantized,
            lambda name, linear: empty_fp8_like(
                linear, input_scale=name in self.static_input, block=self.block
            ),
        )
        if replaced != len(self.quantized):
            missing = sorted(self.quantized - _linear_names(model))
            raise ValueError(f"FP8 checkpoint has scales for unknown layers: {missing[:3]}")
        return replaced

    def filter_tensors(
        self, tensors: Iterable[tuple[str, torch.Tensor]]
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Pass every tensor on except KV cache scales, which are kept in ``kv_scales``;
        ``weight_scale_inv`` passes on as ``weight_scale``."""
        for name, tensor in tensors:
            slot = _kv_scale_slot(name)
            if slot is None:
                if name.endswith(SCALE_INV_SUFFIX):
                    name = name.removesuffix(SCALE_INV_SUFFIX) + ".weight_scale"
                yield name, tensor
                continue
            layer = LAYER_INDEX.search(name)
            if layer is None or tensor.numel() != 1:
                raise ValueError(f"KV cache scale {name} must be a scalar of a numbered layer")
            value = float(tensor.float().reshape(()))
            if not value > 0:
                raise ValueError(f"KV cache scale {name} is {value}; it must be positive")
            self.kv_scales.setdefault(int(layer.group(1)), [1.0, 1.0])[slot] = value

    def layer_kv_scales(self, num_layers: int) -> list[tuple[float, float]] | None:
        """Per-layer (k_scale, v_scale), or None when the checkpoint had none."""
        if not self.kv_scales:
            return None
        return [tuple(self.kv_scales.get(i, [1.0, 1.0])) for i in range(num_layers)]  # type: ignore[misc]


def inspect_fp8_checkpoint(
    hf_config: dict[str, Any], headers: Iterable[tuple[str, str]]
) -> Fp8Checkpoint | None:
    """An Fp8Checkpoint when config.json or the tensor dtypes say FP8; None otherwise.

    `headers` are (tensor name, safetensors dtype) pairs. Quantization this engine cannot
    run (other methods, e5m2 FP8) is a ValueError naming it.
    """
    config = hf_config.get("quantization_config")
    declared = _declares_fp8(config)
    block = _weight_block(config) if declared and isinstance(config, dict) else None
    quantized: set[str] = set()
    static_input: set[str] = set()
    for name, dtype in headers:
        if dtype in OTHER_FP8_HEADER_DTYPES:
            raise ValueError(f"tensor {name} is {dtype}; only float8_e4m3fn FP8 is supported")
        param = name.rpartition(".")[2]
        if param == "weight" and dtype == FP8_HEADER_DTYPE:
            quantized.add(_our_module(name))
        elif param == "input_scale":
            static_input.add(_our_module(name))
        elif param == "weight_scale_inv" and block is None:
            raise ValueError(
                f"tensor {name} is a block-wise scale, but config.json gives no "
                "quantization_config.weight_block_size"
            )
    if not quantized:
        if declared:
            raise ValueError("config.json declares FP8 quantization, but no weight is e4m3")
        return None
    stray = static_input - quantized
    if stray:
        raise ValueError(f"input_scale for layers that are not FP8: {sorted(stray)[:3]}")
    return Fp8Checkpoint(frozenset(quantized), frozenset(static_input), block)


def _our_module(hf_name: str) -> str:
    return _target(hf_name)[0].rpartition(".")[0]


def _kv_scale_slot(name: str) -> int | None:
    for suffix, slot in KV_SCALE_NAMES.items():
        if name.endswith("." + suffix):
            return slot
    return None


def _linear_names(model: nn.Module) -> set[str]:
    return {name for name, module in model.named_modules() if isinstance(module, Fp8Linear)}


def _declares_fp8(config: object) -> bool:
    """Whether quantization_config asks for FP8 we run; ValueError for anything else."""
    if config is None:
        return False
    if not isinstance(config, dict):
        raise ValueError("config.json quantization_config must be an object")
    method = config.get("quant_method")
    if method == "fp8":
        if config.get("fmt", "e4m3") != "e4m3":
            raise ValueError(f"FP8 format {config.get('fmt')!r} is not supported; only e4m3")
        return True
    if method == "compressed-tensors":
        groups = config.get("config_groups") or {}
        if not isinstance(groups, dict) or not groups:
            raise ValueError("compressed-tensors quantization_config has no config_groups")
        for group_name, group in groups.items():
            _check_compressed_group(str(group_name), group)
        return True
    raise ValueError(
        f"checkpoint quantization {method!r} is not supported; only FP8 "
        "(quant_method 'fp8' or 'compressed-tensors' with 8-bit float weights)"
    )


def _check_compressed_group(name: str, group: object) -> None:
    weights = group.get("weights") if isinstance(group, dict) else None
    if not isinstance(weights, dict):
        raise ValueError(f"compressed-tensors group {name} has no weights scheme")
    if weights.get("type") != "float" or weights.get("num_bits") != 8:
        raise ValueError(
            f"compressed-tensors group {name}: {weights.get('num_bits')}-bit "
            f"{weights.get('type')} weights are not supported; only 8-bit float (FP8)"
        )
    if weights.get("strategy", "tensor") not in ("tensor", "channel", "block"):
        raise ValueError(
            f"compressed-tensors group {name}: weight strategy {weights.get('strategy')!r} "
            "is not supported; only 'tensor', 'channel' or 'block'"
        )


def _weight_block(config: dict[str, Any]) -> tuple[int, int] | None:
    """(rows, columns) of a block-wise FP8 checkpoint's scale blocks; None if not block-wise."""
    blocks: list[object] = []
    if config.get("quant_method") == "fp8":
        blocks = [config.get("weight_block_size")] if config.get("weight_block_size") else []
    else:  # compressed-tensors, already checked by _declares_fp8
        weights = [group["weights"] for group in config["config_groups"].values()]
        blocks = [w.get("block_structure") for w in weights if w.get("strategy") == "block"]
        if blocks and len(blocks) != len(weights):
            raise ValueError("compressed-tensors groups mixing block-wise and other FP8 weights")
    if not blocks:
        return None
    shapes = set()
    for block in blocks:
        if (
            not isinstance(block, list | tuple)
            or len(block) != 2
            or not all(isinstance(n, int) and n > 0 for n in block)
        ):
            raise ValueError(f"FP8 weight block {block!r} must be two positive integers")
        shapes.add((block[0], block[1]))
    if len(shapes) > 1:
        raise ValueError(f"FP8 weight blocks of different shapes are not supported: {shapes}")
    return shapes.pop()

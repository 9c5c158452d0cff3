"""What one decode step reads from the weights: the bound that batch-1 decode time should
follow (a 4-bit model reads about a quarter of bf16's bytes)."""

from __future__ import annotations

from torch import nn

from inference.model.quant.group_linear import GroupQuantWeights

# Tensors read whole by every step: weights, their scales / offsets, biases and norms.
# Caches of derived values (rotary tables) are not weights.
WEIGHT_NAMES = ("weight", "weight_scale", "weight_offset", "bias", "input_perm")


def decode_weights(model: nn.Module) -> tuple[int, int]:
    """(bytes, weight values) a decode step reads once each. The token table counts only
    where it is also the output projection (tied): a lookup reads a few rows of it. The
    values count each logical weight once, whatever its storage (a 4-bit code is one)."""
    skipped: set[int] = set()
    table = getattr(getattr(model, "model", None), "embed_tokens", None)
    if getattr(model, "lm_head", None) is not None and isinstance(table, nn.Module):
        skipped = {id(t) for t in (*table.parameters(), *table.buffers())}
    seen: set[int] = set()
    total = values = 0
    for module in model.modules():
        tensors = [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
        for name, tensor in tensors:
            if name not in WEIGHT_NAMES or id(tensor) in skipped or id(tensor) in seen:
                continue  # a tied table is one tensor, read once
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
            if name == "weight" and isinstance(module, GroupQuantWeights):
                values += module.weight_scale.shape[0] * module.cols  # packed codes
            elif name == "weight":
                values += tensor.numel()
    return total, values


def decode_weight_bytes(model: nn.Module) -> int:
    """The bytes of `decode_weights`."""
    return decode_weights(model)[0]

"""How many bytes of weights one decode step reads: the bound that batch-1 decode time
should follow (a 4-bit model reads about a quarter of bf16's bytes)."""

from __future__ import annotations

from torch import nn

# Tensors read whole by every step: weights, their scales / offsets, biases and norms.
# Caches of derived values (rotary tables) are not weights.
WEIGHT_NAMES = ("weight", "weight_scale", "weight_offset", "bias", "input_perm")


def decode_weight_bytes(model: nn.Module) -> int:
    """Bytes of every weight a decode step reads once. The token table counts only where
    it is also the output projection (tied): a lookup reads a few rows of it."""
    skipped: set[int] = set()
    table = getattr(getattr(model, "model", None), "embed_tokens", None)
    if getattr(model, "lm_head", None) is not None and isinstance(table, nn.Module):
        skipped = {id(t) for t in (*table.parameters(), *table.buffers())}
    seen: set[int] = set()
    total = 0
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if name.rpartition(".")[2] not in WEIGHT_NAMES or id(tensor) in skipped:
            continue
        if id(tensor) in seen:  # a tied table is one tensor, read once
            continue
        seen.add(id(tensor))
        total += tensor.numel() * tensor.element_size()
    return total

"""Prepacked bfloat16 weights (oneDNN's layout) give the very same results as plain ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inference.model.layers.linear import FusedLinear, can_prepack_for_cpu
from inference.model.loader import load_model
from tests.inference.checkpoints import make_checkpoint
from tests.inference.model.paged import PagedDriver

# Packing happens only where oneDNN has bf16 kernels (AVX-512 BF16 or AMX, as on the
# machines this project runs on); elsewhere nothing is packed and nothing may change.
PACKS = can_prepack_for_cpu(torch.empty(1, dtype=torch.bfloat16))


def test_a_packed_layer_computes_the_same_bits() -> None:
    gen = torch.Generator().manual_seed(0)
    layer = FusedLinear(64, [48, 16], bias=True, dtype=torch.bfloat16, device=torch.device("cpu"))
    layer.weight.data.copy_(torch.randn(64, 64, generator=gen))
    assert layer.bias is not None
    layer.bias.data.copy_(torch.randn(64, generator=gen))
    inputs = [torch.randn(rows, 64, generator=gen).bfloat16() for rows in (1, 5, 64, 300)]
    expected = [layer(x) for x in inputs]
    if PACKS:
        layer.prepack_for_cpu(batch_hint=64)
        assert layer.packed and layer.weight.is_mkldnn
    for x, want in zip(inputs, expected, strict=True):
        assert torch.equal(layer(x), want)


@pytest.mark.parametrize("kind", ["smollm2", "qwen2"])  # a tied head; qkv biases
def test_a_packed_model_gives_the_same_logits(kind: str, tmp_path: Path) -> None:
    model, config = load_model(make_checkpoint(kind, tmp_path), dtype="bfloat16", progress=False)
    tokens = torch.randint(3, config.vocab_size, (24,), generator=torch.Generator().manual_seed(1))
    expected = PagedDriver(model, num_blocks=8).step({0: tokens.tolist()})
    packed = model.prepack_for_cpu(batch_hint=16)
    # q|k|v, o, gate|up and down in each layer, plus the output projection.
    assert packed == (4 * config.num_layers + 1 if PACKS else 0)
    actual = PagedDriver(model, num_blocks=8).step({0: tokens.tolist()})
    assert torch.equal(actual, expected)
    assert model.prepack_for_cpu(batch_hint=16) == 0  # packing twice packs nothing more

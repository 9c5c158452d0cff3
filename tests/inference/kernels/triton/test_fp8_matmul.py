"""The grouped FP8 matmul against the torch path (`grouped_fp8_linear`), interpreted."""

from __future__ import annotations

import pytest
import torch

from inference.kernels.triton.fp8_matmul import default_tiles, grouped_fp8_matmul, groups_per_tile
from inference.model.quant.fp8_math import (
    dequantize_weight_fp8,
    grouped_fp8_linear,
    quantize_weight_fp8,
)


@pytest.mark.parametrize(
    ("tokens", "out_features", "in_features", "group_size"),
    [
        (1, 40, 48, 16),  # one decode token; a partial tile of outputs
        (5, 100, 96, 16),
        (33, 64, 200, 128),  # a ragged last group (72 of 128 columns) and partial K tile
        (3, 70, 576, 16),  # SmolLM2's hidden size: 36 groups
        (2, 48, 320, 128),  # a 128-column tile per group (block-wise checkpoints); ragged
        (4, 40, 200, 64),  # one group a tile, the last one ragged
        (20, 24, 96, 32),  # prefill-sized tiles of tokens, two groups a tile
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_fp8_matmul_matches_the_torch_path(
    tokens: int, out_features: int, in_features: int, group_size: int, dtype: torch.dtype
) -> None:
    gen = torch.Generator().manual_seed(tokens + in_features)
    # Columns of very different size, so that every group has its own scale.
    weight = torch.randn(out_features, in_features, generator=gen)
    weight = weight * torch.logspace(-2, 1, in_features)
    q, scale = quantize_weight_fp8(weight, group_size)
    x = torch.randn(tokens, in_features, generator=gen).to(dtype)
    actual = grouped_fp8_matmul(x, q, scale, group_size)
    assert actual.dtype == dtype and actual.shape == (tokens, out_features)
    if dtype == torch.float32:
        expected = grouped_fp8_linear(x, q, scale, group_size)
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-4)
        return
    # bf16: the same bf16 weight values, but products summed in float32 and rounded once,
    # where torch's bf16 matmul may round differently; bf16 tolerance, relative to the
    # output's scale (sums of many terms cancel to near zero).
    weight_bf16 = dequantize_weight_fp8(q, scale, dtype, group_size).float()
    exact = x.float() @ weight_bf16.T
    torch.testing.assert_close(
        actual.float(), exact, rtol=2**-8, atol=2**-8 * exact.abs().max().item()
    )
    assert (grouped_fp8_linear(x, q, scale, group_size).float() - exact).abs().max() <= (
        2**-7 * exact.abs().max()
    )


def test_grouped_fp8_matmul_keeps_leading_dims_and_checks_its_inputs() -> None:
    q, scale = quantize_weight_fp8(torch.randn(24, 32), 16)
    x = torch.randn(2, 3, 32)
    out = grouped_fp8_matmul(x, q, scale, 16)
    assert out.shape == (2, 3, 24)
    torch.testing.assert_close(out, grouped_fp8_linear(x, q, scale, 16), rtol=1e-5, atol=1e-4)
    assert grouped_fp8_matmul(torch.randn(0, 32), q, scale, 16).shape == (0, 24)
    with pytest.raises(ValueError, match="scale must be float32"):
        grouped_fp8_matmul(x, q, scale, 8)
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        grouped_fp8_matmul(x, q.float(), scale, 16)
    with pytest.raises(ValueError, match="features"):
        grouped_fp8_matmul(torch.randn(3, 16), q, scale, 16)


def test_default_tiles_hold_whole_groups() -> None:
    assert default_tiles(16, 1) == (16, 64, 64)  # four groups a tile
    assert default_tiles(128, 1) == (16, 32, 128)  # one group a tile, narrow at decode
    assert default_tiles(128, 300) == (64, 64, 128)
    assert default_tiles(512, 1) == (16, 64, 64)  # wider than any tile: column by column
    assert default_tiles(96, 1) == (16, 64, 64)  # not a power of two
    assert groups_per_tile(16, 64) == 4 and groups_per_tile(128, 128) == 1
    assert groups_per_tile(512, 64) == 0 and groups_per_tile(48, 96) == 0
    assert groups_per_tile(16, 48) == 0  # three groups: not a power of two

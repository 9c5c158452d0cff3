"""The group-quantized Triton matmul against dequantize-then-matmul in float32, interpreted.

Weights are random codes (every nibble value, both halves of each byte) with random
float16 scales and offsets per group, so a code read from the wrong nibble, column or
group changes the result; the layout test checks each column exactly against llama.cpp's
block layout written out here by hand.
"""

from __future__ import annotations

import pytest
import torch
from triton.runtime.interpreter import InterpretedFunction

from inference.kernels.triton import group_gemm
from inference.kernels.triton.group_gemm import (
    default_tiles,
    group_quant_matmul,
    groups_per_tile,
    k_tile,
    plan_split_k,
)
from inference.model.quant.group_math import GroupQuantized, dequantize, pack_codes


def random_weight(rows: int, cols: int, bits: int, group_size: int, seed: int) -> GroupQuantized:
    gen = torch.Generator().manual_seed(seed)
    groups = -(-cols // group_size)
    codes = torch.randint(0, 1 << bits, (rows, cols), generator=gen, dtype=torch.uint8)
    # Scales over two decades and offsets of either sign: each group visibly its own.
    scale = (torch.rand(rows, groups, generator=gen) * 2 - 2).exp2().mul(0.05).half()
    offset = ((torch.rand(rows, groups, generator=gen) - 0.5) * scale.float() * 16).half()
    weight = GroupQuantized(pack_codes(codes, bits), scale, offset, bits, group_size, cols)
    weight.check("test")
    return weight


def test_the_kernels_run_under_the_interpreter() -> None:
    # The conftest imported them for it: these tests run the kernel, not a torch fallback.
    assert isinstance(group_gemm._group_gemm_kernel, InterpretedFunction)
    assert isinstance(group_gemm._sum_splits_kernel, InterpretedFunction)


@pytest.mark.parametrize(
    ("tokens", "rows", "cols", "bits", "group_size", "split_k", "block_k"),
    [
        (1, 40, 200, 4, 32, None, None),  # one decode token, K planned in 2 splits
        (1, 40, 200, 8, 64, 1, None),  # split-K off; a ragged last group
        (3, 33, 333, 4, 128, None, 32),  # odd K, 32-column tiles inside 128-column groups
        (16, 64, 100, 8, 32, 3, 32),  # a full tile of tokens; 4 K tiles in 2 splits
        (16, 24, 576, 4, 64, 5, None),  # SmolLM2's hidden size: 4.5 K tiles in 5 splits
        (5, 40, 300, 4, 96, None, None),  # a group of 96: K tiles of 32 columns
        (17, 40, 200, 4, 64, None, None),  # one past decode sizes: plain tiles, K whole
        (64, 48, 160, 8, 128, None, None),  # a prefill tile; groups wider than a K tile
        (64, 33, 96, 4, 32, None, None),  # two groups a tile; partial tile of outputs
    ],
)
def test_matches_dequantize_then_matmul_in_float32(
    tokens: int,
    rows: int,
    cols: int,
    bits: int,
    group_size: int,
    split_k: int | None,
    block_k: int | None,
) -> None:
    weight = random_weight(rows, cols, bits, group_size, seed=tokens * 1000 + cols)
    x = torch.randn(tokens, cols, generator=torch.Generator().manual_seed(tokens))
    actual = group_quant_matmul(x, weight, split_k=split_k, block_k=block_k)
    assert actual.dtype == torch.float32 and actual.shape == (tokens, rows)
    expected = x @ dequantize(weight).T
    atol = 1e-5 * expected.abs().max().item()
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=atol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("tokens", "bits", "group_size"), [(1, 4, 32), (17, 8, 64)])
def test_half_activations_round_the_weight_as_the_torch_path(
    dtype: torch.dtype, tokens: int, bits: int, group_size: int
) -> None:
    weight = random_weight(40, 200, bits, group_size, seed=tokens)
    x = torch.randn(tokens, 200, generator=torch.Generator().manual_seed(7)).to(dtype)
    actual = group_quant_matmul(x, weight)
    assert actual.dtype == dtype
    # The weight rounded to x's dtype as `dequantize(weight, dtype)` rounds it (to nearest:
    # a truncated weight fails here), products summed in float32, each output rounded
    # once: within one unit in its last place (the interpreter truncates that cast).
    exact = x.float() @ dequantize(weight, dtype).float().T
    ulp = 2**-7 if dtype == torch.bfloat16 else 2**-10
    excess = (actual.float() - exact).abs() - ulp * exact.abs()
    assert excess.max() <= 2**-16 * exact.abs().max()


@pytest.mark.parametrize(("bits", "group_size"), [(4, 32), (4, 64), (8, 32)])
@pytest.mark.parametrize("picked", [list(range(80)), [0, 15, 16, 31, 32, 47, 48, 63, 64, 79]])
def test_each_column_is_read_from_its_nibble_and_group(
    bits: int, group_size: int, picked: list[int]
) -> None:
    """One-hot activations pick single columns of the weight, which must equal, bit for
    bit, ``scale * code + offset`` with the code found as llama.cpp stores it: 80 columns
    padded to 96, the last group ragged; 80 rows of x run plain tiles, 10 split K."""
    rows, cols = 24, 80
    weight = random_weight(rows, cols, bits, group_size, seed=bits + group_size)
    packed = weight.codes.tolist()
    expected = torch.empty(rows, cols)
    for r in range(rows):
        for c in range(cols):
            if bits == 8:
                code = packed[r][c]
            else:  # byte i of a 16-byte block: column i low, column 16 + i high
                byte = packed[r][(c // 32) * 16 + c % 16]
                code = byte >> 4 if c % 32 >= 16 else byte & 15
            g = c // group_size
            expected[r, c] = weight.scale[r, g].float() * code + weight.offset[r, g].float()
    x = torch.eye(cols)[picked]
    split = 4 if len(picked) <= 16 else 1
    actual = group_quant_matmul(x, weight, block_k=32, split_k=split)
    assert torch.equal(actual, expected[:, picked].T)


def test_split_k_sums_match_the_unsplit_kernel() -> None:
    weight = random_weight(40, 1000, 4, 32, seed=3)
    x = torch.randn(2, 1000, generator=torch.Generator().manual_seed(3))
    whole = group_quant_matmul(x, weight, split_k=1, block_k=64)
    for split in (2, 7, 16):  # 16 tiles of 64 columns: 2, 8 (3 a split, last 1) and 16
        torch.testing.assert_close(
            group_quant_matmul(x, weight, split_k=split, block_k=64), whole, rtol=1e-5, atol=1e-4
        )


def test_keeps_leading_dimensions_and_checks_its_inputs() -> None:
    weight = random_weight(24, 64, 4, 32, seed=1)
    x = torch.randn(2, 3, 64)
    out = group_quant_matmul(x, weight)
    assert out.shape == (2, 3, 24)
    torch.testing.assert_close(out, x @ dequantize(weight).T, rtol=1e-5, atol=1e-4)
    assert group_quant_matmul(torch.empty(0, 64), weight).shape == (0, 24)
    # A row slice of the activations (strided rows) and of the weight (a shard).
    wide = torch.randn(3, 128)
    shard = weight.select_rows(slice(8, 20))
    torch.testing.assert_close(
        group_quant_matmul(wide[:, :64], shard),
        wide[:, :64] @ dequantize(shard).T,
        rtol=1e-5,
        atol=1e-4,
    )
    with pytest.raises(ValueError, match="features"):
        group_quant_matmul(torch.randn(1, 63), weight)
    with pytest.raises(ValueError, match="does not hold groups"):
        group_quant_matmul(torch.randn(1, 200), random_weight(8, 200, 4, 96, seed=2), block_k=64)
    with pytest.raises(ValueError, match="power of two"):
        group_quant_matmul(x, weight, block_k=48)
    with pytest.raises(ValueError, match="float32, float16 or bfloat16"):
        group_quant_matmul(x.double(), weight)


def test_tiles_and_splits() -> None:
    assert default_tiles(32, 1) == (16, 32, 128) and default_tiles(128, 16) == (16, 32, 128)
    assert default_tiles(96, 1) == (16, 32, 32) and default_tiles(256, 64) == (64, 64, 64)
    assert k_tile(64, 128) == 128 and k_tile(512, 128) == 128 and k_tile(160, 128) == 32
    assert groups_per_tile(32, 128) == 4 and groups_per_tile(128, 32) == 1
    with pytest.raises(ValueError):
        groups_per_tile(96, 128)  # a tile that would cut a group
    # SmolLM2's 960x576 at one token on 132 SMs: 30 output tiles, 5 K tiles in 5 splits.
    assert plan_split_k(30, 5, 4 * 132) == 5
    assert plan_split_k(1536, 5, 4 * 132) == 1  # the vocabulary fills the GPU already
    assert plan_split_k(2, 20, 4 * 132) == 10  # at most MAX_SPLIT_K: 16 -> 2 tiles a split
    assert plan_split_k(2, 11, 8) == 4  # 3 tiles a split, the last one 2

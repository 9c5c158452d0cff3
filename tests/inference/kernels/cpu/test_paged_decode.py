"""The C decode kernel against `TorchAttentionBackend` on ragged paged batches.

Both builds are checked: the AVX-512 path (where the machine has it) and the portable one
(``-mno-avx512f``), over every pool dtype, GQA ratios 1, 3 and 8, block sizes 16 and 32,
and contexts that end on and just past a block boundary.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from inference.kernels.attention import TorchAttentionBackend
from inference.kernels.backends import make_attention_backend
from inference.kernels.cpu.backend import (
    CASCADE_MIN_TOKENS,
    CpuAttentionBackend,
    build_cpu_metadata,
)
from inference.kernels.cpu.build import load_kv_store, load_paged_decode
from inference.kernels.kv_cache import FP8_KV_DTYPE

from ..paged_case import assert_close_bf16, make_case

CPU = torch.device("cpu")

BUILDS = {"native": (), "portable": ("-mno-avx512f",)}


def backend(build: str) -> CpuAttentionBackend:
    return CpuAttentionBackend(load_paged_decode(BUILDS[build]), load_kv_store(BUILDS[build]))


def assert_matches(actual: torch.Tensor, expected: torch.Tensor, pool: str) -> None:
    """Float32 to rounding; bf16, FP8 and float16 pools within bf16's tolerance."""
    if pool == "f32":
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    else:
        assert_close_bf16(actual, expected)


def decode_contexts(block_size: int) -> list[tuple[int, int]]:
    """(cached, new): decodes ending on, just before and past block boundaries, and a chunk."""
    b = block_size
    return [(0, 1), (b - 1, 1), (b, 1), (2 * b - 1, 1), (3 * b + 5, 1), (b + 3, b - 3)]


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("pool", ["bf16", "fp8", "f16"])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("group", [1, 3, 8])
def test_decodes_match_the_torch_path(group: int, block_size: int, pool: str, build: str) -> None:
    pool_dtype = {"bf16": torch.bfloat16, "fp8": FP8_KV_DTYPE, "f16": torch.float16}[pool]
    dtype = torch.float16 if pool == "f16" else torch.bfloat16
    case = make_case(
        decode_contexts(block_size),
        group=group,
        num_kv_heads=1 if group == 8 else 2,
        head_dim=64,
        block_size=block_size,
        dtype=dtype,
        pool_dtype=pool_dtype,
        seed=group * block_size,
    )
    scale = 64**-0.5
    expected = case.attend(TorchAttentionBackend(), scale)
    actual = case.attend(backend(build), scale)
    assert_close_bf16(actual, expected)


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("head_dim", [32, 96, 128, 80])
def test_bf16_head_sizes(head_dim: int, build: str) -> None:
    """The bf16 dot-product path takes head sizes in steps of 32 up to 128; others fall to
    the widening path (80 here)."""
    case = make_case(
        [(c, 1) for c in (0, 15, 16, 100, 257)],
        group=4,
        num_kv_heads=2,
        head_dim=head_dim,
        block_size=16,
        dtype=torch.bfloat16,
        pool_dtype=torch.bfloat16,
        seed=head_dim + 1,
    )
    scale = head_dim**-0.5
    expected = case.attend(TorchAttentionBackend(), scale)
    actual = case.attend(backend(build), scale)
    assert_close_bf16(actual, expected)


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("head_dim", [16, 24, 80, 128])
def test_float32_is_exact_to_rounding(head_dim: int, build: str) -> None:
    """Head sizes that are and are not multiples of the vector width, in float32."""
    case = make_case(
        [(c, 1) for c in (0, 15, 16, 100, 257)],
        group=4,
        num_kv_heads=2,
        head_dim=head_dim,
        block_size=16,
        dtype=torch.float32,
        pool_dtype=torch.float32,
        seed=head_dim,
    )
    scale = head_dim**-0.5
    expected = case.attend(TorchAttentionBackend(), scale)
    actual = case.attend(backend(build), scale)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_a_query_view_with_strided_rows() -> None:
    """The model hands q as a view of the fused q|k rows: no copy is needed."""
    case = make_case(
        [(30, 1), (7, 1)],
        group=3,
        num_kv_heads=2,
        head_dim=32,
        block_size=16,
        dtype=torch.bfloat16,
        pool_dtype=torch.bfloat16,
    )
    wide = torch.cat([case.query, torch.randn(2, 2, 32).bfloat16()], dim=1)
    query = wide[:, :6]
    assert not query.is_contiguous()
    scale = 32**-0.5
    expected = case.attend(TorchAttentionBackend(), scale, query.contiguous())
    kernel = backend("native")
    actual = case.attend(kernel, scale, query)
    assert torch.equal(actual, case.attend(kernel, scale, query.contiguous()))
    assert_close_bf16(actual, expected)


def test_auto_picks_the_kernel_on_cpu() -> None:
    assert isinstance(make_attention_backend("auto", torch.device("cpu")), CpuAttentionBackend)
    assert isinstance(make_attention_backend("cpu", torch.device("cpu")), CpuAttentionBackend)
    assert type(make_attention_backend("torch", torch.device("cpu"))) is TorchAttentionBackend


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("pool", ["bf16", "fp8", "f32", "f16"])
def test_cascade_over_a_shared_prefix_matches_the_torch_path(pool: str, build: str) -> None:
    """Decodes sharing 5 blocks (80 tokens): the shared part is attended once for all."""
    pool_dtype = {
        "bf16": torch.bfloat16,
        "fp8": FP8_KV_DTYPE,
        "f32": torch.float32,
        "f16": torch.float16,
    }[pool]
    dtype = {"f32": torch.float32, "f16": torch.float16}.get(pool, torch.bfloat16)
    contexts = [(80, 1), (95, 1), (96, 1), (130, 1), (81, 20)]  # the last one is a chunk
    case = make_case(
        contexts,
        group=3,
        num_kv_heads=2,
        head_dim=64,
        block_size=16,
        dtype=dtype,
        pool_dtype=pool_dtype,
        shared_blocks=5,
    )
    assert build_cpu_metadata(case.layout, CPU).decode_shared_blocks == 5
    assert CASCADE_MIN_TOKENS <= 5 * 16  # the cascade path really runs
    scale = 64**-0.5
    expected = case.attend(TorchAttentionBackend(), scale)
    actual = case.attend(backend(build), scale)
    assert_matches(actual, expected, pool)


def test_shared_blocks_stop_short_of_every_decodes_last_token() -> None:
    """A decode whose whole context is shared blocks keeps its last block to itself."""
    case = make_case(
        [(31, 1), (40, 1)],
        group=1,
        num_kv_heads=2,
        head_dim=16,
        block_size=16,
        dtype=torch.float32,
        pool_dtype=torch.float32,
        shared_blocks=2,
    )
    assert build_cpu_metadata(case.layout, CPU).decode_shared_blocks == 1


@pytest.fixture
def eight_threads() -> Iterator[None]:
    """Torch's thread count, which the backend hands the kernel, at 8 for one test: more
    threads than sequences is what makes the kernel split contexts, on any machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(8)
    yield
    torch.set_num_threads(before)


def test_contexts_are_split_where_the_sequences_leave_threads_idle() -> None:
    splits = load_paged_decode().paged_decode_splits
    assert splits(1, 255, 2) == 1  # a part is at least 128 tokens
    assert splits(1, 600, 2) == 2
    assert splits(1, 700, 8) == 5  # at most one part per 128 tokens
    assert splits(3, 1101, 8) == 8  # 8 / gcd(3, 8) parts: 3 a thread
    assert splits(6, 5000, 4) == 2  # 4 / gcd(6, 4): 3 parts a thread, not 2 or 1 sequence
    assert splits(3, 5000, 2) == 2
    assert splits(7, 5000, 2) == 2
    assert splits(2, 5000, 2) == 1  # a sequence a thread already
    assert splits(4, 5000, 2) == 1
    assert splits(9, 5000, 2) == 1  # from 4 sequences a thread on, not split
    assert splits(1, 5000, 1) == 1


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("pool", ["bf16", "fp8", "f32"])
@pytest.mark.usefixtures("eight_threads")
def test_long_contexts_split_over_the_threads_match_the_torch_path(pool: str, build: str) -> None:
    """One long decode alone (5 parts), and a ragged batch of three (8 parts each: the
    20-token context fills only two, the other six empty), against the torch path."""
    pool_dtype = {"bf16": torch.bfloat16, "fp8": FP8_KV_DTYPE, "f32": torch.float32}[pool]
    dtype = torch.float32 if pool == "f32" else torch.bfloat16
    for contexts in ([(699, 1)], [(1100, 1), (19, 1), (700, 1)]):
        case = make_case(
            contexts,
            group=3,
            num_kv_heads=3,
            head_dim=64,
            block_size=16,
            dtype=dtype,
            pool_dtype=pool_dtype,
            seed=len(contexts),
        )
        scale = 64**-0.5
        expected = case.attend(TorchAttentionBackend(), scale)
        actual = case.attend(backend(build), scale)
        assert_matches(actual, expected, pool)


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.usefixtures("eight_threads")
def test_split_contexts_fold_in_a_cascades_shared_prefix(build: str) -> None:
    """Two decodes sharing 32 blocks, each with its own 600-odd tokens after them: the
    shared part goes through the cascade, the rest is split, and the three fold together."""
    case = make_case(
        [(512 + 640, 1), (512 + 600, 1)],
        group=3,
        num_kv_heads=3,
        head_dim=64,
        block_size=16,
        dtype=torch.float32,
        pool_dtype=torch.float32,
        seed=7,
        shared_blocks=32,
    )
    assert build_cpu_metadata(case.layout, CPU).decode_shared_blocks == 32
    scale = 64**-0.5
    expected = case.attend(TorchAttentionBackend(), scale)
    actual = case.attend(backend(build), scale)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_bad_arguments_are_refused() -> None:
    lib = load_paged_decode()
    args = [0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 4, 2, 16, 16, 1.0, 1.0, 1.0, 0, 0, 0, 1]
    block_size = 13
    assert lib.paged_decode_attention(*args[:16], block_size, *args[17:]) == -1
    skip_without_prior = 16
    assert lib.paged_decode_attention(*args[:20], skip_without_prior, *args[21:]) == -5

"""The C prefill kernel (paged_prefill.h) against `TorchAttentionBackend` on paged chunks.

The kernel is AVX-512 only (float32 products, and bf16 dot products where the processor
has AVX-512 BF16): every pool dtype, GQA ratios 1 to 4, head sizes 32 to 128, block sizes
8 to 32, and chunks that start the context, follow a cached part, end inside a key tile or
span many. A build without AVX-512 (``-mno-avx512f``, as on an AVX2-only processor) has no
kernel and keeps the torch path, bit for bit.
"""

from __future__ import annotations

import pytest
import torch

from inference.kernels.attention import TorchAttentionBackend
from inference.kernels.cpu.backend import CpuAttentionBackend, torch_attention_uses_amx
from inference.kernels.cpu.build import load_kv_store, load_paged_decode
from inference.kernels.kv_cache import FP8_KV_DTYPE

from ..paged_case import assert_close_bf16, make_case

PORTABLE = ("-mno-avx512f",)
POOLS = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "fp8": FP8_KV_DTYPE}
# (cached, new): fresh chunks of 37, 16 and 2 tokens, chunks after 20 and 64 cached tokens
# (100 new: seven key tiles), and a decode in the same step (the decode kernel's).
CONTEXTS = [(0, 37), (20, 17), (5, 1), (64, 100), (0, 16), (3, 2)]


def backend(flags: tuple[str, ...] = ()) -> CpuAttentionBackend:
    """The chunk kernel for every dtype, also where bf16 would keep the torch path (AMX)."""
    return CpuAttentionBackend(
        load_paged_decode(flags), load_kv_store(flags), bf16_prefill_in_torch=False
    )


def native_kernel() -> None:
    """Skips where this processor's build has no kernel (no AVX-512): the torch path runs."""
    if not load_paged_decode().paged_prefill_available():
        pytest.skip("the prefill kernel needs AVX-512; this processor keeps the torch path")


def torch_prefill_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test if a chunk falls back to the torch path."""

    def refuse(*args: object) -> None:
        raise AssertionError("a prefill chunk took the torch path")

    monkeypatch.setattr(TorchAttentionBackend, "prefill", refuse)


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize(
    ("group", "head_dim", "block_size"),
    [(1, 64, 16), (3, 64, 16), (4, 32, 8), (2, 128, 32), (3, 96, 16), (2, 48, 16)],
)
def test_chunks_match_the_torch_path(
    group: int, head_dim: int, block_size: int, pool: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    native_kernel()
    dtype = {"f32": torch.float32, "f16": torch.float16}.get(pool, torch.bfloat16)
    case = make_case(
        CONTEXTS,
        group=group,
        num_kv_heads=2,
        head_dim=head_dim,
        block_size=block_size,
        dtype=dtype,
        pool_dtype=POOLS[pool],
        seed=group * head_dim + block_size,
    )
    scale = head_dim**-0.5
    expected = case.attend(TorchAttentionBackend(), scale)
    torch_prefill_refused(monkeypatch)
    actual = case.attend(backend(), scale)
    if pool == "f32":
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    else:
        assert_close_bf16(actual, expected)


@pytest.mark.parametrize("pool", ["bf16", "f32"])
def test_a_long_chunk_with_a_peaked_softmax(pool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries that grow along the chunk make each row's maximum move tile after tile (the
    running output rescaled many times) and the softmax nearly one-hot."""
    native_kernel()
    dtype = POOLS[pool]
    case = make_case(
        [(300, 200)], group=3, num_kv_heads=1, head_dim=64, block_size=16,
        dtype=dtype, pool_dtype=dtype,
    )  # fmt: skip
    ramp = torch.linspace(0.5, 6.0, case.query.shape[0])[:, None, None]
    query = (case.query.float() * ramp).to(dtype)
    expected = case.attend(TorchAttentionBackend(), 0.125, query)
    torch_prefill_refused(monkeypatch)
    actual = case.attend(backend(), 0.125, query)
    if pool == "f32":
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    else:
        assert_close_bf16(actual, expected)


@pytest.mark.parametrize("pool", ["bf16", "f32"])
def test_a_build_without_avx512_keeps_the_torch_path(pool: str) -> None:
    assert load_paged_decode(PORTABLE).paged_prefill_available() == 0
    chunks = [(cached, new) for cached, new in CONTEXTS if new > 1]  # no decode
    case = make_case(
        chunks, group=3, num_kv_heads=2, head_dim=64, block_size=16,
        dtype=POOLS[pool], pool_dtype=POOLS[pool],
    )  # fmt: skip
    expected = case.attend(TorchAttentionBackend(), 0.125)
    assert torch.equal(case.attend(backend(PORTABLE), 0.125), expected)


@pytest.mark.parametrize("in_torch", [True, False])
def test_bf16_chunks_keep_the_torch_path_where_it_uses_amx(
    in_torch: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a processor with AMX (``bf16_prefill_in_torch``) bf16 chunks go to torch's SDPA,
    bit for bit the reference, while float32 chunks still take the kernel."""
    native_kernel()
    chunks = [(cached, new) for cached, new in CONTEXTS if new > 1]  # no decode
    shape = {"group": 3, "num_kv_heads": 2, "head_dim": 64, "block_size": 16, "seed": 5}
    cases = {
        dtype: make_case(chunks, dtype=dtype, pool_dtype=dtype, **shape)
        for dtype in (torch.bfloat16, torch.float32)
    }
    expected = {dtype: case.attend(TorchAttentionBackend(), 0.125) for dtype, case in cases.items()}
    reference = TorchAttentionBackend.prefill
    torch_chunks: list[torch.dtype] = []

    def counted(self: TorchAttentionBackend, query: torch.Tensor, *args: object) -> None:
        torch_chunks.append(query.dtype)
        reference(self, query, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(TorchAttentionBackend, "prefill", counted)
    chosen = CpuAttentionBackend(
        load_paged_decode(), load_kv_store(), bf16_prefill_in_torch=in_torch
    )
    actual = {dtype: case.attend(chosen, 0.125) for dtype, case in cases.items()}
    assert torch_chunks == ([torch.bfloat16] if in_torch else [])
    if in_torch:
        assert torch.equal(actual[torch.bfloat16], expected[torch.bfloat16])
    else:
        assert_close_bf16(actual[torch.bfloat16], expected[torch.bfloat16])
    torch.testing.assert_close(actual[torch.float32], expected[torch.float32])


def test_the_choice_follows_whether_torchs_attention_uses_amx() -> None:
    default = CpuAttentionBackend(load_paged_decode(), load_kv_store())
    assert default.bf16_prefill_in_torch == torch_attention_uses_amx()
    assert torch_attention_uses_amx() == torch.cpu._is_amx_tile_supported()


def test_head_sizes_the_kernel_does_not_take_go_through_torch() -> None:
    case = make_case(
        [(0, 20), (10, 12)], group=2, num_kv_heads=1, head_dim=40, block_size=16,
        dtype=torch.float32, pool_dtype=torch.float32,
    )  # fmt: skip
    expected = case.attend(TorchAttentionBackend(), 0.25)
    assert torch.equal(case.attend(backend(), 0.25), expected)


def call_kernel(
    chunks: list[list[int]], *, num_tokens: int = 8, head_dim: int = 32, flags: tuple[str, ...] = ()
) -> int:
    """The C function itself on a small f32 problem (2 blocks of 8, one table row)."""
    library = load_paged_decode(flags)
    query = torch.zeros(num_tokens, 2, head_dim)
    out = torch.empty_like(query)
    pool = torch.zeros(2, 8, 1, head_dim)
    tables = torch.tensor([[0, 1]], dtype=torch.int64)
    seqs = torch.tensor(chunks, dtype=torch.int64)
    function = library.paged_prefill_attention
    return int(
        function(
            query.data_ptr(), query.stride(0), out.data_ptr(), out.stride(0), 0, num_tokens,
            pool.data_ptr(), pool.data_ptr(), 0, tables.data_ptr(), 1, 2,
            seqs.data_ptr(), len(chunks), 2, 1, head_dim, 8, 1.0, 1.0, 1.0, 2,
        )
    )  # fmt: skip


def test_the_kernel_refuses_what_does_not_fit() -> None:
    assert call_kernel([[0, 0, 8, 16]], flags=PORTABLE) == -5  # a build without the kernel
    native_kernel()
    assert call_kernel([[0, 0, 8, 16]]) == 0
    assert call_kernel([[1, 0, 8, 16]]) == -4  # no such table row
    assert call_kernel([[0, 4, 8, 16]]) == -4  # rows past the step's tokens
    assert call_kernel([[0, 0, 8, 17]]) == -4  # a context past the table's blocks
    assert call_kernel([[0, 0, 8, 7]]) == -4  # more queries than context
    assert call_kernel([[0, 0, 0, 4]]) == -4  # an empty chunk
    assert call_kernel([[0, 0, 8, 16]], head_dim=40) == -1

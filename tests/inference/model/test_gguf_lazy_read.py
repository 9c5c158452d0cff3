"""GGUF matrices read lazily (`LazyGroupQuantized`): a layer filled a chunk of rows at a
time straight from the file's map holds the very bytes of the tensor converted whole, for
block types and K-quants, in tensors of several chunks, a last chunk cut short, and rows
moved by the rotary unpermute; each chunk's file bytes are released once, after they are
copied; FP8 layers quantize the chunks to the bytes of the whole tensor."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, ReaderTensor
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from inference.model.loader.gguf import PlainArrayReader
from inference.model.loader.gguf_quant import lazy_group_quantized
from inference.model.loader.gguf_tensors import plan_tensors
from inference.model.quant import fp8_math, group_lazy
from inference.model.quant.fp8_math import FP8_DTYPE, quantize_rows_into
from inference.model.quant.group_lazy import LazyGroupQuantized
from inference.model.quant.group_linear import GroupQuantLinear
from inference.model.quant.group_math import GroupQuantized, dequantize
from tests.inference.model.k_quant_blocks import pack, random_fields
from tests.inference.model.test_gguf_files import write_gguf

Q = GGMLQuantizationType
COLS = 256  # one K-quant super-block a row
CHUNK_ROWS = 3
HEADS = 2
# name -> (type, rows): 10 rows are three whole chunks and one of a single row; 8 rotary
# rows (unpermuted over 2 heads) are chunks of 3, 3 and 2; 2 rows fit in one chunk.
TENSORS = {
    "blk.0.ffn_up.weight": (Q.Q4_0, 10),
    "blk.0.ffn_gate.weight": (Q.Q4_1, 10),
    "blk.0.ffn_down.weight": (Q.Q8_0, 10),
    "blk.0.attn_output.weight": (Q.Q4_K, 10),
    "blk.0.attn_v.weight": (Q.Q6_K, 2),
    "blk.0.attn_q.weight": (Q.Q4_1, 8),
    "blk.0.attn_k.weight": (Q.Q5_K, 8),
}


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> PlainArrayReader:
    rng = np.random.default_rng(3)
    tensors = {}
    for name, (qtype, rows) in TENSORS.items():
        if qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
            raw = pack(random_fields(qtype, rows * COLS // 256, rng), rows)
        else:
            values = rng.standard_normal((rows, COLS)) * rng.uniform(0.1, 3, (rows, 1))
            raw = gguf_quantize(values.astype(np.float32), qtype)
        tensors[name] = (raw, qtype)
    path = write_gguf(tmp_path_factory.mktemp("lazy") / "lazy.gguf", tensors, packed=True)
    return PlainArrayReader(path)


def tensor_named(
    reader: PlainArrayReader, name: str, monkeypatch: pytest.MonkeyPatch
) -> ReaderTensor:
    """The tensor, its chunks cut to CHUNK_ROWS rows (a few bytes short of one more)."""
    tensor = next(tensor for tensor in reader.tensors if tensor.name == name)
    row_bytes = tensor.n_bytes // TENSORS[name][1]
    monkeypatch.setattr(group_lazy, "CHUNK_BYTES", (CHUNK_ROWS + 1) * row_bytes - 1)
    return tensor


def whole(lazy: LazyGroupQuantized) -> GroupQuantized:
    """The eager read: every row converted at once, rows moved as the lazy one moves them."""
    packed = lazy.read_rows(0, lazy.rows)
    if lazy.destination is None:
        return packed
    return packed.select_rows(torch.argsort(lazy.destination))


def filled_layer(tensor: GroupQuantized | LazyGroupQuantized) -> GroupQuantLinear:
    layer = GroupQuantLinear(COLS, [tensor.rows], bits=tensor.bits, group_size=32, bias=False,
                             dtype=torch.float32, device="cpu")  # fmt: skip
    layer.load_shard("weight", 0, tensor, "w")
    return layer


def assert_same_layer(got: GroupQuantLinear, want: GroupQuantLinear) -> None:
    for part in ("weight", "weight_scale", "weight_offset"):
        a, b = getattr(got, part), getattr(want, part)
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), part


@pytest.mark.parametrize("name", list(TENSORS))
def test_lazy_fill_holds_the_bytes_of_the_whole_tensor(
    reader: PlainArrayReader, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    qtype, rows = TENSORS[name]
    released: list[tuple[int, int]] = []
    tensor = tensor_named(reader, name, monkeypatch)
    plan = plan_tensors([tensor], 4, HEADS, unpermute_rotary=True, keep_quantized=True,
                        release=lambda *span: released.append(span))  # fmt: skip
    ((_, lazy),) = list(plan)
    assert isinstance(lazy, LazyGroupQuantized) and lazy.shape == (rows, COLS)
    assert (lazy.destination is not None) == name.startswith(("blk.0.attn_q", "blk.0.attn_k"))
    assert_same_layer(filled_layer(lazy), filled_layer(whole(lazy)))
    # Each chunk's bytes released once, in order, covering the tensor exactly.
    row_bytes = tensor.n_bytes // rows
    starts = range(0, rows, CHUNK_ROWS)
    assert released == [
        (tensor.data_offset + start * row_bytes, min(CHUNK_ROWS, rows - start) * row_bytes)
        for start in starts
    ]
    if qtype in (Q.Q4_0, Q.Q4_1, Q.Q8_0):  # kept exactly: the file's own values
        values = gguf_dequantize(np.asarray(tensor.data).view(np.uint8), qtype).reshape(rows, -1)
        if lazy.destination is not None:
            values = values[torch.argsort(lazy.destination).numpy()]
        assert torch.equal(dequantize(filled_layer(lazy).packed), torch.from_numpy(values))


def test_rotary_rows_move_as_the_float_read_moves_them(
    reader: PlainArrayReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    tensor = tensor_named(reader, "blk.0.attn_q.weight", monkeypatch)
    ((_, floats),) = plan_tensors([tensor], 4, HEADS, unpermute_rotary=True)
    ((_, lazy),) = plan_tensors([tensor], 4, HEADS, unpermute_rotary=True, keep_quantized=True)
    assert isinstance(lazy, LazyGroupQuantized) and isinstance(floats, torch.Tensor)
    assert torch.equal(dequantize(lazy.materialize()), floats)


def test_each_chunk_is_released_after_it_is_copied(
    reader: PlainArrayReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    tensor = tensor_named(reader, "blk.0.ffn_down.weight", monkeypatch)
    layer = filled_layer(whole(lazy_group_quantized(tensor)))
    target = GroupQuantLinear(COLS, [10], bits=8, group_size=32, bias=False,
                              dtype=torch.float32, device="cpu")  # fmt: skip
    row_bytes = tensor.n_bytes // 10

    def release(offset: int, length: int) -> None:
        stop = (offset + length - tensor.data_offset) // row_bytes
        assert torch.equal(target.weight[:stop], layer.weight[:stop])  # already copied
        assert not target.weight[stop:].any()  # and nothing read ahead of it

    target.load_shard("weight", 0, lazy_group_quantized(tensor, release), "w")
    assert torch.equal(target.weight, layer.weight)


@pytest.mark.parametrize("name", ["blk.0.ffn_gate.weight", "blk.0.attn_q.weight"])
def test_fp8_quantizes_the_chunks_to_the_bytes_of_the_whole_tensor(
    reader: PlainArrayReader, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tensor = tensor_named(reader, name, monkeypatch)
    ((_, lazy),) = plan_tensors([tensor], 4, HEADS, unpermute_rotary=True, keep_quantized=True)
    assert isinstance(lazy, LazyGroupQuantized)
    shape = lazy.shape
    got_q, want_q = torch.empty(shape, dtype=FP8_DTYPE), torch.empty(shape, dtype=FP8_DTYPE)
    got_scale, want_scale = torch.empty(shape[0]), torch.empty(shape[0])
    quantize_rows_into(whole(lazy), torch.bfloat16, want_q, want_scale)
    monkeypatch.setattr(fp8_math, "QUANTIZE_SLICE_ELEMENTS", 2 * COLS)  # 2 rows a slice
    quantize_rows_into(lazy, torch.bfloat16, got_q, got_scale)
    assert torch.equal(got_q.view(torch.uint8), want_q.view(torch.uint8))
    assert torch.equal(got_scale, want_scale)

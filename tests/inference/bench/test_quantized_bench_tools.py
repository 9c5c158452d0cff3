"""The tools behind the quantization benchmarks: a GGUF file written again in another
block type, and the bytes of weights a decode step reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from inference.bench.requantize_gguf import main as requantize_main
from inference.bench.weight_bytes import decode_weight_bytes
from inference.model.loader import load_model
from tests.inference.checkpoints import make_checkpoint
from tests.inference.model.test_gguf_files import _write_model

Q = GGMLQuantizationType


def test_requantized_file_keeps_metadata_and_values(tmp_path: Path) -> None:
    source, target = tmp_path / "f32.gguf", tmp_path / "q8.gguf"
    _write_model(source)
    assert requantize_main([str(source), str(target), "--type", "Q8_0"]) == 0
    before, after = GGUFReader(source), GGUFReader(target)
    fields = {
        name: f.contents() for name, f in before.fields.items() if not name.startswith("GGUF.")
    }
    assert fields == {n: f.contents() for n, f in after.fields.items() if not n.startswith("GGUF.")}
    tensors = {t.name: t for t in before.tensors}
    assert [t.name for t in after.tensors] == list(tensors)
    for tensor in after.tensors:
        original = tensors[tensor.name]
        want = dequantize(original.data, Q(original.tensor_type))
        got = dequantize(tensor.data, Q(tensor.tensor_type))
        if len(tensor.shape) == 2:
            assert Q(tensor.tensor_type) == Q.Q8_0, tensor.name
            # Q8_0: each block of 32 is d * q with d = amax / 127 rounded to float16, so the
            # error is at most d / 2 and 127 times d's rounding (2^-11 of it).
            blocks = want.reshape(-1, 32)
            bound = np.abs(blocks).max(axis=1, keepdims=True) / 127 * (0.5 + 127 * 2**-11)
            assert np.all(np.abs(got.reshape(-1, 32) - blocks) <= bound + 1e-7), tensor.name
        else:
            assert Q(tensor.tensor_type) == Q(original.tensor_type)
            assert np.array_equal(got, want), tensor.name
    model, _ = load_model(target, dtype="float32", progress=False, quantization="gguf")
    assert model is not None


def test_requantize_refuses_a_missing_source_and_an_existing_target(tmp_path: Path) -> None:
    source = tmp_path / "f32.gguf"
    _write_model(source)
    with pytest.raises(SystemExit) as missing:
        requantize_main([str(tmp_path / "none.gguf"), str(tmp_path / "out.gguf")])
    assert missing.value.code == 2
    with pytest.raises(SystemExit) as exists:
        requantize_main([str(source), str(source)])
    assert exists.value.code == 2


def _bytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("kind", ["llama", "smollm2"])  # untied, tied
def test_decode_weight_bytes_counts_what_a_step_reads(tmp_path: Path, kind: str) -> None:
    model, config = load_model(make_checkpoint(kind, tmp_path), dtype="bfloat16", progress=False)
    every = _bytes(list(model.parameters()))
    table = _bytes(list(model.model.embed_tokens.parameters()))
    want = every - table if not config.tie_word_embeddings else every
    assert decode_weight_bytes(model) == want


def test_decode_weight_bytes_of_a_kept_quantized_file(tmp_path: Path) -> None:
    path = tmp_path / "q8.gguf"
    _write_model(tmp_path / "f32.gguf")
    requantize_main([str(tmp_path / "f32.gguf"), str(path)])
    kept, _ = load_model(path, dtype="bfloat16", progress=False, quantization="gguf")
    floats, _ = load_model(path, dtype="bfloat16", progress=False)
    # 8-bit codes plus two float16 numbers a block of 32: 36 bytes for bf16's 64.
    ratio = decode_weight_bytes(kept) / decode_weight_bytes(floats)
    assert 0.5 < ratio < 0.6

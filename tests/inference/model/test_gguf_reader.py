"""PlainArrayReader (the fast path of read_gguf) reads what gguf's own GGUFReader does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFReader

from inference.model.loader.gguf import PlainArrayReader
from tests.inference.model.test_gguf_files import GGUF_NAMES, Q, _model_tensors, write_gguf


def test_the_plain_reader_reads_every_field_and_tensor_the_same(tmp_path: Path) -> None:
    tensors = {
        GGUF_NAMES[n]: (v, Q.F32) for n, v in _model_tensors(np.random.default_rng(1)).items()
    }
    tensors["blk.0.ffn_up.weight"] = (tensors["blk.0.ffn_up.weight"][0], Q.Q4_1)
    path = write_gguf(tmp_path / "tiny.gguf", tensors)
    ours, theirs = PlainArrayReader(path), GGUFReader(path)
    assert type(ours.data) is np.ndarray and not ours.data.flags.writeable
    assert list(ours.fields) == list(theirs.fields)
    for name, field in theirs.fields.items():
        assert ours.fields[name].contents() == field.contents(), name
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for mine, reference in zip(ours.tensors, theirs.tensors, strict=True):
        assert mine.tensor_type == reference.tensor_type
        assert mine.data_offset == reference.data_offset
        assert np.array_equal(mine.data, reference.data), mine.name

"""`python -m inference bench load-memory` on a tiny GGUF file: every load measured twice in
its own process, the extras computed from what was measured."""

from __future__ import annotations

import json
from pathlib import Path

from gguf import GGMLQuantizationType

from inference.__main__ import main
from inference.model.loader.gguf import PlainArrayReader
from tests.inference.model.test_gguf_files import _write_model

ROWS = ["gguf as bf16", "gguf as gguf", "gguf as fp8", "bf16 directory as bf16",
        "bf16 directory as fp8"]  # fmt: skip


def test_load_memory_writes_first_and_warm_loads(tmp_path: Path) -> None:
    model = tmp_path / "tiny.gguf"
    _write_model(model, qtype=GGMLQuantizationType.Q8_0)
    out = tmp_path / "load-memory.json"
    assert main(["bench", "load-memory", "--model", str(model), "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    largest = max(int(tensor.n_bytes) for tensor in PlainArrayReader(model).tensors)
    assert result["largest_gguf_tensor_mb"] == round(largest / 1e6, 3)
    assert list(result["rows"]) == ROWS
    for name, row in result["rows"].items():
        # (A tiny model's warm peak can read a few kB under zero: the load trims pages
        # freed before it started.)
        assert row["weights"] > 0 and row["peak"] > row["warm_peak"], name
        assert abs(row["first_extra_mb"] - (row["peak"] - row["held"])) <= 0.002, name
        assert abs(row["warm_extra_mb"] - (row["warm_peak"] - row["warm_held"])) <= 0.002, name
    rows = result["rows"]
    assert rows["gguf as fp8"]["weights"] < rows["gguf as bf16"]["weights"]  # 8 bits, not 16


def test_load_memory_refuses_what_is_not_a_gguf_file(tmp_path: Path) -> None:
    assert main(["bench", "load-memory", "--model", str(tmp_path / "none.gguf")]) == 2
    assert main(["bench", "load-memory", "--model", str(tmp_path)]) == 2

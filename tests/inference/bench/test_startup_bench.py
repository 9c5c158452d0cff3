"""`python -m inference bench startup` on a tiny GGUF: real worker starts, their phases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inference.__main__ import main
from tests.inference.model.test_gguf_files import GGUF_NAMES, Q, _model_tensors, write_gguf


def test_cold_fills_the_caches_and_warm_reads_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tensors = _model_tensors(np.random.default_rng(0))
    model = write_gguf(
        tmp_path / "tiny.gguf", {GGUF_NAMES[n]: (v, Q.F32) for n, v in tensors.items()}
    )
    out, cache_dir = tmp_path / "startup.json", tmp_path / "cache"
    args = ["bench", "startup", "--model", str(model), "--runs", "cold,warm,nocache"]
    args += ["--cache-dir", str(cache_dir), "--output", str(out)]
    args += ["--worker-arg=--kv-cache-memory-bytes=1048576"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads(out.read_text())
    cold, warm, nocache = (report["runs"][kind] for kind in ("cold", "warm", "nocache"))
    for run in (cold, warm, nocache):
        assert 0 < run["health_s"] <= run["ready_s"] <= run["listed_s"]
        assert run["phases_s"]["imports"] > 0 and "kv_cache" in run["phases_s"]
    # The first start reads the GGUF file and writes the cache; the next reads the cache.
    assert {"gguf_metadata", "weights", "weight_cache_write"} <= set(cold["phases_s"])
    assert "weight_cache_load" in warm["phases_s"]
    assert not {"gguf_metadata", "weights", "weight_cache_write"} & set(warm["phases_s"])
    assert {"gguf_metadata", "weights"} <= set(nocache["phases_s"])
    assert "weight_cache_load" not in nocache["phases_s"]
    assert len(list((cache_dir / "weights").glob("tiny-*.safetensors"))) == 1
    assert list((cache_dir / "kernels").glob("*.so"))


def test_unknown_runs_and_missing_models_are_refused(tmp_path: Path) -> None:
    assert main(["bench", "startup", "--model", str(tmp_path / "none.gguf")]) == 2
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    assert main(["bench", "startup", "--model", str(model), "--runs", "hot"]) == 2

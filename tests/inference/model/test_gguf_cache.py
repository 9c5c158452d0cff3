"""The prepared-weights cache of a GGUF model: a hit loads what a cold load does, without
reading the GGUF file; a changed file, or a damaged cache file, is rebuilt, never fatal."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from inference import LLM, SamplingParams
from inference.model.loader import gguf_cache
from inference.model.loader.gguf_cache import FORMAT, cache_file, write_safetensors
from tests.inference.model.test_gguf_files import GGUF_NAMES, Q, _model_tensors, write_gguf

PROMPTS = [[5, 40, 41, 60, 7], [90, 3, 12]]
PARAMS = SamplingParams(temperature=0, max_tokens=6, logprobs=3, ignore_eos=True)


def _write(path: Path, seed: int) -> Path:
    """A one-layer llama GGUF with random weights (the FFN's up projection in Q4_0)."""
    tensors = {
        GGUF_NAMES[n]: (v, Q.F32) for n, v in _model_tensors(np.random.default_rng(seed)).items()
    }
    up = tensors["blk.0.ffn_up.weight"][0]
    tensors["blk.0.ffn_up.weight"] = (up, Q.Q4_0)
    return write_gguf(path, tensors)


def _run(model: Path, cache_dir: Path | None) -> tuple[list[list[int]], list[object], LLM]:
    llm = LLM(
        str(model),
        cache_dir=None if cache_dir is None else str(cache_dir),
        kv_cache_memory_bytes=1 << 20,
        max_num_seqs=4,
        progress=False,
    )
    outputs = llm.generate(PROMPTS, PARAMS)
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    logprobs = [o.outputs[0].logprobs for o in outputs]
    return tokens, logprobs, llm


def _parameters(llm: LLM) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in llm.engine.model.named_parameters()}


def _the_file(cache_dir: Path, model: Path) -> Path:
    return cache_file(cache_dir, model, "auto", torch.device("cpu"))


def _forbid_reading_gguf(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: object) -> None:
        raise AssertionError(f"the GGUF file {path} was parsed on a cache hit")

    monkeypatch.setattr(gguf_cache, "read_gguf", refuse)


def test_a_hit_generates_what_a_cold_load_does_without_reading_the_gguf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    model = _write(tmp_path / "tiny.gguf", seed=3)
    cold_tokens, cold_logprobs, cold = _run(model, None)
    cache_dir = tmp_path / "cache"
    _, _, filling = _run(model, cache_dir)
    cached = _the_file(cache_dir, model)
    assert stat.S_IMODE(cached.stat().st_mode) == 0o600  # a copy of the model's weights
    modes = [stat.S_IMODE(d.stat().st_mode) for d in (cache_dir, cached.parent)]
    assert modes == [0o700, 0o700]
    del filling
    _forbid_reading_gguf(monkeypatch)
    with caplog.at_level(logging.INFO, logger="inference.loader"):
        tokens, logprobs, hit = _run(model, cache_dir)
    assert "loaded prepared weights from" in caplog.text
    assert tokens == cold_tokens and logprobs == cold_logprobs
    expected, got = _parameters(cold), _parameters(hit)
    assert expected.keys() == got.keys()
    # bfloat16 weights are prepacked (opaque) on a CPU with oneDNN; compare the rest exactly.
    for name, tensor in expected.items():
        if not tensor.is_mkldnn:
            assert torch.equal(tensor, got[name]), name
    # The tokenizer came out of the cache too, and encodes as the GGUF's does.
    text = "hello world"
    assert hit.engine.tokenizer.encode(text) == cold.engine.tokenizer.encode(text)
    assert hit.engine.tokenizer.chat_template == cold.engine.tokenizer.chat_template


def test_a_changed_gguf_file_is_prepared_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = tmp_path / "tiny.gguf"
    _write(model, seed=3)
    cache_dir = tmp_path / "cache"
    first, _, _ = _run(model, cache_dir)
    with safe_open(str(_the_file(cache_dir, model)), "pt") as handle:
        old_key = handle.metadata()["key"]
    # Other weights, the same size, in the same file name.
    _write(model, seed=4)
    expected, _, _ = _run(model, None)
    assert expected != first, "the two models must differ for this test to mean anything"
    with caplog.at_level(logging.INFO, logger="inference.loader"):
        tokens, _, _ = _run(model, cache_dir)
    assert "are stale" in caplog.text
    assert tokens == expected
    with safe_open(str(_the_file(cache_dir, model)), "pt") as handle:
        assert handle.metadata()["key"] != old_key


def _put_in_place(path: Path, data: bytes) -> None:
    """A damaged file where the cache file was; never written over in place: an engine of
    this process may still map the old one, and a mapped file cut short is a SIGBUS."""
    damaged = path.with_name("damaged")
    damaged.write_bytes(data)
    damaged.replace(path)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    _put_in_place(path, data[: len(data) // 2])


def _garble(path: Path) -> None:
    _put_in_place(path, b"\xff" * 64 + os.urandom(1000))


def _drop_a_tensor(path: Path) -> None:
    """A well-formed file under the right key that lacks a parameter."""
    with safe_open(str(path), "pt") as handle:
        meta = handle.metadata()
        # Copies: the file is mapped, and it is about to be replaced.
        tensors = {n: handle.get_tensor(n).clone() for n in handle.keys()}  # noqa: SIM118
    tensors.pop("model.norm.weight")
    with (path.parent / "edited").open("wb") as output:
        write_safetensors(output, tensors, meta)
    (path.parent / "edited").replace(path)


@pytest.mark.parametrize("damage", [_truncate, _garble, _drop_a_tensor])
def test_a_damaged_cache_file_is_ignored_and_rebuilt(
    tmp_path: Path, damage: object, caplog: pytest.LogCaptureFixture
) -> None:
    model = _write(tmp_path / "tiny.gguf", seed=3)
    cache_dir = tmp_path / "cache"
    expected, _, _ = _run(model, cache_dir)
    cached = _the_file(cache_dir, model)
    damage(cached)  # type: ignore[operator]
    with caplog.at_level(logging.INFO, logger="inference.loader"):
        tokens, _, _ = _run(model, cache_dir)
    assert "ignoring the prepared weights" in caplog.text
    assert tokens == expected
    with safe_open(str(cached), "pt") as handle:  # written again, whole
        assert handle.metadata()["format"] == FORMAT
        assert "model.norm.weight" in handle.keys()  # noqa: SIM118 (no __contains__)


def test_no_cache_dir_writes_nothing_and_a_full_disk_skips_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    model = _write(tmp_path / "tiny.gguf", seed=3)
    _run(model, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.gguf"]
    monkeypatch.setattr(gguf_cache, "MIN_FREE_BYTES", 1 << 62)
    with caplog.at_level(logging.INFO, logger="inference.loader"):
        _run(model, tmp_path / "cache")
    assert "not caching the prepared weights" in caplog.text
    assert list((tmp_path / "cache" / "weights").iterdir()) == []


def test_a_cache_folder_that_cannot_be_made_is_skipped_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    model = _write(tmp_path / "tiny.gguf", seed=3)
    expected, _, _ = _run(model, None)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("INFERENCE_CACHE_DIR", str(blocked / "cache"))  # the kernels' too
    with caplog.at_level(logging.INFO):
        tokens, _, _ = _run(model, blocked / "cache")
    assert tokens == expected
    assert "could not cache the prepared weights" in caplog.text

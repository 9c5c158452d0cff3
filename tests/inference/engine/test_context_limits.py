"""max_model_len: the model's limit by default, refused past it, capped at a sliding window."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from inference import LLM
from tests.inference.checkpoints import make_checkpoint


def mistral_with_window(directory: Path, window: int) -> Path:
    path = make_checkpoint("mistral", directory)
    config = json.loads((path / "config.json").read_text())
    config["sliding_window"] = window
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_a_sliding_window_caps_the_default_context(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = mistral_with_window(tmp_path / "mistral", 64)
    with caplog.at_level(logging.WARNING, logger="inference.engine"):
        llm = LLM(str(path), dtype="float32", progress=False, kv_cache_memory_bytes=1 << 20)
    assert llm.engine.max_model_len == 64
    assert "sliding window of 64 tokens" in caplog.text
    with pytest.raises(ValueError, match="prompt"):
        llm.generate([[5] * 70])  # longer than the window: refused, never silently wrong


def test_asking_past_the_window_or_the_model_is_an_error(tmp_path: Path) -> None:
    path = mistral_with_window(tmp_path / "mistral", 64)
    with pytest.raises(ValueError, match="sliding window of 64 tokens"):
        LLM(str(path), dtype="float32", progress=False, max_model_len=128)
    with pytest.raises(ValueError, match="max_position_embeddings 512"):
        LLM(str(path), dtype="float32", progress=False, max_model_len=1024)
    within = LLM(str(path), dtype="float32", progress=False, max_model_len=48)
    assert within.engine.max_model_len == 48

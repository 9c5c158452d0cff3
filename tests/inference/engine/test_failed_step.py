"""A step that raises leaves no trace in the prefix cache: the blocks it registered for
K/V it never wrote are forgotten, so a later request with the same prompt computes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from inference import LLM, SamplingParams
from tests.inference.checkpoints import make_checkpoint

PROMPT = list(range(5, 75))  # several full blocks


def _llm(path: Path) -> LLM:
    return LLM(
        str(path), dtype="float32", max_model_len=256, kv_cache_memory_bytes=8 << 20, progress=False
    )


def test_a_failed_step_registers_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_checkpoint("llama", tmp_path)
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    expected = _llm(path).generate([PROMPT], greedy)[0].outputs[0].token_ids

    llm = _llm(path)
    engine, blocks = llm.engine, llm.engine.scheduler.block_manager
    cached_before = set(blocks.cached)

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the device fell over")

    monkeypatch.setattr(engine.runner, "execute", broken)
    engine.add_request("doomed", PROMPT, greedy)
    with pytest.raises(RuntimeError, match="fell over"):
        engine.step()
    engine.abort_request("doomed")  # what the serving loop does after a failed step
    monkeypatch.undo()

    assert set(blocks.cached) == cached_before
    blocks.check_integrity([])
    hits_before = blocks.prefix_cache_hits
    again = llm.generate([PROMPT], greedy)[0].outputs[0].token_ids
    assert blocks.prefix_cache_hits == hits_before  # nothing of the failed step was hit
    assert again == expected


def test_the_offline_api_drops_its_requests_when_a_step_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = _llm(make_checkpoint("llama", tmp_path))
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the device fell over")

    monkeypatch.setattr(llm.engine.runner, "execute", broken)
    with pytest.raises(RuntimeError, match="fell over"):
        llm.generate([PROMPT, PROMPT[:9]], greedy)
    monkeypatch.undo()
    assert not llm.engine.has_unfinished_requests()
    llm.engine.scheduler.block_manager.check_integrity([])
    assert len(llm.generate([PROMPT[:9]], greedy)[0].outputs[0].token_ids) == 4

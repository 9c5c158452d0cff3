"""The time-budget policy changes when tokens are computed, never which: greedy output
of a mixed batch is the same as with the token budget alone."""

from __future__ import annotations

import pytest

from inference import LLM, SamplingParams
from tests.inference.checkpoints import make_checkpoint


@pytest.mark.parametrize("budget_ms", [2.0, 50.0])
def test_greedy_tokens_match_the_token_budget_schedule(
    tmp_path_factory: pytest.TempPathFactory, budget_ms: float
) -> None:
    path = str(make_checkpoint("llama", tmp_path_factory.mktemp("llama")))
    common = {"dtype": "float32", "max_model_len": 256, "kv_cache_memory_bytes": 8 << 20}
    plain = LLM(path, progress=False, **common)
    timed = LLM(path, progress=False, step_time_budget_ms=budget_ms, **common)
    shared = list(range(3, 120))
    prompts = [
        [*shared, 5, 6],  # a long prompt ...
        [*shared, 7],  # ... and one that shares its prefix
        list(range(200, 360)),  # another long one
        [11, 12, 13],  # and short ones
        [14],
    ]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    expected = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    got = [o.outputs[0].token_ids for o in timed.generate(prompts, params)]
    assert got == expected
    # Both count their steps (the cost model learns from either); a small budget takes more.
    steps_plain = plain.engine.scheduler.step_cost.num_observed
    steps_timed = timed.engine.scheduler.step_cost.num_observed
    assert steps_timed > steps_plain if budget_ms < 10 else steps_timed >= steps_plain

"""A verify step (speculative decoding) through the Triton kernels, interpreted on a CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from inference import LLM, SamplingParams
from inference.kernels.triton.backend import TritonAttentionBackend
from tests.inference.checkpoints import make_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("smollm2", tmp_path_factory.mktemp("smollm2"))


def test_triton_verify_steps_give_the_plain_greedy_tokens(checkpoint: Path) -> None:
    options = {"dtype": "float32", "max_model_len": 128, "kv_cache_memory_bytes": 1 << 20}
    prompts = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [40, 41, 40, 41, 40]]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    plain = LLM(str(checkpoint), attention_backend="torch", progress=False, **options)
    spec = LLM(
        str(checkpoint),
        attention_backend="triton",
        speculative="ngram",
        num_speculative_tokens=3,
        progress=False,
        **options,
    )
    assert isinstance(spec.engine.runner.attention_backend, TritonAttentionBackend)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
    assert got == want
    assert spec.engine.spec is not None
    assert spec.engine.spec.stats.num_verify_steps > 0

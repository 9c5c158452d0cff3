"""The offline API against Hugging Face transformers on the same tiny checkpoints.

Greedy tokens must be identical to ``generate`` alone, batched with prompts of other
lengths, with prefix caching on and off, and with prefill chunks forced small.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from inference import LLM, SamplingParams
from tests.inference.checkpoints import ARCHITECTURES, make_checkpoint

NEW_TOKENS = 32


@pytest.fixture(scope="module", params=ARCHITECTURES)
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(request.param, tmp_path_factory.mktemp(request.param))


def hf_greedy(path: Path, prompt: list[int]) -> list[int]:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=0,
        )
    return out[0, len(prompt) :].tolist()


def prompts_for(vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(1)
    # Lengths chosen to end on, just past and well inside a 16-token block.
    return [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in (16, 17, 40, 5)]


GREEDY = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)


@pytest.mark.parametrize(
    "engine_kwargs",
    [
        {"enable_prefix_caching": True},
        {"enable_prefix_caching": False},
        {"enable_prefix_caching": True, "max_num_batched_tokens": 8},
    ],
    ids=["prefix-cache", "no-prefix-cache", "small-chunks"],
)
def test_greedy_matches_transformers(checkpoint: Path, engine_kwargs: dict[str, object]) -> None:
    llm = LLM(
        str(checkpoint),
        dtype="float32",
        max_model_len=128,
        kv_cache_memory_bytes=4 << 20,
        progress=False,
        **engine_kwargs,
    )
    prompts = prompts_for(llm.engine.arch.vocab_size)
    expected = [hf_greedy(checkpoint, p) for p in prompts]

    alone = [llm.generate([p], GREEDY)[0].outputs[0].token_ids for p in prompts]
    assert alone == expected
    batched = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)]
    assert batched == expected


def test_prefix_cache_reuses_a_finished_requests_blocks(checkpoint: Path) -> None:
    llm = LLM(
        str(checkpoint),
        dtype="float32",
        max_model_len=128,
        progress=False,
        kv_cache_memory_bytes=4 << 20,
    )
    prompt = prompts_for(llm.engine.arch.vocab_size)[2]  # 40 tokens: two full blocks
    first = llm.generate([prompt], GREEDY)[0]
    second = llm.generate([prompt], GREEDY)[0]
    assert first.num_cached_tokens == 0
    assert second.num_cached_tokens == 32
    assert second.outputs[0].token_ids == first.outputs[0].token_ids

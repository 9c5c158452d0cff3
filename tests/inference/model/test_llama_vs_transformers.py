"""Our Llama-family model against transformers on the same tiny checkpoints (float32)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationMixin, PreTrainedModel

from inference.model.llama import LlamaForCausalLM
from inference.model.loader import load_model
from tests.inference.checkpoints import ARCHITECTURES, make_checkpoint
from tests.inference.model.paged import PagedDriver


def assert_logits_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module", params=ARCHITECTURES)
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def ours(checkpoint: Path) -> LlamaForCausalLM:
    return load_model(checkpoint, dtype="float32", progress=False)[0]


@pytest.fixture(scope="module")
def reference(checkpoint: Path) -> PreTrainedModel:
    return AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()


def prompt(vocab: int, length: int, seed: int = 0) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (length,), generator=gen).tolist()


@torch.inference_mode()
def reference_logits(model: PreTrainedModel, tokens: list[int]) -> torch.Tensor:
    return model(torch.tensor([tokens])).logits[0].float()


def test_prompt_logits_match(ours: LlamaForCausalLM, reference: PreTrainedModel) -> None:
    tokens = prompt(ours.config.vocab_size, 41)  # crosses two 16-token block boundaries
    logits = PagedDriver(ours).step({0: tokens})
    assert_logits_close(logits, reference_logits(reference, tokens))


def test_chunked_prefill_matches_one_shot(ours: LlamaForCausalLM) -> None:
    tokens = prompt(ours.config.vocab_size, 40, seed=1)
    whole = PagedDriver(ours).step({0: tokens})
    driver = PagedDriver(ours)
    chunks = [driver.step({0: tokens[i : i + 7]}) for i in range(0, len(tokens), 7)]
    assert_logits_close(torch.cat(chunks), whole)


def test_batch_matches_each_alone(ours: LlamaForCausalLM) -> None:
    vocab = ours.config.vocab_size
    first, second = prompt(vocab, 33, seed=2), prompt(vocab, 17, seed=3)
    alone_first = PagedDriver(ours).step({0: first})
    alone_second = PagedDriver(ours).step({1: second})
    driver = PagedDriver(ours)
    batched = driver.step({0: first, 1: second})
    assert_logits_close(batched[: len(first)], alone_first)
    assert_logits_close(batched[len(first) :], alone_second)
    # A mixed step: one decode and one prefill chunk in the same forward.
    third = prompt(vocab, 9, seed=4)
    mixed = driver.step({0: [5], 2: third})
    alone = PagedDriver(ours)
    alone.step({0: first})
    assert_logits_close(mixed[:1], alone.step({0: [5]}))
    assert_logits_close(mixed[1:], PagedDriver(ours).step({2: third}))


def test_greedy_decode_matches_generate(ours: LlamaForCausalLM, reference: PreTrainedModel) -> None:
    vocab = ours.config.vocab_size
    prompts = [prompt(vocab, 20, seed=5), prompt(vocab, 31, seed=6)]
    expected = []
    for tokens in prompts:
        ids = torch.tensor([tokens])
        with torch.inference_mode():
            out = cast(GenerationMixin, reference).generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=16,
                min_new_tokens=16,
                do_sample=False,
                pad_token_id=0,
            )
        expected.append(out[0, len(tokens) :].tolist())
    # Both sequences decode together: the batched decode path.
    driver = PagedDriver(ours)
    logits = driver.step({0: prompts[0]})
    nxt0 = int(logits[-1].argmax())
    logits = driver.step({1: prompts[1]})
    nxt1 = int(logits[-1].argmax())
    generated: list[list[int]] = [[nxt0], [nxt1]]
    for _ in range(15):
        logits = driver.step({0: [generated[0][-1]], 1: [generated[1][-1]]})
        generated[0].append(int(logits[0].argmax()))
        generated[1].append(int(logits[1].argmax()))
    assert generated == expected


def test_bfloat16_model_tracks_float32(checkpoint: Path, ours: LlamaForCausalLM) -> None:
    half, _ = load_model(checkpoint, dtype="bfloat16", progress=False)
    tokens = prompt(ours.config.vocab_size, 24, seed=7)
    full = PagedDriver(ours).step({0: tokens})
    approx = PagedDriver(half).step({0: tokens})  # float32 cache, bfloat16 model
    assert approx.dtype == torch.float32
    relative = float((approx - full).norm() / full.norm())
    assert relative < 0.05, relative

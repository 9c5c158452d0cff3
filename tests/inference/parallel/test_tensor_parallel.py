"""tensor_parallel_size=2 on gloo against one process, on the tiny checkpoints.

Greedy tokens must be identical: a batch of prompts of different lengths (prefill chunks
and decodes mixed in one step), then a prompt that hits the prefix cache, so rank 1 must
read the KV it wrote for an earlier request from its own pool. float32, so the only
difference between the two is where the all-reduce splits the sums. One pair of engines
per checkpoint; spawning a rank costs seconds.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator

import pytest
import torch

from inference import LLM, SamplingParams
from inference.parallel.sharding import RowParallel
from tests.inference.checkpoints import make_checkpoint

# 4 query / 2 KV heads, intermediate 128: all split over 2. qwen2 has a qkv bias, qwen3
# q/k norms.
KINDS = ["llama", "qwen2", "qwen3"]
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
ENGINE = {
    "dtype": "float32",
    "max_model_len": 128,
    "kv_cache_memory_bytes": 1 << 20,
    "progress": False,
}

Engines = tuple[LLM, LLM]


@pytest.fixture(scope="module", params=KINDS)
def engines(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engines]:
    checkpoint = make_checkpoint(request.param, tmp_path_factory.mktemp(request.param))
    single = LLM(str(checkpoint), **ENGINE)
    with LLM(str(checkpoint), tensor_parallel_size=2, **ENGINE) as parallel:
        yield single, parallel
    assert multiprocessing.active_children() == []  # close left no rank behind


def prompts(count: int, lengths: tuple[int, ...], seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 384, (n,), generator=gen).tolist() for n in lengths[:count]]


def greedy(llm: LLM, batch: list[list[int]]) -> list[list[int]]:
    return [output.outputs[0].token_ids for output in llm.generate(batch, GREEDY)]


def test_rank0_runs_its_share(engines: Engines) -> None:
    single, parallel = engines
    attn = parallel.engine.model.model.layers[0].self_attn
    assert (attn.num_heads, attn.num_kv_heads) == (2, 1)
    assert isinstance(attn.o_proj, RowParallel)
    # Half the KV heads per rank: the same bytes hold twice the tokens.
    assert parallel.engine.kv_capacity_tokens == 2 * single.engine.kv_capacity_tokens


def test_batch_of_mixed_lengths_matches_one_process(engines: Engines) -> None:
    single, parallel = engines
    batch = prompts(4, (16, 17, 40, 5), seed=1)  # on, just past and inside a block
    expected = greedy(single, batch)
    assert greedy(parallel, batch) == expected
    assert greedy(parallel, batch[3:]) == expected[3:]  # alone, too


def test_prefix_cache_hit_matches_one_process(engines: Engines) -> None:
    single, parallel = engines
    (shared,) = prompts(1, (40,), seed=2)  # two full blocks of 16
    first = parallel.generate([shared], GREEDY)[0]
    extended = [*shared, 5, 6, 7, 8, 9]
    second = parallel.generate([extended], GREEDY)[0]
    assert second.num_cached_tokens == 32
    assert [first.outputs[0].token_ids, second.outputs[0].token_ids] == greedy(
        single, [shared, extended]
    )

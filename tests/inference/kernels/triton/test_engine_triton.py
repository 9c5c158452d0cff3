"""End to end: the engine with the Triton backend forced on a CPU gives the torch tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inference import LLM, SamplingParams
from inference.engine.engine_config import EngineConfig
from inference.kernels.attention import TorchAttentionBackend
from inference.kernels.backends import make_attention_backend
from inference.kernels.cpu.backend import CpuAttentionBackend
from inference.kernels.triton.backend import TritonAttentionBackend
from tests.inference.checkpoints import make_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 6 query heads over 2 KV heads (GQA 3), head_dim 16.
    return make_checkpoint("smollm2", tmp_path_factory.mktemp("smollm2"))


def generate(path: Path, backend: str) -> tuple[LLM, list[list[int]], int]:
    llm = LLM(
        str(path),
        dtype="float32",
        attention_backend=backend,
        max_model_len=128,
        max_num_batched_tokens=24,  # prompts arrive in chunks over their cached start
        kv_cache_memory_bytes=1 << 20,
        progress=False,
    )
    shared = list(range(3, 37))  # a prefix long enough to be cached in whole blocks
    prompts = [[*shared, 50], [*shared, 60], [100, 101, 102]]
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    first = llm.generate(prompts[:1], params)  # fills the prefix cache
    rest = llm.generate(prompts[1:], params)
    outputs = first + rest
    return llm, [o.outputs[0].token_ids for o in outputs], sum(o.num_cached_tokens for o in rest)


def test_triton_backend_generates_the_torch_tokens(checkpoint: Path) -> None:
    torch_llm, expected, _ = generate(checkpoint, "torch")
    triton_llm, actual, cached = generate(checkpoint, "triton")
    assert isinstance(torch_llm.engine.runner.attention_backend, TorchAttentionBackend)
    assert isinstance(triton_llm.engine.runner.attention_backend, TritonAttentionBackend)
    assert triton_llm.engine.runner.decode_graphs is None  # no CUDA here
    assert cached == 32  # the second prompt read two blocks of the prefix from the cache
    assert actual == expected


def test_backend_choice_follows_the_device() -> None:
    cpu = torch.device("cpu")
    # The C kernels where they build, else the torch path.
    chosen = make_attention_backend("auto", cpu)
    assert isinstance(chosen, CpuAttentionBackend | TorchAttentionBackend)
    assert isinstance(make_attention_backend("triton", cpu), TritonAttentionBackend)
    with pytest.raises(ValueError, match="attention_backend"):
        EngineConfig(model="m", attention_backend="flash")

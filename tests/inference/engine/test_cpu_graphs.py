"""CPU decode graphs (inference/engine/cpu_graphs.py): decode steps replayed from a
recording of their C kernel calls give what the eager steps give, and only steps whose
pass is all C kernels replay."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import torch

from inference import LLM, SamplingParams
from inference.bench.requantize_gguf import main as requantize_main
from inference.engine.cpu_graphs import CpuDecodeGraphRunner
from inference.kernels.cpu.layers import load_layer_kernels
from inference.model.llama import LlamaForCausalLM
from inference.server.cli import add_arguments, engine_config_kwargs
from tests.inference.checkpoints import make_checkpoint
from tests.inference.model.test_gguf_files import _write_model

TEXT = "hello world, the world is hell or hello. " * 12


def write_q4_model(folder: Path) -> Path:
    """A tiny Llama GGUF whose every matrix is Q4_0 (kept as group-quantized layers)."""
    if (kernels := load_layer_kernels()) is None or kernels.quant is None:
        pytest.fail("the CPU kernels must build on the test machine")
    _write_model(folder / "f32.gguf")
    q4 = folder / "q4.gguf"
    assert requantize_main([str(folder / "f32.gguf"), str(q4), "--type", "Q4_0"]) == 0
    return q4


@pytest.fixture(scope="module")
def q4_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_q4_model(tmp_path_factory.mktemp("cpu-graphs"))


def generate(llm: LLM, prompts: list[str], tokens: int) -> list[tuple[list[int], list[Any]]]:
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True, logprobs=3)
    return [
        (list(o.outputs[0].token_ids), o.outputs[0].logprobs) for o in llm.generate(prompts, params)
    ]


def graphs_of(llm: LLM) -> CpuDecodeGraphRunner:
    graphs = llm.engine.runner.decode_graphs
    assert isinstance(graphs, CpuDecodeGraphRunner)
    return graphs


def run_both(path: Path, batches: list[list[str]], tokens: int, **kwargs: Any) -> Any:
    """Each batch generated eagerly and with graphs; (eager, graphs, the graph runner)."""
    results = []
    kwargs = {"dtype": "float32", **kwargs}
    for eager in (True, False):
        with LLM(str(path), enforce_eager=eager, max_model_len=128, block_size=8,
                 progress=False, **kwargs) as llm:  # fmt: skip
            results.append([generate(llm, batch, tokens) for batch in batches])
            if eager:
                assert llm.engine.runner.decode_graphs is None
            else:
                runner = graphs_of(llm)
    return results[0], results[1], runner


@pytest.mark.parametrize("int8", [False, True], ids=["float", "int8-activations"])
def test_replayed_decode_steps_give_the_eager_tokens_and_logprobs(
    q4_file: Path, int8: bool
) -> None:
    # Batches of 1 and 3, each size twice (the first of a size runs eagerly, the second
    # records it, later steps replay); 20 tokens cross the 8-token blocks: the block
    # tables grow while the graph replays them.
    batches = [[TEXT[:30]], [TEXT[5:50]], [TEXT[:7], TEXT[9:40], TEXT[3:90]], [TEXT[:60]] * 3]
    eager, graphs, runner = run_both(
        q4_file, batches, 20, quantization="gguf", int8_activations=int8
    )
    assert graphs == eager  # the same kernels on the same inputs: bitwise the same
    assert runner.num_captured == 2 and runner.largest == 8
    assert {1, 3} == {size for size, graph in runner._graphs.items() if graph.recording}
    recording = runner._graphs[1].recording
    assert recording is not None and recording._program is not None
    (run,) = recording._program  # every call of the pass, one call of replay.c
    assert len(getattr(run, "packed", ())) == len(recording.calls)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_float_model_replays_its_torch_matmuls_too(tmp_path: Path, dtype: str) -> None:
    """A float checkpoint's projections are torch matmuls (oneDNN's prepacked ones for
    bfloat16 where the CPU has them): they are rerun among the kernel calls."""
    path = make_checkpoint("llama", tmp_path)
    batches = [[TEXT[:30]], [TEXT[:20]], [TEXT[:9], TEXT[:44]], [TEXT[3:9], TEXT[:50]]]
    eager, graphs, runner = run_both(path, batches, 12, dtype=dtype)
    assert graphs == eager
    assert runner.num_captured == 2
    recording = runner._graphs[1].recording
    assert recording is not None and recording.torch_ops > 0


def test_a_pass_a_replay_cannot_repeat_runs_eagerly(
    q4_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass that reads a value back into Python (here, a check on the hidden states) is
    not recorded: its size, and every larger one, run eagerly from then on."""
    forward_layers = LlamaForCausalLM.forward_layers

    def checked(self: LlamaForCausalLM, hidden: torch.Tensor, *args: Any) -> torch.Tensor:
        if not bool(torch.isfinite(hidden).all()):  # Python branches on the data
            raise ValueError("non-finite hidden states")
        return forward_layers(self, hidden, *args)

    monkeypatch.setattr(LlamaForCausalLM, "forward_layers", checked)
    eager, graphs, runner = run_both(q4_file, [[TEXT[:30]], [TEXT[:20]]], 6, quantization="gguf")
    assert graphs == eager
    assert runner.num_captured == 0 and runner.largest == 0 and not runner.enabled


def test_a_change_of_the_models_paths_drops_the_recordings(q4_file: Path) -> None:
    with LLM(str(q4_file), quantization="gguf", dtype="float32", max_model_len=128,
             progress=False) as llm:  # fmt: skip
        runner = graphs_of(llm)
        generate(llm, [TEXT[:30]], 6)
        recording = runner._graphs[1].recording
        assert recording is not None and recording.torch_ops == 0  # all C kernels
        llm.engine.runner.model.set_layer_kernels(None)  # the layers' torch code from now on
        again = generate(llm, [TEXT[:30]], 6)  # its decodes: eager, recorded, replayed
        recording = runner._graphs[1].recording
        assert recording is not None and recording.torch_ops > 0  # the torch code's ops
        assert generate(llm, [TEXT[:30]], 6) == again


def test_shared_prefix_decodes_take_the_cascade_not_the_graph(q4_file: Path) -> None:
    """Decodes sharing 64 or more leading tokens attend them once (the cascade), which a
    recording cannot follow: that step runs eagerly."""
    shared = TEXT[:120]  # 75 tokens
    batches = [[shared + "a b", shared + "c d"]] * 3
    eager, graphs, runner = run_both(q4_file, batches, 8, quantization="gguf")
    assert graphs == eager
    assert 2 not in runner._graphs


def test_cli_option_turns_the_graphs_off() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert engine_config_kwargs(parser.parse_args(["--model", "m.gguf"]))["enforce_eager"] is False
    args = parser.parse_args(["--model", "m.gguf", "--enforce-eager"])
    assert engine_config_kwargs(args)["enforce_eager"] is True

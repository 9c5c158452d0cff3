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
from inference.engine.cpu_graphs import CpuDecodeGraphRunner, cpu_graph_sizes, padded_size
from inference.kernels.cpu.layers import load_layer_kernels
from inference.kernels.cpu.quant_linear import MAX_KERNEL_ROWS
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
    # Sizes up to the rows the kept layers multiply in place: 15, or the int8 kernel's 16
    # (AVX2) or 32 (VNNI), 64 where every layer is bound interleaved on VNNI (whole tiles of
    # 16 rows), any number (None) where bound interleaved on AVX2, so up to the runner's own
    # largest batch; past them a layer copies its weight per call.
    in_place = runner.model.rows_in_place()
    assert (in_place in (15, 16, 32, 64, None)) if int8 else (in_place == MAX_KERNEL_ROWS - 1)
    largest = runner._max_batch if in_place is None else in_place
    assert runner.num_captured == 2 and runner.largest == runner.sizes[-1] == largest
    assert {1, 3} == {size for size, graph in runner._graphs.items() if graph.recording}
    recording = runner._graphs[1].recording
    assert recording is not None and recording._program is not None
    (run,) = recording._program  # every call of the pass, one call of replay.c
    assert len(getattr(run, "packed", ())) == len(recording.calls)


def test_graph_sizes_are_exact_to_eight_then_every_eighth() -> None:
    assert cpu_graph_sizes(256) == [*range(1, 9), 16, 24, 32, 40, 48, 56, 64]
    assert cpu_graph_sizes(20) == [*range(1, 9), 16, 20]
    assert cpu_graph_sizes(5) == [1, 2, 3, 4, 5]
    sizes = cpu_graph_sizes(256)
    assert [padded_size(n, sizes) for n in (1, 8, 9, 16, 17, 63, 64, 65)] == [
        1, 8, 16, 16, 24, 64, 64, None
    ]  # fmt: skip


@pytest.mark.parametrize("int8", [False, True], ids=["float", "int8-activations"])
def test_a_batch_between_sizes_replays_the_next_size_padded(q4_file: Path, int8: bool) -> None:
    """11 decodes run in the next graph size (15 or 16): the padding rows write no KV and
    are not returned, so the real rows get the eager tokens, and logprobs equal up to the
    kernels' order of summation, which follows the number of rows."""
    prompts = [TEXT[i : i + 20 + 3 * i] for i in range(11)]
    eager, graphs, runner = run_both(
        q4_file, [prompts, prompts[::-1]], 12, quantization="gguf", int8_activations=int8
    )
    for eager_batch, graph_batch in zip(eager, graphs, strict=True):
        for (tokens, logprobs), (graph_tokens, graph_logprobs) in zip(
            eager_batch, graph_batch, strict=True
        ):
            assert graph_tokens == tokens
            for want, got in zip(logprobs, graph_logprobs, strict=True):
                assert [t for t, _ in got.top] == [t for t, _ in want.top]
                assert [v for _, v in got.top] == pytest.approx(
                    [v for _, v in want.top], rel=1e-3, abs=1e-3
                )
    size = padded_size(11, runner.sizes)
    assert size in (15, 16) and set(runner._graphs) == {size} and runner.num_captured == 1
    graph = runner._graphs[size]
    assert graph.out is not None and graph.out.shape[0] == size
    pad = size - 11
    assert graph.slots.tolist()[11:] == [-1] * pad and graph.lens.tolist()[11:] == [1] * pad


def test_recordings_past_the_memory_budget_run_eagerly(q4_file: Path) -> None:
    """The recordings together keep at most `memory_bytes`: once the batch-1 graph is kept,
    a batch-3 recording that would pass the budget is dropped and its steps run eagerly."""
    batches = [[TEXT[:30]], [TEXT[:7], TEXT[9:40], TEXT[3:90]], [TEXT[:60]] * 3]
    with LLM(str(q4_file), quantization="gguf", dtype="float32", enforce_eager=True,
             max_model_len=128, progress=False) as llm:  # fmt: skip
        eager = [generate(llm, batch, 10) for batch in batches]
    with LLM(str(q4_file), quantization="gguf", dtype="float32", max_model_len=128,
             progress=False) as llm:  # fmt: skip
        runner = graphs_of(llm)
        assert generate(llm, batches[0], 10) == eager[0]
        one_row = runner.kept_bytes
        assert runner.num_captured == 1 and one_row > 0
        runner.memory_bytes = one_row * 3  # batch 3 would keep about three rows more
        assert [generate(llm, batch, 10) for batch in batches[1:]] == eager[1:]
        assert runner.num_captured == 1 and 3 not in runner._graphs
        assert runner.kept_bytes == one_row and runner.largest == runner.sizes[-1]


def test_the_step_that_records_is_left_out_of_the_step_cost_model(q4_file: Path) -> None:
    """Recording a size's graph takes far longer than the step will again (about a second
    for the demo model): fed to the scheduler's cost model it priced every step that dear
    and then planned prefill chunks four times past the time budget. Every other step,
    the eager first one of the size and the replays after the recording, is observed."""
    with LLM(str(q4_file), quantization="gguf", dtype="float32", max_model_len=128,
             progress=False) as llm:  # fmt: skip
        engine = llm.engine
        engine.add_request("r", TEXT[:30], SamplingParams(max_tokens=6, ignore_eos=True))
        observed: list[int] = []  # steps observed so far, after each step
        while engine.has_unfinished_requests():
            engine.step()
            observed.append(engine.scheduler.step_cost.num_observed)
        assert engine.runner.one_time_steps == 1 == graphs_of(llm).num_captured
        # prefill (with the first token), the eager decode, the recording, three replays
        assert observed == [1, 2, 2, 3, 4, 5]


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


def test_a_change_of_the_models_paths_drops_the_recordings(tmp_path: Path) -> None:
    path = make_checkpoint("llama", tmp_path)
    with LLM(str(path), dtype="float32", max_model_len=128, progress=False) as llm:
        runner = graphs_of(llm)
        generate(llm, [TEXT[:30]], 6)
        recording = runner._graphs[1].recording
        assert recording is not None
        fused_ops = recording.torch_ops  # the matmuls; norms, rotary, SiLU are C kernels
        llm.engine.runner.model.set_layer_kernels(None)  # the layers' torch code from now on
        again = generate(llm, [TEXT[:30]], 6)  # its decodes: eager, recorded, replayed
        recording = runner._graphs[1].recording
        assert recording is not None and recording.torch_ops > fused_ops
        assert generate(llm, [TEXT[:30]], 6) == again


def test_kept_layers_without_their_kernel_run_eagerly(q4_file: Path) -> None:
    """Without the C kernel a kept layer dequantizes its weight each call, which a recording
    would keep for every layer: no size records then."""
    with LLM(str(q4_file), quantization="gguf", dtype="float32", max_model_len=128,
             progress=False) as llm:  # fmt: skip
        runner = graphs_of(llm)
        generate(llm, [TEXT[:30]], 6)
        assert runner.num_captured == 1
        llm.engine.runner.model.set_layer_kernels(None)
        generate(llm, [TEXT[:30]], 6)
        assert runner.sizes == [] and runner.largest == 0 and runner.num_captured == 0


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

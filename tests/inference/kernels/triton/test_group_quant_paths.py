"""GroupQuantLinear and GroupQuantEmbedding on their CUDA path, run here under the
interpreter: with `use_triton` every call goes through the Triton kernel, and a tiny GGUF
model kept quantized that way gives the logits of the file dequantized at load."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from inference.kernels.profile import group_quant_triton_runs
from inference.kernels.triton.group_gemm import group_quant_matmul
from inference.model.loader import load_model
from inference.model.quant.group_linear import (
    GroupQuantEmbedding,
    GroupQuantLinear,
    GroupQuantWeights,
)
from inference.model.quant.group_math import GroupQuantized, dequantize, quantize_groups
from tests.inference.model.test_gguf_kept_quantized import (
    LAYOUTS,
    PROMPTS,
    assert_logits_close,
    run_steps,
    write_model,
)

CPU = torch.device("cpu")


def counting(layer: GroupQuantLinear | GroupQuantEmbedding) -> list[int]:
    """Wrap the layer's kernel so that each call is counted (and still runs it)."""
    kernel = layer._triton
    assert kernel is group_quant_matmul
    calls: list[int] = []

    def counted(x: torch.Tensor, weight: GroupQuantized) -> torch.Tensor:
        calls.append(x.numel() // x.shape[-1])  # rows of activations
        return kernel(x, weight)

    layer._triton = counted
    return calls


def test_a_linear_layer_takes_the_kernel_for_decode_and_prefill() -> None:
    torch.manual_seed(0)
    shards = [24, 16]
    layer = GroupQuantLinear(
        200, shards, bits=4, group_size=64, bias=True, dtype=torch.bfloat16, device=CPU
    )
    weight = quantize_groups(torch.randn(sum(shards), 200), 4, 64)
    for shard in range(2):
        layer.load_shard("weight", shard, weight.select_rows(layer.shard_rows(shard)), "w")
    assert layer.bias is not None
    layer.bias.data.normal_()
    layer.use_triton(True)
    calls = counting(layer)
    run: Callable[[torch.Tensor], torch.Tensor] = layer
    for tokens in (3, 40):  # split K, then plain tiles
        x = torch.randn(1, tokens, 200).bfloat16()
        y = run(x)
        assert y.shape == (1, tokens, 40) and y.dtype == torch.bfloat16
        expected = x.float() @ dequantize(weight, torch.bfloat16).float().T + layer.bias.float()
        torch.testing.assert_close(y.float(), expected, rtol=2**-6, atol=2**-6 * 8)
    assert calls == [3, 40]
    layer.use_triton(False)  # back to the torch path
    assert layer._triton is None
    torch.testing.assert_close(run(x).float(), y.float(), rtol=2**-6, atol=2**-6 * 8)


def test_the_kept_quantized_output_projection_takes_the_kernel() -> None:
    table = GroupQuantEmbedding(100, 64, bits=8, group_size=32, dtype=torch.float32, device=CPU)
    weight = quantize_groups(torch.randn(100, 64), 8, 32)
    table.load_shard("weight", 0, weight, "embed")
    table.use_triton(True)
    calls = counting(table)
    hidden = torch.randn(2, 64)
    logits = table.unembed(hidden)
    torch.testing.assert_close(logits, hidden @ dequantize(weight).T, rtol=1e-5, atol=1e-4)
    assert calls == [2]


def test_the_profile_probe_runs_its_own_call() -> None:
    # A mistake in the probe's tiny weight would turn the kernel off on every GPU.
    assert group_quant_triton_runs(CPU, torch.float32)


def test_a_kept_quantized_model_on_the_kernel_matches_dequantized_at_load(
    tmp_path: Path,
) -> None:
    # Q4_0 q|k|v and down, Q8_0 o_proj and table, Q4_1 gate|up and output projection.
    types, head = LAYOUTS["untied-q4-head"]
    path = write_model(tmp_path / "model.gguf", types, head)
    reference, _ = load_model(path, dtype="float32", progress=False)
    kept, _ = load_model(path, dtype="float32", progress=False, quantization="gguf")
    layers = [m for m in kept.modules() if isinstance(m, GroupQuantWeights)]
    assert {m.bits for m in layers} == {4, 8} and kept.lm_head in layers
    for layer in layers:
        layer.use_triton(True)
    # A prefill of both prompts (27 rows: plain tiles), then decodes of 2 rows (split K).
    assert_logits_close(run_steps(kept, PROMPTS), run_steps(reference, PROMPTS))

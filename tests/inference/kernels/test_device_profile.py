"""The device profile: chosen once per device, then swapped into every layer of a model."""

from __future__ import annotations

from pathlib import Path

import torch

from inference.engine.model_runner import ModelRunner
from inference.kernels.attention import TorchAttentionBackend
from inference.kernels.cpu.backend import CpuAttentionBackend
from inference.kernels.profile import choose_device_profile
from inference.model.layers.norm import RMSNorm
from inference.model.llama import LlamaAttention, LlamaMLP
from inference.model.loader import load_model
from inference.model.quant import Fp8Embedding, Fp8Linear
from tests.inference.checkpoints import make_checkpoint

CPU = torch.device("cpu")


def test_a_cpu_profile_has_no_gpu_paths() -> None:
    auto = choose_device_profile("auto", CPU, torch.bfloat16)
    assert not auto.fp8_scaled_mm and not auto.fp8_triton and not auto.group_quant_triton
    # The C kernels come with the CPU attention backend (where they build) and only then.
    assert (auto.layer_kernels is not None) == isinstance(auto.attention, CpuAttentionBackend)
    reference = choose_device_profile("torch", CPU, torch.bfloat16)
    assert isinstance(reference.attention, TorchAttentionBackend)
    assert reference.layer_kernels is None


def test_the_runner_swaps_the_profile_into_every_layer(tmp_path: Path) -> None:
    model, config = load_model(
        make_checkpoint("smollm2", tmp_path), dtype="bfloat16", progress=False, quantization="fp8"
    )
    runner = ModelRunner(
        model, config, num_blocks=4, block_size=16, kv_dtype=torch.bfloat16, device=CPU
    )
    profile = runner.profile
    kinds = RMSNorm | LlamaAttention | LlamaMLP | Fp8Linear | Fp8Embedding
    layers = [m for m in model.modules() if isinstance(m, kinds)]
    assert any(isinstance(m, Fp8Linear) for m in layers)
    assert all(m.kernels is profile.layer_kernels for m in layers)
    attention = [m for m in model.modules() if isinstance(m, LlamaAttention)]
    assert all(m.backend is profile.attention is runner.attention_backend for m in attention)
    assert not any(m._use_scaled_mm for m in layers if isinstance(m, Fp8Linear))

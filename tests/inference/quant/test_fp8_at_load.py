"""FP8 quantized while loading: each tensor is quantized as the checkpoint streams in, to
the very bytes that quantizing the loaded bf16 model gives, so nothing changes but the
memory the load passes through."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from inference.bench.load_memory import write_bf16_directory
from inference.model.layers.linear import FusedLinear
from inference.model.llama import LlamaForCausalLM
from inference.model.loader import load_model
from inference.model.quant import Fp8Embedding, Fp8Linear, fp8_math, quantize_model_fp8
from inference.model.quant.fp8_math import quantize_rows_into, quantize_weight_fp8
from tests.inference.checkpoints import make_checkpoint
from tests.inference.model.test_gguf_files import _write_model
from tests.inference.model.test_gguf_kquant import write_k_model
from tests.inference.quant.load_memory import assert_within_bound, describe, measure_loads
from tests.inference.quant.test_gguf_q4_smollm2 import LARGEST_SOURCE_TENSOR_BYTES, demo_path

__all__ = ["demo_path"]  # the fixture, shared

FP8_LAYERS = (Fp8Linear, Fp8Embedding)


def fp8_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every FP8 layer's weight (as bytes) and scales, by name."""
    found = {}
    for name, module in model.named_modules():
        if isinstance(module, FP8_LAYERS):
            found[f"{name}.weight"] = module.weight.data.view(torch.uint8)
            found[f"{name}.weight_scale"] = module.weight_scale.data
    return found


def assert_same_model(at_load: nn.Module, after: nn.Module) -> None:
    assert not any(isinstance(m, FusedLinear) for m in at_load.modules())
    got, want = fp8_tensors(at_load), fp8_tensors(after)
    assert got.keys() == want.keys() and got
    for name in want:
        assert torch.equal(got[name], want[name]), name
    floats = dict(after.state_dict())
    for name, tensor in at_load.state_dict().items():
        assert torch.equal(tensor, floats[name]), name  # norms, biases, the rest


def quantized_after_load(path: Path, dtype: str) -> LlamaForCausalLM:
    model, _ = load_model(path, dtype=dtype, progress=False)
    quantize_model_fp8(model)
    return model


@pytest.mark.parametrize("kind", ["llama", "smollm2", "qwen2"])  # untied, tied, with biases
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_hf_checkpoint_quantized_at_load_equals_quantized_after(
    tmp_path: Path, kind: str, dtype: str
) -> None:
    path = make_checkpoint(kind, tmp_path / kind)
    at_load, config = load_model(path, dtype=dtype, progress=False, quantization="fp8")
    after = quantized_after_load(path, dtype)
    assert_same_model(at_load, after)
    ids = torch.arange(1, 40)
    with torch.no_grad():
        assert torch.equal(at_load.model.embed_tokens(ids), after.model.embed_tokens(ids))
    assert isinstance(at_load.model.embed_tokens, Fp8Embedding)
    if not config.tie_word_embeddings:
        assert isinstance(at_load.lm_head, Fp8Linear) and at_load.lm_head.group_size == 16


def test_gguf_file_quantized_at_load_equals_quantized_after(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    _write_model(path)
    at_load, _ = load_model(path, dtype="bfloat16", progress=False, quantization="fp8")
    assert_same_model(at_load, quantized_after_load(path, "bfloat16"))


def test_slices_quantize_to_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    source = torch.randn(37, 50) * torch.rand(37, 1) * 4
    for group_size in (None, 16):
        want_q, want_scale = quantize_weight_fp8(source.to(torch.bfloat16), group_size)
        monkeypatch.setattr(fp8_math, "QUANTIZE_SLICE_ELEMENTS", 3 * 50)  # 3 rows a slice
        q = torch.empty_like(want_q)
        scale = torch.empty_like(want_scale)
        quantize_rows_into(source, torch.bfloat16, q, scale, group_size)
        assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
        assert torch.equal(scale, want_scale)
        monkeypatch.undo()


def test_bad_tensors_are_refused() -> None:
    q = torch.empty(4, 8, dtype=fp8_math.FP8_DTYPE)
    scale = torch.empty(4)
    with pytest.raises(ValueError, match="shape"):
        quantize_rows_into(torch.zeros(4, 9), torch.bfloat16, q, scale)
    with pytest.raises(ValueError, match="cannot quantize"):
        quantize_rows_into(torch.zeros(4, 8, dtype=torch.int32), torch.bfloat16, q, scale)
    layer = Fp8Linear(8, [2, 2], bias=False, dtype=torch.bfloat16, device="cpu",
                      quantize_on_load=True)  # fmt: skip
    with pytest.raises(ValueError, match="shape"):
        layer.load_shard("weight", 1, torch.zeros(3, 8), "k_proj.weight")
    with pytest.raises(ValueError, match="takes no weight_scale"):
        layer.load_shard("weight_scale", 0, torch.ones(2), "q_proj.weight_scale")
    table = Fp8Embedding(4, 8, group_size=16, dtype=torch.bfloat16, device="cpu")
    with pytest.raises(ValueError, match="table only"):
        table.load_shard("bias", 0, torch.zeros(4), "embed_tokens.bias")


def test_a_checkpoint_without_a_tensor_is_still_refused(tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    path = make_checkpoint("llama", tmp_path / "llama")
    file = path / "model.safetensors"
    tensors = load_file(file)
    del tensors["model.layers.1.mlp.down_proj.weight"]
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, file,
              metadata={"format": "pt"})  # fmt: skip
    with pytest.raises(ValueError, match=r"missing tensors: model\.layers\.1\.mlp\.down_proj"):
        load_model(path, progress=False, quantization="fp8")


def test_fp8_load_never_holds_the_bf16_model(demo_path: Path) -> None:
    measured = measure_loads(demo_path, {"bf16": "", "fp8": "fp8"})
    bf16, fp8 = measured["bf16"], measured["fp8"]
    print(f"\nSmolLM2 load_model memory: {describe(measured)}")
    assert fp8["held"] <= 0.6 * bf16["held"]
    # Quantized a slice of a chunk at a time, straight from the file's map: at its peak the
    # load holds the FP8 model and a slice's buffers, within the bound (the token
    # table as stored), far from the bf16 model it used to build first.
    assert fp8["peak"] < bf16["held"]
    assert_within_bound(fp8, LARGEST_SOURCE_TENSOR_BYTES)


def test_k_quant_file_quantized_at_load_equals_quantized_after(tmp_path: Path) -> None:
    # K-quants are read dequantized for FP8 (their kept form is only close to the file's
    # values); the exact block types reach the FP8 layers as blocks. Either way, the bytes
    # are those of the file dequantized at load and then quantized.
    path = write_k_model(tmp_path / "k.gguf")
    at_load, _ = load_model(path, dtype="bfloat16", progress=False, quantization="fp8")
    assert_same_model(at_load, quantized_after_load(path, "bfloat16"))


@pytest.fixture(scope="module")
def demo_directory(demo_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model as a bf16 Hugging Face directory (config.json and one safetensors
    file), written from its GGUF file."""
    return write_bf16_directory(demo_path, tmp_path_factory.mktemp("smollm2-bf16"))


def test_fp8_from_bf16_peaks_at_the_model_and_one_tensor(demo_directory: Path) -> None:
    measured = measure_loads(demo_directory, {"bf16": "", "fp8": "fp8"})
    bf16, fp8 = measured["bf16"], measured["fp8"]
    print(f"\nSmolLM2 bf16 directory, load_model memory: {describe(measured)}")
    largest = 49152 * 576 * 2  # the token table in bf16
    # The bound: the quantized model plus the largest tensor in the source dtype.
    # (Read through a memory map, the checkpoint's pages stayed: 436 MB for FP8.)
    assert_within_bound(fp8, largest)
    assert fp8["peak"] <= fp8["held"] + largest  # the first load, even with its slack
    assert bf16["peak"] <= bf16["held"] + largest
    assert fp8["held"] <= 0.6 * bf16["held"]

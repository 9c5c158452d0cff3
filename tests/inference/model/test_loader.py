"""Loading Hugging Face directories, and the errors a damaged one must give."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inference.model.loader import (
    cpu_has_native_bf16,
    load_model,
    num_kv_cache_bytes_per_token,
    resolve_dtype,
)
from tests.inference.checkpoints import make_checkpoint


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("llama", tmp_path_factory.mktemp("llama"))


def copy_checkpoint(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def test_loads_every_tensor_of_the_checkpoint(llama_dir: Path) -> None:
    model, config = load_model(llama_dir, dtype="float32", progress=False)
    state = load_file(llama_dir / "model.safetensors")
    q = state["model.layers.1.self_attn.q_proj.weight"]
    up = state["model.layers.0.mlp.up_proj.weight"]
    ours = model.state_dict()
    assert torch.equal(ours["model.layers.1.self_attn.qkv_proj.weight"][: config.q_size], q)
    gate_up = ours["model.layers.0.mlp.gate_up_proj.weight"]
    assert torch.equal(gate_up[config.intermediate_size :], up)
    assert model.lm_head is not None
    assert torch.equal(model.lm_head.weight, state["lm_head.weight"])


def test_auto_dtype_follows_this_cpu_and_explicit_dtype_wins(llama_dir: Path) -> None:
    """The checkpoint is float32: auto runs it in bf16 where this CPU multiplies bf16 in
    hardware, in float32 where it does not."""
    auto, _ = load_model(llama_dir, progress=False)
    expected = torch.bfloat16 if cpu_has_native_bf16() else torch.float32
    assert auto.model.embed_tokens.weight.dtype == expected
    f32, _ = load_model(llama_dir, dtype=torch.float32, progress=False)
    assert f32.state_dict()["model.layers.0.self_attn.qkv_proj.weight"].dtype == torch.float32
    with pytest.raises(ValueError, match="unknown dtype"):
        load_model(llama_dir, dtype="float8", progress=False)


BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32


@pytest.mark.parametrize(
    ("declared", "native_bf16", "expected"),
    [
        ("float32", True, BF16),
        ("float16", True, BF16),
        ("bfloat16", True, BF16),
        ("float32", False, F32),  # software bf16 would make prefill several times slower
        ("float16", False, F32),
        ("bfloat16", False, BF16),  # kept: float32 would double the weights' memory
    ],
)
def test_auto_dtype_on_a_cpu(declared: str, native_bf16: bool, expected: torch.dtype) -> None:
    cpu = torch.device("cpu")
    config = {"torch_dtype": declared}
    assert resolve_dtype("auto", config, cpu, native_bf16=native_bf16) == expected
    # an explicit dtype is taken as asked, and CUDA follows the checkpoint's rule
    assert resolve_dtype("bfloat16", config, cpu, native_bf16=False) == BF16
    cuda = resolve_dtype("auto", config, torch.device("cuda"), native_bf16=False)
    assert cuda == (F16 if declared == "float16" else BF16)


def test_native_bf16_matches_the_processor_flags() -> None:
    """x86 flags name the bf16 units; elsewhere (no flags line) the probes say no."""
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text() if cpuinfo.exists() else ""
    flags = set(text.split("flags", 2)[1].split("\n", 1)[0].split()) if "flags" in text else set()
    assert cpu_has_native_bf16() == bool({"avx512_bf16", "amx_bf16"} & flags)


def test_tied_embeddings_share_the_embedding(tmp_path: Path) -> None:
    directory = make_checkpoint("smollm2", tmp_path / "smollm2")
    assert "lm_head.weight" not in load_file(directory / "model.safetensors")
    model, config = load_model(directory, dtype="float32", progress=False)
    assert model.lm_head is None and config.tie_word_embeddings
    hidden = torch.randn(3, config.hidden_size)
    expected = hidden @ model.model.embed_tokens.weight.T
    torch.testing.assert_close(model.compute_logits(hidden), expected)


def test_sharded_index_loads_the_same_model(llama_dir: Path, tmp_path: Path) -> None:
    state = load_file(llama_dir / "model.safetensors")
    sharded = copy_checkpoint(llama_dir, tmp_path / "sharded")
    (sharded / "model.safetensors").unlink()
    names = sorted(state)
    halves = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    weight_map = {}
    for file_name, part in halves.items():
        save_file({n: state[n] for n in part}, sharded / file_name)
        weight_map.update(dict.fromkeys(part, file_name))
    index = {"metadata": {}, "weight_map": weight_map}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    single, _ = load_model(llama_dir, dtype="float32", progress=False)
    from_shards, _ = load_model(sharded, dtype="float32", progress=False)
    for (name, a), (_, b) in zip(
        single.state_dict().items(), from_shards.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_truncated_safetensors_is_a_value_error(llama_dir: Path, tmp_path: Path) -> None:
    broken = copy_checkpoint(llama_dir, tmp_path / "broken")
    data = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(data[: len(data) - 100])
    with pytest.raises(ValueError, match="truncated"):
        load_model(broken, progress=False)
    (broken / "model.safetensors").write_bytes(data[:4])
    with pytest.raises(ValueError, match="not a safetensors file"):
        load_model(broken, progress=False)


def test_missing_files_and_bad_config(llama_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a checkpoint directory"):
        load_model(tmp_path / "nowhere", progress=False)
    broken = copy_checkpoint(llama_dir, tmp_path / "broken")
    (broken / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"neither model\.safetensors"):
        load_model(broken, progress=False)
    (broken / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json"):
        load_model(broken, progress=False)


def test_unknown_architecture_is_named(llama_dir: Path, tmp_path: Path) -> None:
    other = copy_checkpoint(llama_dir, tmp_path / "other")
    config = json.loads((other / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"GPT2LMHeadModel.*Qwen3ForCausalLM"):
        load_model(other, progress=False)


def rewrite_tensors(directory: Path, edit: dict[str, torch.Tensor | None]) -> None:
    state = load_file(directory / "model.safetensors")
    for name, tensor in edit.items():
        if tensor is None:
            del state[name]
        else:
            state[name] = tensor
    save_file(state, directory / "model.safetensors")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            {"model.layers.1.mlp.up_proj.weight": None},
            "missing tensors: model.layers.1.mlp.up_proj",
        ),
        ({"model.layers.9.mlp.up_proj.weight": torch.zeros(2)}, "unexpected tensor model.layers.9"),
        ({"model.layers.0.self_attn.k_proj.weight": torch.zeros(3, 64)}, "k_proj.weight has shape"),
        ({"model.norm.weight": torch.zeros(7)}, "model.norm.weight has shape"),
    ],
    ids=["missing", "unexpected", "bad-fused-shape", "bad-shape"],
)
def test_weight_mismatches_name_the_tensor(
    llama_dir: Path, tmp_path: Path, edit: dict[str, torch.Tensor | None], message: str
) -> None:
    broken = copy_checkpoint(llama_dir, tmp_path / "broken")
    rewrite_tensors(broken, edit)
    with pytest.raises(ValueError, match=message):
        load_model(broken, progress=False)


def test_kv_cache_bytes_per_token(llama_dir: Path) -> None:
    _, config = load_model(llama_dir, progress=False)
    # 2 (k and v) * 2 layers * 2 KV heads * head_dim 16 * 2 bytes
    assert num_kv_cache_bytes_per_token(config, torch.bfloat16) == 2 * 2 * 2 * 16 * 2

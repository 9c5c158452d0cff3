"""--quantization gguf on tiny GGUF files written here: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0
matrices kept as their blocks (GroupQuantLinear, GroupQuantEmbedding) give the logits of
the same file dequantized at load, and files or settings it does not apply to are refused.
K-quants: test_gguf_kquant.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter, ReaderTensor

from inference.engine.engine_config import EngineConfig
from inference.kernels.cpu.layers import load_layer_kernels
from inference.model.layers.embedding import VocabEmbedding
from inference.model.layers.linear import FusedLinear
from inference.model.llama import LlamaForCausalLM
from inference.model.loader import load_model
from inference.model.loader.gguf import read_gguf
from inference.model.loader.gguf_quant import group_quantized, kept_format
from inference.model.loader.gguf_tensors import dequantize_tensor
from inference.model.quant.group_linear import GroupQuantEmbedding, GroupQuantLinear
from inference.model.quant.group_math import dequantize
from tests.inference.checkpoints import make_checkpoint
from tests.inference.model.paged import PagedDriver
from tests.inference.model.test_gguf_files import (
    GGUF_NAMES,
    HEADS,
    HIDDEN,
    KV_HEADS,
    _model_tensors,
    _permute_like_llama_cpp,
    _vocab,
    write_gguf,
)

Q = GGMLQuantizationType
LAYER = "model.layers.0"
BITS = {Q.Q4_0: 4, Q.Q4_1: 4, Q.Q5_0: 8, Q.Q5_1: 8, Q.Q8_0: 8}

# Per HF tensor, the GGUF type it is written in (norms are always F32). The fused q|k|v and
# gate|up layers are kept only when all their shards share a type.
ALL_KEPT = {
    "model.embed_tokens.weight": Q.F32,
    f"{LAYER}.self_attn.q_proj.weight": Q.Q4_0,
    f"{LAYER}.self_attn.k_proj.weight": Q.Q4_0,
    f"{LAYER}.self_attn.v_proj.weight": Q.Q4_0,
    f"{LAYER}.self_attn.o_proj.weight": Q.Q8_0,
    f"{LAYER}.mlp.gate_proj.weight": Q.Q4_1,
    f"{LAYER}.mlp.up_proj.weight": Q.Q4_1,
    f"{LAYER}.mlp.down_proj.weight": Q.Q4_0,
}
LAYOUTS: dict[str, tuple[dict[str, GGMLQuantizationType], GGMLQuantizationType | None]] = {
    # (types, lm_head's type or None for a tied head)
    "tied-f32-embedding": (ALL_KEPT, None),
    "tied-q8-embedding": ({**ALL_KEPT, "model.embed_tokens.weight": Q.Q8_0}, None),
    "tied-q4-embedding": ({**ALL_KEPT, "model.embed_tokens.weight": Q.Q4_1}, None),
    "untied-q4-head": ({**ALL_KEPT, "model.embed_tokens.weight": Q.Q8_0}, Q.Q4_1),
    "untied-f32-embedding-q8-head": (ALL_KEPT, Q.Q8_0),
    "q5": (
        {
            **ALL_KEPT,
            f"{LAYER}.self_attn.o_proj.weight": Q.Q5_0,
            f"{LAYER}.mlp.gate_proj.weight": Q.Q5_1,
            f"{LAYER}.mlp.up_proj.weight": Q.Q5_1,
            "model.embed_tokens.weight": Q.Q5_0,
        },
        None,
    ),
    "mixed-shards": (
        {
            **ALL_KEPT,
            f"{LAYER}.self_attn.k_proj.weight": Q.Q8_0,  # q and v stay Q4_0
            f"{LAYER}.mlp.gate_proj.weight": Q.F16,  # up stays Q4_1
        },
        None,
    ),
}
# Which layer each fused layer's shards come from.
FUSED = {
    f"{LAYER}.self_attn.qkv_proj": ("q_proj", "k_proj", "v_proj"),
    f"{LAYER}.mlp.gate_up_proj": ("gate_proj", "up_proj"),
}


def write_model(
    path: Path,
    types: dict[str, GGMLQuantizationType],
    head: GGMLQuantizationType | None,
    arch: str = "llama",
) -> Path:
    """A one-layer model with each tensor in its type; llama.cpp's Q/K row order for llama."""
    rng = np.random.default_rng(7)
    hf = _model_tensors(rng)
    if arch == "llama":
        for name, heads in (("q_proj", HEADS), ("k_proj", KV_HEADS)):
            full = f"{LAYER}.self_attn.{name}.weight"
            hf[full] = _permute_like_llama_cpp(hf[full], heads)
    tensors = {GGUF_NAMES[name]: (values, types.get(name, Q.F32)) for name, values in hf.items()}
    if arch == "qwen2":  # Qwen2's q, k and v have biases: GroupQuantLinear's bias too
        for name in ("q", "k", "v"):
            rows = hf[f"{LAYER}.self_attn.{name}_proj.weight"].shape[0]
            bias = rng.standard_normal((rows,)).astype(np.float32)
            tensors[f"blk.0.attn_{name}.bias"] = (bias, Q.F32)
    if head is not None:
        output = rng.standard_normal((len(_vocab()), HIDDEN)).astype(np.float32)
        tensors["output.weight"] = (output, head)
    return write_gguf(path, tensors, arch)


def expected_bits(
    types: dict[str, GGMLQuantizationType], head: GGMLQuantizationType | None
) -> dict[str, int | None]:
    """Module name -> bits of the group-quantized layer it should be, or None (floats)."""
    expected: dict[str, int | None] = {}
    for module, shards in FUSED.items():
        parent = module.rpartition(".")[0]
        kinds = {types[f"{parent}.{shard}.weight"] for shard in shards}
        expected[module] = BITS.get(kinds.pop()) if len(kinds) == 1 else None
    for name in ("self_attn.o_proj", "mlp.down_proj"):
        expected[f"{LAYER}.{name}"] = BITS.get(types[f"{LAYER}.{name}.weight"])
    expected["model.embed_tokens"] = BITS.get(types["model.embed_tokens.weight"])
    expected["lm_head"] = BITS.get(head) if head is not None else None
    return expected


def check_modules(model: LlamaForCausalLM, expected: dict[str, int | None]) -> None:
    modules = dict(model.named_modules())
    for name, bits in expected.items():
        if name == "lm_head" and model.lm_head is None:
            continue
        module = modules[name]
        table = name == "model.embed_tokens"
        if bits is None:
            assert isinstance(module, VocabEmbedding if table else FusedLinear), (name, module)
            assert module.weight.dtype == torch.float32, name
            continue
        quantized = GroupQuantEmbedding if table else GroupQuantLinear
        assert isinstance(module, quantized), (name, module)
        assert (module.bits, module.group_size) == (bits, 32), name
        assert module.weight.dtype == torch.uint8, name


def run_steps(model: LlamaForCausalLM, prompts: dict[int, list[int]]) -> list[torch.Tensor]:
    """A prefill of every prompt (one batch, more rows than the kernel takes), then three
    decode steps of one token each (the kernel's few rows); the logits of each step."""
    driver = PagedDriver(model, num_blocks=16)
    steps = [driver.step(prompts)]
    for offset in range(3):
        steps.append(driver.step({seq: [5 + offset + seq] for seq in prompts}))
    return steps


PROMPTS = {
    0: [int(t) for t in np.random.default_rng(11).integers(3, len(_vocab()), 21)],
    1: [int(t) for t in np.random.default_rng(12).integers(3, len(_vocab()), 6)],
}


def prefixed(prefix: str) -> Callable[[str], str]:
    return lambda message: f"{prefix}: {message}"


def assert_logits_close(ours: list[torch.Tensor], reference: list[torch.Tensor]) -> None:
    for step, (got, want) in enumerate(zip(ours, reference, strict=True)):
        assert got.shape == want.shape and got.dtype == torch.float32
        scale = want.abs().max().item()
        torch.testing.assert_close(
            got, want, rtol=1e-4, atol=1e-4 * scale, msg=prefixed(f"step {step}")
        )


@pytest.mark.parametrize("kernels", [False, True], ids=["torch", "cpu-kernels"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_kept_quantized_logits_match_dequantized_at_load(
    tmp_path: Path, layout: str, kernels: bool
) -> None:
    types, head = LAYOUTS[layout]
    path = write_model(tmp_path / f"{layout}.gguf", types, head)
    reference, _ = load_model(path, dtype="float32", progress=False)
    kept, config = load_model(path, dtype="float32", progress=False, quantization="gguf")
    assert config.tie_word_embeddings == (head is None)
    assert not any(
        isinstance(m, GroupQuantLinear | GroupQuantEmbedding) for m in reference.modules()
    )
    check_modules(kept, expected_bits(types, head))
    if kernels:
        layer_kernels = load_layer_kernels()
        if layer_kernels is None or layer_kernels.quant is None:
            pytest.skip("the CPU kernels do not build here")
        reference.set_layer_kernels(layer_kernels)
        kept.set_layer_kernels(layer_kernels)
    assert_logits_close(run_steps(kept, PROMPTS), run_steps(reference, PROMPTS))


def test_qwen2_layout_keeps_its_rows(tmp_path: Path) -> None:
    """No rotary unpermute for qwen2: the kept rows must not be reordered either; the
    q, k and v biases load into the group-quantized layer."""
    types, head = LAYOUTS["tied-q8-embedding"]
    path = write_model(tmp_path / "qwen2.gguf", types, head, arch="qwen2")
    reference, _ = load_model(path, dtype="float32", progress=False)
    kept, _ = load_model(path, dtype="float32", progress=False, quantization="gguf")
    check_modules(kept, expected_bits(types, head))
    qkv = kept.model.layers[0].get_submodule("self_attn.qkv_proj")
    assert isinstance(qkv, GroupQuantLinear) and qkv.bias is not None
    assert qkv.bias.abs().sum() > 0
    assert_logits_close(run_steps(kept, PROMPTS), run_steps(reference, PROMPTS))


def test_kept_layers_hold_no_float_weight(tmp_path: Path) -> None:
    types, head = LAYOUTS["untied-q4-head"]
    path = write_model(tmp_path / "untied.gguf", types, head)
    kept, _ = load_model(path, dtype="float32", progress=False, quantization="gguf")
    quantized = [m for m in kept.modules() if isinstance(m, GroupQuantLinear | GroupQuantEmbedding)]
    assert len(quantized) == 6  # qkv, o, gate_up, down, the table and the head
    for module in quantized:
        tensors = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
        assert {t.dtype for t in tensors} <= {torch.uint8, torch.float16}, module


def test_checkpoint_lists_what_it_keeps(tmp_path: Path) -> None:
    types, head = LAYOUTS["mixed-shards"]
    path = write_model(tmp_path / "mixed.gguf", types, head)
    assert read_gguf(path).kept == {}
    kept = read_gguf(path, keep_quantized=True).kept
    wanted = {name: (BITS[kind], 32) for name, kind in types.items() if kind in BITS}
    assert kept == wanted


@pytest.mark.parametrize("qtype", list(BITS), ids=lambda q: q.name)
def test_blocks_dequantize_exactly_as_gguf_does(
    tmp_path: Path, qtype: GGMLQuantizationType
) -> None:
    """Random blocks (every code, Q8_0's -128 included) with sane float16 scales and
    minimums: scale * code + offset in float32 is gguf's own dequantizing, bit for bit."""
    block_bytes = {Q.Q4_0: 18, Q.Q4_1: 20, Q.Q5_0: 22, Q.Q5_1: 24, Q.Q8_0: 34}[qtype]
    rows, blocks_per_row = 5, 3
    rng = np.random.default_rng(int(qtype))
    raw = rng.integers(0, 256, size=(rows * blocks_per_row, block_bytes), dtype=np.uint8)
    raw[:, 0:2] = rng.uniform(-0.1, 0.1, (len(raw), 1)).astype(np.float16).view(np.uint8)
    if qtype in (Q.Q4_1, Q.Q5_1):
        raw[:, 2:4] = rng.uniform(-1, 1, (len(raw), 1)).astype(np.float16).view(np.uint8)
    path = tmp_path / f"{qtype.name}.gguf"
    writer = GGUFWriter(path, "llama")
    writer.add_tensor("token_embd.weight", raw.reshape(rows, -1), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    (tensor,) = GGUFReader(path).tensors
    assert kept_format(tensor) == (BITS[qtype], 32)
    packed = group_quantized(tensor)
    assert packed.shape == (rows, blocks_per_row * 32) and packed.bits == BITS[qtype]
    packed.check("token_embd.weight")
    expected = torch.from_numpy(dequantize_tensor(tensor))
    assert torch.equal(dequantize(packed), expected)


def _one_tensor(
    tmp_path: Path, qtype: GGMLQuantizationType, shape: tuple[int, ...]
) -> ReaderTensor:
    values = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    path = write_gguf(tmp_path / f"one-{qtype.name}.gguf", {"token_embd.weight": (values, qtype)})
    (tensor,) = GGUFReader(path).tensors
    return tensor


def test_damaged_block_count_is_refused(tmp_path: Path) -> None:
    tensor = _one_tensor(tmp_path, Q.Q4_1, (4, 64))
    data = np.asarray(tensor.data).view(np.uint8).reshape(-1)
    for damaged in (data[:-1], data[:-20], np.concatenate([data, data[:20]])):
        with pytest.raises(ValueError, match=r"token_embd\.weight.*bytes, not 8 blocks"):
            group_quantized(tensor._replace(data=damaged))
    # A shape whose columns are not whole blocks (the data is left as it was).
    odd = tensor._replace(shape=np.array([48, 4], dtype=np.uint64))
    with pytest.raises(ValueError, match="not whole blocks"):
        group_quantized(odd)


@pytest.mark.parametrize(
    ("qtype", "shape"),
    [(Q.F32, (4, 64)), (Q.F16, (4, 64)), (Q.Q8_0, (64,))],
    ids=["F32", "F16", "Q8_0-vector"],
)
def test_other_tensors_are_not_kept(
    tmp_path: Path, qtype: GGMLQuantizationType, shape: tuple[int, ...]
) -> None:
    tensor = _one_tensor(tmp_path, qtype, shape)
    assert kept_format(tensor) is None
    with pytest.raises(ValueError, match="is not kept quantized"):
        group_quantized(tensor)


def test_file_with_nothing_to_keep_is_refused(tmp_path: Path) -> None:
    types = {name: (Q.F16 if name.endswith("proj.weight") else Q.F32) for name in ALL_KEPT}
    path = write_model(tmp_path / "float.gguf", types, Q.F16)
    load_model(path, dtype="float32", progress=False)  # fine without quantization
    with pytest.raises(ValueError, match="has none to keep"):
        load_model(path, dtype="float32", progress=False, quantization="gguf")
    # Nor a file already opened without keep_quantized.
    types, head = LAYOUTS["tied-q8-embedding"]
    path = write_model(tmp_path / "q.gguf", types, head)
    with pytest.raises(ValueError, match="has none to keep"):
        load_model(path, progress=False, gguf=read_gguf(path), quantization="gguf")


def test_hugging_face_directory_is_refused(tmp_path: Path) -> None:
    directory = make_checkpoint("llama", tmp_path / "llama")
    with pytest.raises(ValueError, match=r"applies to \.gguf files"):
        load_model(directory, progress=False, quantization="gguf")


def test_engine_config_refuses_gguf_quantization_where_it_cannot_apply() -> None:
    with pytest.raises(ValueError, match=r"needs a \.gguf file"):
        EngineConfig(model="x.safetensors-dir", quantization="gguf")
    with pytest.raises(ValueError, match="one rank"):
        EngineConfig(model="model.gguf", quantization="gguf", tensor_parallel_size=2)
    config = EngineConfig(model="model.gguf", quantization="gguf")
    assert config.quantization == "gguf"

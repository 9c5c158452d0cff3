"""read_gguf on tiny GGUF files written here: dequantization, Q/K layout, tokenizer, bad files."""

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import quantize
from tokenizers import pre_tokenizers
from transformers.integrations.gguf.dequant import dequantize as transformers_dequantize

from inference.model.arch import ArchConfig
from inference.model.layers.rotary import RotaryEmbedding, rope_inverse_frequencies
from inference.model.loader.gguf import read_gguf
from inference.model.loader.gguf_tensors import dequantize_tensor

Q = GGMLQuantizationType
HIDDEN, FFN, HEADS, KV_HEADS = 64, 32, 2, 1
HEAD_DIM = HIDDEN // HEADS
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["h e", "l l", "he ll", "Ġ w", "o r"]


def _vocab() -> list[str]:
    merged = [left + right for left, right in (merge.split(" ") for merge in MERGES)]
    return SPECIAL_TOKENS + sorted(pre_tokenizers.ByteLevel.alphabet()) + merged


def _encode_raw(values: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    if qtype == Q.F32:
        return values.astype(np.float32)
    if qtype == Q.F16:
        return values.astype(np.float16)
    return quantize(values.astype(np.float32), qtype)


def write_gguf(
    path: Path,
    tensors: dict[str, tuple[np.ndarray, GGMLQuantizationType]],
    arch: str = "llama",
    *,
    dims: tuple[int, int, int, int] = (HIDDEN, FFN, HEADS, KV_HEADS),
    packed: bool = False,
) -> Path:
    """A GGUF with llama.cpp's metadata for a one-layer model and the tensors given.

    ``dims``: hidden size, feed-forward size, heads and KV heads. ``packed``: the arrays are
    already the type's stored bytes (K-quants, which gguf cannot quantize), not values."""
    hidden, ffn, heads, kv_heads = dims
    writer = GGUFWriter(path, arch)
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(50000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    vocab = _vocab()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(vocab)
    writer.add_token_types([3] * len(SPECIAL_TOKENS) + [1] * (len(vocab) - len(SPECIAL_TOKENS)))
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template("{{ messages[0]['content'] }}")
    for name, (values, qtype) in tensors.items():
        raw = values if packed else _encode_raw(values, qtype)
        raw_dtype = None if qtype in (Q.F32, Q.F16) else qtype
        writer.add_tensor(name, raw, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _round_trip(tmp_path: Path, values: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    path = write_gguf(tmp_path / f"{qtype.name}.gguf", {"token_embd.weight": (values, qtype)})
    (tensor,) = GGUFReader(path).tensors
    return dequantize_tensor(tensor)


# Largest error per element, as a fraction of its 32-value block's largest magnitude: half a
# quantization step, plus slack for the fp16 scale.
QUANT_TOLERANCE = {
    Q.F16: 1e-3,
    Q.BF16: 8e-3,
    Q.Q8_0: 1 / 127,
    Q.Q4_0: 1 / 8,
    Q.Q4_1: 1 / 15,
}


@pytest.mark.parametrize("qtype", list(QUANT_TOLERANCE), ids=lambda q: q.name)
def test_dequantize_is_within_format_error(tmp_path: Path, qtype: GGMLQuantizationType) -> None:
    values = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    restored = _round_trip(tmp_path, values, qtype)
    assert restored.shape == values.shape and restored.dtype == np.float32
    blocks = np.abs(values).reshape(-1, 32).max(axis=1, keepdims=True)
    error = np.abs(restored - values).reshape(-1, 32)
    assert (error <= blocks * QUANT_TOLERANCE[qtype] + 1e-6).all()


def test_f32_is_exact(tmp_path: Path) -> None:
    values = np.random.default_rng(1).standard_normal((3, 32)).astype(np.float32)
    assert np.array_equal(_round_trip(tmp_path, values, Q.F32), values)


# The gguf package cannot quantize K-quants, so we feed random blocks (with sane fp16 scales)
# and compare with transformers' own, separately written, torch dequantizer.
K_QUANT_SCALE_OFFSETS = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}


@pytest.mark.parametrize("qtype", list(K_QUANT_SCALE_OFFSETS), ids=lambda q: q.name)
def test_k_quants_match_an_independent_dequantizer(
    tmp_path: Path, qtype: GGMLQuantizationType
) -> None:
    block_bytes = {Q.Q4_K: 144, Q.Q5_K: 176, Q.Q6_K: 210}[qtype]
    rows, blocks_per_row = 4, 2
    rng = np.random.default_rng(2)
    raw = rng.integers(0, 256, size=(rows * blocks_per_row, block_bytes), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.1, size=(raw.shape[0], 1)).astype(np.float16).view(np.uint8)
    for offset in K_QUANT_SCALE_OFFSETS[qtype]:
        raw[:, offset : offset + 2] = scales
    raw = raw.reshape(rows, blocks_per_row * block_bytes)
    path = tmp_path / f"{qtype.name}.gguf"
    writer = GGUFWriter(path, "llama")
    writer.add_tensor("token_embd.weight", raw, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    (tensor,) = GGUFReader(path).tensors
    ours = dequantize_tensor(tensor)
    reference = transformers_dequantize(torch.from_numpy(raw.reshape(-1)), int(qtype))
    assert ours.shape == (rows, blocks_per_row * 256)
    assert np.abs(ours).max() > 0
    np.testing.assert_allclose(ours.reshape(-1), reference.numpy(), rtol=1e-6, atol=1e-6)


def _permute_like_llama_cpp(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter: each head's two rotary halves become interleaved pairs."""
    half = weight.shape[0] // heads // 2
    return weight.reshape(heads, 2, half, -1).swapaxes(1, 2).reshape(weight.shape)


def _model_tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    shapes = {
        "model.embed_tokens.weight": (len(_vocab()), HIDDEN),
        "model.norm.weight": (HIDDEN,),
        "model.layers.0.input_layernorm.weight": (HIDDEN,),
        "model.layers.0.post_attention_layernorm.weight": (HIDDEN,),
        "model.layers.0.self_attn.q_proj.weight": (HIDDEN, HIDDEN),
        "model.layers.0.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
        "model.layers.0.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
        "model.layers.0.self_attn.o_proj.weight": (HIDDEN, HIDDEN),
        "model.layers.0.mlp.gate_proj.weight": (FFN, HIDDEN),
        "model.layers.0.mlp.up_proj.weight": (FFN, HIDDEN),
        "model.layers.0.mlp.down_proj.weight": (HIDDEN, FFN),
    }
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "model.layers.0.input_layernorm.weight": "blk.0.attn_norm.weight",
    "model.layers.0.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "model.layers.0.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "model.layers.0.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "model.layers.0.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "model.layers.0.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "model.layers.0.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "model.layers.0.mlp.down_proj.weight": "blk.0.ffn_down.weight",
}


def _write_model(path: Path, arch: str = "llama", qtype: GGMLQuantizationType = Q.F32) -> dict:
    hf = _model_tensors(np.random.default_rng(3))
    stored = dict(hf)
    if arch == "llama":
        q_name, k_name = (f"model.layers.0.self_attn.{p}_proj.weight" for p in "qk")
        stored[q_name] = _permute_like_llama_cpp(hf[q_name], HEADS)
        stored[k_name] = _permute_like_llama_cpp(hf[k_name], KV_HEADS)
    tensors = {GGUF_NAMES[name]: (values, Q.F32) for name, values in stored.items()}
    tensors["blk.0.ffn_up.weight"] = (stored["model.layers.0.mlp.up_proj.weight"], qtype)
    write_gguf(path, tensors, arch)
    return hf


def test_tiny_llama_reads_back_as_hf_checkpoint(tmp_path: Path) -> None:
    hf = _write_model(tmp_path / "tiny.gguf")
    checkpoint = read_gguf(tmp_path / "tiny.gguf")
    read = dict(checkpoint.tensors)
    assert checkpoint.num_tensors == len(read) == len(hf)
    for name, values in hf.items():
        assert torch.equal(read[name], torch.from_numpy(values)), name
    config = checkpoint.hf_config
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_attention_heads"]) == (HIDDEN, HEADS)
    assert (config["num_key_value_heads"], config["head_dim"]) == (KV_HEADS, HEAD_DIM)
    assert config["rope_theta"] == 50000.0 and config["tie_word_embeddings"] is True
    assert config["vocab_size"] == len(_vocab()) and config["eos_token_id"] == 2


def test_qwen2_keeps_its_rotary_rows(tmp_path: Path) -> None:
    hf = _write_model(tmp_path / "qwen.gguf", arch="qwen2")
    checkpoint = read_gguf(tmp_path / "qwen.gguf")
    q_name = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(dict(checkpoint.tensors)[q_name], torch.from_numpy(hf[q_name]))
    assert checkpoint.hf_config["architectures"] == ["Qwen2ForCausalLM"]


def test_qwen3_maps_its_head_norms(tmp_path: Path) -> None:
    norms = np.random.default_rng(4).standard_normal((2, HEAD_DIM)).astype(np.float32)
    tensors = {
        "token_embd.weight": (np.ones((len(_vocab()), HIDDEN)), Q.F32),
        "blk.0.attn_q_norm.weight": (norms[0], Q.F32),
        "blk.0.attn_k_norm.weight": (norms[1], Q.F32),
        "output.weight": (np.ones((len(_vocab()), HIDDEN)), Q.F16),
    }
    checkpoint = read_gguf(write_gguf(tmp_path / "qwen3.gguf", tensors, "qwen3"))
    read = dict(checkpoint.tensors)
    assert torch.equal(read["model.layers.0.self_attn.q_norm.weight"], torch.from_numpy(norms[0]))
    assert torch.equal(read["model.layers.0.self_attn.k_norm.weight"], torch.from_numpy(norms[1]))
    assert "lm_head.weight" in read and checkpoint.hf_config["tie_word_embeddings"] is False
    assert checkpoint.hf_config["architectures"] == ["Qwen3ForCausalLM"]


def test_unknown_tensor_name_is_named(tmp_path: Path) -> None:
    tensors = {"blk.0.ffn_gate_exps.weight": (np.ones((4, 32)), Q.F32)}
    with pytest.raises(ValueError, match="ffn_gate_exps"):
        read_gguf(write_gguf(tmp_path / "moe.gguf", tensors))


def test_tokenizer_and_config_from_metadata(tmp_path: Path) -> None:
    _write_model(tmp_path / "tiny.gguf")
    checkpoint = read_gguf(tmp_path / "tiny.gguf")
    vocab = _vocab()
    encoding = checkpoint.tokenizer.encode("<|im_start|>hello world<|im_end|>")
    assert [vocab[i] for i in encoding.ids] == [
        "<|im_start|>",
        "hell",
        "o",
        "Ġw",
        "or",
        "l",
        "d",
        "<|im_end|>",
    ]
    assert encoding.ids[-1] == 2
    assert checkpoint.tokenizer.decode(encoding.ids, skip_special_tokens=True) == "hello world"
    assert checkpoint.tokenizer_config["bos_token"] == "<|im_start|>"
    assert checkpoint.tokenizer_config["eos_token"] == "<|im_end|>"
    assert checkpoint.tokenizer_config["chat_template"] == "{{ messages[0]['content'] }}"
    assert checkpoint.generation_config["eos_token_id"] == 2


def test_unsupported_tensor_type_is_named(tmp_path: Path) -> None:
    _write_model(tmp_path / "mxfp4.gguf", qtype=Q.MXFP4)
    with pytest.raises(ValueError, match=r"blk\.0\.ffn_up\.weight.*MXFP4"):
        read_gguf(tmp_path / "mxfp4.gguf")


def test_unknown_architecture_is_named(tmp_path: Path) -> None:
    write_gguf(tmp_path / "mamba.gguf", {"token_embd.weight": (np.ones((4, 32)), Q.F32)}, "mamba")
    with pytest.raises(ValueError, match="architecture 'mamba'"):
        read_gguf(tmp_path / "mamba.gguf")


@pytest.mark.parametrize("keep_fraction", [0.02, 0.5, 0.99])
def test_truncated_file_is_rejected(tmp_path: Path, keep_fraction: float) -> None:
    path = tmp_path / "tiny.gguf"
    _write_model(path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep_fraction)])
    with pytest.raises(ValueError, match="truncated"):
        read_gguf(path)


def test_non_gguf_and_missing_files_are_rejected(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    with pytest.raises(ValueError, match="not a readable GGUF"):
        read_gguf(tmp_path / "config.json")
    with pytest.raises(ValueError, match="does not exist"):
        read_gguf(tmp_path / "absent.gguf")


def test_llama3_rope_freqs_tensor_scales_the_rotary_frequencies(tmp_path: Path) -> None:
    """llama.cpp stores Llama 3.1 scaling as divisors; they give the llama3 frequencies."""
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    }
    plain = rope_inverse_frequencies(HEAD_DIM, 50000.0, None)
    llama3 = rope_inverse_frequencies(HEAD_DIM, 50000.0, scaling)
    divisors = (plain / llama3).numpy().astype(np.float32)
    assert divisors.max() > 1.5  # the scaling really moves some frequencies
    tensors = {
        GGUF_NAMES[n]: (v, Q.F32) for n, v in _model_tensors(np.random.default_rng(0)).items()
    }
    tensors["rope_freqs.weight"] = (divisors, Q.F32)
    checkpoint = read_gguf(write_gguf(tmp_path / "llama3.gguf", tensors))
    arch = ArchConfig.from_hf_config(checkpoint.hf_config)
    assert arch.rope_scaling is not None and arch.rope_scaling["rope_type"] == "freq_factors"
    rotary = RotaryEmbedding(HEAD_DIM, arch.rope_theta, arch.rope_scaling, torch.device("cpu"))
    torch.testing.assert_close(rotary.inv_freq, llama3, rtol=1e-6, atol=0.0)
    assert checkpoint.num_tensors == len(tensors) - 1  # the divisors are no weight


def test_rope_freqs_of_the_wrong_length_are_refused() -> None:
    with pytest.raises(ValueError, match="rope frequency factors"):
        rope_inverse_frequencies(HEAD_DIM, 1e4, {"rope_type": "freq_factors", "factors": [1.0]})

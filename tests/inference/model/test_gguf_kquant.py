"""--quantization gguf on K-quant tensors (Q4_K, Q5_K, Q6_K): repacked at load into the
group-quantized layout, within a stated bound of gguf's own dequantizing, and a tiny model
of them gives the logits of the same file dequantized at load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFReader, ReaderTensor
from gguf.quants import dequantize as gguf_dequantize

from inference.model.llama import LlamaForCausalLM
from inference.model.loader import load_model
from inference.model.loader.gguf_quant import group_quantized, kept_format
from inference.model.loader.gguf_tensors import plan_tensors
from inference.model.quant.group_linear import GroupQuantEmbedding, GroupQuantLinear
from inference.model.quant.group_math import dequantize
from tests.inference.model.k_quant_blocks import KFields, pack, random_fields
from tests.inference.model.test_gguf_files import _vocab, write_gguf
from tests.inference.model.test_gguf_kept_quantized import PROMPTS, run_steps

Q = GGMLQuantizationType
K_BITS = {Q.Q4_K: 4, Q.Q5_K: 8, Q.Q6_K: 8}
HALF_ULP = 2.0**-11  # float16's relative rounding
HIDDEN, FFN, HEADS, KV_HEADS = 256, 512, 4, 2


def write_raw(path: Path, tensors: dict[str, tuple[np.ndarray, GGMLQuantizationType]]) -> Path:
    """A GGUF holding these tensors (K-quants as their packed bytes) and a tiny Llama's
    metadata, dimensions a multiple of 256 so that every matrix can be a K-quant."""
    return write_gguf(path, tensors, dims=(HIDDEN, FFN, HEADS, KV_HEADS), packed=True)


def one_tensor(tmp_path: Path, fields: KFields, rows: int) -> ReaderTensor:
    path = write_raw(
        tmp_path / "one.gguf", {"token_embd.weight": (pack(fields, rows), fields.qtype)}
    )
    (tensor,) = GGUFReader(path).tensors
    return tensor


def reference(tensor: ReaderTensor, rows: int) -> torch.Tensor:
    raw = np.asarray(tensor.data).view(np.uint8)
    return torch.from_numpy(gguf_dequantize(raw, Q(tensor.tensor_type)).reshape(rows, -1))


@pytest.mark.parametrize("qtype", list(K_BITS), ids=lambda q: q.name)
def test_packed_fields_are_what_gguf_dequantizes(
    tmp_path: Path, qtype: GGMLQuantizationType
) -> None:
    """The test's own packing follows the format: gguf reads back the values it meant."""
    fields = random_fields(qtype, 6, np.random.default_rng(1))
    tensor = one_tensor(tmp_path, fields, rows=3)
    np.testing.assert_array_equal(reference(tensor, 3).numpy(), fields.values(3))


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K], ids=lambda q: q.name)
def test_q4_k_q5_k_within_float16_rounding(tmp_path: Path, qtype: GGMLQuantizationType) -> None:
    """Codes are kept as they are; only d*sc and dmin*m round to float16, so each value is
    within half a float16 step of those two (plus float32's own rounding)."""
    rows = 8
    fields = random_fields(qtype, rows * 2, np.random.default_rng(int(qtype)))
    tensor = one_tensor(tmp_path, fields, rows)
    assert kept_format(tensor) == (K_BITS[qtype], 32)
    packed = group_quantized(tensor)
    packed.check("token_embd.weight")
    assert packed.shape == (rows, 512) and packed.bits == K_BITS[qtype]
    want = reference(tensor, rows)
    step = np.repeat(fields.d.astype(np.float32)[:, None] * fields.scales, 32, axis=1)
    low = np.repeat(fields.dmin.astype(np.float32)[:, None] * fields.mins, 32, axis=1)
    magnitude = torch.from_numpy((step * fields.q + low).reshape(rows, -1))
    error = (dequantize(packed) - want).abs()
    assert (error <= HALF_ULP * 1.01 * magnitude).all()
    assert error.max() > 0  # float16 does round here: the bound is what is tested
    # The codes themselves are the file's, in our nibble order.
    codes = packed.codes if packed.bits == 8 else _unpacked4(packed.codes)
    assert torch.equal(codes, torch.from_numpy(fields.q.reshape(rows, -1)))


def _unpacked4(codes: torch.Tensor) -> torch.Tensor:
    blocks = codes.reshape(codes.shape[0], -1, 16)
    return torch.cat((blocks & 0x0F, blocks >> 4), dim=2).reshape(codes.shape[0], -1)


def test_q6_k_requantized_under_the_larger_step(tmp_path: Path) -> None:
    """Two 16-value sub-blocks share a group: the one with the larger step is exact up to
    float16's rounding of that step, the other within an eighth of the larger step."""
    rows = 8
    fields = random_fields(Q.Q6_K, rows * 2, np.random.default_rng(6))
    # Corner cases in the first super-block: opposite steps (s and -s), one zero step,
    # both zero; and extreme codes next to them.
    fields.scales[0, 0:6] = [100, -100, 0, 57, 0, 0]
    fields.q[0, :16] = 0
    fields.q[0, 16:32] = 0
    fields.d[0] = 2.0**-10  # d*100 and d*50 exact in float16: the s, -s group is exact
    tensor = one_tensor(tmp_path, fields, rows)
    assert kept_format(tensor) == (8, 32)
    packed = group_quantized(tensor)
    packed.check("token_embd.weight")
    want = reference(tensor, rows)
    steps = np.abs(fields.d.astype(np.float32)[:, None] * fields.scales.astype(np.float32))
    pairs = steps.reshape(-1, 8, 2)
    larger = pairs.max(axis=2, keepdims=True)
    is_larger = np.repeat(pairs >= larger, 16, axis=2).reshape(rows, -1)
    bound = np.repeat(larger / 8 * (1 + 2.0**-10), 32, axis=2).reshape(rows, -1)
    error = (dequantize(packed) - want).abs()
    rounding = HALF_ULP * 1.01 * want.abs() + 1e-9
    exact_part = torch.from_numpy(is_larger)
    assert (error[exact_part] <= rounding[exact_part]).all()
    assert (error <= torch.from_numpy(bound) + rounding).all()
    assert torch.equal(error[0, :32], torch.zeros(32))  # s and -s: all multiples of s
    assert torch.equal(dequantize(packed)[0, 64:96], torch.zeros(32))  # zero steps


def test_rows_that_are_not_whole_super_blocks_are_refused(tmp_path: Path) -> None:
    fields = random_fields(Q.Q4_K, 4, np.random.default_rng(2))
    tensor = one_tensor(tmp_path, fields, rows=2)
    odd = tensor._replace(shape=np.array([384, 2], dtype=np.uint64))  # 1.5 super-blocks
    with pytest.raises(ValueError, match=r"384 columns, not whole blocks of 256"):
        group_quantized(odd)
    with pytest.raises(ValueError, match=r"rows of 384 values, not whole blocks of 256"):
        plan_tensors([odd], HEADS, KV_HEADS, unpermute_rotary=False, keep_quantized=True)
    short = tensor._replace(data=np.asarray(tensor.data).view(np.uint8).reshape(-1)[:-1])
    with pytest.raises(ValueError, match="bytes, not 4 blocks"):
        group_quantized(short)


def test_float16_overflow_is_refused(tmp_path: Path) -> None:
    fields = random_fields(Q.Q4_K, 2, np.random.default_rng(3), d_range=(6e4, 6.5e4))
    fields.scales[:] = 63
    with pytest.raises(ValueError, match="beyond float16's range"):
        group_quantized(one_tensor(tmp_path, fields, rows=1))


# A one-layer model whose matrices are K-quants (a Q4_K_M file's mix: v and down in Q6_K).
# q|k|v's shards are 4- and 8-bit, so that fused layer stays in floats; o is kept 4-bit,
# gate|up 8-bit (Q5_K), down and the tied table 8-bit (Q6_K).
MODEL_TYPES = {
    "token_embd.weight": (Q.Q6_K, (len(_vocab()), HIDDEN)),
    "blk.0.attn_q.weight": (Q.Q4_K, (HIDDEN, HIDDEN)),
    "blk.0.attn_k.weight": (Q.Q4_K, (KV_HEADS * HIDDEN // HEADS, HIDDEN)),
    "blk.0.attn_v.weight": (Q.Q6_K, (KV_HEADS * HIDDEN // HEADS, HIDDEN)),
    "blk.0.attn_output.weight": (Q.Q4_K, (HIDDEN, HIDDEN)),
    "blk.0.ffn_gate.weight": (Q.Q5_K, (FFN, HIDDEN)),
    "blk.0.ffn_up.weight": (Q.Q5_K, (FFN, HIDDEN)),
    "blk.0.ffn_down.weight": (Q.Q6_K, (HIDDEN, FFN)),
}
KEPT_MODULES = {
    "model.embed_tokens": (GroupQuantEmbedding, 8),
    "model.layers.0.self_attn.o_proj": (GroupQuantLinear, 4),
    "model.layers.0.mlp.gate_up_proj": (GroupQuantLinear, 8),
    "model.layers.0.mlp.down_proj": (GroupQuantLinear, 8),
}


# d's range per type: weights of at most about 0.4-0.5.
D_RANGES = {Q.Q4_K: (3e-4, 1e-3), Q.Q5_K: (1.5e-4, 5e-4), Q.Q6_K: (3e-5, 1e-4)}


def write_k_model(path: Path) -> Path:
    rng = np.random.default_rng(21)
    tensors: dict[str, tuple[np.ndarray, GGMLQuantizationType]] = {}
    for name, (qtype, (rows, cols)) in MODEL_TYPES.items():
        fields = random_fields(qtype, rows * cols // 256, rng, d_range=D_RANGES[qtype])
        if qtype != Q.Q6_K:  # minimums that centre each sub-block on zero
            top = 15 if qtype == Q.Q4_K else 31
            factor = (top + 1) // 2
            fields.dmin[:] = fields.d * factor
            fields.mins[:] = np.rint(fields.scales * (top / 2 / factor))
        else:  # as a quantizer sets them: near the super-block's largest, either sign
            sign = rng.choice(np.array([-1, 1], np.int16), fields.scales.shape)
            fields.scales[:] = sign * rng.integers(64, 128, fields.scales.shape)
        tensors[name] = (pack(fields, rows), qtype)
    for name in ("output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"):
        tensors[name] = (rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32), Q.F32)
    return write_raw(path, tensors)


def repacked_as_floats(path: Path, out: Path, exact: frozenset[str]) -> Path:
    """The same model with every kept tensor written as the float32 of its repack, but
    those named in ``exact`` (the loader reads them as floats) as gguf dequantizes them."""
    tensors = {}
    for tensor in GGUFReader(path).tensors:
        if tensor.name in exact:
            raw = np.asarray(tensor.data).view(np.uint8)
            values = gguf_dequantize(raw, Q(tensor.tensor_type))
            tensors[tensor.name] = (values.reshape(len(raw), -1), Q.F32)
        elif kept_format(tensor) is None:
            tensors[tensor.name] = (np.array(tensor.data), Q.F32)
        else:
            tensors[tensor.name] = (dequantize(group_quantized(tensor)).numpy(), Q.F32)
    return write_raw(out, tensors)


def relative_rms(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


def test_k_quant_model_logits_match_dequantized_at_load(tmp_path: Path) -> None:
    """Kept, the model computes its repacked weights (tight); against the file
    dequantized at load, the logits move by the repack's error (measured ~1.4% RMS on
    this random model, whose Q6_K sub-blocks are repacked with ~0.3% RMS error)."""
    path = write_k_model(tmp_path / "k.gguf")
    kept, _ = load_model(path, dtype="float32", progress=False, quantization="gguf")
    assert isinstance(kept, LlamaForCausalLM)
    modules = dict(kept.named_modules())
    for name, (kind, bits) in KEPT_MODULES.items():
        assert isinstance(modules[name], kind) and modules[name].bits == bits, name
    qkv = modules["model.layers.0.self_attn.qkv_proj"]
    assert not isinstance(qkv, GroupQuantLinear) and qkv.weight.dtype == torch.float32
    ours = run_steps(kept, PROMPTS)
    # q|k|v stays in floats: its shards, though kept, are read dequantized from the file.
    in_floats = frozenset(f"blk.0.attn_{name}.weight" for name in "qkv")
    same_weights, _ = load_model(
        repacked_as_floats(path, tmp_path / "f32.gguf", in_floats), dtype="float32", progress=False
    )
    at_load, _ = load_model(path, dtype="float32", progress=False)
    for step, (got, exact, loose) in enumerate(
        zip(ours, run_steps(same_weights, PROMPTS), run_steps(at_load, PROMPTS), strict=True)
    ):
        scale = exact.abs().max().item()
        torch.testing.assert_close(got, exact, rtol=1e-4, atol=1e-4 * scale, msg=f"step {step}")
        assert 0 < relative_rms(got, loose) < 0.03, step
        assert (got.argmax(dim=-1) == loose.argmax(dim=-1)).float().mean() >= 0.9, step

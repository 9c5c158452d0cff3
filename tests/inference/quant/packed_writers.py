"""Tiny GPTQ and AWQ checkpoints, written here in the formats' own layouts, and the formats'
own dequantization, written from their specifications (not from our reader):

- GPTQ: ``qweight`` int32 (in * bits / 32, out), 32 / bits input rows a word, low bits
  first; ``qzeros`` int32 (groups, out * bits / 32), output columns likewise, stored as
  zero - 1 ("gptq", AutoGPTQ's v1) or zero ("gptq_v2"); ``scales`` float16 (groups, out);
  ``g_idx`` int32 (in,). Act-order shuffles which columns form a group.
- AWQ GEMM: ``qweight`` int32 (in, out / 8) with nibble k of a word holding output column
  ORDER[k] of its 8; ``qzeros`` (groups, out / 8) likewise; ``scales`` (groups, out).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig

ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Projections fed the same input share GPTQ's act-order permutation.
INPUT_OF = {"q_proj": "attn", "k_proj": "attn", "v_proj": "attn", "o_proj": "o",
            "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "down"}  # fmt: skip


@dataclass(frozen=True)
class Spec:
    method: str  # "gptq" or "awq"
    bits: int = 4
    group_size: int = 128
    sym: bool = False
    act_order: bool = False
    v2: bool = False  # GPTQ checkpoint_format "gptq_v2"
    hidden: int = 64
    intermediate: int = 128
    own_perm: str | None = None  # a projection given a permutation of its own

    @property
    def zero_offset(self) -> int:
        return 1 if self.method == "gptq" and not self.v2 else 0


def _words(fields: np.ndarray, bits: int) -> np.ndarray:
    """(..., n, 32 / bits) fields -> (..., n) int32 words, the first field in the low bits."""
    words = np.zeros(fields.shape[:-1], dtype=np.uint32)
    for k in range(fields.shape[-1]):
        words |= fields[..., k].astype(np.uint32) << np.uint32(bits * k)
    return words.view(np.int32)


def _fields(words: np.ndarray, bits: int) -> np.ndarray:
    """(..., n) int32 words -> (..., n, 32 / bits) fields."""
    unsigned = words.view(np.uint32)
    return np.stack(
        [(unsigned >> np.uint32(bits * k)) & np.uint32((1 << bits) - 1) for k in range(32 // bits)],
        axis=-1,
    ).astype(np.int64)


def quantize(w: np.ndarray, spec: Spec, perm: np.ndarray | None) -> dict[str, np.ndarray]:
    """w (out, in) -> the unpacked q (in, out), zero and float16 scale (groups, out), g_idx."""
    out, cols = w.shape
    size = cols if spec.group_size == -1 else spec.group_size
    maxq = (1 << spec.bits) - 1
    order = np.arange(cols) if perm is None else perm
    g_idx = np.empty(cols, dtype=np.int32)
    g_idx[order] = np.arange(cols) // size
    groups = -(-cols // size)
    q = np.zeros((cols, out), dtype=np.int64)
    zero = np.zeros((groups, out), dtype=np.int64)
    scale = np.zeros((groups, out), dtype=np.float16)
    for g in range(groups):
        members = np.nonzero(g_idx == g)[0]
        block = w[:, members]
        low, high = np.minimum(block.min(1), 0), np.maximum(block.max(1), 0)
        if spec.sym:
            high = np.maximum(-low, high)
            low = -high
        step = np.maximum((high - low) / maxq, 1e-6).astype(np.float16)
        if spec.sym:
            z = np.full(out, (maxq + 1) // 2)
        else:  # v1 cannot store a zero of 0 (it would be -1): real quantizers avoid it too
            z = np.clip(np.round(-low / step.astype(np.float32)), spec.zero_offset, maxq)
        codes = np.round(block / step.astype(np.float32)[:, None]) + z[:, None]
        q[members] = np.clip(codes, 0, maxq).T
        zero[g], scale[g] = z, step
    return {"q": q, "zero": zero, "scale": scale, "g_idx": g_idx}


def pack(parts: dict[str, np.ndarray], spec: Spec) -> dict[str, torch.Tensor]:
    q, zero, scale = parts["q"], parts["zero"], parts["scale"]
    bits, per = spec.bits, 32 // spec.bits
    stored = zero - spec.zero_offset
    if spec.method == "gptq":
        qweight = _words(q.reshape(-1, per, q.shape[1]).transpose(0, 2, 1), bits)
        qzeros = _words(stored.reshape(stored.shape[0], -1, per), bits)
        packed = {"g_idx": torch.from_numpy(parts["g_idx"])}
    else:
        qweight = _words(q.reshape(q.shape[0], -1, 8)[:, :, list(ORDER)], bits)
        qzeros = _words(stored.reshape(stored.shape[0], -1, 8)[:, :, list(ORDER)], bits)
        packed = {}
    packed["qweight"] = torch.from_numpy(np.ascontiguousarray(qweight))
    packed["qzeros"] = torch.from_numpy(np.ascontiguousarray(qzeros))
    packed["scales"] = torch.from_numpy(scale)
    return packed


def unpack(packed: dict[str, torch.Tensor], spec: Spec) -> dict[str, np.ndarray]:
    """The format's own reading of a layer: q (in, out), zero and scale (groups, out)."""
    qweight, qzeros = packed["qweight"].numpy(), packed["qzeros"].numpy()
    if spec.method == "gptq":
        fields = _fields(qweight, spec.bits)  # (in / per, out, per)
        q = fields.transpose(0, 2, 1).reshape(-1, qweight.shape[1])
        zero = _fields(qzeros, spec.bits).reshape(qzeros.shape[0], -1) + spec.zero_offset
        g_idx = packed["g_idx"].numpy().astype(np.int64)
    else:

        def columns(words: np.ndarray) -> np.ndarray:
            fields = _fields(words, 4)  # (rows, words, 8): nibble k is column ORDER[k]
            natural = np.empty_like(fields)
            natural[:, :, list(ORDER)] = fields
            return natural.reshape(words.shape[0], -1)

        q, zero = columns(qweight), columns(qzeros)
        size = q.shape[0] if spec.group_size == -1 else spec.group_size
        g_idx = np.arange(q.shape[0]) // size
    return {"q": q, "zero": zero, "scale": packed["scales"].numpy(), "g_idx": g_idx}


def dequantize_exact(parts: dict[str, np.ndarray]) -> np.ndarray:
    """The format's float32 weight (out, in): scale * (q - zero)."""
    g = parts["g_idx"]
    scale = parts["scale"].astype(np.float32)[g]  # (in, out)
    return (scale * (parts["q"] - parts["zero"][g]).astype(np.float32)).T


def dequantize_rounded(parts: dict[str, np.ndarray]) -> np.ndarray:
    """scale * q + float16(-scale * zero) in float32: the same arithmetic our layout does."""
    g = parts["g_idx"]
    scale = parts["scale"].astype(np.float32)
    offset = (-scale * parts["zero"].astype(np.float32)).astype(np.float16).astype(np.float32)
    return (parts["q"].astype(np.float32) * scale[g] + offset[g]).T


def write_packed_checkpoint(
    directory: Path, spec: Spec, seed: int = 0
) -> dict[str, dict[str, np.ndarray]]:
    """A tiny random Llama in ``spec``'s format at ``directory``; returns each quantized
    module's format-read parts (``unpack`` of what was written), by module name."""
    config = LlamaConfig(
        hidden_size=spec.hidden, intermediate_size=spec.intermediate, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=384,
        max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(
        directory / "float", safe_serialization=True
    )
    rng = np.random.default_rng(seed)
    tensors = load_file(str(directory / "float" / "model.safetensors"))
    out: dict[str, torch.Tensor] = {}
    read: dict[str, dict[str, np.ndarray]] = {}
    for layer in range(config.num_hidden_layers):
        perms = {key: rng.permutation(n) for key, n in [
            ("attn", spec.hidden), ("o", spec.hidden), ("mlp", spec.hidden),
            ("down", spec.intermediate), ("own", spec.hidden)]}  # fmt: skip
        for projection in PROJECTIONS:
            parent = "mlp" if projection in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            module = f"model.layers.{layer}.{parent}.{projection}"
            weight = tensors.pop(f"{module}.weight").numpy()
            key = "own" if projection == spec.own_perm else INPUT_OF[projection]
            perm = perms[key] if spec.act_order else None
            packed = pack(quantize(weight, spec, perm), spec)
            out.update({f"{module}.{part}": t for part, t in packed.items()})
            read[module] = unpack(packed, spec)
    out.update(tensors)  # embeddings, norms, lm_head: floats in these formats
    save_file(out, str(directory / "model.safetensors"))
    document = json.loads((directory / "float" / "config.json").read_text())
    document["quantization_config"] = quantization_config(spec)
    (directory / "config.json").write_text(json.dumps(document))
    return read


def quantization_config(spec: Spec) -> dict[str, object]:
    if spec.method == "gptq":
        return {"quant_method": "gptq", "bits": spec.bits, "group_size": spec.group_size,
                "desc_act": spec.act_order, "sym": spec.sym,
                "checkpoint_format": "gptq_v2" if spec.v2 else "gptq"}  # fmt: skip
    return {"quant_method": "awq", "bits": spec.bits, "group_size": spec.group_size,
            "zero_point": True, "version": "gemm"}  # fmt: skip

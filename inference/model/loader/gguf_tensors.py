"""GGUF tensors as Hugging Face tensors: llama.cpp names mapped back, dequantized to float32
(or, asked to keep them quantized, their quantized matrices as `LazyGroupQuantized`: read
from the file's map a chunk of rows at a time as their layer copies them).

llama.cpp's converter permutes the Q and K projection rows of Llama checkpoints so that its
rotary kernel can rotate adjacent pairs; Hugging Face rotates the two halves of each head.
`unpermute_rotary_rows` undoes that, so the weights fit a model written for HF checkpoints.
"""

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, ReaderTensor
from gguf.quants import dequantize

from inference.model.loader.gguf_kquant import K_TYPES
from inference.model.loader.gguf_quant import kept_format, lazy_group_quantized
from inference.model.quant.group_lazy import LazyGroupQuantized

SUPPORTED_TENSOR_TYPES = frozenset(
    {
        GGMLQuantizationType.F32,
        GGMLQuantizationType.F16,
        GGMLQuantizationType.BF16,
        GGMLQuantizationType.Q8_0,
        GGMLQuantizationType.Q4_0,
        GGMLQuantizationType.Q4_1,
        GGMLQuantizationType.Q5_0,
        GGMLQuantizationType.Q5_1,
        GGMLQuantizationType.Q4_K,
        GGMLQuantizationType.Q5_K,
        GGMLQuantizationType.Q6_K,
    }
)

GLOBAL_TENSOR_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

LAYER_TENSOR_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}

# Precomputed rotary frequencies (Llama 3 files); HF models derive them from the config.
SKIPPED_TENSOR_NAMES = frozenset({"rope_freqs.weight"})

_LAYER_NAME = re.compile(r"blk\.(\d+)\.(.+)")


def hf_tensor_name(gguf_name: str) -> str:
    """The Hugging Face name of a llama.cpp tensor; ValueError for a name we do not know."""
    if gguf_name in GLOBAL_TENSOR_NAMES:
        return GLOBAL_TENSOR_NAMES[gguf_name]
    match = _LAYER_NAME.fullmatch(gguf_name)
    if match is not None and match.group(2) in LAYER_TENSOR_NAMES:
        return f"model.layers.{match.group(1)}.{LAYER_TENSOR_NAMES[match.group(2)]}"
    raise ValueError(f"GGUF tensor {gguf_name!r} has no Hugging Face counterpart we know")


def unpermute_rotary_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's per-head interleave of Q/K rows (rows are the output features)."""
    rows = weight.shape[0]
    if rows % (2 * num_heads) != 0:
        raise ValueError(f"{rows} rotary rows do not split into {num_heads} heads of pairs")
    half = rows // num_heads // 2
    # GGUF row order within a head is (half, 2); HF's is (2, half).
    grouped = weight.reshape(num_heads, half, 2, *weight.shape[1:])
    return grouped.swapaxes(1, 2).reshape(weight.shape)


def dequantize_tensor(tensor: ReaderTensor) -> np.ndarray:
    """A GGUF tensor as float32 in numpy (row-major) shape; ValueError for unsupported types."""
    qtype = GGMLQuantizationType(tensor.tensor_type)
    if qtype not in SUPPORTED_TENSOR_TYPES:
        raise ValueError(f"GGUF tensor {tensor.name!r} has unsupported type {qtype.name}")
    # GGUF lists dimensions fastest-first; numpy wants them slowest-first.
    shape = tuple(int(dim) for dim in reversed(tensor.shape.tolist()))
    raw = np.asarray(tensor.data)
    if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        values = raw.astype(np.float32, copy=False)
    else:
        values = dequantize(raw.view(np.uint8), qtype)
    return np.ascontiguousarray(values, dtype=np.float32).reshape(shape)


def rotary_destinations(rows: int, num_heads: int) -> torch.Tensor:
    """The row `unpermute_rotary_rows` moves each row to."""
    order = unpermute_rotary_rows(np.arange(rows).reshape(rows, 1), num_heads)[:, 0]
    return torch.from_numpy(np.argsort(order))


@dataclass(frozen=True)
class TensorPlan:
    """Which GGUF tensors become which HF tensors, and which need their rotary rows undone.

    ``kept``: HF names of the tensors handed over as `LazyGroupQuantized` (bits, group size)
    instead of float32; empty unless the file was read to keep them quantized. Read as the
    plan is iterated, so a loader may take out the names its layers want in floats.
    """

    entries: tuple[tuple[str, ReaderTensor], ...]
    query_heads: int
    key_value_heads: int
    unpermute_rotary: bool
    kept: dict[str, tuple[int, int]]
    # Called with (file offset, bytes) once those bytes are copied out of the file's map.
    release: Callable[[int, int], None] | None = None
    # The kept names whose form is close to the file's values, not exact (K-quants).
    repacked: frozenset[str] = frozenset()

    def __len__(self) -> int:
        return len(self.entries)

    def _rotary_heads(self, hf_name: str) -> int | None:
        if self.unpermute_rotary and hf_name.endswith("q_proj.weight"):
            return self.query_heads
        if self.unpermute_rotary and hf_name.endswith("k_proj.weight"):
            return self.key_value_heads
        return None

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor | LazyGroupQuantized]]:
        for hf_name, tensor in self.entries:
            heads = self._rotary_heads(hf_name)
            if hf_name in self.kept:
                # Read as its layer copies it, each chunk's mapped pages let go after.
                packed = lazy_group_quantized(tensor, self.release)
                if heads is not None:
                    packed = packed.moved_rows(rotary_destinations(packed.rows, heads))
                yield hf_name, packed
                continue
            values = dequantize_tensor(tensor)
            if heads is not None:
                values = unpermute_rotary_rows(values, heads)
            if not values.flags.writeable:
                # F32 tensors are views of the read-only memory map; torch wants a copy.
                values = values.copy()
            if self.release is not None:  # a copy: the mapped pages can go
                self.release(tensor.data_offset, tensor.n_bytes)
            yield hf_name, torch.from_numpy(np.ascontiguousarray(values))


def plan_tensors(
    tensors: list[ReaderTensor],
    query_heads: int,
    key_value_heads: int,
    unpermute_rotary: bool,
    keep_quantized: bool = False,
    release: Callable[[int, int], None] | None = None,
) -> TensorPlan:
    """Check every tensor's name and type up front, so a bad file fails before any is read.

    With ``keep_quantized``, the matrices whose type `gguf_quant.py` keeps (repacking the
    K-quants) are handed over as `LazyGroupQuantized`. ``release(offset, length)``: lets
    go of the file's mapped bytes there once they are copied.
    """
    entries = []
    kept: dict[str, tuple[int, int]] = {}
    repacked: set[str] = set()
    for tensor in tensors:
        if tensor.name in SKIPPED_TENSOR_NAMES:
            continue
        qtype = GGMLQuantizationType(tensor.tensor_type)
        if qtype not in SUPPORTED_TENSOR_TYPES:
            raise ValueError(f"GGUF tensor {tensor.name!r} has unsupported type {qtype.name}")
        block_size = GGML_QUANT_SIZES[qtype][0]
        if int(tensor.shape[0]) % block_size:  # GGUF lists the row length first
            raise ValueError(
                f"GGUF tensor {tensor.name!r} ({qtype.name}) has rows of "
                f"{int(tensor.shape[0])} values, not whole blocks of {block_size}"
            )
        hf_name = hf_tensor_name(tensor.name)
        entries.append((hf_name, tensor))
        if keep_quantized and (kept_as := kept_format(tensor)) is not None:
            kept[hf_name] = kept_as
            if qtype in K_TYPES:
                repacked.add(hf_name)
    return TensorPlan(
        tuple(entries), query_heads, key_value_heads, unpermute_rotary, kept, release,
        frozenset(repacked),
    )  # fmt: skip

"""Read a single .gguf file as if it were a Hugging Face checkpoint directory.

One GGUF holds what an HF repo spreads over config.json, *.safetensors, tokenizer.json and
tokenizer_config.json. `read_gguf` gives each of those back in HF's vocabulary, so the rest of
the loader does not care which kind of checkpoint it was handed. Tensors are read lazily from
a memory map and dequantized to float32 one at a time.
"""

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader, ReaderField
from tokenizers import Tokenizer

from inference.model.loader.gguf_tensors import plan_tensors
from inference.model.loader.gguf_tokenizer import build_tokenizer, build_tokenizer_config
from inference.model.quant.group_lazy import LazyGroupQuantized

# general.architecture -> HF architecture name, and whether llama.cpp permuted Q/K rows.
ARCHITECTURES = {
    "llama": ("LlamaForCausalLM", True),
    "qwen2": ("Qwen2ForCausalLM", False),
    "qwen3": ("Qwen3ForCausalLM", False),
}


@dataclass
class GGUFCheckpoint:
    """A GGUF file's contents in Hugging Face shape (see `read_gguf`)."""

    hf_config: dict[str, Any]
    tensors: Iterator[tuple[str, torch.Tensor | LazyGroupQuantized]]
    num_tensors: int
    tokenizer: Tokenizer
    tokenizer_config: dict[str, Any]
    generation_config: dict[str, Any]
    # HF names of the tensors handed over quantized -> (bits, group size); see read_gguf.
    # The tensors read it as they go: a name taken out before they are read comes as floats.
    kept: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Those of ``kept`` repacked close to the file's values, not exactly (K-quants).
    repacked: frozenset[str] = frozenset()


def _field_value(field: ReaderField) -> Any:
    value = field.contents()
    # Scalars come back as numpy scalars; plain Python keeps configs JSON-serializable.
    return value.item() if isinstance(value, np.generic) else value


class PlainArrayReader(GGUFReader):
    """GGUFReader over a plain ndarray view of its memory map, not the ``np.memmap`` itself.

    The reader takes one slice of the file per value, hundreds of thousands for a
    tokenizer's tokens and merges, and each slice of an ``np.memmap`` runs its Python-level
    subclass hooks: 1.7 s of the demo model's start went there. A plain view of the same
    mapping reads the same bytes (the view keeps the mapping open) in 0.55 s.
    """

    @property  # type: ignore[override]
    def data(self) -> np.ndarray:
        return self._plain

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._plain = value.view(np.ndarray)
        self._mapping: mmap.mmap | None = getattr(value, "_mmap", None)

    def drop_pages(self, offset: int, length: int) -> None:
        """Let go of the pages the file's bytes [offset, offset + length) are mapped into,
        once read. They are clean file pages, yet counted in the process's memory while
        mapped: without this a load holds the whole file beside the model until the last
        tensor (98 MB for the demo model). Reading them again faults them back in, so
        dropping a neighbour's page too is harmless."""
        if self._mapping is None or length <= 0:
            return
        start = offset - offset % mmap.PAGESIZE
        self._mapping.madvise(mmap.MADV_DONTNEED, start, offset + length - start)


def _open_reader(path: Path) -> GGUFReader:
    if not path.is_file():
        raise ValueError(f"GGUF file {str(path)!r} does not exist")
    try:
        reader = PlainArrayReader(path)
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, struct.error) as error:
        raise ValueError(
            f"{str(path)!r} is not a readable GGUF file (truncated, or not GGUF): {error}"
        ) from error
    file_size = path.stat().st_size
    for tensor in reader.tensors:
        if tensor.data_offset + tensor.n_bytes > file_size:
            raise ValueError(f"GGUF file {str(path)!r} is truncated (tensor {tensor.name!r})")
    return reader


def _require(metadata: dict[str, Any], key: str) -> Any:
    if key not in metadata:
        raise ValueError(f"GGUF metadata lacks {key!r}")
    return metadata[key]


def _rope_scaling(metadata: dict[str, Any], arch: str) -> dict[str, Any] | None:
    kind = metadata.get(f"{arch}.rope.scaling.type")
    if kind is None or kind == "none":
        return None
    if kind not in ("linear", "yarn"):
        raise ValueError(f"GGUF rope scaling type {kind!r} is not supported")
    scaling: dict[str, Any] = {
        "rope_type": kind,
        "factor": float(_require(metadata, f"{arch}.rope.scaling.factor")),
    }
    original = metadata.get(f"{arch}.rope.scaling.original_context_length")
    if original is not None:
        scaling["original_max_position_embeddings"] = int(original)
    return scaling


def build_hf_config(metadata: dict[str, Any], tensor_names: set[str]) -> dict[str, Any]:
    """config.json fields from the `{arch}.*` keys; ValueError for an unknown architecture."""
    arch = str(_require(metadata, "general.architecture"))
    if arch not in ARCHITECTURES:
        raise ValueError(f"GGUF architecture {arch!r} is not supported ({sorted(ARCHITECTURES)})")
    hidden_size = int(_require(metadata, f"{arch}.embedding_length"))
    num_heads = int(_require(metadata, f"{arch}.attention.head_count"))
    num_kv_heads = int(metadata.get(f"{arch}.attention.head_count_kv", num_heads))
    head_dim = int(metadata.get(f"{arch}.attention.key_length", hidden_size // num_heads))
    vocab_size = metadata.get(f"{arch}.vocab_size")
    if vocab_size is None:
        vocab_size = len(_require(metadata, "tokenizer.ggml.tokens"))
    rope_theta = float(metadata.get(f"{arch}.rope.freq_base", 10000.0))
    rope_scaling = _rope_scaling(metadata, arch)
    config: dict[str, Any] = {
        "architectures": [ARCHITECTURES[arch][0]],
        "model_type": arch,
        "vocab_size": int(vocab_size),
        "hidden_size": hidden_size,
        "intermediate_size": int(_require(metadata, f"{arch}.feed_forward_length")),
        "num_hidden_layers": int(_require(metadata, f"{arch}.block_count")),
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": float(_require(metadata, f"{arch}.attention.layer_norm_rms_epsilon")),
        "rope_theta": rope_theta,
        "rope_scaling": rope_scaling,
        "rope_parameters": {
            "rope_theta": rope_theta,
            "rope_type": "default",
            **(rope_scaling or {}),
        },
        "max_position_embeddings": int(metadata.get(f"{arch}.context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "attention_bias": "blk.0.attn_q.bias" in tensor_names,
        "mlp_bias": False,
        "bos_token_id": metadata.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": metadata.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": metadata.get("tokenizer.ggml.padding_token_id"),
        "torch_dtype": "float32",
    }
    if arch in ("qwen2", "qwen3"):
        config["use_sliding_window"] = False
        config["sliding_window"] = None
    return config


def _apply_rope_freqs(hf_config: dict[str, Any], reader: GGUFReader) -> None:
    """Llama 3.1 GGUF files carry their rope scaling as a tensor of per-frequency divisors."""
    tensor = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
    if tensor is None:
        return
    if hf_config["rope_scaling"] is not None:
        raise ValueError("GGUF file has both rope scaling metadata and a rope_freqs tensor")
    if GGMLQuantizationType(tensor.tensor_type) != GGMLQuantizationType.F32:
        raise ValueError("GGUF tensor 'rope_freqs.weight' must be F32")
    scaling = {"rope_type": "freq_factors", "factors": [float(x) for x in tensor.data]}
    hf_config["rope_scaling"] = scaling
    hf_config["rope_parameters"] = {"rope_theta": hf_config["rope_theta"], **scaling}


def read_gguf(path: str | Path, *, keep_quantized: bool = False) -> GGUFCheckpoint:
    """Open a .gguf file; ValueError if it is not a complete GGUF of a model we can run.

    ``keep_quantized``: its quantized matrices (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 as they are,
    the K-quants repacked: gguf_quant.py) are handed over as `LazyGroupQuantized`, listed
    in ``kept``, not dequantized: each is read from the file's map as its layer copies it,
    a chunk of rows at a time.
    """
    path = Path(path)
    reader = _open_reader(path)
    metadata = {name: _field_value(field) for name, field in reader.fields.items()}
    hf_config = build_hf_config(metadata, {tensor.name for tensor in reader.tensors})
    _apply_rope_freqs(hf_config, reader)
    arch = str(metadata["general.architecture"])
    plan = plan_tensors(
        list(reader.tensors),
        query_heads=hf_config["num_attention_heads"],
        key_value_heads=hf_config["num_key_value_heads"],
        unpermute_rotary=ARCHITECTURES[arch][1],
        keep_quantized=keep_quantized,
        release=getattr(reader, "drop_pages", None),
    )
    generation_config = {
        key: hf_config[key]
        for key in ("bos_token_id", "eos_token_id", "pad_token_id")
        if hf_config[key] is not None
    }
    return GGUFCheckpoint(
        hf_config=hf_config,
        tensors=iter(plan),
        num_tensors=len(plan),
        tokenizer=build_tokenizer(metadata),
        tokenizer_config=build_tokenizer_config(metadata),
        generation_config=generation_config,
        kept=plan.kept,
        repacked=plan.repacked,
    )

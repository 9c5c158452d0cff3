"""Build a model from a checkpoint: a Hugging Face directory or a GGUF file."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm import tqdm

from inference.model.arch import ArchConfig
from inference.model.llama import LlamaForCausalLM
from inference.model.loader.hf import HFCheckpoint, checkpoint_dtype
from inference.model.registry import model_class_for

if TYPE_CHECKING:
    from inference.model.loader.gguf import GGUFCheckpoint

DTYPE_NAMES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(
    requested: torch.dtype | str, hf_config: dict[str, Any], device: torch.device
) -> torch.dtype:
    """Pick the weights' dtype.

    "auto" follows the checkpoint, with vLLM's exception for float32 checkpoints (and GGUF
    files, which dequantize to float32): they run in bfloat16, which halves the bytes read
    per step and uses AMX / tensor cores. float16 on CPU becomes bfloat16 too (faster there).
    Ask for "float32" explicitly for exact comparisons.
    """
    if isinstance(requested, torch.dtype):
        dtype = requested
    elif requested == "auto":
        dtype = checkpoint_dtype(hf_config)
        if dtype == torch.float32 or (dtype == torch.float16 and device.type == "cpu"):
            dtype = torch.bfloat16
    elif requested in DTYPE_NAMES:
        dtype = DTYPE_NAMES[requested]
    else:
        raise ValueError(f"unknown dtype {requested!r}; use auto, {', '.join(DTYPE_NAMES)}")
    if dtype not in DTYPE_NAMES.values():
        raise ValueError(f"unsupported model dtype {dtype}")
    return dtype


def load_model(
    path: str | Path,
    dtype: torch.dtype | str = "auto",
    device: torch.device | str = "cpu",
    progress: bool = True,
    gguf: GGUFCheckpoint | None = None,
) -> tuple[LlamaForCausalLM, ArchConfig]:
    """Load a checkpoint. ``gguf``: an already opened GGUF file (its tensors unread)."""
    path = Path(path)
    device = torch.device(device)
    tensors: Iterable[tuple[str, torch.Tensor]]
    if gguf is not None or path.suffix == ".gguf":
        from inference.model.loader.gguf import read_gguf  # the GGUF reader is optional

        gguf = gguf or read_gguf(path)
        hf_config, tensors, total = gguf.hf_config, gguf.tensors, gguf.num_tensors
    else:
        checkpoint = HFCheckpoint(path)
        hf_config, tensors, total = checkpoint.config, checkpoint.tensors(), checkpoint.num_tensors
    config = ArchConfig.from_hf_config(hf_config)
    model_dtype = resolve_dtype(dtype, hf_config, device)
    model = model_class_for(config)(config, model_dtype, device)
    model.load_weights(_with_progress(tensors, total, path.name, progress))
    return model.eval(), config


def _with_progress(
    tensors: Iterable[tuple[str, torch.Tensor]], total: int | None, label: str, enabled: bool
) -> Iterator[tuple[str, torch.Tensor]]:
    bar = tqdm(total=total, desc=f"loading {label}", unit="tensor", disable=not enabled)
    with bar:
        for item in tensors:
            yield item
            bar.update(1)


def num_kv_cache_bytes_per_token(config: ArchConfig, kv_dtype: torch.dtype) -> int:
    """Bytes of key plus value cache one token takes across all layers."""
    element = torch.empty((), dtype=kv_dtype).element_size()
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * element


__all__ = ["load_model", "num_kv_cache_bytes_per_token", "resolve_dtype"]

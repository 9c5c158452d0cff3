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
from inference.model.loader.safetensors import read_header
from inference.model.quant import QUANTIZATIONS, quantize_model_fp8
from inference.model.quant.checkpoint import Fp8Checkpoint, inspect_fp8_checkpoint
from inference.model.registry import model_class_for

if TYPE_CHECKING:
    from inference.model.loader.gguf import GGUFCheckpoint

# Where load_model leaves an FP8 checkpoint's KV cache scales on the model.
KV_SCALES_ATTRIBUTE = "fp8_kv_scales"
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
    quantization: str | None = None,
) -> tuple[LlamaForCausalLM, ArchConfig]:
    """Load a checkpoint. ``gguf``: an already opened GGUF file (its tensors unread).

    ``quantization="fp8"`` quantizes the decoder's linear layers once loaded. A checkpoint
    already in FP8 loads as it is, whatever ``quantization`` says; its KV cache scales,
    if any, are left on the model (see `checkpoint_kv_scales`).
    """
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantization!r}; use {', '.join(QUANTIZATIONS)}")
    path = Path(path)
    device = torch.device(device)
    tensors: Iterable[tuple[str, torch.Tensor]]
    fp8: Fp8Checkpoint | None = None
    if gguf is not None or path.suffix == ".gguf":
        from inference.model.loader.gguf import read_gguf  # the GGUF reader is optional

        gguf = gguf or read_gguf(path)
        hf_config, tensors, total = gguf.hf_config, gguf.tensors, gguf.num_tensors
    else:
        checkpoint = HFCheckpoint(path)
        hf_config, tensors, total = checkpoint.config, checkpoint.tensors(), checkpoint.num_tensors
        headers = (
            (name, str(info.get("dtype")))
            for file in checkpoint.files
            for name, info in read_header(file).items()
        )
        fp8 = inspect_fp8_checkpoint(hf_config, headers)
    config = ArchConfig.from_hf_config(hf_config)
    model_dtype = resolve_dtype(dtype, hf_config, device)
    model = model_class_for(config)(config, model_dtype, device)
    if fp8 is not None:
        fp8.prepare(model)
        tensors = fp8.filter_tensors(tensors)
    model.load_weights(_with_progress(tensors, total, path.name, progress))
    if fp8 is not None:
        setattr(model, KV_SCALES_ATTRIBUTE, fp8.layer_kv_scales(config.num_layers))
    elif quantization == "fp8":
        quantize_model_fp8(model)
    return model.eval(), config


def _with_progress(
    tensors: Iterable[tuple[str, torch.Tensor]], total: int | None, label: str, enabled: bool
) -> Iterator[tuple[str, torch.Tensor]]:
    bar = tqdm(total=total, desc=f"loading {label}", unit="tensor", disable=not enabled)
    with bar:
        for item in tensors:
            yield item
            bar.update(1)


def checkpoint_kv_scales(model: LlamaForCausalLM) -> list[tuple[float, float]] | None:
    """Per-layer (k_scale, v_scale) an FP8 checkpoint supplied for an FP8 KV cache, if any."""
    scales: list[tuple[float, float]] | None = getattr(model, KV_SCALES_ATTRIBUTE, None)
    return scales


def num_kv_cache_bytes_per_token(config: ArchConfig, kv_dtype: torch.dtype) -> int:
    """Bytes of key plus value cache one token takes across all layers (1 per value in FP8)."""
    element = torch.empty((), dtype=kv_dtype).element_size()
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * element


__all__ = ["checkpoint_kv_scales", "load_model", "num_kv_cache_bytes_per_token", "resolve_dtype"]

"""Build a model from a checkpoint: a Hugging Face directory or a GGUF file."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm import tqdm

from inference.model.arch import ArchConfig
from inference.model.llama import LlamaForCausalLM
from inference.model.loader.hf import HFCheckpoint, checkpoint_dtype
from inference.model.loader.memory import release_freed_memory
from inference.model.loader.safetensors import read_header
from inference.model.quant import QUANTIZATIONS
from inference.model.quant.apply import prepare_fp8_at_load
from inference.model.quant.checkpoint import Fp8Checkpoint, inspect_fp8_checkpoint
from inference.model.quant.group_lazy import AnyGroupQuantized
from inference.model.quant.packed_checkpoint import (
    PACKED_METHODS,
    PackedCheckpoint,
    check_requested,
    inspect_packed_checkpoint,
)
from inference.model.registry import model_class_for

if TYPE_CHECKING:
    from inference.model.loader.gguf import GGUFCheckpoint

log = logging.getLogger("inference.loader")

# Where load_model leaves an FP8 checkpoint's KV cache scales on the model.
KV_SCALES_ATTRIBUTE = "fp8_kv_scales"
DTYPE_NAMES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cpu_has_native_bf16() -> bool:
    """Whether this processor multiplies bfloat16 in hardware (AVX512-BF16 or AMX), as
    oneDNN needs for bf16 matmuls to beat float32. Elsewhere (AVX2-only x86 such as older
    EPYC, other architectures) torch widens bf16 in software and a prefill runs several times
    slower than in float32 (docs/engine.md, "The dtype auto picks")."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def resolve_dtype(
    requested: torch.dtype | str,
    hf_config: dict[str, Any],
    device: torch.device,
    *,
    native_bf16: bool | None = None,
) -> torch.dtype:
    """Pick the weights' dtype.

    "auto" follows the checkpoint, with vLLM's exception for float32 checkpoints (and GGUF
    files, which dequantize to float32): they run in bfloat16, which halves the bytes read
    per step and uses AMX / tensor cores. float16 on CPU becomes bfloat16 too (faster there).
    On a CPU without bf16 arithmetic (``native_bf16``, default `cpu_has_native_bf16`)
    both run in float32 instead; a bfloat16 checkpoint stays bfloat16 (half the memory), with
    a warning that float32 would run faster. Ask for "float32" explicitly for exact
    comparisons.
    """
    if isinstance(requested, torch.dtype):
        dtype = requested
    elif requested == "auto":
        dtype = checkpoint_dtype(hf_config)
        if dtype == torch.float32 or (dtype == torch.float16 and device.type == "cpu"):
            dtype = torch.bfloat16
        if dtype == torch.bfloat16 and device.type == "cpu":
            fast = cpu_has_native_bf16() if native_bf16 is None else native_bf16
            if not fast and checkpoint_dtype(hf_config) != torch.bfloat16:
                dtype = torch.float32
            elif not fast:
                log.warning(
                    "this CPU has no bfloat16 arithmetic: the bf16 checkpoint runs slowly "
                    "(prefill several times slower); --dtype float32 is faster at twice "
                    "the weights' memory"
                )
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

    ``quantization="fp8"`` quantizes the linear layers and the token table tensor by tensor
    as they are read (`prepare_fp8_at_load`): the model never exists whole in bf16. A
    checkpoint already in FP8 loads as it is, whatever ``quantization`` says; its KV cache
    scales, if any, are left on the model (see `checkpoint_kv_scales`).

    ``quantization="gguf"`` keeps a GGUF file's quantized matrices (Q4_0, Q4_1, Q5_0,
    Q5_1, Q8_0 as they are; Q4_K, Q5_K, Q6_K repacked) in group-quantized layers, never a
    float copy; a given ``gguf`` must have been read with ``keep_quantized``. Other
    checkpoints are refused with that setting.

    A GPTQ or AWQ checkpoint (config.json's quantization_config) loads its layers as they
    are (group-quantized layers, never a float copy) with ``quantization`` None or its own
    method ("gptq" / "awq"); any other setting, or "gptq" / "awq" on another checkpoint,
    is a ValueError that says what the checkpoint holds.
    """
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantization!r}; use {', '.join(QUANTIZATIONS)}")
    path = Path(path)
    device = torch.device(device)
    tensors: Iterable[tuple[str, torch.Tensor | AnyGroupQuantized]]
    fp8: Fp8Checkpoint | None = None
    packed: PackedCheckpoint | None = None
    if quantization in PACKED_METHODS and (gguf is not None or path.suffix == ".gguf"):
        raise ValueError(
            f"--quantization {quantization} loads a {quantization.upper()} checkpoint "
            f"directory; {path.name} is a GGUF file (use gguf, or leave it out)"
        )
    if gguf is not None or path.suffix == ".gguf":
        from inference.model.loader.gguf import read_gguf  # the GGUF reader is optional

        # FP8 reads the blocks too: its layers dequantize them a slice at a time.
        gguf = gguf or read_gguf(path, keep_quantized=quantization in ("gguf", "fp8"))
        if quantization == "gguf" and not gguf.kept:
            raise ValueError(
                "--quantization gguf keeps Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K matrices "
                f"quantized, and {path.name} has none to keep (or was read without "
                "keep_quantized)"
            )
        hf_config, tensors, total = gguf.hf_config, gguf.tensors, gguf.num_tensors
    elif quantization == "gguf":
        raise ValueError(
            f"--quantization gguf applies to .gguf files; {path.name} is a Hugging Face "
            "checkpoint (leave --quantization out to load it as it is)"
        )
    else:
        checkpoint = HFCheckpoint(path)
        hf_config, total = checkpoint.config, checkpoint.num_tensors
        packed = inspect_packed_checkpoint(hf_config, checkpoint.files)
        check_requested(quantization, packed, path.name)
        if packed is not None:  # a layer's packed parts stream on as one weight
            tensors = packed.convert_tensors(checkpoint.tensors())
            total -= packed.merged_tensors
        else:
            headers = (
                (name, str(info.get("dtype")))
                for file in checkpoint.files
                for name, info in read_header(file).items()
            )
            fp8 = inspect_fp8_checkpoint(hf_config, headers)
            # Lazy: the FP8 filter keeps KV cache scales aside as the tensors stream.
            tensors = (
                checkpoint.tensors() if fp8 is None else fp8.filter_tensors(checkpoint.tensors())
            )
    config = ArchConfig.from_hf_config(hf_config)
    model_dtype = resolve_dtype(dtype, hf_config, device)
    model = model_class_for(config)(config, model_dtype, device)
    if fp8 is not None:
        fp8.prepare(model)
    elif packed is not None:
        packed.prepare(model)
    elif quantization == "fp8":
        prepare_fp8_at_load(model)
    if gguf is not None and gguf.kept:
        from inference.model.quant.group_apply import kept_in_floats, prepare_group_quant

        if quantization == "gguf":
            prepare_group_quant(model, gguf.kept)
            floats = kept_in_floats(model, gguf.kept)
        else:  # FP8 layers take exact blocks; a K-quant's repacked form is only close
            floats = set(gguf.repacked)
        # The tensors are not read yet: those of layers left in floats come dequantized.
        for name in floats & gguf.kept.keys():
            del gguf.kept[name]
    model.load_weights(_with_progress(tensors, total, path.name, progress))
    if fp8 is not None:
        setattr(model, KV_SCALES_ATTRIBUTE, fp8.layer_kv_scales(config.num_layers))
    release_freed_memory()
    return model.eval(), config


def _with_progress(
    tensors: Iterable[tuple[str, torch.Tensor | AnyGroupQuantized]],
    total: int | None,
    label: str,
    enabled: bool,
) -> Iterator[tuple[str, torch.Tensor | AnyGroupQuantized]]:
    bar = tqdm(total=total, desc=f"loading {label}", unit="tensor", disable=not enabled)
    with bar:
        for item in tensors:
            yield item
            bar.update(1)
            release_freed_memory(collect=False)  # the tensor's load-time buffers


def checkpoint_kv_scales(model: LlamaForCausalLM) -> list[tuple[float, float]] | None:
    """Per-layer (k_scale, v_scale) an FP8 checkpoint supplied for an FP8 KV cache, if any."""
    scales: list[tuple[float, float]] | None = getattr(model, KV_SCALES_ATTRIBUTE, None)
    return scales


def num_kv_cache_bytes_per_token(config: ArchConfig, kv_dtype: torch.dtype) -> int:
    """Bytes of key plus value cache one token takes across all layers (1 per value in FP8)."""
    element = torch.empty((), dtype=kv_dtype).element_size()
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * element


__all__ = [
    "checkpoint_kv_scales",
    "cpu_has_native_bf16",
    "load_model",
    "num_kv_cache_bytes_per_token",
    "resolve_dtype",
]

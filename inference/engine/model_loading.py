"""The engine's model: from the start-up cache, a GGUF file, a directory, or over ranks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from inference.engine.engine_config import EngineConfig
from inference.kernels.cpu.threads import single_thread_small_kernels
from inference.model.arch import ArchConfig
from inference.model.llama import LlamaForCausalLM
from inference.model.loader import load_model
from inference.model.loader.gguf import GGUFCheckpoint, read_gguf
from inference.model.loader.gguf_cache import load_gguf
from inference.model.quant.group_apply import use_int8_activations
from inference.parallel.group import TensorParallelGroup
from inference.startup import phase


@dataclass
class LoadedModel:
    model: LlamaForCausalLM
    arch: ArchConfig
    gguf: GGUFCheckpoint | None  # a GGUF file's parts (its tokenizer), if it is one
    tp: TensorParallelGroup | None  # the other ranks, with tensor parallelism


def load_engine_model(config: EngineConfig, device: torch.device) -> LoadedModel:
    """Load ``config.model`` on ``device`` as the engine runs it."""
    single_thread_small_kernels(config.single_thread_small_kernels)
    is_gguf = config.model.endswith(".gguf")
    single = config.tensor_parallel_size == 1
    if is_gguf and config.cache_dir is not None and config.quantization is None and single:
        # Through the start-up cache of prepared weights (filled on a miss). Quantized
        # weights are not cached: kept ones are read as they are in the file, no slower,
        # and FP8 ones are quantized tensor by tensor as the file is read, which a cache
        # of bf16 weights (mapped whole) would defeat.
        prepared = load_gguf(
            Path(config.model),
            Path(config.cache_dir),
            dtype=config.dtype,
            device=device,
            progress=config.progress,
        )
        return LoadedModel(prepared.model, prepared.arch, prepared.checkpoint, None)
    # A GGUF file is opened once: its metadata gives the tokenizer, its tensors the model.
    gguf = None
    if is_gguf:
        with phase("gguf_metadata"):
            # FP8 takes the blocks too, to dequantize them a slice at a time.
            gguf = read_gguf(config.model, keep_quantized=config.quantization in ("gguf", "fp8"))
    if config.tensor_parallel_size > 1:
        tp = TensorParallelGroup.start(config, device, gguf)
        try:
            model, arch = tp.loaded_model()
        except BaseException:
            tp.close()  # no rank outlives a failed start
            raise
        return LoadedModel(model, arch, gguf, tp)
    with phase("weights"):
        model, arch = load_model(
            config.model,
            dtype=config.dtype,
            device=device,
            progress=config.progress,
            gguf=gguf,
            quantization=config.quantization,
        )
    if config.int8_activations:
        use_int8_activations(model, device)
    return LoadedModel(model, arch, gguf, None)

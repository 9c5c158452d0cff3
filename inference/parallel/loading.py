"""What every tensor-parallel rank does the same way: pick its device, load, shard, quantize."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from inference.engine.engine_config import EngineConfig
from inference.model.arch import ArchConfig
from inference.model.llama import LlamaForCausalLM
from inference.model.loader import load_model
from inference.model.loader.gguf import GGUFCheckpoint, read_gguf
from inference.model.loader.hf import read_config
from inference.model.quant import quantize_model_fp8
from inference.model.quant.fp8 import Fp8Linear
from inference.parallel.sharding import shard_model

# How long ranks wait for each other to join the group (and, after, on a collective).
INIT_TIMEOUT = timedelta(seconds=120)
# Commands: a worker waits for the next one as long as the engine stays idle.
CONTROL_TIMEOUT = timedelta(days=365)


def read_arch(config: EngineConfig, gguf: GGUFCheckpoint | None) -> ArchConfig:
    """The model's architecture from its config alone, before any weight is read."""
    if gguf is not None:
        return ArchConfig.from_hf_config(gguf.hf_config)
    return ArchConfig.from_hf_config(read_config(Path(config.model)))


def rank_device(device: torch.device, rank: int, world: int) -> torch.device:
    """Rank r runs on cuda:r (rank 0's device type decides), or on the CPU."""
    if device.type != "cuda":
        return device
    available = torch.cuda.device_count()
    if available < world:
        raise ValueError(
            f"tensor_parallel_size {world} needs {world} CUDA devices, torch sees {available}"
        )
    return torch.device("cuda", rank)


def cpu_threads_per_rank(world: int) -> int:
    """The CPU's cores shared out, so N ranks in lock step do not oversubscribe them."""
    return max(1, (os.cpu_count() or 1) // world)


def init_groups(
    device: torch.device, rank: int, world: int, port: int
) -> tuple[dist.ProcessGroup, dist.ProcessGroup]:
    """Join the group; return (the all-reduce group, the gloo group commands travel on)."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=INIT_TIMEOUT,
        # Binds NCCL to this rank's GPU up front, rather than guessing it at the first
        # collective (and warning that it guessed).
        device_id=device if device.type == "cuda" else None,
    )
    world_group = dist.group.WORLD
    assert world_group is not None
    # Its own gloo group, so that waiting for the next command never times out the
    # all-reduces, and commands stay on the host under NCCL.
    control = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
    return world_group, control


def load_rank_model(
    config: EngineConfig,
    device: torch.device,
    rank: int,
    world: int,
    group: dist.ProcessGroup,
    gguf: GGUFCheckpoint | None = None,
) -> tuple[LlamaForCausalLM, ArchConfig]:
    """Load the whole checkpoint, keep this rank's share, then quantize (if asked).

    Sharding comes first so that FP8 scales are computed over the rows each rank keeps;
    a checkpoint already in FP8 loads as FP8 and is sharded as it is. Returns the model
    and the full (unsharded) architecture.
    """
    if gguf is None and config.model.endswith(".gguf"):
        gguf = read_gguf(config.model)
    model, arch = load_model(
        config.model,
        dtype=config.dtype,
        device=device,
        progress=config.progress and rank == 0,
        gguf=gguf,
        quantization=None,
    )
    shard_model(model, rank, world, group)
    already_fp8 = any(isinstance(m, Fp8Linear) for m in model.modules())
    if config.quantization == "fp8" and not already_fp8:
        quantize_model_fp8(model)
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the full weights' memory, for the KV pool to take
    return model, arch

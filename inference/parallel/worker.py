"""The loop of tensor-parallel ranks 1..N-1: receive a command, act, until Shutdown.

A worker holds its share of the model and its own KV pool (its KV heads, rank 0's number
of blocks, so block tables are shared). It never schedules or samples: for each `StepInputs`
it runs the forward pass, whose all-reduces keep it in lock step with rank 0, and drops
the result. It exits when told to, when rank 0's connection breaks, or when rank 0 dies.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from multiprocessing.queues import Queue

import torch
import torch.distributed as dist

from inference.engine.engine_config import EngineConfig
from inference.engine.model_runner import ModelRunner
from inference.engine.step_inputs import StepInputs
from inference.kernels.cpu.threads import single_thread_small_kernels
from inference.kernels.kv_cache import FP8_KV_DTYPE
from inference.model.loader import checkpoint_kv_scales
from inference.parallel.loading import (
    cpu_threads_per_rank,
    init_groups,
    load_rank_model,
    rank_device,
)
from inference.parallel.messages import AllocateKVCache, Command, Shutdown, WorkerStatus
from inference.parallel.sharding import local_arch

log = logging.getLogger("inference.parallel")

PARENT_POLL_S = 1.0


def receive(control: dist.ProcessGroup) -> Command:
    """The next command rank 0 broadcast on ``control``."""
    box: list[object] = [None]
    dist.broadcast_object_list(box, src=0, group=control)
    command = box[0]
    if not isinstance(command, StepInputs | AllocateKVCache | Shutdown):
        raise TypeError(f"unexpected tensor-parallel command {type(command).__name__}")
    return command


def worker_main(
    config: EngineConfig,
    rank: int,
    world: int,
    port: int,
    status: Queue[WorkerStatus],
    parent_pid: int,
) -> None:
    """Entry point of a spawned rank (``config.device`` is rank 0's resolved device type)."""
    _exit_with_parent(parent_pid)
    try:
        device = rank_device(torch.device(config.device), rank, world)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        else:
            torch.set_num_threads(cpu_threads_per_rank(world))
            single_thread_small_kernels(config.single_thread_small_kernels)
        status.put(WorkerStatus(rank, "started"))
        group, control = init_groups(device, rank, world, port)
        model, arch = load_rank_model(config, device, rank, world, group)
        status.put(WorkerStatus(rank, "loaded"))
        setup = receive(control)
        if not isinstance(setup, AllocateKVCache):
            raise TypeError(f"expected AllocateKVCache first, got {type(setup).__name__}")
        fp8_kv = config.kv_cache_dtype == "fp8"
        runner = ModelRunner(
            model,
            local_arch(arch, world),
            num_blocks=setup.num_blocks,
            block_size=config.block_size,
            kv_dtype=FP8_KV_DTYPE if fp8_kv else model.dtype,
            device=device,
            kv_scales=checkpoint_kv_scales(model) if fp8_kv else None,
            attention_backend=config.attention_backend,
            enforce_eager=True,
            max_num_seqs=config.max_num_seqs,
            max_model_len=setup.max_model_len,
        )
        status.put(WorkerStatus(rank, "ready"))
    except BaseException:
        status.put(WorkerStatus(rank, "failed", traceback.format_exc()))
        return
    try:
        while True:
            command = receive(control)
            if isinstance(command, StepInputs):
                runner.forward_step(command)
            elif isinstance(command, Shutdown):
                break
            else:
                raise TypeError(f"unexpected {type(command).__name__} while serving")
    except Exception:
        # Rank 0 sees this as a broken connection on its next collective.
        log.exception("tensor-parallel rank %d stopped", rank)
    finally:
        dist.destroy_process_group()


def _exit_with_parent(parent_pid: int) -> None:
    """Exit at once if rank 0 goes away without a Shutdown (killed, crashed)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="tp-parent-watch", daemon=True).start()

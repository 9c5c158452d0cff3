"""Rank 0's side of tensor parallelism: spawn the other ranks, drive them, shut them down.

Start-up, in order (each wait bounded, a failed rank's traceback raised here):

1. check that the model's heads split over N (before anything is spawned);
2. spawn ranks 1..N-1 (spawn context) and wait until each says it started;
3. join the process group (gloo on the CPU, NCCL on CUDA; 127.0.0.1, a free port), plus
   a gloo group for commands; load and shard rank 0's own model;
4. wait until every rank has loaded; later `allocate_kv_cache` sends the pool size and
   waits until every rank has its pool.

Then each eager step, `broadcast` sends the step's `StepInputs` and the model's all-reduces
keep the ranks in lock step. `close` (also run at exit) sends `Shutdown`, joins the
processes and terminates any that do not leave in time.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import multiprocessing as mp
import os
import queue
import socket
import threading
import time
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue

import torch
import torch.distributed as dist

from inference.engine.engine_config import EngineConfig
from inference.engine.step_inputs import StepInputs
from inference.model.arch import ArchConfig
from inference.model.llama import LlamaForCausalLM
from inference.model.loader.gguf import GGUFCheckpoint
from inference.parallel.loading import (
    INIT_TIMEOUT,
    init_groups,
    load_rank_model,
    rank_device,
    read_arch,
)
from inference.parallel.messages import AllocateKVCache, Command, Shutdown, WorkerStatus
from inference.parallel.sharding import check_tensor_parallel, local_arch
from inference.parallel.worker import worker_main

log = logging.getLogger("inference.parallel")

# Loading a large checkpoint takes a while; a rank that died is noticed at once anyway.
LOAD_TIMEOUT_S = 1800.0
SHUTDOWN_TIMEOUT_S = 10.0


class TensorParallelGroup:
    """Ranks 1..N-1 of one engine, and rank 0's own share of the model."""

    def __init__(
        self,
        world: int,
        processes: list[BaseProcess],
        status: Queue[WorkerStatus],
    ) -> None:
        self.world = world
        self._processes = processes
        self._status = status
        self._control: dist.ProcessGroup | None = None
        self._closed = False
        self.model: LlamaForCausalLM | None = None
        self.arch: ArchConfig | None = None

    @classmethod
    def start(
        cls, config: EngineConfig, device: torch.device, gguf: GGUFCheckpoint | None = None
    ) -> TensorParallelGroup:
        """Spawn and join ranks 1..N-1, load rank 0's share; `model` and `arch` are set."""
        world = config.tensor_parallel_size
        check_tensor_parallel(read_arch(config, gguf), world)
        if dist.is_initialized():
            raise RuntimeError(
                "a torch.distributed process group is already initialized in this process; "
                "close the other tensor-parallel engine first"
            )
        device = rank_device(device, 0, world)
        worker_config = dataclasses.replace(config, device=device.type)
        context = mp.get_context("spawn")
        status: Queue[WorkerStatus] = context.Queue()
        port = _free_port()
        processes: list[BaseProcess] = [
            context.Process(
                target=worker_main,
                args=(worker_config, rank, world, port, status, os.getpid()),
                name=f"tp-rank-{rank}",
                daemon=True,
            )
            for rank in range(1, world)
        ]
        group = cls(world, processes, status)
        atexit.register(group.close)
        try:
            for process in processes:
                process.start()
            group._wait_for("started", INIT_TIMEOUT.total_seconds())
            world_group, group._control = init_groups(device, 0, world, port)
            group.model, group.arch = load_rank_model(config, device, 0, world, world_group, gguf)
            group._wait_for("loaded", LOAD_TIMEOUT_S)
        except BaseException:
            group.close()
            raise
        log.info("tensor parallel: %d ranks on %s", world, device.type)
        return group

    def loaded_model(self) -> tuple[LlamaForCausalLM, ArchConfig]:
        """Rank 0's share of the model and the full architecture."""
        if self.model is None or self.arch is None:
            raise RuntimeError("the tensor-parallel group has not loaded a model")
        return self.model, self.arch

    def local_arch(self) -> ArchConfig:
        """The head counts each rank runs (KV pools are sized by it)."""
        return local_arch(self.loaded_model()[1], self.world)

    def allocate_kv_cache(self, num_blocks: int, max_model_len: int) -> None:
        """Have every other rank allocate a pool of ``num_blocks``; wait until they have."""
        self._send(AllocateKVCache(num_blocks, max_model_len))
        self._wait_for("ready", INIT_TIMEOUT.total_seconds())

    def broadcast(self, step: StepInputs) -> None:
        """Send one step's inputs; every rank then runs the same forward pass."""
        self._send(step)

    def close(self) -> None:
        """Stop every rank (Shutdown, then terminate what lingers) and leave the group."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self._control is not None and any(p.is_alive() for p in self._processes):
            # In a thread: a rank stuck mid-step would never receive it.
            sender = threading.Thread(target=self._try_send_shutdown, daemon=True)
            sender.start()
            sender.join(SHUTDOWN_TIMEOUT_S)
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT_S
        for process in self._processes:
            if process.pid is None:
                continue
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.warning("tensor-parallel %s did not stop; terminating it", process.name)
                process.terminate()
                process.join(SHUTDOWN_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()
        if dist.is_initialized():
            dist.destroy_process_group()
        self._status.close()

    def _send(self, command: Command) -> None:
        if self._closed or self._control is None:
            raise RuntimeError("the tensor-parallel group is closed")
        dist.broadcast_object_list([command], src=0, group=self._control)

    def _try_send_shutdown(self) -> None:
        with contextlib.suppress(Exception):  # a rank already gone: nothing to tell it
            dist.broadcast_object_list([Shutdown()], src=0, group=self._control)

    def _wait_for(self, phase: str, timeout_s: float) -> None:
        """Wait until every worker reports ``phase``; raise on a failure, death or timeout."""
        pending = set(range(1, self.world))
        deadline = time.monotonic() + timeout_s
        while pending:
            try:
                report = self._status.get(timeout=0.1)
            except queue.Empty:
                for rank, process in enumerate(self._processes, start=1):
                    if rank in pending and not process.is_alive():
                        raise RuntimeError(
                            f"tensor-parallel rank {rank} exited (code {process.exitcode}) "
                            f"before it was {phase}"
                        ) from None
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"tensor-parallel ranks {sorted(pending)} not {phase} after "
                        f"{timeout_s:.0f} s"
                    ) from None
                continue
            if report.phase == "failed":
                raise RuntimeError(f"tensor-parallel rank {report.rank} failed:\n{report.error}")
            if report.phase == phase:
                pending.discard(report.rank)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port

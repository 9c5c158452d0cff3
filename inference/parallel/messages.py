"""What rank 0 tells the other tensor-parallel ranks, and what they report back.

Commands go out as pickled dataclasses over a gloo broadcast (`TensorParallelGroup`), so a
rank acts on the type of what it received, never on a method name. Status goes back over
a multiprocessing queue, only while the group starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class RunStep:
    """One forward pass: the flat batch of new tokens and its attention layout (host side).

    Every rank builds the same tensors from it; block ids index every rank's KV pool,
    since all pools have the same number of blocks.
    """

    input_ids: np.ndarray  # (T,) int64
    positions: np.ndarray  # (T,) int64
    slots: np.ndarray  # (T,) int64: block_id * block_size + offset
    query_start_loc: list[int]  # (B + 1,)
    seq_lens: list[int]  # (B,) context length after this step
    block_tables: np.ndarray  # (B, max_blocks) int64, padded with 0


@dataclass(frozen=True, slots=True)
class AllocateKVCache:
    """Allocate the KV pool (this rank's KV heads only) with rank 0's number of blocks."""

    num_blocks: int
    max_model_len: int


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Leave the loop, tear down the process group and exit."""


Command = RunStep | AllocateKVCache | Shutdown


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """A worker's progress through start-up: "started", "loaded", "ready" or "failed"."""

    rank: int
    phase: str
    error: str | None = None  # the traceback, when phase is "failed"

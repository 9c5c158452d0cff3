"""What rank 0 tells the other tensor-parallel ranks, and what they report back.

Commands go out as pickled dataclasses over a gloo broadcast (`TensorParallelGroup`), so a
rank acts on the type of what it received, never on a method name. Status goes back over
a multiprocessing queue, only while the group starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference.engine.step_inputs import StepInputs


@dataclass(frozen=True, slots=True)
class AllocateKVCache:
    """Allocate the KV pool (this rank's KV heads only) with rank 0's number of blocks."""

    num_blocks: int
    max_model_len: int


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Leave the loop, tear down the process group and exit."""


# StepInputs: one forward pass (the engine's own step inputs, sent as they are).
Command = StepInputs | AllocateKVCache | Shutdown


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """A worker's progress through start-up: "started", "loaded", "ready" or "failed"."""

    rank: int
    phase: str
    error: str | None = None  # the traceback, when phase is "failed"

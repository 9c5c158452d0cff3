"""A group-quantized weight still in its checkpoint: converted a chunk of rows at a time.

A GGUF file's blocks are read through a memory map. Converting a whole tensor before a
layer copies it holds, at the same moment, the file's mapped pages for it and a full copy
of its codes (for the demo model's token table, 28 MB each) beside the model.
`LazyGroupQuantized` holds only how to convert rows [start, stop) of its source
(``read_rows``) and how to let go of their file pages (``release_rows``): a layer copies
it into its own storage one chunk (about CHUNK_BYTES of the source) at a time, each
chunk's pages dropped once it is copied, so a load holds the model and one chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch

from inference.model.quant.group_math import (
    GroupQuantized,
    check_format,
    code_bytes,
    group_count,
)

CHUNK_BYTES = 1 << 20  # of the source, converted and copied at a time


@dataclass(frozen=True)
class LazyGroupQuantized:
    """A (rows, cols) group-quantized weight read on demand (see the module's docstring).

    ``read_rows(start, stop)``: those source rows as `GroupQuantized`, the caller's own
    memory; ``release_rows(start, stop)``: called once they are copied. ``destination``:
    where each source row goes (a permutation of the rows, as rotary rows are undone), or
    None for in order."""

    rows: int
    cols: int
    bits: int
    group_size: int
    row_bytes: int  # of the source, for the chunks' size
    read_rows: Callable[[int, int], GroupQuantized]
    release_rows: Callable[[int, int], None] | None = None
    destination: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def groups(self) -> int:
        return group_count(self.cols, self.group_size)

    def check(self, name: str) -> None:
        """ValueError where the format is not one a layer holds (as `GroupQuantized.check`)."""
        check_format(name, self.bits, self.group_size)
        if self.cols <= 0 or self.rows <= 0:
            raise ValueError(f"tensor {name}: shape {self.shape} is empty")
        if self.destination is not None and tuple(self.destination.shape) != (self.rows,):
            raise ValueError(f"tensor {name}: {self.destination.shape} destinations, not rows")

    def moved_rows(self, destination: torch.Tensor) -> LazyGroupQuantized:
        """The same weight with source row i at row ``destination[i]`` (a permutation)."""
        if self.destination is not None:
            destination = destination[self.destination]
        return replace(self, destination=destination)

    def chunks(
        self, max_values: int | None = None
    ) -> Iterator[tuple[slice | torch.Tensor, GroupQuantized]]:
        """(destination rows, their weight) a chunk at a time: about CHUNK_BYTES of the
        source, fewer rows where ``max_values`` (rows times columns) is smaller. Each
        chunk's source pages are released when the next is asked for, or at the end."""
        step = max(1, CHUNK_BYTES // max(1, self.row_bytes))
        if max_values is not None:
            step = min(step, max(1, max_values // self.cols))
        for start in range(0, self.rows, step):
            stop = min(start + step, self.rows)
            part = self.read_rows(start, stop)
            if part.shape != (stop - start, self.cols) or part.bits != self.bits:
                raise ValueError(f"rows {start}:{stop} read as {part.shape}, {part.bits}-bit")
            where = slice(start, stop) if self.destination is None else self.destination[start:stop]
            yield where, part
            if self.release_rows is not None:
                self.release_rows(start, stop)

    def fill(self, target: GroupQuantized) -> None:
        """Copy every row into ``target`` (the same shape and format), chunk by chunk; the
        chunks are read on the CPU, the target may be on another device."""
        device = target.codes.device
        for where, part in self.chunks():
            if isinstance(where, torch.Tensor):
                where = where.to(device)
            target.codes[where] = part.codes.to(device)
            target.scale[where] = part.scale.to(device)
            target.offset[where] = part.offset.to(device)

    def materialize(self) -> GroupQuantized:
        """The whole weight in memory (what a reader that is not lazy gives)."""
        whole = GroupQuantized(
            torch.empty(self.rows, code_bytes(self.cols, self.bits), dtype=torch.uint8),
            torch.empty(self.rows, self.groups, dtype=torch.float16),
            torch.empty(self.rows, self.groups, dtype=torch.float16),
            self.bits, self.group_size, self.cols,
        )  # fmt: skip
        self.fill(whole)
        return whole


AnyGroupQuantized = GroupQuantized | LazyGroupQuantized

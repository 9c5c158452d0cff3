"""Lay a recording's scratch out again in one buffer, reusing bytes once their last reader ran.

A recorded pass (recording.py) keeps every tensor it allocated, at the address it had, so
that a replay finds each where the calls point: for a decode step of SmolLM2 that is some
300 tensors, half a megabyte a row, though most live from one kernel call to the next. A
replay makes the same calls in the same order, so a tensor's bytes are free again once the
last call that names it has run. `compact` finds each scratch storage's first and last call
(a torch op naming one of its tensors, or a C kernel given a pointer into it), places the
storages in one buffer so that no two whose spans of calls overlap share a byte (largest
first, each at the lowest offset free over its span), and rewrites the calls' pointers and
tensors to point there. Storages the caller reads after a replay (the pass's result) live to
the end.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeGuard

import torch
from torch.utils._pytree import tree_flatten, tree_map

from inference.kernels.cpu.recording import KernelCall, Recording, rerun

ALIGN = 64  # bytes: a cache line, and every dtype's alignment


@dataclass
class _Span:
    """One scratch storage: where it was, what it needs, and where it goes."""

    address: int
    nbytes: int
    first: int  # the first and last call that name it
    last: int
    offset: int = -1  # in the buffer


def compact(recording: Recording, results: list[torch.Tensor]) -> list[torch.Tensor]:
    """Move ``recording``'s scratch into one buffer (in place); ``results`` (tensors the
    caller reads after each replay) as they are found there from now on."""
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage()
        for t in recording.scratch
        if _strided(t)
    }
    starts = sorted(address for address in storages if storages[address].nbytes() > 0)
    ends = [address + storages[address].nbytes() for address in starts]
    spans: dict[int, _Span] = {}

    def note(pointer: int, index: int) -> None:
        at = bisect.bisect_right(starts, pointer) - 1
        if at < 0 or pointer >= ends[at]:
            return  # not scratch: a weight, the KV pools, the graph's inputs
        span = spans.get(starts[at])
        if span is None:
            spans[starts[at]] = _Span(starts[at], ends[at] - starts[at], index, index)
        else:
            span.last = index

    for index, (function, args) in enumerate(recording.calls):
        for pointer in _pointers(function, args):
            note(pointer, index)
    for result in results:
        note(result.untyped_storage().data_ptr(), len(recording.calls))
        if result.untyped_storage().data_ptr() not in spans:
            raise ValueError("a result must be a tensor the recorded pass allocated")
    size = _place(list(spans.values()))
    arena = torch.empty(size + ALIGN, dtype=torch.uint8)
    base = -arena.data_ptr() % ALIGN  # the first aligned byte
    moved = {span.address: span for span in spans.values()}

    def address(pointer: int) -> int:
        at = bisect.bisect_right(starts, pointer) - 1
        span = moved.get(starts[at]) if at >= 0 and pointer < ends[at] else None
        if span is None:
            return pointer
        return arena.data_ptr() + base + span.offset + (pointer - span.address)

    memo: dict[int, torch.Tensor] = {}

    def tensor(t: Any) -> Any:
        if not _strided(t) or t.untyped_storage().data_ptr() not in moved:
            return t
        if id(t) not in memo:
            span = moved[t.untyped_storage().data_ptr()]
            at = base + span.offset
            assert at % t.element_size() == 0
            memo[id(t)] = torch.empty(0, dtype=t.dtype).set_(
                arena.untyped_storage(),
                at // t.element_size() + t.storage_offset(),
                t.shape,
                t.stride(),
            )
        return memo[id(t)]

    calls: list[KernelCall] = []
    for function, args in recording.calls:
        if _is_rerun(function):
            func, op_args, op_kwargs, out = function.args
            out = type(out)(map(tensor, out)) if isinstance(out, (list, tuple)) else tensor(out)
            op_args, op_kwargs = tree_map(tensor, op_args), tree_map(tensor, op_kwargs)
            calls.append((partial(rerun, func, op_args, op_kwargs, out), args))
        else:
            calls.append((function, tuple(_moved_arg(a, address) for a in args)))
    moved_results = [tensor(result) for result in results]
    recording.calls[:] = calls
    recording.scratch = [arena]
    recording.scratch_bytes = arena.untyped_storage().nbytes()
    return moved_results


def _is_rerun(function: Any) -> TypeGuard[partial[None]]:
    """A torch op's call (recording.py notes those as a partial of `rerun`)."""
    return isinstance(function, partial) and function.func is rerun


def _pointers(function: Any, args: tuple[Any, ...]) -> list[int]:
    """The addresses a call reads or writes through: its tensors' storages for a torch op,
    its integer arguments (pointers among them) for a C kernel."""
    if _is_rerun(function):
        leaves = tree_flatten(function.args)[0]
        return [t.untyped_storage().data_ptr() for t in leaves if _strided(t)]
    return [a for a in args if isinstance(a, int) and not isinstance(a, bool) and a > 0]


def _strided(t: Any) -> bool:
    """A tensor with a storage (not an opaque one, such as a weight prepacked for oneDNN)."""
    return isinstance(t, torch.Tensor) and t.layout == torch.strided


def _moved_arg(arg: Any, address: Any) -> Any:
    if isinstance(arg, int) and not isinstance(arg, bool) and arg > 0:
        return address(arg)
    return arg


def _place(spans: list[_Span]) -> int:
    """Give each span an aligned offset, no two whose calls overlap sharing a byte; the
    buffer's size. Largest first, each at the lowest offset free over its calls."""
    placed: list[_Span] = []
    for span in sorted(spans, key=lambda s: (-s.nbytes, s.first)):
        busy = sorted(
            (other.offset, other.offset + other.nbytes)
            for other in placed
            if other.first <= span.last and span.first <= other.last
        )
        offset = 0
        for lo, hi in busy:
            if offset + span.nbytes <= lo:
                break
            offset = max(offset, -(-hi // ALIGN) * ALIGN)
        span.offset = offset
        placed.append(span)
    return max((s.offset + s.nbytes for s in placed), default=0)

"""What this machine can do at best, measured on the spot: memory bandwidth and matmul peak.

`bench profile` prints these beside the engine's step times, so that each step reads
against the bound it is under (a batch-1 decode step reads every weight once: bandwidth;
a prefill chunk multiplies them by hundreds of tokens: compute). The probes use torch's own
kernels with its thread pool, as the engine does; each is the best of a few runs, so a
burst of someone else's work on a shared machine lowers the number less.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class MachinePeak:
    read_gb_s: float  # summing a buffer far larger than the caches
    copy_gb_s: float  # copying it (bytes read plus bytes written)
    matmul_tflops: dict[str, float]  # square matmuls, per dtype
    threads: int

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _best(run: Any, repeat: int) -> float:
    run()  # the first call pays page faults and kernel selection
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def probe(buffer_mib: int = 512, matmul_size: int = 2048, repeat: int = 5) -> MachinePeak:
    """Measure on this CPU. ``buffer_mib`` must dwarf the last-level cache."""
    if buffer_mib < 64 or matmul_size < 256 or repeat < 1:
        raise ValueError("buffer_mib must be >= 64, matmul_size >= 256, repeat >= 1")
    with torch.inference_mode():
        read_gb_s, copy_gb_s = _bandwidth(buffer_mib * 2**20 // 4, repeat)
        tflops = {}
        for dtype in (torch.bfloat16, torch.float32):
            a = torch.randn(matmul_size, matmul_size).to(dtype)
            b = torch.randn(matmul_size, matmul_size).to(dtype)
            seconds = _best(lambda a=a, b=b: torch.mm(a, b), max(1, repeat // 2))
            tflops[str(dtype).removeprefix("torch.")] = round(
                2 * matmul_size**3 / seconds / 1e12, 3
            )
    return MachinePeak(
        read_gb_s=read_gb_s,
        copy_gb_s=copy_gb_s,
        matmul_tflops=tflops,
        threads=torch.get_num_threads(),
    )


def _bandwidth(numel: int, repeat: int) -> tuple[float, float]:
    """GB/s summing a float32 buffer of ``numel`` elements, and copying it (read + write)."""
    src = torch.ones(numel, dtype=torch.float32)
    dst = torch.empty_like(src)
    nbytes = numel * 4
    read_s = _best(lambda: src.sum(), repeat)
    copy_s = _best(lambda: dst.copy_(src), repeat)
    return round(nbytes / read_s / 1e9, 2), round(2 * nbytes / copy_s / 1e9, 2)

"""Times prefill-chunk attention on the CPU: the C chunk kernel (paged_prefill.h) against
torch's SDPA path and, for chunks after a shared cached prefix, against the cascade. JSON
on stdout, milliseconds a call (best of ``--repeats`` runs of ``--calls`` calls, the paths
taking turns), SmolLM2-135M's heads (9 query heads over 3 KV heads of 64); queries and
pool in bf16 (the bf16 dot products), float32, or bf16 queries over an FP8 pool.

    PYTHONPATH=. .venv/bin/python scripts/bench_prefill_attention.py --threads 2 [--pool f32]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from inference.bench.machine import cpu_model  # noqa: E402 (after the path)
from inference.kernels.attention import TorchAttentionBackend, paged_layout  # noqa: E402
from inference.kernels.cpu.backend import CpuAttentionBackend  # noqa: E402
from inference.kernels.cpu.build import load_kv_store, load_paged_decode  # noqa: E402
from inference.kernels.kv_cache import FP8_KV_DTYPE, KVCache  # noqa: E402

HEADS, KV_HEADS, DIM, BLOCK = 9, 3, 64, 16
# --pool: (the queries' dtype, the pool's)
POOLS = {
    "bf16": (torch.bfloat16, torch.bfloat16),
    "f32": (torch.float32, torch.float32),
    "fp8": (torch.bfloat16, FP8_KV_DTYPE),
}
# (cached tokens, new tokens, chunks): fresh prompts, then chunks after a cached prefix
FRESH = [(0, 128, 4), (0, 512, 1), (0, 2048, 1), (1536, 512, 1), (2048, 256, 1)]
# chunks right after the same cached blocks (the cascade's case)
SHARED = [(1024, 128, 16), (2048, 64, 8), (2176, 35, 20), (256, 128, 4)]


def make_step(
    cached: int, new: int, chunks: int, shared: bool, pool: str, gen: torch.Generator
) -> tuple[torch.Tensor, KVCache, object]:
    """A step of ``chunks`` chunks of ``new`` tokens after ``cached`` ones (the same blocks
    for every chunk when ``shared``), over a pool of scattered blocks."""
    own = -(-(cached + new) // BLOCK) - (cached // BLOCK if shared else 0)
    prefix = cached // BLOCK if shared else 0
    num_blocks = prefix + own * chunks + 1
    shape = (num_blocks, BLOCK, KV_HEADS, DIM)
    q_dtype, kv_dtype = POOLS[pool]
    cache = KVCache(
        torch.randn(shape, generator=gen).to(kv_dtype),
        torch.randn(shape, generator=gen).to(kv_dtype),
    )
    order = torch.randperm(num_blocks, generator=gen).tolist()
    common = [order.pop() for _ in range(prefix)]
    tables, slots, starts, lens = [], [], [0], []
    for _ in range(chunks):
        table = common + [order.pop() for _ in range(own)]
        tables.append(table)
        slots += [table[p // BLOCK] * BLOCK + p % BLOCK for p in range(cached, cached + new)]
        starts.append(starts[-1] + new)
        lens.append(cached + new)
    layout = paged_layout(slots, starts, lens, tables, BLOCK)
    query = torch.randn(starts[-1], HEADS, DIM, generator=gen).to(q_dtype)
    return query, cache, layout


def best_ms(paths: dict[str, Callable[[], object]], calls: int, repeats: int) -> dict[str, float]:
    best = {name: float("inf") for name in paths}
    for run in paths.values():
        run()  # warm: the kernel built, the pools touched
    for _ in range(repeats):
        for name, run in paths.items():
            start = time.perf_counter()
            for _ in range(calls):
                run()
            best[name] = min(best[name], (time.perf_counter() - start) / calls)
    return {name: round(seconds * 1e3, 3) for name, seconds in best.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pool", choices=sorted(POOLS), default="bf16")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    # the kernel for bf16 too, where the backend would leave it to torch (AMX)
    kernel = CpuAttentionBackend(load_paged_decode(), load_kv_store(), bf16_prefill_in_torch=False)
    reference = TorchAttentionBackend()
    scale = DIM**-0.5
    rows = []
    for cached, new, chunks in FRESH:
        query, cache, layout = make_step(cached, new, chunks, False, args.pool, gen)
        meta_torch = reference.build_metadata(layout, torch.device("cpu"))  # type: ignore[arg-type]
        meta = kernel.build_metadata(layout, torch.device("cpu"))  # type: ignore[arg-type]
        times = best_ms(
            {
                "torch_sdpa": partial(reference.forward, query, cache, meta_torch, scale),
                "chunk_kernel": partial(kernel.forward, query, cache, meta, scale),
            },
            args.calls,
            args.repeats,
        )
        rows.append({"cached": cached, "new": new, "chunks": chunks, "shared": False, **times})
    for cached, new, chunks in SHARED:
        query, cache, layout = make_step(cached, new, chunks, True, args.pool, gen)
        meta = kernel.build_metadata(layout, torch.device("cpu"))  # type: ignore[arg-type]
        seqs = meta.base.prefill_seqs
        out = torch.empty_like(query)
        assert kernel._chunk_kernel_takes(query, cache, meta.base, out)
        times = best_ms(
            {
                "cascade": partial(_cascade, kernel, query, cache, meta, scale, out, seqs),
                "chunk_kernel": partial(kernel.prefill, query, cache, meta, scale, out, seqs),
            },
            args.calls,
            args.repeats,
        )
        rows.append({"cached": cached, "new": new, "chunks": chunks, "shared": True, **times})
    result = {
        "benchmark": "prefill-attention",
        "cpu": cpu_model(),
        "threads": args.threads,
        "heads": [HEADS, KV_HEADS, DIM],
        "pool": args.pool,
        "block_size": BLOCK,
        "unit": "milliseconds a call (one layer)",
        "rows": rows,
    }
    print(json.dumps(result, indent=2))
    return 0


def _cascade(kernel: CpuAttentionBackend, *args: object) -> None:
    """The cascade as it ran before the chunk kernel (the kernel set aside)."""
    kernel._prefill_kernel_built = False
    try:
        kernel.prefill(*args)  # type: ignore[arg-type]
    finally:
        kernel._prefill_kernel_built = True


if __name__ == "__main__":
    raise SystemExit(main())

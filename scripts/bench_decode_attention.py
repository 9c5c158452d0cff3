"""Times decode attention on the CPU (paged_decode.c) with a context split over the threads
against the same kernel on one thread (what a sequence got before the split). JSON on
stdout, microseconds a call (best of ``--repeats`` runs of ``--calls`` calls, the two
taking turns), SmolLM2-135M's heads (9 query heads over 3 KV heads of 64), one to three
decoding sequences of each context length; the pool as bench_prefill_attention.py's.

    PYTHONPATH=. .venv/bin/python scripts/bench_decode_attention.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench_prefill_attention import POOLS, best_ms, make_step  # noqa: E402 (a sibling script)

from inference.bench.machine import cpu_model  # noqa: E402 (after the path)
from inference.kernels.cpu.backend import CpuAttentionBackend  # noqa: E402
from inference.kernels.cpu.build import load_kv_store, load_paged_decode  # noqa: E402

CONTEXTS = [128, 256, 512, 1024, 2209, 4096]


def with_threads(threads: int, run: Callable[[], object]) -> Callable[[], object]:
    def call() -> object:
        torch.set_num_threads(threads)
        return run()

    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--pool", choices=sorted(POOLS), default="bf16")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    library = load_paged_decode()
    kernel = CpuAttentionBackend(library, load_kv_store())
    scale = 64**-0.5
    rows = []
    for batch in (1, 2, 3):
        for context in CONTEXTS:
            query, cache, layout = make_step(context - 1, 1, batch, False, args.pool, gen)
            meta = kernel.build_metadata(layout, torch.device("cpu"))  # type: ignore[arg-type]

            def run(query: torch.Tensor = query, cache: object = cache, meta: object = meta):
                return kernel.forward(query, cache, meta, scale)  # type: ignore[arg-type]

            times = best_ms(
                {"one_thread": with_threads(1, run), "split": with_threads(args.threads, run)},
                args.calls,
                args.repeats,
            )
            rows.append(
                {
                    "sequences": batch,
                    "context": context,
                    "parts": library.paged_decode_splits(batch, context, args.threads),
                    **{name: round(ms * 1e3, 1) for name, ms in times.items()},
                }
            )
    torch.set_num_threads(args.threads)
    print(
        json.dumps(
            {
                "benchmark": "decode attention, a context split over the threads",
                "cpu": cpu_model(),
                "threads": args.threads,
                "pool": args.pool,
                "unit": "microseconds a call (the backend's forward, Python included)",
                "rows": rows,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

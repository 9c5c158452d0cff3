"""Times the group-quantized kernels as a decode step calls them, one row of x: JSON on stdout.

`bench_quant_linear.py` calls one weight again and again, so it stays in cache; a decode
step reads each of its ~100 MB of weights once, from memory. Here the calls go through
replay.c (as a recorded step replays them, no Python between): each SmolLM2 layer shape
alone, repeated (`warm`), then 30 layers' distinct weights in a row (`layers`, 68 MB of
4-bit codes and scales), the 8-bit tied vocabulary alone (`vocab`, 32 MB), and both in
one run (`step`), each the best of ``--repeats``. ``--checkout`` times another checkout's
kernels (an A/B in turns: run it once per checkout, alternated); ``--interleaved`` the int8
path over the weights laid out 16 rows interleaved (quant_linear_q8_il.h), as a layer with
int8 activations binds them where VNNI runs it.

    PYTHONPATH=. .venv/bin/python scripts/bench_quant_stream.py [--exact] [--avx2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

SHAPES = [("qkv", 960, 576), ("o", 576, 576), ("gate_up", 3072, 576), ("down", 576, 1536)]
LAYERS = 30  # SmolLM2-135M's
VOCAB = (49152, 576)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--exact", action="store_true", help="float activations, not int8")
    parser.add_argument("--avx2", action="store_true", help="the kernels built -mno-avx512f")
    parser.add_argument(
        "--interleaved",
        action="store_true",
        help="int8: the weights 16 rows interleaved, as a layer takes them where it can",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(args.checkout))
    from inference.bench.machine import cpu_model
    from inference.kernels.cpu.quant_linear import INTERLEAVED_PATHS, load_quant_linear
    from inference.kernels.cpu.recording import _batched, _replay_library
    from inference.model.quant.group_math import quantize_groups

    torch.set_num_threads(args.threads)
    kernel = load_quant_linear(("-mno-avx512f",) if args.avx2 else ())
    replay_calls = _replay_library()
    if kernel is None or replay_calls is None or (not args.exact and kernel._int8 is None):
        raise SystemExit("the kernels do not build here")
    library = kernel._lib if args.exact else kernel._int8
    function = library.quant_linear if args.exact else library.quant_linear_q8
    function = getattr(function, "__wrapped__", function)  # the raw ctypes function
    interleaved = getattr(getattr(library, "quant_linear_q8_il", None), "__wrapped__", None)
    if args.interleaved and (args.exact or kernel.int8_path not in INTERLEAVED_PATHS):
        raise SystemExit("--interleaved: the int8 path with AVX512-VNNI or AVX2 only")
    alive: list[object] = []

    def call(rows: int, cols: int, bits: int = 4) -> tuple[Any, tuple[Any, ...]]:
        weight = quantize_groups(torch.randn(rows, cols), bits, 32)
        bound = kernel.bind(weight, interleave=args.interleaved)
        assert bound is not None
        run, arguments = function, bound.arguments
        if bound.interleaved_arguments is not None:
            run, arguments = interleaved, bound.interleaved_arguments
        x, out = torch.randn(1, cols).bfloat16(), torch.empty(1, rows, dtype=torch.bfloat16)
        alive.extend([bound, x, out])
        return run, (x.data_ptr(), cols, 1, 1, *arguments, out.data_ptr(), args.threads)

    def best_us(run: Callable[[], None], calls: int) -> float:
        run()
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
        return round(best / calls * 1e6, 1)

    warm = {name: best_us(_batched(replay_calls, [call(r, c)] * 200), 200) for name, r, c in SHAPES}
    layers = [call(r, c) for _ in range(LAYERS) for _, r, c in SHAPES]
    vocab = call(*VOCAB, bits=8)
    laid = ", weights interleaved" if args.interleaved else ""
    report = {
        "cpu": cpu_model(),
        "kernel": ("exact " + kernel.path) if args.exact else f"int8 {kernel.int8_path}{laid}",
        "threads": args.threads,
        "checkout": str(args.checkout),
        "unit": "microseconds",
        "warm_a_call": warm,
        "layers": best_us(_batched(replay_calls, layers), 1),
        "vocab": best_us(_batched(replay_calls, [vocab]), 1),
        "step": best_us(_batched(replay_calls, [*layers, vocab]), 1),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

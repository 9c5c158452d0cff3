"""Times the CPU's FP8 matmul (fp8_linear.c) against the layer's fallback: JSON on stdout.

For each of SmolLM2's linear shapes (per-row scales; the vocabulary with groups of 16, as
the FP8 embedding is stored) and each count of rows of x: the fused kernel as built for
this processor, the fallback (`fp8_dequantize` in C, then torch's matmul) and torch's
matmul over a weight in x's dtype (what a bf16 or float32 model runs; ``--dtype``). Where
the fallback overtakes the kernel is what `Fp8LinearKernel.max_rows` should say. Each time
is the best of ``--repeats`` runs of up to 50 calls (about 2 GFLOP), the paths taking turns
so that a busy neighbour hurts them alike.

    PYTHONPATH=. .venv/bin/python scripts/bench_fp8_linear.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from inference.bench.machine import cpu_model  # noqa: E402 (after the path)
from inference.kernels.cpu.layers import CpuLayerKernels, load_layer_kernels  # noqa: E402
from inference.model.quant.fp8_math import quantize_weight_fp8  # noqa: E402

# (name, rows, cols, group): SmolLM2-135M's linears and its FP8 vocabulary.
SHAPES = [
    ("qkv", 960, 576, None),
    ("gate_up", 3072, 576, None),
    ("down", 576, 1536, None),
    ("vocab", 49152, 576, 16),
]
ROWS = [1, 4, 16, 64, 256, 1024]


def best_ms(paths: dict[str, Callable[[], object]], calls: int, repeats: int) -> dict[str, float]:
    best = dict.fromkeys(paths, float("inf"))
    for _ in range(repeats):
        for name, call in paths.items():
            call()
            start = time.perf_counter()
            for _ in range(calls):
                call()
            best[name] = min(best[name], (time.perf_counter() - start) / calls * 1e3)
    return {name: round(ms, 4) for name, ms in best.items()}


def calls_for(rows: int, out: int, cols: int) -> int:
    """About 2 GFLOP of calls, 1 to 50."""
    return max(1, min(50, int(2e9 // (2 * rows * out * cols))))


def shape_paths(
    kernels: CpuLayerKernels, x: torch.Tensor, weight: torch.Tensor, group: int | None
) -> dict[str, Callable[[], object]]:
    """The fused kernel (unless past its limit), the fallback and a plain weight's matmul."""
    fp8 = kernels.fp8
    assert fp8 is not None
    q, scale = quantize_weight_fp8(weight, group)
    scale = scale.contiguous()
    plain_weight = weight.to(x.dtype)

    def fallback() -> torch.Tensor:
        whole = kernels.dequantize_fp8(q, scale, x.dtype, group)
        assert whole is not None
        return F.linear(x, whole)

    paths: dict[str, Callable[[], object]] = {
        f"fused {fp8.path}": lambda: fp8(x, q, scale, group),
        "dequantize + matmul": fallback,
        f"{str(x.dtype).removeprefix('torch.')} weight matmul": lambda: F.linear(x, plain_weight),
    }
    if fp8(x, q, scale, group) is None:
        del paths[f"fused {fp8.path}"]  # past this build's limit
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, nargs="*", default=ROWS)
    parser.add_argument(
        "--dtype",
        choices=["bfloat16", "float32"],
        default="bfloat16",
        help="the activations' (a float32 model's on a CPU without bf16)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    kernels = load_layer_kernels()
    if kernels is None or kernels.fp8 is None:
        raise SystemExit("no fused FP8 kernel on this processor")
    fp8 = kernels.fp8
    dtype = getattr(torch, args.dtype)
    results = []
    for name, out, cols, group in SHAPES:
        g = torch.Generator().manual_seed(out + cols)
        weight = torch.randn(out, cols, generator=g)
        for rows in args.rows:
            x = torch.randn(rows, cols, generator=g).to(dtype)
            paths = shape_paths(kernels, x, weight, group)
            ms = best_ms(paths, calls_for(rows, out, cols), args.repeats)
            results.append({"shape": name, "out": out, "in": cols, "group": group,
                            "rows": rows, "ms": ms})  # fmt: skip
            print(json.dumps(results[-1]), file=sys.stderr)
    print(json.dumps({
        "cpu": cpu_model(), "threads": args.threads, "path": fp8.path, "dtype": args.dtype,
        "torch": torch.__version__, "results": results,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()

"""Times the group-quantized CPU matmul's paths on SmolLM2's shapes: JSON on stdout.

At one row of x (a decode step): the exact kernel as built for this processor (AVX-512
where present) and forced to AVX2, the int8-activation kernel, and torch's bf16
`F.linear` over a float weight of the same shape. Then a sweep over the rows of x (a
decode batch) on every shape: the exact kernel, the int8 kernel as built here (over the
file's layout and, where it runs, 16 rows interleaved) and forced to AVX2, the layer's
fallback (dequantize once in C, one torch matmul, bf16 and float32) and bf16 `F.linear`
on a bf16 weight (what a bf16 model runs): where the fallback overtakes each kernel is
what `MAX_KERNEL_ROWS` and `int8_max_rows` should be. Each time is the best of
``--repeats`` runs of ``--calls`` calls, the paths taking turns so that a busy neighbour
hurts them alike.

    PYTHONPATH=. .venv/bin/python scripts/bench_quant_linear.py --threads 2
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
from inference.kernels.cpu.quant_linear import QuantLinearKernel, load_quant_linear  # noqa: E402
from inference.model.quant.group_math import GroupQuantized, quantize_groups  # noqa: E402

# (name, rows, cols): SmolLM2-135M's linears (hidden 576, 9 query and 3 KV heads of 64).
SHAPES = [
    ("qkv", 960, 576),
    ("o", 576, 576),
    ("gate_up", 3072, 576),
    ("down", 576, 1536),
    ("vocab", 49152, 576),
]
SWEEP_ROWS = [1, 4, 8, 16, 32, 64, 128]


Timed = dict[str, Callable[[], object]]


def one_row_paths(
    native: QuantLinearKernel,
    avx2: QuantLinearKernel,
    x: torch.Tensor,
    weight: GroupQuantized,
    bf16_weight: torch.Tensor,
) -> Timed:
    return {
        native.path: lambda: native.matmul(x, weight),
        f"{avx2.path} (forced)": lambda: avx2.matmul(x, weight),
        f"int8 {native.int8_path}": lambda: native.matmul_int8(x, weight),
        "bf16 F.linear": lambda: F.linear(x.bfloat16(), bf16_weight),  # x's cast included
    }


def sweep_paths(
    native: QuantLinearKernel,
    avx2: QuantLinearKernel,
    x: torch.Tensor,
    weight: GroupQuantized,
    bf16_weight: torch.Tensor,
) -> Timed:
    """The kernels, the layer's fallback for many rows (a float32 or bf16 model's), and a
    bf16 model's own matmul; x is bf16, as served."""

    def dequantized(dtype: torch.dtype) -> torch.Tensor:
        whole = native.dequantize(weight, dtype)
        if whole is None:
            raise SystemExit("the kernel did not dequantize the weight")
        return F.linear(x.to(dtype), whole)

    interleaved = native.bind(weight, interleave=True) if native.can_interleave(weight) else None
    laid: Timed = {}
    if interleaved is not None:  # bound once, as a layer binds it: the copy is not timed
        laid[f"int8 {native.int8_path} interleaved"] = lambda: native.matmul_bound(
            x, interleaved, int8=True
        )
    return {
        "exact": lambda: native.matmul(x, weight),
        f"int8 {native.int8_path}": lambda: native.matmul_int8(x, weight),
        **laid,
        f"int8 {avx2.int8_path} (forced)": lambda: avx2.matmul_int8(x, weight),
        "dequantize+matmul bf16": lambda: dequantized(torch.bfloat16),
        "dequantize+matmul f32": lambda: dequantized(torch.float32),
        "bf16 F.linear": lambda: F.linear(x, bf16_weight),
    }


def best_of(functions: Timed, calls: int, repeats: int) -> dict[str, float]:
    """Microseconds a call, the best of `repeats`, the functions taking turns."""
    best = dict.fromkeys(functions, float("inf"))
    for function in functions.values():
        function()  # warm: caches, pages, the thread pool
    for _ in range(repeats):
        for name, function in functions.items():
            start = time.perf_counter()
            for _ in range(calls):
                function()
            best[name] = min(best[name], (time.perf_counter() - start) / calls * 1e6)
    return {name: round(us, 1) for name, us in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--group-size", type=int, default=32)
    parser.add_argument("--shapes", nargs="*", default=[name for name, _, _ in SHAPES])
    parser.add_argument("--no-one-row", action="store_true", help="only the row sweep")
    parser.add_argument("--no-sweep", action="store_true", help="only the one-row times")
    parser.add_argument("--sweep-bits", type=int, nargs="*", default=[4, 8])
    parser.add_argument("--rows", type=int, nargs="*", default=SWEEP_ROWS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    native, avx2 = load_quant_linear(), load_quant_linear(("-mno-avx512f",))
    if native is None or avx2 is None:
        raise SystemExit("the kernel does not build here")
    report: dict[str, object] = {
        "cpu": cpu_model(),
        "threads": args.threads,
        "group_size": args.group_size,
        "paths": {"native": native.path, "int8": native.int8_path, "forced": avx2.path},
        "unit": "microseconds a call",
    }
    torch.manual_seed(0)
    one_row = []
    selected = [shape for shape in SHAPES if shape[0] in args.shapes]
    for name, rows, cols in [] if args.no_one_row else selected:
        dense = torch.randn(rows, cols)
        bf16_weight, x = dense.bfloat16(), torch.randn(1, cols)
        for bits in (4, 8):
            weight = quantize_groups(dense, bits, args.group_size)
            times = best_of(
                one_row_paths(native, avx2, x, weight, bf16_weight),
                args.calls,
                args.repeats,
            )
            one_row.append({"shape": name, "rows": rows, "cols": cols, "bits": bits, **times})
    if one_row:
        report["one_row"] = one_row
    sweep = []
    for name, rows, cols in [] if args.no_sweep else selected:
        dense = torch.randn(rows, cols)
        bf16_weight = dense.bfloat16()
        for bits in args.sweep_bits:
            weight = quantize_groups(dense, bits, args.group_size)
            for m in args.rows:
                x = torch.randn(m, cols).bfloat16()
                calls = max(2, args.calls // 4) if rows * m < 1 << 20 else 2
                times = best_of(
                    sweep_paths(native, avx2, x, weight, bf16_weight), calls, args.repeats
                )
                sweep.append({"shape": name, "bits": bits, "m": m, **times})
    if sweep:
        report["rows_sweep_bf16_x"] = sweep
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

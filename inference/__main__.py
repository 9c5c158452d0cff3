"""`python -m inference serve ...` (the worker) and `python -m inference bench ...`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from inference.openmp import configure_openmp_waiting

# The worker and the benchmarks: before anything here imports torch (see inference/openmp.py).
configure_openmp_waiting()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inference")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from inference.server.cli import add_arguments as add_serve

    add_serve(commands.add_parser("serve", help="the OpenAI-compatible worker"))
    bench = commands.add_parser("bench", help="benchmarks that print JSON")
    which = bench.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")

    from inference.bench.throughput import add_arguments as add_throughput

    add_throughput(which.add_parser("throughput", help="offline throughput vs transformers"))
    from inference.bench.serve import add_arguments as add_bench_serve

    add_bench_serve(which.add_parser("serve", help="online latency against a running worker"))
    from inference.bench.fp8_accuracy import add_arguments as add_fp8_accuracy

    add_fp8_accuracy(which.add_parser("fp8-accuracy", help="FP8 weights' predictions vs bf16"))
    from inference.bench.int8_accuracy import add_arguments as add_int8_accuracy

    add_int8_accuracy(
        which.add_parser("int8-accuracy", help="int8 activations' predictions vs float")
    )
    from inference.bench.profile import add_arguments as add_profile

    add_profile(which.add_parser("profile", help="where a step's time goes, beside the bound"))

    from inference.bench.load_memory import add_arguments as add_load_memory

    add_load_memory(
        which.add_parser("load-memory", help="a GGUF load's peak memory over the model it holds")
    )
    from inference.bench.startup import add_arguments as add_startup

    add_startup(which.add_parser("startup", help="a worker's start-up time, phase by phase"))
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (ValueError, FileNotFoundError) as exc:
        print(f"python -m inference: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

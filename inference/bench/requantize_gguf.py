"""Write a GGUF file's matrices again in another block type, for the benchmarks that
compare quantizations of one model (`bench throughput --quantization gguf` on Q8_0 and
Q4_1 of SmolLM2, whose package ships Q4_1 only).

    python -m inference.bench.requantize_gguf IN.gguf OUT.gguf --type Q8_0

Every 2-D tensor whose columns are whole 32-value blocks is dequantized (gguf's own
reader) and quantized again (gguf's own writer); the rest, and all metadata, are copied as
they are. Requantizing a 4-bit file to 8 bits adds no information: it gives the 8-bit
file's speed and memory, with (almost) the 4-bit file's accuracy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, Keys
from gguf.quants import dequantize, quantize

TARGETS = {"Q8_0": GGMLQuantizationType.Q8_0, "Q4_0": GGMLQuantizationType.Q4_0}
BLOCK = 32


def requantize(source: Path, target: Path, qtype: GGMLQuantizationType) -> int:
    """Write ``target``; returns how many tensors were requantized."""
    reader = GGUFReader(source)
    arch = str(reader.fields[Keys.General.ARCHITECTURE].contents())
    writer = GGUFWriter(target, arch)
    for field in reader.fields.values():
        if field.name == Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        value_type = field.types[0]
        sub = field.types[-1] if value_type == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub)
    changed = 0
    for tensor in reader.tensors:
        cols = int(tensor.shape[0])
        if len(tensor.shape) == 2 and cols % BLOCK == 0:
            values = dequantize(tensor.data, GGMLQuantizationType(tensor.tensor_type))
            data, kind = quantize(np.asarray(values, dtype=np.float32), qtype), qtype
            changed += 1
        else:
            data, kind = np.asarray(tensor.data), GGMLQuantizationType(tensor.tensor_type)
        writer.add_tensor(tensor.name, data, raw_shape=data.shape, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inference.bench.requantize_gguf")
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--type", choices=sorted(TARGETS), default="Q8_0")
    args = parser.parse_args(argv)
    if not args.source.is_file():
        parser.error(f"{args.source} is not a file")
    if args.target.exists():
        parser.error(f"{args.target} exists; give a new path")
    changed = requantize(args.source, args.target, TARGETS[args.type])
    print(f"{args.target}: {changed} tensors written as {args.type}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

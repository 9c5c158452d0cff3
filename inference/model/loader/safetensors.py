"""Reading .safetensors files with checks that turn damage into clear ValueErrors.

The header is validated by hand first (length, JSON, offsets inside the file) so that a
truncated or corrupt file is reported by name instead of failing deep inside a reader.

Tensors are read with plain file reads into their own buffers, not through a memory map:
a mapped file's pages count in the process's memory as they are touched and stay until the
file is closed, so a mapped load would peak at the model plus its whole checkpoint (551 MB
for SmolLM2 in bf16, whose model is 269 MB). Read, it peaks at about the model plus one
tensor.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from io import FileIO
from pathlib import Path
from typing import Any

import torch

HEADER_LENGTH_BYTES = 8
MAX_HEADER_BYTES = 100 << 20
DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "I64": torch.int64,
    "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}  # fmt: skip


def read_header(path: Path) -> dict[str, dict[str, object]]:
    """Tensor name -> {"dtype", "shape", "data_offsets"}, after checking it fits the file."""
    return _read_header(path)[0]


def _read_header(path: Path) -> tuple[dict[str, dict[str, object]], int]:
    """The header and the byte where the tensors' data starts."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(HEADER_LENGTH_BYTES)
            if len(prefix) < HEADER_LENGTH_BYTES:
                raise ValueError(f"{path} is not a safetensors file (only {size} bytes)")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > min(size - HEADER_LENGTH_BYTES, MAX_HEADER_BYTES):
                raise ValueError(f"{path} is truncated or corrupt: bad header length")
            header = json.loads(f.read(header_len))
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValueError(f"{path} is corrupt: its header is not JSON") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path} is corrupt: its header is not a JSON object")
    header.pop("__metadata__", None)
    data_size = size - HEADER_LENGTH_BYTES - header_len
    for name, info in header.items():
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2):
            raise ValueError(f"{path} is corrupt: tensor {name} has no data_offsets")
        if not 0 <= offsets[0] <= offsets[1] <= data_size:
            raise ValueError(
                f"{path} is truncated: tensor {name} ends at byte {offsets[1]} of the data, "
                f"but the file holds {data_size}"
            )
    return header, HEADER_LENGTH_BYTES + header_len


def iter_safetensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) from one file, in header order, each read on demand."""
    header, start = _read_header(path)
    try:
        with path.open("rb", buffering=0) as f:
            for name, info in header.items():
                yield name, _read_tensor(f, path, name, info, start)
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err}") from None


def _read_tensor(
    f: FileIO, path: Path, name: str, info: dict[str, Any], start: int
) -> torch.Tensor:
    dtype = DTYPES.get(str(info.get("dtype")))
    shape = info.get("shape")
    if dtype is None:
        raise ValueError(f"{path}: tensor {name} has unsupported dtype {info.get('dtype')!r}")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise ValueError(f"{path} is corrupt: tensor {name} has shape {shape!r}")
    begin, end = info["data_offsets"]
    element = torch.empty((), dtype=dtype).element_size()
    if end - begin != math.prod(shape) * element:
        raise ValueError(
            f"{path} is corrupt: tensor {name} of shape {shape} holds {end - begin} bytes"
        )
    buffer = torch.empty(end - begin, dtype=torch.uint8)
    f.seek(start + begin)
    if f.readinto(buffer.numpy().data) != end - begin:
        raise ValueError(f"{path} is truncated: tensor {name} could not be read whole")
    return buffer.view(dtype).reshape(shape)


def count_tensors(path: Path) -> int:
    return len(read_header(path))

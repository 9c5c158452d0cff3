"""Reading .safetensors files with checks that turn damage into clear ValueErrors.

The header is validated by hand first (length, JSON, offsets inside the file) so that a
truncated or corrupt file is reported by name instead of failing deep inside a reader.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open

HEADER_LENGTH_BYTES = 8
MAX_HEADER_BYTES = 100 << 20


def read_header(path: Path) -> dict[str, dict[str, object]]:
    """Tensor name -> {"dtype", "shape", "data_offsets"}, after checking it fits the file."""
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
    return header


def iter_safetensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) from one file, in file order, each read on demand."""
    header = read_header(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            for name in header:
                yield name, f.get_tensor(name)
    except ValueError:
        raise
    except Exception as err:  # the reader's own errors (SafetensorError, ...)
        raise ValueError(f"cannot read {path}: {err}") from None


def count_tensors(path: Path) -> int:
    return len(read_header(path))

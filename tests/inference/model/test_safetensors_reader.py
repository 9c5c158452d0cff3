"""Safetensors files read tensor by tensor with plain file reads: every dtype and shape as
the safetensors library itself reads them, and damage reported by name."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from inference.model.loader.safetensors import DTYPES, iter_safetensors


def test_every_dtype_and_shape_reads_as_the_library_reads_it(tmp_path: Path) -> None:
    torch.manual_seed(0)
    tensors = {
        f"t.{name.lower()}": (torch.randn(3, 5, 2) * 40).to(dtype) for name, dtype in DTYPES.items()
    }
    tensors["scalar"] = torch.tensor(2.5)
    tensors["empty"] = torch.empty(0, 4, dtype=torch.bfloat16)
    tensors["row"] = torch.arange(7, dtype=torch.int64)
    path = tmp_path / "all.safetensors"
    save_file(tensors, path)
    read = dict(iter_safetensors(path))
    assert read.keys() == tensors.keys()
    with safe_open(str(path), framework="pt") as f:
        for name in tensors:
            want = f.get_tensor(name)
            got = read[name]
            assert got.dtype == want.dtype and got.shape == want.shape, name
            flat = (got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8))
            assert torch.equal(*flat), name


def _rewrite_header(path: Path, change: dict[str, object]) -> None:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header["w"].update(change)
    header["__metadata__"]["pad"] = ""  # room for the change; spaces fill the rest
    encoded = json.dumps(header, separators=(",", ":")).encode().ljust(length)
    assert len(encoded) == length
    path.write_bytes(data[:8] + encoded + data[8 + length :])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dtype": "C64"}, "unsupported dtype 'C64'"),
        ({"shape": [4, 5]}, "holds 24 bytes"),
        ({"shape": [-2, -3]}, "has shape"),
        ({"shape": "2x3"}, "has shape"),
    ],
)
def test_a_damaged_header_is_named(tmp_path: Path, change: dict[str, object], message: str) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"w": torch.zeros(2, 3)}, path, metadata={"pad": " " * 64})
    _rewrite_header(path, change)
    with pytest.raises(ValueError, match=message):
        dict(iter_safetensors(path))

"""Hugging Face checkpoint directories: config.json plus one or more safetensors files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from inference.model.loader.safetensors import count_tensors, iter_safetensors

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read {path}: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


def read_config(directory: Path) -> dict[str, Any]:
    if not directory.is_dir():
        raise ValueError(f"{directory} is not a checkpoint directory")
    return read_json(directory / "config.json")


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files of a checkpoint: the single file, or every shard of the index."""
    index_path = directory / INDEX_FILE
    if index_path.exists():
        weight_map = read_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{index_path} has no weight_map")
        files = [directory / name for name in dict.fromkeys(weight_map.values())]
    elif (directory / SINGLE_FILE).exists():
        files = [directory / SINGLE_FILE]
    else:
        raise ValueError(f"{directory} has neither {SINGLE_FILE} nor {INDEX_FILE}")
    for path in files:
        if not path.is_file():
            raise ValueError(f"checkpoint file {path} is missing")
    return files


def checkpoint_dtype(config: dict[str, Any]) -> torch.dtype:
    """The dtype the checkpoint declares (transformers 5 `dtype`, older `torch_dtype`)."""
    name = config.get("dtype") or config.get("torch_dtype") or "float32"
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"config.json declares unknown dtype {name!r}")
    return dtype


class HFCheckpoint:
    """Tensors of a checkpoint directory, validated up front, read lazily."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.config = read_config(directory)
        self.files = weight_files(directory)
        # Reading every header now reports a damaged shard before any weight is loaded.
        self.num_tensors = sum(count_tensors(path) for path in self.files)

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        for path in self.files:
            yield from iter_safetensors(path)

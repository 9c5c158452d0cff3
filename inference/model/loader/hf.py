"""Hugging Face checkpoint directories: config.json plus one or more safetensors files.

A GPTQ/AWQ format declared in quantize_config.json / quant_config.json (older AutoGPTQ and
AutoAWQ) is read into the config's ``quantization_config`` here (quantize_config.py), so
every reader of the config sees it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from inference.model.loader.quantize_config import LEGACY_FILES, check_base_name, merge_legacy_files
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
    config = read_json(directory / "config.json")
    legacy = {
        name: read_json(directory / name) for name in LEGACY_FILES if (directory / name).exists()
    }
    return merge_legacy_files(config, legacy)


def weights_base_names(config: dict[str, Any]) -> tuple[str, ...]:
    """Base names the weights may be saved under, in the order tried: AutoGPTQ names them
    by ``model_file_base_name``, or else ``gptq_model-{bits}bit-{group_size}g``."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict) or quant.get("quant_method") != "gptq":
        return ("model",)
    base = quant.get("model_file_base_name")
    named = [check_base_name(base, "quantization_config")] if base is not None else []
    default = f"gptq_model-{quant.get('bits')}bit-{quant.get('group_size', -1)}g"
    return tuple(dict.fromkeys([*named, "model", default]))


def weight_files(directory: Path, base_names: tuple[str, ...] = ("model",)) -> list[Path]:
    """The safetensors files of a checkpoint: the single file, or every shard of the index,
    under the first of ``base_names`` that has either."""
    for base in base_names:
        index_path = directory / f"{base}.safetensors.index.json"
        if index_path.exists():
            weight_map = read_json(index_path).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise ValueError(f"{index_path} has no weight_map")
            files = [directory / name for name in dict.fromkeys(weight_map.values())]
            break
        if (directory / f"{base}.safetensors").exists():
            files = [directory / f"{base}.safetensors"]
            break
    else:
        others = [base for base in base_names if base != "model"]
        tried = " or ".join(f"{base}.safetensors[.index.json]" for base in others)
        raise ValueError(
            f"{directory} has neither {SINGLE_FILE} nor {INDEX_FILE}"
            + (f" (nor {tried})" if tried else "")
        )
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
        self.files = weight_files(directory, weights_base_names(self.config))
        # Reading every header now reports a damaged shard before any weight is loaded.
        self.num_tensors = sum(count_tensors(path) for path in self.files)

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        for path in self.files:
            yield from iter_safetensors(path)

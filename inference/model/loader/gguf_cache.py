"""A GGUF model's prepared weights, kept as safetensors so that the next start maps them.

Loading a GGUF file costs seconds before the first token: the reader parses every
metadata field (the tokenizer's tens of thousands of strings one by one), then each tensor
is dequantized in numpy, its rotary rows unpermuted and copied into the fused layers.
None of that changes between starts, so the result is written once to
``<cache dir>/weights/`` (inference/cache_dir.py) as a safetensors file: every parameter
as the model holds it after loading (before FP8 quantization and the oneDNN prepack,
which are redone at each start), with the configuration and the tokenizer in the
header's metadata. The next start memory-maps it, and the GGUF file is not read at all.

The file is named by the model's path, the dtype asked for and the device type; inside,
a key says what it was built from: the GGUF file's size, modification time and a hash of
its first and last 8 MiB, and the version of the code that prepares weights (a hash of
inference/model's sources, with torch's and gguf's versions). A different key means a
stale file: it is rebuilt, over the old one. A file that cannot be read (truncated,
damaged, tampered with) is ignored with a warning and rebuilt; the cache never decides
whether a start succeeds. Files are written to a temporary name and renamed into place,
so a reader never sees half of one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from importlib import metadata as package_metadata
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from tokenizers import Tokenizer

import inference
from inference.cache_dir import private_subdir
from inference.model.arch import ArchConfig
from inference.model.llama import LlamaForCausalLM
from inference.model.loader import load_model, resolve_dtype
from inference.model.loader.gguf import GGUFCheckpoint, read_gguf
from inference.model.registry import model_class_for
from inference.startup import phase

log = logging.getLogger("inference.loader")

FORMAT = "enclave-prepared-weights/1"
MODEL_SOURCES = Path(inference.__file__).parent / "model"
SAMPLE_BYTES = 8 << 20  # hashed at each end of the GGUF file
# Free disk left after writing, at least: a cache must not fill the disk the database is on.
MIN_FREE_BYTES = 1 << 30
_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
_DTYPE_NAMES = {dtype: name for name, dtype in _DTYPES.items()}


@dataclass
class Prepared:
    """What the cache gives back: the loaded model and the GGUF's other parts."""

    model: LlamaForCausalLM
    arch: ArchConfig
    checkpoint: GGUFCheckpoint  # its tensors already consumed


def cache_file(cache_dir: Path, model_path: Path, dtype: str, device: torch.device) -> Path:
    """Where the prepared weights of ``model_path`` for ``dtype`` on ``device`` live."""
    where = hashlib.sha256(str(model_path.resolve()).encode()).hexdigest()[:12]
    return cache_dir / "weights" / f"{model_path.stem}-{where}-{dtype}-{device.type}.safetensors"


def source_key(model_path: Path) -> str:
    """The GGUF file's identity and the preparing code's version, as one hash."""
    stat = model_path.stat()
    digest = hashlib.sha256(f"{FORMAT}\n{stat.st_size}\n{stat.st_mtime_ns}\n".encode())
    with model_path.open("rb") as handle:
        digest.update(handle.read(SAMPLE_BYTES))
        handle.seek(max(0, stat.st_size - SAMPLE_BYTES))
        digest.update(handle.read(SAMPLE_BYTES))
    digest.update(_code_version().encode())
    return digest.hexdigest()


@cache
def _code_version() -> str:
    """What the prepared weights depend on besides the file: this package's loading code."""
    digest = hashlib.sha256()
    for source in sorted(MODEL_SOURCES.rglob("*.py")):
        digest.update(source.relative_to(MODEL_SOURCES).as_posix().encode())
        digest.update(source.read_bytes())
    versions = [inference.__version__, torch.__version__]
    for package in ("gguf", "numpy"):
        try:
            versions.append(package_metadata.version(package))
        except package_metadata.PackageNotFoundError:
            versions.append("none")
    digest.update(" ".join(versions).encode())
    return digest.hexdigest()


def load_gguf(
    model_path: Path,
    cache_dir: Path,
    *,
    dtype: str,
    device: torch.device,
    progress: bool = False,
) -> Prepared:
    """`load_model` for a GGUF file, through the cache in ``cache_dir`` (filled on a miss).

    No quantization: FP8 is applied by the caller after this (the cache holds the weights
    it starts from).
    """
    path = cache_file(cache_dir, model_path, dtype, device)
    with phase("weight_cache_load"):
        key = source_key(model_path)
        prepared = load_prepared(path, key, dtype, device)
    if prepared is not None:
        return prepared
    with phase("gguf_metadata"):
        checkpoint = read_gguf(model_path)
    with phase("weights"):
        model, arch = load_model(
            model_path, dtype=dtype, device=device, progress=progress, gguf=checkpoint
        )
    with phase("weight_cache_write"):
        save_prepared(path, key, model, checkpoint)
    return Prepared(model, arch, checkpoint)


def load_prepared(
    path: Path, key: str, dtype: str | torch.dtype, device: torch.device
) -> Prepared | None:
    """The model from the cache file ``path`` if it holds ``key``; None (logged) if not.

    ``dtype`` as `load_model` takes it ("auto" resolves against the cached configuration).
    """
    if not path.is_file():
        log.info("no prepared weights in %s yet: preparing them from the GGUF file", path)
        return None
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            meta = handle.metadata() or {}
            if meta.get("format") != FORMAT or meta.get("key") != key:
                log.info("the prepared weights in %s are stale: preparing them again", path)
                return None
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
        hf_config = json.loads(meta["hf_config"])
        checkpoint = GGUFCheckpoint(
            hf_config=hf_config,
            tensors=iter(()),
            num_tensors=0,
            tokenizer=Tokenizer.from_str(meta["tokenizer"]),
            tokenizer_config=json.loads(meta["tokenizer_config"]),
            generation_config=json.loads(meta["generation_config"]),
        )
        arch = ArchConfig.from_hf_config(hf_config)
        model = model_class_for(arch)(arch, resolve_dtype(dtype, hf_config, device), device)
        _adopt(model, tensors)
    except Exception as error:  # whatever is wrong with it, the GGUF file is still there
        log.warning("ignoring the prepared weights in %s (%s): preparing them again", path, error)
        return None
    log.info("loaded prepared weights from %s", path)
    return Prepared(model.eval(), arch, checkpoint)


def _adopt(model: LlamaForCausalLM, tensors: dict[str, torch.Tensor]) -> None:
    """Make ``tensors`` the model's parameters: on a CPU without a copy (they stay mapped)."""
    params = dict(model.named_parameters())
    if set(params) != set(tensors):
        missing = sorted(set(params) - set(tensors))[:3]
        extra = sorted(set(tensors) - set(params))[:3]
        raise ValueError(f"parameters do not match (missing {missing}, unexpected {extra})")
    for name, param in params.items():
        tensor = tensors[name]
        if tensor.shape != param.shape or tensor.dtype != param.dtype:
            raise ValueError(f"{name} is {tensor.dtype} {tuple(tensor.shape)}, not {param.dtype}")
        with torch.no_grad():
            if param.device.type == "cpu":
                param.data = tensor
            else:
                param.copy_(tensor)


def save_prepared(
    path: Path, key: str, model: LlamaForCausalLM, checkpoint: GGUFCheckpoint
) -> None:
    """Write the model's parameters and ``checkpoint``'s parts to ``path``, atomically.

    Any failure (no room, no permission) is logged and leaves no file behind.
    """
    params = {name: param.detach() for name, param in model.named_parameters()}
    meta = {
        "format": FORMAT,
        "key": key,
        "hf_config": json.dumps(checkpoint.hf_config),
        "tokenizer": checkpoint.tokenizer.to_str(),
        "tokenizer_config": json.dumps(checkpoint.tokenizer_config),
        "generation_config": json.dumps(checkpoint.generation_config),
    }
    try:
        folder = private_subdir(path.parent.parent, path.parent.name)
        needed = sum(p.numel() * p.element_size() for p in params.values())
        free = shutil.disk_usage(folder).free
        if free - needed < MIN_FREE_BYTES:
            log.warning(
                "not caching the prepared weights (%d MB) in %s: only %d MB free",
                needed >> 20,
                folder,
                free >> 20,
            )
            return
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
        try:
            with os.fdopen(handle, "wb") as output:
                write_safetensors(output, params, meta)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except (OSError, ValueError, RuntimeError) as error:
        log.warning("could not cache the prepared weights in %s: %s", path, error)
        return
    log.info("cached the prepared weights in %s (%d MB)", path, needed >> 20)


def write_safetensors(output: Any, tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    """The safetensors format, streamed tensor by tensor (no second copy of the weights in
    memory, which the library's ``save_file`` would make). Wider dtypes come first, so
    that every tensor's data starts aligned to its element size."""
    names = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header: dict[str, Any] = {"__metadata__": meta}
    offset = 0
    for name in names:
        tensor = tensors[name]
        if tensor.dtype not in _DTYPE_NAMES:
            raise ValueError(f"cannot cache {name}: {tensor.dtype}")
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _DTYPE_NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    output.write(len(encoded).to_bytes(8, "little"))
    output.write(encoded)
    for name in names:
        flat = tensors[name].detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        output.write(flat.numpy().data)
    output.flush()
    os.fsync(output.fileno())

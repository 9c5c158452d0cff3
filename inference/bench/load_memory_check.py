"""Peak memory while a model loads, for each way of storing its weights: the GPU check's
proof that FP8 (and a GGUF file kept quantized) never passes through the bf16 model.

On CUDA the reading is ``torch.cuda.max_memory_allocated`` over `load_model` (reset just
before); on a Linux CPU, the growth of the process's high-water mark (VmHWM, reset through
/proc/self/clear_refs). ``weights``: the bytes the loaded model holds.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from inference.bench.machine import process_status_bytes

MIB = 1 << 20


def load_memory(path: str, device: Any) -> dict[str, Any]:
    """{setting: {peak_mib, weights_mib}} for bf16, FP8 and (for a GGUF file) the file's
    blocks kept; a setting that cannot load says why instead."""
    settings: list[str | None] = [None, "fp8"] + (["gguf"] if path.endswith(".gguf") else [])
    results: dict[str, Any] = {}
    for quantization in settings:
        try:
            results[quantization or "bf16"] = _one_load(path, device, quantization)
        except (ValueError, RuntimeError, OSError) as error:
            results[quantization or "bf16"] = {"error": f"{type(error).__name__}: {error}"}
    return results


def _one_load(path: str, device: Any, quantization: str | None) -> dict[str, Any]:
    import torch

    from inference.model.loader import load_model
    from inference.model.loader.memory import release_freed_memory

    release_freed_memory()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")
        before = _status("VmRSS")
    model, _ = load_model(path, dtype="bfloat16", device=device, progress=False,
                          quantization=quantization)  # fmt: skip
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - before
    else:
        peak = _status("VmHWM") - before
    weights = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    del model
    gc.collect()
    return {"peak_mib": round(peak / MIB, 1), "weights_mib": round(weights / MIB, 1)}


def _status(key: str) -> int:
    value = process_status_bytes(key)
    if value is None:
        raise OSError(f"/proc/self/status has no {key}")
    return value

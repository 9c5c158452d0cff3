"""`scripts/gpu_check.sh --device cpu --quick`: the GPU check's plumbing, run on the CPU.

The script is what a session with a GPU runs first, with minutes to spare, so a part
that fails must not take the others' results with it: here the SmolLM2 part is handed a
file that is not GGUF, and the tiny model's part and the kernel checks must still be in
the JSON, with the failure recorded beside them.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_a_failing_part_is_recorded_and_the_others_still_run(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"not a GGUF file")
    output = tmp_path / "gpu-check.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        ["bash", str(REPO / "scripts/gpu_check.sh"), "--device", "cpu", "--quick",
         "--models", "smollm2-135m,tiny", "--gguf", str(corrupt),
         "--workdir", str(tmp_path / "models"), "--output", str(output)],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]  # a part failed
    report = json.loads(output.read_text())
    assert report["complete"] is True and report["quick"] is True
    # The kernels ran under the interpreter and matched the torch path.
    assert [k["ok"] for k in report["kernels"]] == [True, True, True]
    assert report["kernels"][2]["case"].endswith("kv=fp8 d=16")
    group = report["group_quant_matmul"]  # two tiny interpreted cases, untimed on a CPU
    assert [c["ok"] for c in group["cases"]] == [True, True] and group["timings"] == []
    smollm2 = report["models"]["smollm2-135m"]
    for weights in ("bf16", "fp8"):
        assert "not a readable GGUF file" in smollm2[weights]["error"]
    for weights in ("bf16", "fp8", "gguf"):
        assert "not a readable GGUF file" in smollm2["load_memory"][weights]["error"]
    tiny = report["models"]["tiny"]
    for weights in ("bf16", "fp8"):
        assert "error" not in tiny[weights]
        assert set(tiny[weights]["decode_tokens_per_s"]) == {"1", "2"}
        assert tiny[weights]["prefill_tokens_per_s"] > 0
    loads = tiny["load_memory"]  # a random Llama directory: no GGUF setting
    assert set(loads) == {"bf16", "fp8"}
    assert loads["fp8"]["weights_mib"] < 0.7 * loads["bf16"]["weights_mib"]
    assert all(isinstance(loads[w]["peak_mib"], float) for w in loads)  # a tiny model's peak
    # FP8 weights are about half the bytes of bf16 ones.
    assert tiny["fp8"]["weight_bytes"] < 0.7 * tiny["bf16"]["weight_bytes"]
    assert "error: smollm2-135m bf16" in result.stderr

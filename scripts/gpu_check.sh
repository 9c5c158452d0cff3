#!/usr/bin/env bash
# On one GPU (an H200 takes a few minutes): the Triton kernels against the torch path
# (the group-quantized 4/8-bit matmul too, timed against torch's dequantize-then-matmul
# on SmolLM2's shapes; alone: python -m inference.bench.group_gemm_check), then decode
# tokens/s at batch 1, 32 and 128 for bf16 and fp8 weights, batch-1 HBM bandwidth and
# prefill tokens/s; JSON lands in docs/benchmarks/gpu-check-<date>.json.
# Without CUDA it stops at once with an error. `scripts/gpu_check.sh --device cpu --quick`
# runs the plumbing on a CPU. Other arguments: python -m inference.bench.gpu_check --help.
#
# Uses .venv/bin/python when there is one, else $PYTHON or python3 (a GPU machine's own
# torch). The engine imports `gguf`, `msgspec` and `llguidance`: where one is missing,
# wheels in .whl/ are installed to /tmp/site first (pip download --no-deps them into .whl/
# on a machine with PyPI; docs/engine.md has the command). A hard 8-minute limit keeps it
# from hanging.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=${PYTHON:-python3}; fi
if ! "$py" -c "import gguf, msgspec, llguidance" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec timeout --kill-after=10 "${GPU_CHECK_TIMEOUT:-480}" "$py" -m inference.bench.gpu_check "$@"

"""The embedded worker's environment: an allow-list, never the gateway's whole one.

The gateway's environment holds its secrets (ENCLAVE_SECRET_KEY, the database URL with its
password, the OIDC client secret, whatever else the host set); the worker needs none of
them, and a worker's crash dump, debug endpoint or log must not be able to show them. It
gets what a Python process on a GPU needs, the variables that tune CUDA, ROCm, PyTorch,
Triton and the thread pools, the names an operator adds (ENCLAVE_WORKER_ENV), and the
internal token. docs/workers-routing.md lists them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ALLOWED_NAMES = frozenset(
    {
        # The process itself: where programs, home, temporary files and caches are.
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TZ", "LANG", "LANGUAGE",
        "TMPDIR", "TEMP", "TMP", "XDG_CACHE_HOME", "LD_LIBRARY_PATH", "LD_PRELOAD",
        # Triton compiles a small C launcher per kernel with the system's compiler.
        "CC", "CXX", "LIBRARY_PATH", "CPATH",
        # Python: where the inference package and its environment are, and how it runs.
        "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
        "PYTHONPYCACHEPREFIX", "PYTHONFAULTHANDLER", "PYTHONMALLOC", "PYTHONWARNINGS",
        "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONHASHSEED", "VIRTUAL_ENV", "CONDA_PREFIX",
        # Tokenizers and Hugging Face caches (models load from local paths; no HF_TOKEN).
        "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
        "TOKENIZERS_PARALLELISM",
        # The worker's start-up caches (off, or another folder than <data dir>/cache).
        "INFERENCE_CACHE_DIR",
    }
)  # fmt: skip
ALLOWED_PREFIXES = (
    "LC_",  # locale
    "CUDA_",  # CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, CUDA_HOME, CUDA_MODULE_LOADING...
    "NVIDIA_",  # container runtimes: NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES
    "NCCL_",  # tensor parallel across the machine's GPUs
    "HIP_", "ROCR_", "HSA_", "ROCM_",  # ROCm: HIP_VISIBLE_DEVICES, HSA_OVERRIDE_GFX_VERSION
    "TORCH_", "PYTORCH_", "TORCHINDUCTOR_",  # PYTORCH_CUDA_ALLOC_CONF, TORCH_CUDA_ARCH_LIST
    "TRITON_",  # TRITON_CACHE_DIR, TRITON_PTXAS_PATH
    "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_",  # CPU thread pools: OMP_NUM_THREADS
)  # fmt: skip
# Never passed on, whatever the lists say: the gateway's own settings and secrets.
GATEWAY_PREFIX = "ENCLAVE_"


def worker_environment(
    parent: Mapping[str, str], token_variable: str, token: str, extra_names: Iterable[str] = ()
) -> dict[str, str]:
    """The variables of ``parent`` the worker may see, plus its token."""
    extra = frozenset(extra_names)
    kept = {
        name: value
        for name, value in parent.items()
        if not name.startswith(GATEWAY_PREFIX)
        and (name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES) or name in extra)
    }
    kept[token_variable] = token
    return kept

"""EngineConfig: what LLM(...) and `python -m inference serve` are configured with."""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
QUANTIZATIONS = ("fp8", "gguf", "gptq", "awq")  # as inference.model.quant.QUANTIZATIONS
KV_CACHE_DTYPES = ("auto", "fp8")
ATTENTION_BACKENDS = ("auto", "torch", "cpu", "triton")
SPECULATIVE_METHODS = ("ngram", "draft")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """One engine's settings. Validated here; sizes that need the model are derived later.

    ``kv_cache_memory_bytes`` sizes the KV pool directly; otherwise the pool takes
    ``kv_cache_memory_fraction`` of the device memory that is free once weights are loaded.
    ``quantization="fp8"`` keeps the decoder's linear weights in float8_e4m3fn (a checkpoint
    already in FP8 loads as FP8 regardless); ``quantization="gguf"`` keeps a GGUF file's
    quantized matrices (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 as they are, K-quants repacked; one rank
    only); a GPTQ or AWQ checkpoint loads as
    it is (one rank only), with ``quantization`` None or "gptq" / "awq" naming it;
    ``int8_activations`` multiplies group-quantized weights (gguf, gptq, awq) on the CPU
    with each row of activations quantized to int8 per block of 32 and integer dot
    products, as llama.cpp does: faster, but not the float matmul (its agreement is
    measured by ``bench int8-accuracy``); every step takes it, prompts too, except
    beside AMX, where steps of few rows (decode) do (docs/engine.md).
    ``single_thread_small_kernels`` runs the CPU kernels' small calls (a decode step's
    norms, rotary, KV writes) on the calling thread: faster beside other busy processes,
    slower alone on the cores (inference/kernels/cpu/threads.py).
    ``kv_cache_dtype="fp8"`` stores K and V in e4m3, twice the tokens in the same bytes
    ("auto": the model dtype).
    ``attention_backend="auto"`` runs the Triton kernels on CUDA and the C kernels on a CPU
    (the torch path where they cannot be built); ``enforce_eager`` turns off CUDA graphs
    for decode steps, and their CPU counterpart (engine/cpu_graphs.py).
    ``tensor_parallel_size=N`` splits heads and MLP over N processes (rank 0 is this one;
    see inference/parallel/), each with its own KV pool: the KV budget is per rank.
    ``speculative="ngram"`` turns on speculative decoding with the prompt-lookup proposer:
    up to ``num_speculative_tokens`` tokens per step, proposed where the sequence's last
    ``ngram_max`` .. ``ngram_min`` tokens occurred earlier in it (see ngram_proposer.py),
    and, given ``speculative_max_batch``, only in steps with at most that many sequences
    running (on a CPU a large batch is compute-bound, and verifying costs more than it
    saves). ``speculative="draft"`` proposes with ``draft_model`` instead (a smaller model
    with the target's tokenizer, run greedily by the same engine code; see
    draft_proposer.py), whose own KV pool holds ``draft_kv_cache_fraction`` of the target
    pool's tokens (the KV budget covers both pools).
    ``step_time_budget_ms`` plans each step to take about that long, prefill chunks sized
    by a cost model fitted to the steps that ran, decodes and short prefills first (see
    latency_policy.py); None: each step is filled up to ``max_num_batched_tokens``, best
    for offline throughput. The worker serves with 250 ms by default.
    """

    model: str
    tokenizer: str | None = None
    dtype: str = "auto"
    device: str = "auto"
    enable_prefix_caching: bool = True
    max_pinned_fraction: float = 0.5  # of the KV blocks, at most, held by pinned prefixes
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None  # default: max(2048, max_model_len)
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    kv_cache_memory_bytes: int | None = None
    kv_cache_memory_fraction: float | None = None  # default: 0.9 on CUDA, 0.1 on CPU
    quantization: str | None = None
    int8_activations: bool = False
    single_thread_small_kernels: bool = False
    kv_cache_dtype: str = "auto"
    attention_backend: str = "auto"
    enforce_eager: bool = False
    tensor_parallel_size: int = 1
    seed: int = 0
    progress: bool = True
    speculative: str | None = None
    num_speculative_tokens: int = 3
    ngram_max: int = 3
    ngram_min: int = 1
    speculative_max_batch: int | None = None  # speculate only while this many run, at most
    step_time_budget_ms: float | None = None  # None: the token budget alone
    draft_model: str | None = None  # with speculative="draft": HF directory or .gguf file
    draft_kv_cache_fraction: float = 1.0  # the draft pool's tokens, of the target pool's
    # The start-up caches' folder (inference/cache_dir.py): a GGUF's prepared weights and
    # the compiled C kernels; None: neither is read or written.
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.quantization is not None and self.quantization not in QUANTIZATIONS:
            raise ValueError(
                f"quantization must be None or one of {', '.join(QUANTIZATIONS)}, "
                f"got {self.quantization!r}"
            )
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(
                f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, "
                f"got {self.kv_cache_dtype!r}"
            )
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(
                f"attention_backend must be one of {', '.join(ATTENTION_BACKENDS)}, "
                f"got {self.attention_backend!r}"
            )
        if self.block_size not in (8, 16, 32, 64, 128):
            raise ValueError(f"block_size must be 8, 16, 32, 64 or 128, got {self.block_size}")
        if self.tensor_parallel_size < 1:
            raise ValueError(
                f"tensor_parallel_size must be at least 1, got {self.tensor_parallel_size}"
            )
        if self.quantization in ("gguf", "gptq", "awq") and self.tensor_parallel_size > 1:
            raise ValueError(f"quantization {self.quantization!r} runs on one rank; tensor "
                             "parallelism splits float weights only")  # fmt: skip
        if self.quantization == "gguf" and not self.model.endswith(".gguf"):
            raise ValueError(f"quantization 'gguf' needs a .gguf file, got {self.model!r}")
        if self.quantization in ("gptq", "awq") and self.model.endswith(".gguf"):
            raise ValueError(
                f"quantization {self.quantization!r} needs a {self.quantization.upper()} "
                f"checkpoint directory, got the GGUF file {self.model!r}"
            )
        if self.int8_activations:
            self._check_int8_activations()
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be at least 1, got {self.max_num_seqs}")
        for name in ("max_num_batched_tokens", "max_model_len", "kv_cache_memory_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive, got {value}")
        if not 0 <= self.max_pinned_fraction < 1:
            raise ValueError(
                f"max_pinned_fraction must be in [0, 1), got {self.max_pinned_fraction}"
            )
        if self.speculative is not None and self.speculative not in SPECULATIVE_METHODS:
            raise ValueError(
                f"speculative must be None or one of {', '.join(SPECULATIVE_METHODS)}, "
                f"got {self.speculative!r}"
            )
        if (self.speculative == "draft") != (self.draft_model is not None):
            raise ValueError(
                "speculative='draft' needs draft_model, and draft_model needs "
                f"speculative='draft' (got speculative={self.speculative!r})"
            )
        if not 0 < self.draft_kv_cache_fraction <= 1:
            raise ValueError(
                f"draft_kv_cache_fraction must be in (0, 1], got {self.draft_kv_cache_fraction}"
            )
        if not 1 <= self.num_speculative_tokens <= 16:
            raise ValueError(
                f"num_speculative_tokens must be in [1, 16], got {self.num_speculative_tokens}"
            )
        if self.speculative_max_batch is not None and self.speculative_max_batch < 1:
            raise ValueError(
                f"speculative_max_batch must be at least 1, got {self.speculative_max_batch}"
            )
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(
                f"need 1 <= ngram_min <= ngram_max, got {self.ngram_min} and {self.ngram_max}"
            )
        budget = self.step_time_budget_ms
        if budget is not None and not budget > 0:
            raise ValueError(f"step_time_budget_ms must be positive or None, got {budget}")
        fraction = self.kv_cache_memory_fraction
        if fraction is not None and not 0 < fraction <= 1:
            raise ValueError(f"kv_cache_memory_fraction must be in (0, 1], got {fraction}")

    def _check_int8_activations(self) -> None:
        """What the config alone tells: the model must keep group-quantized weights (a GGUF
        file with quantization 'gguf', or a GPTQ/AWQ directory) on a CPU. Whether a
        directory holds such weights is checked once it is loaded."""
        if self.quantization == "fp8":
            raise ValueError("int8_activations multiplies group-quantized weights (gguf, gptq, "
                             "awq); FP8 weights have their own kernel")  # fmt: skip
        if self.model.endswith(".gguf") and self.quantization != "gguf":
            raise ValueError("int8_activations needs quantization 'gguf' for a GGUF file "
                             "(otherwise its weights are dequantized at load)")  # fmt: skip
        if self.tensor_parallel_size > 1:
            raise ValueError("int8_activations runs on one rank, as group-quantized "
                             "weights do")  # fmt: skip
        if self.device == "cuda":
            raise ValueError("int8_activations runs on the CPU kernels; on CUDA the "
                             "group-quantized layers take the Triton kernel")  # fmt: skip

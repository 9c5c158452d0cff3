"""`python -m inference serve --model PATH ...`: one worker process, drained on SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from inference.cache_dir import ENV as CACHE_ENV
from inference.cache_dir import default_cache_dir
from inference.model.quant import QUANTIZATIONS
from inference.secret_env import secret_from_env

log = logging.getLogger("inference.server")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        help="HF directory or .gguf file (a GPTQ/AWQ directory's format from config.json, or "
        "an older quantize_config.json / quant_config.json)",
    )
    parser.add_argument("--tokenizer", help="tokenizer directory (default: the model's)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on; not loopback needs --api-key-env or --insecure-no-auth",
    )
    parser.add_argument("--port", type=int, default=8100, help="port to listen on")
    parser.add_argument(
        "--served-model-name", help="the model id clients send (default: its path stem)"
    )
    parser.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="require 'Authorization: Bearer $VAR' on the API; VAR must be set and not empty, "
        "or VAR_FILE name a file holding the token (a mounted secret)",
    )
    parser.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="allow a --host other than loopback without --api-key-env (anyone who can "
        "reach the port can then generate)",
    )
    parser.add_argument(
        "--dtype",
        default="auto",
        help="auto, float32, bfloat16 or float16: the weights' and activations' type",
    )
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    parser.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        help="fp8: FP8 linear weights, quantized as they load; gguf: keep a GGUF file's "
        "quantized weights (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 as they are, K-quants repacked); gptq, "
        "awq: name what a GPTQ / AWQ checkpoint holds (it loads as it is without)",
    )
    parser.add_argument(
        "--int8-activations",
        action="store_true",
        help="multiply group-quantized weights (gguf, gptq, awq) with activations quantized "
        "to int8 at every step, prompts too (on CPUs with AMX: decode steps), as llama.cpp "
        "does: faster on a CPU, not the float matmul "
        "(its agreement: bench int8-accuracy)",
    )
    parser.add_argument(
        "--single-thread-small-kernels",
        action="store_true",
        help="run the CPU kernels' small calls (a decode step's norms, rotary, KV writes) on "
        "one thread: faster on cores shared with other busy processes, slower alone",
    )
    parser.add_argument(
        "--enforce-eager",
        action="store_true",
        help="run every step through the model's Python code: no CUDA graphs, and on a CPU "
        "no replayed recordings of decode steps' kernel calls",
    )
    parser.add_argument(
        "--kv-cache-dtype",
        choices=["auto", "fp8"],
        default="auto",
        help="fp8: K and V in e4m3, twice the tokens (auto: the model's dtype)",
    )
    parser.add_argument(
        "--tensor-parallel-size", type=int, default=1, help="split the model over N processes"
    )
    parser.add_argument(
        "--max-model-len", type=int, help="context length (default: the model's own)"
    )
    parser.add_argument(
        "--max-num-seqs", type=int, default=256, help="sequences in one batch at most"
    )
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        help="tokens in one step at most (default: max(2048, max model len))",
    )
    parser.add_argument(
        "--step-time-budget-ms",
        type=float,
        default=250.0,
        help="plan each step to take about this long: decodes and short (or cached-prefix) "
        "prefills first, long prompts in chunks sized to fit, shared between tenants "
        "(0: fill each step up to --max-num-batched-tokens, as for offline throughput)",
    )
    parser.add_argument(
        "--block-size", type=int, default=16, help="tokens per KV block: 8, 16, 32, 64 or 128"
    )
    parser.add_argument(
        "--kv-cache-memory-bytes",
        type=int,
        help="the KV pool's size per rank (default: 0.9 of free memory on CUDA, 0.1 on CPU)",
    )
    parser.add_argument(
        "--no-enable-prefix-caching",
        action="store_true",
        help="turn off automatic prefix caching (and with it pinned prefixes)",
    )
    parser.add_argument(
        "--max-pinned-fraction",
        type=float,
        default=0.5,
        help="at most this fraction of the KV blocks is held by pinned prefixes (0 to <1)",
    )
    parser.add_argument(
        "--speculative",
        choices=["ngram", "draft"],
        help="speculative decoding: ngram proposes tokens found earlier in the sequence, "
        "draft those a smaller model (--draft-model) predicts",
    )
    parser.add_argument(
        "--draft-model",
        help="with --speculative draft: HF directory or .gguf file of a smaller model with "
        "the same tokenizer",
    )
    parser.add_argument(
        "--draft-kv-cache-fraction",
        type=float,
        default=1.0,
        help="the draft model's KV pool holds this fraction of the target pool's tokens "
        "(0 to 1; one memory budget covers both)",
    )
    parser.add_argument(
        "--num-speculative-tokens", type=int, default=3, help="k: tokens proposed per step"
    )
    parser.add_argument(
        "--ngram-min",
        type=int,
        default=1,
        help="shortest repeated n-gram that proposes (larger: fewer, surer proposals)",
    )
    parser.add_argument(
        "--speculative-max-batch",
        type=int,
        help="speculate only in steps with at most this many sequences running",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="accepted as vLLM's is; the engine does not use it (a request's own seed does)",
    )
    parser.add_argument(
        "--cache-dir",
        help="keep the prepared weights of a GGUF model and the compiled C kernels here, "
        "for a fast next start (default: $INFERENCE_CACHE_DIR, else ~/.cache/enclave)",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="neither read nor write the start-up caches (INFERENCE_CACHE_DIR=off does too)",
    )
    parser.add_argument("--max-queue", type=int, help="503 with Retry-After while this many wait")
    parser.add_argument("--drain-timeout", type=float, default=30.0, help="seconds (SIGTERM)")
    parser.add_argument("--log-level", default="info", help="debug, info, warning or error")
    parser.set_defaults(run=run)


def engine_config_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": args.model,
        "tokenizer": args.tokenizer,
        "dtype": args.dtype,
        "device": args.device,
        "enable_prefix_caching": not args.no_enable_prefix_caching,
        "max_pinned_fraction": args.max_pinned_fraction,
        "block_size": args.block_size,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "step_time_budget_ms": args.step_time_budget_ms or None,
        "max_model_len": args.max_model_len,
        "kv_cache_memory_bytes": args.kv_cache_memory_bytes,
        "quantization": args.quantization,
        "int8_activations": args.int8_activations,
        "single_thread_small_kernels": args.single_thread_small_kernels,
        "enforce_eager": args.enforce_eager,
        "kv_cache_dtype": args.kv_cache_dtype,
        "tensor_parallel_size": args.tensor_parallel_size,
        "seed": args.seed,
        "progress": False,
        "speculative": args.speculative,
        "num_speculative_tokens": args.num_speculative_tokens,
        "ngram_min": args.ngram_min,
        "speculative_max_batch": args.speculative_max_batch,
        "ngram_max": max(3, args.ngram_min),
        "draft_model": args.draft_model,
        "draft_kv_cache_fraction": args.draft_kv_cache_fraction,
        "cache_dir": cache_dir_of(args),
    }
    return kwargs


def cache_dir_of(args: argparse.Namespace) -> str | None:
    """The start-up caches' folder (inference/cache_dir.py); None: off."""
    if args.no_cache:
        return None
    if args.cache_dir:
        return str(Path(args.cache_dir).expanduser())
    default = default_cache_dir()
    return None if default is None else str(default)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: only this machine can connect."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def settings_from(args: argparse.Namespace) -> Any:
    from inference.server.settings import ServerSettings

    if not args.api_key_env and not args.insecure_no_auth and not is_loopback(args.host):
        # Refuse rather than serve the model to the network without a token by mistake.
        raise ValueError(
            f"--host {args.host} is reachable from other machines: give --api-key-env VAR "
            "(the gateway's token), or --insecure-no-auth to serve without one"
        )
    api_key = None
    if args.api_key_env:
        var = args.api_key_env
        api_key = secret_from_env(os.environ, var)  # SecretFileError is a ValueError
        if not api_key:
            # Refuse rather than serve unauthenticated when a key was asked for.
            raise ValueError(f"--api-key-env {var}: neither {var} nor {var}_FILE is set")
    return ServerSettings(
        served_model_name=args.served_model_name or Path(args.model).stem,
        api_key=api_key,
        max_queue=args.max_queue,
        drain_timeout_s=args.drain_timeout,
    )


def run(args: argparse.Namespace) -> int:
    from inference.startup import PHASES, process_age_s

    # Start-up phases (inference/startup.py): the interpreter's own start, then imports.
    PHASES.add("interpreter", process_age_s() or 0.0, quiet=True)
    with PHASES.phase("imports"):
        from inference.engine.engine_config import EngineConfig
        from inference.server.app import create_app

    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stdout,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not Path(args.model).exists():
        raise FileNotFoundError(f"--model {args.model}: no such file or directory")
    settings = settings_from(args)
    config = EngineConfig(**engine_config_kwargs(args))
    # The kernel cache (and tensor-parallel ranks, which inherit the environment) follow
    # the worker's choice of cache folder.
    os.environ[CACHE_ENV] = config.cache_dir or "off"
    if config.draft_model is not None:  # a draft with another tokenizer: refused here
        from inference.engine.draft_model import check_draft_tokenizer

        check_draft_tokenizer(config.model, config.tokenizer, config.draft_model)

    def load() -> Any:
        with PHASES.phase("imports"):
            from inference.engine.llm_engine import LLMEngine
        with PHASES.phase("engine"):
            return LLMEngine(config)

    app = create_app(load, settings)
    server = DrainingServer(
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=5,
        ),
        worker=app.worker,
        drain_timeout_s=settings.drain_timeout_s,
    )
    server.run()
    return 0


class DrainingServer(uvicorn.Server):
    """uvicorn's Server, except that SIGTERM first drains the worker, then exits 0.

    uvicorn re-raises the signals it caught once it has stopped; SIGTERM is kept out of
    that list, so a drained worker exits with status 0. A second signal stops at once.
    """

    def __init__(self, config: uvicorn.Config, *, worker: Any, drain_timeout_s: float) -> None:
        super().__init__(config)
        self.worker = worker
        self.drain_timeout_s = drain_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining = False
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGTERM or self._draining or self._loop is None:
            super().handle_exit(sig, frame)
            return
        self._draining = True
        log.info("SIGTERM: draining (up to %.1fs)", self.drain_timeout_s)
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.ensure_future(self._drain())  # kept: tasks are weakly held

    async def _drain(self) -> None:
        from inference.server.app import drain

        await drain(self.worker, self.drain_timeout_s)
        log.info("drained; exiting")
        self.should_exit = True

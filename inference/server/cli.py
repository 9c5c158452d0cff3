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

log = logging.getLogger("inference.server")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF directory or .gguf file")
    parser.add_argument("--tokenizer", help="tokenizer directory (default: the model's)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument(
        "--served-model-name", help="the model id clients send (default: its path stem)"
    )
    parser.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="require 'Authorization: Bearer $VAR' on the API; VAR must be set and not empty",
    )
    parser.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="allow a --host other than loopback without --api-key-env (anyone who can "
        "reach the port can then generate)",
    )
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--quantization", choices=["fp8"], help="FP8 linear weights")
    parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default="auto")
    parser.add_argument(
        "--tensor-parallel-size", type=int, default=1, help="split the model over N processes"
    )
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--kv-cache-memory-bytes", type=int)
    parser.add_argument("--no-enable-prefix-caching", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-queue", type=int, help="503 with Retry-After while this many wait")
    parser.add_argument("--drain-timeout", type=float, default=30.0, help="seconds (SIGTERM)")
    parser.add_argument("--log-level", default="info")
    parser.set_defaults(run=run)


def engine_config_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": args.model,
        "tokenizer": args.tokenizer,
        "dtype": args.dtype,
        "device": args.device,
        "enable_prefix_caching": not args.no_enable_prefix_caching,
        "block_size": args.block_size,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "max_model_len": args.max_model_len,
        "kv_cache_memory_bytes": args.kv_cache_memory_bytes,
        "quantization": args.quantization,
        "kv_cache_dtype": args.kv_cache_dtype,
        "tensor_parallel_size": args.tensor_parallel_size,
        "seed": args.seed,
        "progress": False,
    }
    return kwargs


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
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            # Refuse rather than serve unauthenticated when a key was asked for.
            raise ValueError(f"--api-key-env {args.api_key_env}: that variable is not set")
    return ServerSettings(
        served_model_name=args.served_model_name or Path(args.model).stem,
        api_key=api_key,
        max_queue=args.max_queue,
        drain_timeout_s=args.drain_timeout,
    )


def run(args: argparse.Namespace) -> int:
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

    def load() -> Any:
        from inference.engine.llm_engine import LLMEngine

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

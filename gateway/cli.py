"""`enclave ...`: the appliance's command line."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from sqlalchemy.exc import IntegrityError

from gateway import cli_admin, cli_audit, cli_worker
from gateway.bench import console_bench, gateway_bench, shift_change
from gateway.private_files import tighten_data_dir
from gateway.settings import Settings, SettingsError, unknown_variables

if TYPE_CHECKING:
    from litestar import Litestar


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="enclave", description="The Enclave appliance.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("serve", help="start the gateway (configured by ENCLAVE_* variables)")
    cli_admin.add_commands(commands)
    cli_audit.add_commands(commands)
    cli_worker.add_commands(commands)
    commands.add_parser("openapi", help="print the gateway's OpenAPI document (JSON)")
    commands.add_parser(
        "config-reference", help="print docs/configuration-reference.md (every setting)"
    )
    bench = commands.add_parser("bench", help="measure the gateway; prints JSON")
    benches = bench.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    gateway_bench.add_arguments(
        benches.add_parser("gateway", help="added latency over calling a worker directly")
    )
    console_bench.add_arguments(
        benches.add_parser("console", help="the admin console's API on a big seeded Postgres")
    )
    shift_change.add_arguments(
        benches.add_parser(
            "shift-change", help="a department's users at once after a worker start (TTFT)"
        )
    )
    args = parser.parse_args(argv)
    if args.command == "bench":
        runs = {"console": console_bench.run, "shift-change": shift_change.run}
        return runs.get(args.bench, gateway_bench.run)(args)
    if args.command == "config-reference":
        from gateway.config_reference import render

        sys.stdout.write(render())
        return 0
    if args.command == "openapi":
        from gateway.openapi import document_json

        sys.stdout.buffer.write(document_json())
        return 0

    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"enclave: configuration error: {exc}", file=sys.stderr)
        return 2

    if args.command == "serve":
        return serve(settings)
    if args.command in {"migrate", "admin"}:
        try:
            return cli_admin.run(settings, args)
        except (ValueError, LookupError, IntegrityError) as exc:
            print(f"enclave: {exc}", file=sys.stderr)
            return 1
    if args.command == "audit":
        return cli_audit.run(settings, args)
    if args.command == "worker":
        return cli_worker.run(settings, args)
    parser.error(f"unknown command {args.command!r}")  # argparse exits
    return 2


def serve(settings: Settings) -> int:
    import uvicorn

    from gateway.app import create_app
    from gateway.logging import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    log = structlog.get_logger("gateway")
    for name in unknown_variables(os.environ):
        log.warning("unknown setting ignored", variable=name)
    tighten_data_dir(settings.data_dir)
    if settings.mode == "embedded":
        first_start(settings)
    supervisor = None
    if settings.mode == "embedded" and not settings.worker_urls:
        from gateway.traffic_setup import embedded_supervisor

        if not Path(settings.model).is_file():
            print(
                f"enclave: the model {settings.model} does not exist; run"
                " scripts/fetch-demo-model.sh or set ENCLAVE_MODEL (or ENCLAVE_WORKERS)",
                file=sys.stderr,
            )
            return 2
        supervisor = embedded_supervisor(settings)
        log.info("starting the embedded worker", model=settings.model, url=supervisor.url)
    log.info(
        "starting",
        mode=settings.mode,
        url=f"http://{settings.host}:{settings.port}",
        processes=settings.processes,
    )
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,
        "access_log": False,  # the request middleware writes the one canonical line
        "server_header": False,
    }
    if settings.processes > 1:
        # uvicorn's supervisor binds the port once and starts each process on it; every
        # process builds its own app from the same ENCLAVE_* variables (app_from_env).
        uvicorn.run("gateway.cli:app_from_env", factory=True, workers=settings.processes, **options)
        return 0
    app = create_app(settings, supervisor=supervisor)
    _freeze_heap()
    uvicorn.run(app, **options)
    return 0


def app_from_env() -> Litestar:
    """One of several gateway processes: its app, built from the environment as `serve` is."""
    from gateway.app import create_app
    from gateway.logging import configure_logging

    settings = Settings.from_env()
    configure_logging(settings.log_level, settings.log_format)
    app = create_app(settings)
    _freeze_heap()
    return app


def _freeze_heap() -> None:
    # The modules and the app are alive for the whole process: keep them out of the
    # collector's way. A full collection over them took 125 ms here, a pause every stream
    # in flight would feel; frozen, the collector scans only what requests allocate.
    gc.collect()
    gc.freeze()


def first_start(settings: Settings) -> None:
    """The embedded default sets itself up: secrets, database, and a break-glass admin."""
    import asyncio

    from gateway import admin_tasks
    from gateway.secret_store import resolve_secret_key

    resolve_secret_key(settings)
    admin_tasks.migrate_database(settings)
    password = asyncio.run(admin_tasks.first_start_admin(settings))
    if password is not None:
        print(
            f"First start: sign in at {settings.base_url}/ as {admin_tasks.DEFAULT_ADMIN_EMAIL}"
            f" with the password {password} (shown once; reset it with"
            f" `enclave admin create-admin {admin_tasks.DEFAULT_ADMIN_EMAIL}`)",
            flush=True,
        )

"""`enclave ...`: the appliance's command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import structlog

from gateway.settings import Settings, SettingsError, unknown_variables


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="enclave", description="The Enclave appliance.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("serve", help="start the gateway (configured by ENCLAVE_* variables)")
    args = parser.parse_args(argv)

    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"enclave: configuration error: {exc}", file=sys.stderr)
        return 2

    if args.command == "serve":
        return serve(settings)
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
    log.info("starting", mode=settings.mode, url=f"http://{settings.host}:{settings.port}")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,  # the request middleware writes the one canonical line
        server_header=False,
    )
    return 0

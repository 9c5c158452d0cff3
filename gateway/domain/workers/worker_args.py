"""ENCLAVE_WORKER_ARGS: further options for the embedded worker, checked before it starts.

The operator's words are split as a shell would and parsed with the worker's own argument
parser (`inference.server.cli`), so a misspelt option is a configuration error when the
gateway starts, not a worker that exits with its usage in a log. The options that the
gateway sets itself (what to serve, where, under which name and token) are refused,
abbreviated or not: the gateway's pool and its token would no longer match the worker.
"""

from __future__ import annotations

import argparse
import shlex

# The worker's options that the supervisor sets (see WorkerSupervisor.command).
OWNED = (
    "--model",
    "--host",
    "--port",
    "--served-model-name",
    "--api-key-env",
    "--insecure-no-auth",
)


class WorkerArgsError(ValueError):
    """What is wrong with the options, in words for the operator."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise WorkerArgsError(message)


def parse_worker_args(text: str) -> list[str]:
    """The options as the worker gets them; WorkerArgsError if the worker would refuse them
    or they set what the gateway sets."""
    try:
        words = shlex.split(text)
    except ValueError as exc:  # an unclosed quote
        raise WorkerArgsError(f"cannot split {text!r}: {exc}") from None
    if not words:
        return []
    from inference.server.cli import add_arguments

    for word in words:
        name = word.partition("=")[0]
        # argparse takes any unambiguous prefix of an option for the option.
        owned = [flag for flag in OWNED if word.startswith("--") and flag.startswith(name)]
        if len(name) > 2 and owned:
            raise WorkerArgsError(f"{owned[0]}: the gateway sets this for its worker itself")
    parser = _Parser(prog="python -m inference serve", add_help=False, exit_on_error=False)
    add_arguments(parser)
    try:
        parser.parse_args(["--model", "model", *words])
    except argparse.ArgumentError as exc:
        raise WorkerArgsError(str(exc)) from None
    return words

"""`enclave worker reload --model NEW`: a weight swap of the running gateway's worker.

It signs in to the gateway's admin API as a local admin (the password from
``--password-file`` or a prompt, never from the command line), asks
``POST /api/admin/workers/{index}/reload`` and, unless ``--no-wait``, waits until the swap
is over. The swap is audited under that admin (``worker.reload``) and its outcome under
``system`` (``worker.reloaded``).
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from gateway.settings import Settings


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = commands.add_parser("worker", help="the worker the gateway runs itself")
    tasks = worker.add_subparsers(dest="task", required=True, metavar="TASK")
    reload = tasks.add_parser(
        "reload",
        help="swap the worker's model without downtime",
        description="Starts a worker on the new model beside the old one, routes new "
        "requests to it once it is ready and warm, drains the old one and stops it. "
        "With --one-at-a-time (memory for one model only) the old one stops first and "
        "requests in the gap get 503 with Retry-After.",
    )
    reload.add_argument("--model", required=True, help="the new checkpoint (directory or file)")
    reload.add_argument("--name", default=None, help="the served name (default: its stem)")
    reload.add_argument("--one-at-a-time", action="store_true", help="stop the old one first")
    reload.add_argument("--index", type=int, default=0, help="the worker's index in the pool")
    reload.add_argument("--url", default=None, help="the gateway (default: from ENCLAVE_*)")
    reload.add_argument("--email", required=True, help="a local admin's email")
    reload.add_argument("--password-file", type=Path, default=None, help="else a prompt")
    reload.add_argument("--no-wait", action="store_true", help="return once it is accepted")
    reload.add_argument("--timeout", type=float, default=900, help="seconds to wait (900)")


def _gateway_url(settings: Settings) -> str:
    host = "127.0.0.1" if settings.host in {"0.0.0.0", "::", ""} else settings.host
    return f"http://{host}:{settings.port}"


def run(settings: Settings, args: argparse.Namespace) -> int:
    try:
        password = (
            args.password_file.read_text().strip()
            if args.password_file
            else getpass.getpass(f"password for {args.email}: ")
        )
    except OSError as exc:
        return _fail(f"the password file could not be read: {exc}")
    model = Path(args.model).expanduser().resolve()
    with httpx.Client(base_url=args.url or _gateway_url(settings), timeout=30) as client:
        signed = client.post("/auth/local/login", json={"email": args.email, "password": password})
        if signed.status_code != 200:
            return _fail(f"sign-in refused ({signed.status_code}): {_detail(signed)}")
        client.headers["x-csrf-token"] = signed.json()["csrf_token"]
        body: dict[str, Any] = {"model": str(model), "one_at_a_time": args.one_at_a_time}
        if args.name:
            body["name"] = args.name
        asked = client.post(f"/api/admin/workers/{args.index}/reload", json=body)
        if asked.status_code != 202:
            return _fail(f"the gateway refused the swap ({asked.status_code}): {_detail(asked)}")
        print(f"swapping worker {args.index} to {model}", flush=True)
        if args.no_wait:
            return 0
        deadline = time.monotonic() + args.timeout
        while True:
            time.sleep(0.5)
            workers = client.get("/api/admin/workers").json()["workers"]
            worker = next((w for w in workers if w["index"] == args.index), None)
            if worker is not None and not worker["reloading"]:
                break
            if time.monotonic() > deadline:
                return _fail(f"the swap was not over within {args.timeout:g} s")
    if worker["reload_error"]:
        return _fail(f"the swap failed: {worker['reload_error']}")
    name = args.name or model.stem
    print(f"worker {args.index} serves {name} at {worker['url']}")
    return 0


def _detail(reply: httpx.Response) -> str:
    try:
        return str(reply.json().get("detail") or reply.text)
    except ValueError:
        return reply.text


def _fail(message: str) -> int:
    print(f"enclave: {message}", file=sys.stderr)
    return 1

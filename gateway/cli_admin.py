"""`enclave migrate` and `enclave admin ...`: scripting equivalents of the admin API."""

from __future__ import annotations

import argparse
import asyncio
import json

import msgspec
from msgspec import UNSET

from gateway import admin_tasks
from gateway.settings import Settings

# set-quota's flags: the department column each one changes, and what it limits.
QUOTA_FLAGS = {
    "--requests-per-minute": ("requests_per_minute", "requests in any 60 s"),
    "--tokens-per-minute": ("tokens_per_minute", "tokens reserved in any 60 s"),
    "--concurrent-requests": ("concurrent_requests", "requests in flight at once"),
    "--daily-tokens": ("daily_token_quota", "tokens per UTC day"),
    "--monthly-tokens": ("monthly_token_quota", "tokens per UTC month"),
}


def _limit(raw: str) -> int | None:
    if raw.strip().lower() in {"none", "unlimited"}:
        return None
    try:
        value = int(raw)
    except ValueError:
        message = f"expected a positive number or 'none', got {raw!r}"
        raise argparse.ArgumentTypeError(message) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be positive (or 'none' to lift it), got {value}")
    return value


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands.add_parser("migrate", help="upgrade the database to the latest revision")
    admin = commands.add_parser("admin", help="administration for scripts")
    tasks = admin.add_subparsers(dest="task", required=True, metavar="TASK")
    create_admin = tasks.add_parser("create-admin", help="create or reset a break-glass admin")
    create_admin.add_argument("email")
    department = tasks.add_parser("create-department", help="create a department")
    department.add_argument("name")
    department.add_argument("--slug", required=True)
    key = tasks.add_parser("create-key", help="create an API key (printed once)")
    key.add_argument("department", help="the department's slug")
    key.add_argument("--name", required=True)
    key.add_argument("--model", action="append", dest="models", help="allow only this model")
    key.add_argument("--expires-days", type=int, default=None)
    quota = tasks.add_parser(
        "set-quota",
        help="change a department's limits and quotas",
        description="Only the limits given change; 'none' lifts one. Applies to the next "
        "request. Prints the department's limits.",
    )
    quota.add_argument("department", help="the department's slug")
    for flag, (column, what) in QUOTA_FLAGS.items():
        quota.add_argument(
            flag, dest=column, type=_limit, default=UNSET, metavar="N|none", help=what
        )
    quota.add_argument(
        "--audit-bodies",
        choices=["on", "off"],
        default=None,
        help="keep prompt and response bodies in the audit log",
    )
    keys = tasks.add_parser("list-keys", help="list API keys as JSON lines (no secrets)")
    keys.add_argument("--department", default=None, help="only this department's slug")


def run(settings: Settings, args: argparse.Namespace) -> int:
    if args.command == "migrate":
        admin_tasks.migrate_database(settings)
        print("database is at the latest revision")
        return 0
    if args.task == "create-admin":
        password = asyncio.run(admin_tasks.create_admin(settings, args.email))
        print(f"admin {args.email} password (shown once): {password}")
    elif args.task == "create-department":
        print(asyncio.run(admin_tasks.create_department(settings, args.name, args.slug)))
    elif args.task == "create-key":
        task = admin_tasks.create_key(
            settings, args.department, args.name, args.models, args.expires_days
        )
        print(asyncio.run(task))
    elif args.task == "set-quota":
        limits = {column: getattr(args, column) for column, _ in QUOTA_FLAGS.values()}
        bodies = UNSET if args.audit_bodies is None else args.audit_bodies == "on"
        task2 = admin_tasks.set_quota(settings, args.department, audit_bodies=bodies, **limits)
        print(json.dumps(msgspec.to_builtins(asyncio.run(task2))))
    elif args.task == "list-keys":
        for key in asyncio.run(admin_tasks.list_keys(settings, args.department)):
            print(json.dumps(msgspec.to_builtins(key)))
    return 0

"""`enclave migrate` and `enclave admin ...`: scripting equivalents of the admin API."""

from __future__ import annotations

import argparse
import asyncio
import json

import msgspec

from gateway import admin_tasks
from gateway.settings import Settings


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
    quota = tasks.add_parser("set-quota", help="set a department's quotas (omit to lift)")
    quota.add_argument("department", help="the department's slug")
    quota.add_argument("--monthly-tokens", type=int, default=None)
    quota.add_argument("--requests-per-minute", type=int, default=None)
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
        task2 = admin_tasks.set_quota(
            settings, args.department, args.monthly_tokens, args.requests_per_minute
        )
        asyncio.run(task2)
    elif args.task == "list-keys":
        for key in asyncio.run(admin_tasks.list_keys(settings, args.department)):
            print(json.dumps(msgspec.to_builtins(key)))
    return 0

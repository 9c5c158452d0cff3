"""`enclave audit verify` and `enclave audit prune`: the request log from the command line."""

from __future__ import annotations

import argparse
import asyncio
import sys

from sqlalchemy.exc import SQLAlchemyError

from gateway.admin_tasks import transaction
from gateway.db.engine import create_engine, session_factory
from gateway.domain.audit.retention import prune_older_than_days
from gateway.domain.audit.verify import VerifyResult, verify_chain
from gateway.settings import Settings


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = commands.add_parser("audit", help="the request audit log")
    tasks = audit.add_subparsers(dest="task", required=True, metavar="TASK")
    tasks.add_parser("verify", help="check that no record was changed or removed")
    prune = tasks.add_parser("prune", help="delete old records (the chain's anchor is kept)")
    prune.add_argument("--older-than-days", type=int, required=True, metavar="N")


def run(settings: Settings, args: argparse.Namespace) -> int:
    try:
        if args.task == "verify":
            result = asyncio.run(_verify(settings))
            if not result.ok:
                print(f"audit chain broken at seq {result.bad_seq}: {result.reason}")
                return 1
            print(f"audit chain ok: {result.checked} records")
            print(f"head: seq {result.head_seq} hash {result.head_hash}")
            return 0
        if args.task == "prune":
            deleted = asyncio.run(_prune(settings, args.older_than_days))
            print(f"pruned {deleted} audit records older than {args.older_than_days} days")
            return 0
    except (SQLAlchemyError, OSError, ValueError, RuntimeError) as exc:
        print(f"enclave: audit {args.task}: {exc}", file=sys.stderr)
        return 1
    return 2


async def _verify(settings: Settings) -> VerifyResult:
    async with transaction(settings) as db:
        return await verify_chain(db)


async def _prune(settings: Settings, days: int) -> int:
    engine = create_engine(settings.effective_database_url)
    try:
        return await prune_older_than_days(session_factory(engine), days)
    finally:
        await engine.dispose()

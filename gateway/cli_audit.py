"""`enclave audit verify` and `enclave audit prune`: the audit log from the command line."""

from __future__ import annotations

import argparse
import asyncio
import sys

from sqlalchemy.exc import SQLAlchemyError

from gateway.admin_tasks import transaction
from gateway.db.engine import create_engine, session_factory
from gateway.domain.audit.actions import CLI
from gateway.domain.audit.retention import prune_older_than_days
from gateway.domain.audit.seal import ChainSeal
from gateway.domain.audit.verify import VerifyResult, verify_chain
from gateway.secret_store import resolve_secret_key
from gateway.settings import Settings


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = commands.add_parser("audit", help="the audit log (requests and admin actions)")
    tasks = audit.add_subparsers(dest="task", required=True, metavar="TASK")
    tasks.add_parser("verify", help="check that no record was changed or removed")
    prune = tasks.add_parser("prune", help="delete old records (the chain's anchor is kept)")
    prune.add_argument("--older-than-days", type=int, required=True, metavar="N")


def run(settings: Settings, args: argparse.Namespace) -> int:
    try:
        seal = ChainSeal.build(resolve_secret_key(settings), settings.audit_head_path)
        if args.task == "verify":
            result = asyncio.run(_verify(settings, seal))
            print("\n".join(report(result, seal)))
            return 0 if result.ok else 1
        if args.task == "prune":
            deleted = asyncio.run(_prune(settings, seal, args.older_than_days))
            print(f"pruned {deleted} audit records older than {args.older_than_days} days")
            return 0
    except (SQLAlchemyError, OSError, ValueError, RuntimeError) as exc:
        print(f"enclave: audit {args.task}: {exc}", file=sys.stderr)
        return 1
    return 2


def report(result: VerifyResult, seal: ChainSeal) -> list[str]:
    """What `enclave audit verify` prints: the verdict first, then what it rests on."""
    if not result.ok:
        return [f"audit chain broken at seq {result.bad_seq}: {result.reason}"]
    lines = [
        f"audit chain ok: {result.checked} records",
        f"head: seq {result.head_seq} hash {result.head_hash}",
    ]
    if result.unkeyed:
        lines.append(
            f"{result.unkeyed} records before seq {result.keyed_from_seq} predate keying: "
            "plain SHA-256, which anyone can recompute"
        )
    recorded = result.recorded
    if recorded is None:
        lines.append(
            f"warning: no head recorded in {seal.head_log.path}; "
            "records removed from the end of the chain would go unnoticed"
        )
    else:
        compared = "matches" if recorded.seq >= result.anchor_seq else "pruned; not compared"
        lines.append(
            f"recorded head: seq {recorded.seq} at {recorded.at} in {seal.head_log.path} "
            f"({compared})"
        )
    return lines


async def _verify(settings: Settings, seal: ChainSeal) -> VerifyResult:
    async with transaction(settings) as db:
        return await verify_chain(db, seal)


async def _prune(settings: Settings, seal: ChainSeal, days: int) -> int:
    engine = create_engine(settings.effective_database_url)
    try:
        return await prune_older_than_days(session_factory(engine), days, seal, CLI)
    finally:
        await engine.dispose()

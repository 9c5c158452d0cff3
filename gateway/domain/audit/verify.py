"""Proof that no record was changed or removed: walk the chain from its anchor to its head.

Each record must follow the previous one in seq (no gap), carry the previous hash, and
hash to what it stores (an HMAC only the gateway's key can compute; plain SHA-256 for
records from before keying); the last one must be the head the chain row names. Rows are
read a page at a time in seq order, so memory stays flat however long the log is.

Two things the rows alone cannot show are checked against what the gateway recorded
elsewhere: a tail cut off with the head moved back (the head log outside the database
holds a later head), and a prefix deleted with the anchor moved up (the anchor must be the
one the latest ``audit.prune`` record names).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import AuditChain, RequestRecord
from gateway.domain.audit.chain import CHAIN_ROW_ID, entry_of, record_hash, unkeyed_hash
from gateway.domain.audit.head_log import RecordedHead
from gateway.domain.audit.retention import PRUNE_ACTION
from gateway.domain.audit.seal import ChainSeal

PAGE_SIZE = 1000


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    checked: int
    bad_seq: int | None
    reason: str
    head_seq: int = 0
    head_hash: str = ""
    unkeyed: int = 0  # records checked with plain SHA-256 (written before keying)
    keyed_from_seq: int = 1
    recorded: RecordedHead | None = None  # the highest head in the head log
    anchor_seq: int = 0


async def verify_chain(db: AsyncSession, seal: ChainSeal) -> VerifyResult:
    # The head log first: a line is written only after its batch committed, so every head
    # read here is one the database (read next) must already hold.
    recorded = await asyncio.to_thread(seal.head_log.highest)
    chain = await db.get(AuditChain, CHAIN_ROW_ID)
    if chain is None:
        return VerifyResult(False, 0, None, "the audit_chain row is missing")
    head_seq, head_hash, keyed_from = chain.head_seq, chain.head_hash, chain.keyed_from_seq
    checked = unkeyed = 0

    def result(bad_seq: int | None, reason: str = "") -> VerifyResult:
        return VerifyResult(
            ok=bad_seq is None,
            checked=checked,
            bad_seq=bad_seq,
            reason=reason,
            head_seq=head_seq,
            head_hash=head_hash,
            unkeyed=unkeyed,
            keyed_from_seq=keyed_from,
            recorded=recorded,
            anchor_seq=chain.anchor_seq,
        )

    def broken(seq: int, reason: str) -> VerifyResult:
        return result(seq, reason)

    where = seal.head_log.path
    if recorded is not None and recorded.seq > head_seq:
        return broken(
            head_seq + 1,
            f"the database's head is seq {head_seq}, but seq {recorded.seq} was recorded in "
            f"{where} at {recorded.at}: records were removed from the end of the chain",
        )
    pruned_head = recorded is not None and recorded.seq == chain.anchor_seq != 0
    if pruned_head and recorded is not None and recorded.hash != chain.anchor_hash:
        return broken(recorded.seq, f"its hash is not the one recorded in {where}")

    expected, prev_hash = chain.anchor_seq + 1, chain.anchor_hash
    last_prune: dict[str, object] | None = None
    while expected <= head_seq:
        statement = (
            select(RequestRecord)
            .where(RequestRecord.seq >= expected, RequestRecord.seq <= head_seq)
            .order_by(RequestRecord.seq)
            .limit(PAGE_SIZE)
        )
        page = (await db.scalars(statement)).all()
        if not page:
            return broken(expected, f"records {expected} to {head_seq} are missing")
        for record in page:
            if record.seq != expected:
                return broken(expected, f"record {expected} is missing (next is {record.seq})")
            if record.prev_hash != prev_hash:
                return broken(record.seq, "its prev_hash is not the previous record's hash")
            entry = entry_of(record)
            if record.seq < keyed_from:
                unkeyed += 1
                computed = unkeyed_hash(prev_hash, record.seq, entry)
            else:
                computed = record_hash(seal.key, prev_hash, record.seq, entry)
            if computed != record.hash:
                return broken(record.seq, "its contents do not match its hash (changed)")
            if recorded is not None and record.seq == recorded.seq and record.hash != recorded.hash:
                return broken(record.seq, f"its hash is not the one recorded in {where}")
            if record.action == PRUNE_ACTION and record.seq >= keyed_from:
                last_prune = _after(record.details)
            prev_hash, expected, checked = record.hash, expected + 1, checked + 1
        db.expunge_all()  # the rows are checked; don't keep them in the session
    if prev_hash != head_hash:
        return broken(head_seq, "the last record's hash is not the chain's head")
    # An anchor left by a prune before keying needs no record (unkeyed ones still follow it).
    needs_record = chain.anchor_seq > 0 and chain.anchor_seq >= keyed_from - 1
    if needs_record or last_prune is not None:
        named = last_prune or {}
        if (named.get("anchor_seq"), named.get("anchor_hash")) != (
            chain.anchor_seq,
            chain.anchor_hash,
        ):
            return broken(
                chain.anchor_seq,
                f"the chain starts after seq {chain.anchor_seq}, but no {PRUNE_ACTION} record "
                "names that anchor: records were deleted from the start of the chain",
            )
    return result(None)


def _after(details: str | None) -> dict[str, object]:
    try:
        after = json.loads(details or "{}").get("after")
    except (ValueError, AttributeError):
        return {}
    return after if isinstance(after, dict) else {}

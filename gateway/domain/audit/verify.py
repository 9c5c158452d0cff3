"""Proof that no record was changed or removed: walk the chain from its anchor to its head.

Each record must follow the previous one in seq (no gap), carry the previous hash, and
hash to what it stores; the last one must be the head the chain row names. Rows are read
a page at a time in seq order, so memory stays flat however long the log is.

The chain proves the log against edits to single rows. Someone who can rewrite every later
row and the chain row too can forge a consistent log; keeping a copy of the head hash
elsewhere (it is printed by ``enclave audit verify``) closes that gap.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import AuditChain, RequestRecord
from gateway.domain.audit.chain import CHAIN_ROW_ID, entry_of, record_hash

PAGE_SIZE = 1000


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    checked: int
    bad_seq: int | None
    reason: str
    head_seq: int = 0
    head_hash: str = ""


async def verify_chain(db: AsyncSession) -> VerifyResult:
    chain = await db.get(AuditChain, CHAIN_ROW_ID)
    if chain is None:
        return VerifyResult(False, 0, None, "the audit_chain row is missing")
    head_seq, head_hash = chain.head_seq, chain.head_hash

    def broken(seq: int, reason: str) -> VerifyResult:
        return VerifyResult(False, checked, seq, reason, head_seq, head_hash)

    expected, prev_hash, checked = chain.anchor_seq + 1, chain.anchor_hash, 0
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
            if record_hash(prev_hash, record.seq, entry_of(record)) != record.hash:
                return broken(record.seq, "its contents do not match its hash (changed)")
            prev_hash, expected, checked = record.hash, expected + 1, checked + 1
        db.expunge_all()  # the rows are checked; don't keep them in the session
    if prev_hash != head_hash:
        return broken(head_seq, "the last record's hash is not the chain's head")
    return VerifyResult(True, checked, None, "", head_seq, head_hash)

"""The entry, its hash and the body cap: pure logic, no database."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from datetime import timedelta, timezone
from typing import Any

import pytest

from gateway.domain.audit.chain import GENESIS_HASH, chain_key, record_hash, unkeyed_hash
from gateway.domain.audit.entry import AuditEntry, cap_body
from tests.gateway.audit.support import entry

NEW_COLUMNS = {"action", "target_type", "target_id", "details", "client_request_id"}


def test_cap_body_keeps_short_text_and_cuts_long_text_between_characters() -> None:
    assert cap_body("hello", 5) == "hello"
    assert cap_body("", 0) == ""
    text = "ab" + "é" * 10  # é is two bytes: a cut at an odd byte count falls inside one
    capped = cap_body(text, 5)
    kept, mark = capped.split("\n", 1)
    assert kept == "abé"  # 4 bytes: the half "é" is dropped, not mangled
    assert mark == "[truncated by the gateway: 4 of 22 bytes kept]"
    emoji = "😀" * 3  # four bytes each
    assert cap_body(emoji, 7).startswith("😀\n[truncated by the gateway: 4 of 12")
    assert cap_body(emoji, 0).startswith("\n[truncated by the gateway: 0 of 12")
    with pytest.raises(ValueError, match="negative"):
        cap_body("x", -1)


def test_json_round_trip_keeps_every_field() -> None:
    original = entry(
        7,
        api_key_id=uuid.uuid4(),
        department_id=uuid.uuid4(),
        streamed=True,
        prompt_body='{"messages": ["ünïcode"]}',
        response_body="line\nbreak",
        reason="rate_limit:requests_per_minute",
    )
    line = original.to_json()
    assert "\n" not in line  # one record, one spool line
    assert AuditEntry.from_json(line) == original


def test_fitted_cuts_values_to_their_columns_before_they_are_hashed() -> None:
    local = timezone(timedelta(hours=2))
    wide = entry(1, request_id="r" * 150, user_agent="a\x00b" * 300, prompt_tokens=2**40)
    wide.created_at = wide.created_at.astimezone(local)
    fitted = wide.fitted()
    assert len(fitted.request_id) == 100 and len(fitted.user_agent) == 500
    assert "\x00" not in fitted.user_agent
    assert fitted.prompt_tokens == 2**31 - 1
    assert fitted.created_at == wide.created_at and fitted.created_at.utcoffset() == timedelta(0)
    assert fitted.fitted() == fitted


KEY = chain_key("a test secret of at least thirty-two characters")


def test_hash_covers_every_field_the_seq_and_the_previous_hash() -> None:
    base = entry(3)
    reference = record_hash(KEY, GENESIS_HASH, 1, base)
    assert reference == record_hash(KEY, GENESIS_HASH, 1, entry(3))  # deterministic
    assert record_hash(KEY, GENESIS_HASH, 2, base) != reference
    assert record_hash(KEY, "1" * 64, 1, base) != reference
    changes: dict[str, Any] = {
        "created_at": base.created_at + timedelta(microseconds=1),
        "request_id": "other",
        "status_code": 500,
        "user_id": None,
        "streamed": True,
        "completion_tokens": 7,
        "ttft_ms": 1.0,
        "latency_ms": 0.5,
        "prompt_body": "",
        "response_body": "x",
        "error": "boom",
        "action": "key.revoke",
        "target_type": "api_key",
        "target_id": "k",
        "details": "{}",
        "client_request_id": "theirs",
    }
    for name, value in changes.items():
        changed = dataclasses.replace(base, **{name: value})
        assert record_hash(KEY, GENESIS_HASH, 1, changed) != reference, name


def test_the_hash_is_keyed_and_records_from_before_keying_check_as_plain_sha256() -> None:
    base = entry(3)
    other_key = chain_key("another secret, just as long as the first one")
    assert record_hash(other_key, GENESIS_HASH, 1, base) != record_hash(KEY, GENESIS_HASH, 1, base)
    assert chain_key("s") != hashlib.sha256(b"s").digest() and len(chain_key("s")) == 32
    # What the unkeyed chain (before migration 0003) stored: SHA-256 over the old columns.
    old = {k: v for k, v in base.plain().items() if k not in NEW_COLUMNS}
    canonical = json.dumps(
        {**old, "seq": 1, "prev_hash": GENESIS_HASH},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    assert unkeyed_hash(GENESIS_HASH, 1, base) == hashlib.sha256(canonical.encode()).hexdigest()
    with pytest.raises(ValueError, match="secret key"):
        chain_key("")

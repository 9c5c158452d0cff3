"""What the chain is sealed with: the HMAC key (from the secret) and the head log."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gateway.domain.audit.chain import chain_key
from gateway.domain.audit.head_log import HeadLog


@dataclass(frozen=True, slots=True)
class ChainSeal:
    key: bytes
    head_log: HeadLog

    def __repr__(self) -> str:
        return f"ChainSeal(key=<hidden>, head_log={self.head_log.path})"

    @classmethod
    def build(cls, secret_key: str, head_file: Path) -> ChainSeal:
        return cls(chain_key(secret_key), HeadLog(head_file))

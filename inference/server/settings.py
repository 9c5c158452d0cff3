"""ServerSettings: how one worker serves its engine (the engine's own knobs are EngineConfig)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """``api_key``: when set, every /v1, /tokenize and /detokenize call needs it as a bearer
    token. ``max_queue``: refuse new requests (503) while this many already wait."""

    served_model_name: str
    api_key: str | None = None
    max_queue: int | None = None
    drain_timeout_s: float = 30.0
    retry_after_s: int = 1
    max_tenant_length: int = 128

    def __post_init__(self) -> None:
        if not self.served_model_name:
            raise ValueError("served_model_name must not be empty")
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key must not be empty when given")
        if self.max_queue is not None and self.max_queue < 0:
            raise ValueError(f"max_queue must be non-negative, got {self.max_queue}")
        if self.drain_timeout_s < 0:
            raise ValueError(f"drain_timeout_s must be non-negative, got {self.drain_timeout_s}")
        if self.retry_after_s < 1:
            raise ValueError(f"retry_after_s must be at least 1, got {self.retry_after_s}")

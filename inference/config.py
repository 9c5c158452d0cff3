"""Frozen configs for the engine's subsystems, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The paged KV pool: ``num_blocks`` blocks of ``block_size`` token slots, of which
    pinned prefixes may hold at most ``max_pinned_fraction``."""

    num_blocks: int
    block_size: int = 16
    enable_prefix_caching: bool = True
    max_pinned_fraction: float = 0.5

    def __post_init__(self) -> None:
        if self.num_blocks < 1:
            raise ValueError(f"num_blocks must be at least 1, got {self.num_blocks}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {self.block_size}")
        if not 0 <= self.max_pinned_fraction < 1:
            raise ValueError(
                f"max_pinned_fraction must be in [0, 1), got {self.max_pinned_fraction}"
            )


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Per-step limits: sequences running at once and tokens fed to the model per step;
    with ``step_time_budget_ms``, also the time a step is planned to take (None: the
    token budget alone decides, see inference/engine/latency_policy.py)."""

    max_model_len: int
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    step_time_budget_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        budget = self.step_time_budget_ms
        if budget is not None and not budget > 0:
            raise ValueError(f"step_time_budget_ms must be positive or None, got {budget}")

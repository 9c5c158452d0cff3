"""The architecture description our model code is built from, read from a config.json."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
)

# Rope types whose frequencies we know how to compute (see layers/rotary.py).
# "freq_factors" is llama.cpp's rope_freqs tensor (Llama 3.1 scaling in GGUF files).
SUPPORTED_ROPE_TYPES = ("default", "llama3", "linear", "freq_factors")


@dataclass(frozen=True)
class ArchConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    # None for plain rope; otherwise a dict with "rope_type" ("llama3" or "linear") and its
    # parameters (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings).
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    qk_norm: bool
    # Stored only: attention is full (not windowed) for now, exact while the context stays
    # within the window.
    sliding_window: int | None
    bos_token_id: int | None
    eos_token_id: int | list[int] | None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.num_heads <= 0 or self.num_kv_heads <= 0 or self.head_dim <= 0:
            raise ValueError("num_heads, num_kv_heads and head_dim must be positive")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.rope_scaling is not None:
            rope_type = self.rope_scaling.get("rope_type")
            if rope_type not in SUPPORTED_ROPE_TYPES:
                raise ValueError(
                    f"unsupported rope_type {rope_type!r}; supported: {SUPPORTED_ROPE_TYPES}"
                )

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any]) -> ArchConfig:
        """Read a Hugging Face config.json (transformers 4 or 5 layout)."""
        if not isinstance(cfg, dict):
            raise ValueError(f"config must be a JSON object, got {type(cfg).__name__}")
        architectures = cfg.get("architectures") or []
        architecture = architectures[0] if architectures else None
        if architecture not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"unsupported architecture {architecture!r}; "
                f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        if cfg.get("mlp_bias"):
            raise ValueError("mlp_bias checkpoints are not supported")
        try:
            hidden = int(cfg["hidden_size"])
            num_heads = int(cfg["num_attention_heads"])
            rope_theta, rope_scaling = _read_rope(cfg)
            return cls(
                architecture=architecture,
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(cfg["intermediate_size"]),
                num_layers=int(cfg["num_hidden_layers"]),
                num_heads=num_heads,
                num_kv_heads=int(cfg.get("num_key_value_heads") or num_heads),
                head_dim=int(cfg.get("head_dim") or hidden // num_heads),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                rope_theta=rope_theta,
                rope_scaling=rope_scaling,
                max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                attention_bias=_has_qkv_bias(architecture, cfg),
                qk_norm=architecture == "Qwen3ForCausalLM",
                sliding_window=_read_sliding_window(cfg),
                bos_token_id=cfg.get("bos_token_id"),
                eos_token_id=cfg.get("eos_token_id"),
            )
        except KeyError as missing:
            raise ValueError(f"config.json lacks required field {missing.args[0]!r}") from None
        except (TypeError, ValueError) as bad:
            raise ValueError(f"bad value in config.json: {bad}") from None


def _read_rope(cfg: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    # transformers 5 folds rope_theta into rope_parameters; older files keep both on top.
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    theta = float(params.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
    rope_type = params.pop("rope_type", None) or params.pop("type", None) or "default"
    params.pop("type", None)
    if rope_type == "default":
        return theta, None
    return theta, {"rope_type": rope_type, **params}


def _has_qkv_bias(architecture: str, cfg: dict[str, Any]) -> bool:
    # Qwen2 configs do not say it: the architecture always has q/k/v bias.
    if architecture == "Qwen2ForCausalLM":
        return True
    return bool(cfg.get("attention_bias", False))


def _read_sliding_window(cfg: dict[str, Any]) -> int | None:
    # Qwen configs carry a sliding_window value even when use_sliding_window is false.
    if cfg.get("use_sliding_window") is False:
        return None
    window = cfg.get("sliding_window")
    return int(window) if window else None

"""The draft model of speculative decoding: loaded beside the target, and refused unless it
shares the target's tokenizer (the draft proposes token ids that the target verifies, so
an id must mean the same text to both).

The check compares the two vocabularies entry by entry (every token's text and id, added
tokens included), the BOS id, and, once loaded, the two models' output widths. The worker
runs the tokenizer half before it starts (`check_draft_tokenizer`), so a wrong
``--draft-model`` is a one-line CLI error rather than a failed start.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from inference.engine.engine_config import EngineConfig
from inference.model.arch import ArchConfig
from inference.model.llama import LlamaForCausalLM
from inference.model.loader import load_model, num_kv_cache_bytes_per_token
from inference.model.loader.gguf import GGUFCheckpoint, read_gguf
from inference.text.tokenizer import Tokenizer


def read_tokenizer(path: str, gguf: GGUFCheckpoint | None = None) -> Tokenizer:
    """A checkpoint's tokenizer: a GGUF file's metadata, or a directory's files."""
    if path.endswith(".gguf"):
        ckpt = gguf or read_gguf(path)
        return Tokenizer.from_parts(ckpt.tokenizer, ckpt.tokenizer_config, ckpt.generation_config)
    if not Path(path).is_dir():
        raise ValueError(f"model path {path!r} is neither a directory nor a .gguf file")
    return Tokenizer.from_dir(path)


def check_same_tokenizer(target: Tokenizer, draft: Tokenizer, draft_path: str) -> None:
    """ValueError naming the first difference unless both tokenizers map the same texts to
    the same ids and agree on BOS."""
    refuse = f"draft model {draft_path} does not share the target model's tokenizer"
    if draft.vocab_size != target.vocab_size:
        raise ValueError(
            f"{refuse}: its vocabulary has {draft.vocab_size} tokens, the target's "
            f"{target.vocab_size}"
        )
    draft_vocab = draft.backend.get_vocab(with_added_tokens=True)
    target_vocab = target.backend.get_vocab(with_added_tokens=True)
    if draft_vocab != target_vocab:
        differ = sorted(
            (token_id, text)
            for text, token_id in target_vocab.items()
            if draft_vocab.get(text) != token_id
        )
        token_id, text = differ[0] if differ else (-1, "?")
        raise ValueError(
            f"{refuse}: {len(differ)} tokens differ, the first {text!r} (id {token_id} for "
            f"the target, {draft_vocab.get(text)} for the draft)"
        )
    if draft.bos_token_id != target.bos_token_id:
        raise ValueError(
            f"{refuse}: its BOS token id is {draft.bos_token_id}, the target's "
            f"{target.bos_token_id}"
        )


def check_draft_tokenizer(model: str, tokenizer: str | None, draft_model: str) -> None:
    """The worker's check before it starts: paths exist and the tokenizers agree."""
    if not Path(draft_model).exists():
        raise FileNotFoundError(f"--draft-model {draft_model}: no such file or directory")
    target = read_tokenizer(tokenizer or model)
    check_same_tokenizer(target, read_tokenizer(draft_model), draft_model)


@dataclass(frozen=True, slots=True)
class DraftModel:
    path: str
    model: LlamaForCausalLM
    arch: ArchConfig
    kv_bytes_per_token: int  # of the draft's own pool (the draft model's dtype)
    kv_fraction: float  # the draft pool's tokens, as a fraction of the target pool's

    @property
    def kv_bytes_per_target_token(self) -> int:
        """What the draft's pool costs per token of the target's pool (to size both)."""
        return -(-int(self.kv_bytes_per_token * self.kv_fraction * 1024) // 1024)


def load_draft_model(
    config: EngineConfig, device: torch.device, target: Tokenizer, target_arch: ArchConfig
) -> DraftModel:
    """Load ``config.draft_model`` on ``device``, refusing one with another tokenizer."""
    path = config.draft_model
    if path is None:
        raise ValueError("speculative='draft' needs draft_model")
    if config.tensor_parallel_size > 1:
        raise ValueError("a draft model is not supported with tensor parallelism")
    gguf = read_gguf(path) if path.endswith(".gguf") else None
    check_same_tokenizer(target, read_tokenizer(path, gguf), path)
    model, arch = load_model(
        path, dtype=config.dtype, device=device, progress=config.progress, gguf=gguf
    )
    if arch.vocab_size != target_arch.vocab_size:
        raise ValueError(
            f"draft model {path} does not share the target model's tokenizer: its output "
            f"has {arch.vocab_size} logits, the target's {target_arch.vocab_size}"
        )
    return DraftModel(
        path=path,
        model=model,
        arch=arch,
        kv_bytes_per_token=num_kv_cache_bytes_per_token(arch, model.dtype),
        kv_fraction=config.draft_kv_cache_fraction,
    )

"""A `tokenizers.Tokenizer` and a tokenizer_config built from a GGUF file's tokenizer.ggml.* keys.

Only byte-level BPE (`tokenizer.ggml.model == "gpt2"`) is supported: the vocabulary and merges
are stored in the byte-to-unicode spelling GPT-2 uses, so they feed a BPE model unchanged.
"""

from collections.abc import Mapping
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

# llama.cpp's token_type values (llama_token_type).
CONTROL_TOKEN_TYPE = 3
USER_DEFINED_TOKEN_TYPE = 4

# Split patterns for `tokenizer.ggml.pre` values whose vocabularies were learned on something
# other than GPT-2's own split (which `ByteLevel(use_regex=True)` applies by default).
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZER_SPLITS = {
    "llama3": _LLAMA3_SPLIT,
    "llama-v3": _LLAMA3_SPLIT,
    "llama-bpe": _LLAMA3_SPLIT,
    "qwen2": _QWEN2_SPLIT,
    "deepseek-r1-qwen": _QWEN2_SPLIT,
}
# Vocabularies trained with every digit split apart before GPT-2's split (SmolLM, StarCoder).
DIGIT_SPLIT_PRE_TOKENIZERS = frozenset({"smollm", "starcoder", "refact"})
GPT2_PRE_TOKENIZERS = frozenset({"gpt2", "default", "gpt-2", "olmo", "jais"})


def _pre_tokenizer(pre_type: str) -> pre_tokenizers.PreTokenizer:
    if pre_type in PRE_TOKENIZER_SPLITS:
        split = pre_tokenizers.Split(Regex(PRE_TOKENIZER_SPLITS[pre_type]), behavior="isolated")
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        return pre_tokenizers.Sequence([split, byte_level])
    if pre_type in DIGIT_SPLIT_PRE_TOKENIZERS:
        digits = pre_tokenizers.Digits(individual_digits=True)
        return pre_tokenizers.Sequence([digits, pre_tokenizers.ByteLevel(add_prefix_space=False)])
    if pre_type in GPT2_PRE_TOKENIZERS:
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    raise ValueError(f"GGUF pre-tokenizer {pre_type!r} is not supported")


def build_tokenizer(metadata: Mapping[str, Any]) -> Tokenizer:
    """A byte-level BPE tokenizer from the tokenizer.ggml.* metadata; ValueError otherwise."""
    model_type = metadata.get("tokenizer.ggml.model")
    if model_type != "gpt2":
        raise ValueError(f"GGUF tokenizer model {model_type!r} is not supported (only 'gpt2')")
    tokens: list[str] = list(metadata["tokenizer.ggml.tokens"])
    token_types: list[int] = list(metadata.get("tokenizer.ggml.token_type", []))
    merge_lines: list[str] = list(metadata.get("tokenizer.ggml.merges", []))
    merges = []
    for line in merge_lines:
        left, sep, right = line.partition(" ")
        if not sep:
            raise ValueError(f"GGUF merge {line!r} is not two tokens separated by a space")
        merges.append((left, right))
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tokenizer.pre_tokenizer = _pre_tokenizer(str(metadata.get("tokenizer.ggml.pre", "default")))
    tokenizer.decoder = decoders.ByteLevel()
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    # A control token spelled outside the byte alphabet is a mislabelled normal token; treating
    # it as special would let text match it whole where the model never saw that.
    special = [
        AddedToken(token, normalized=False, special=True)
        for token, kind in zip(tokens, token_types, strict=False)
        if kind == CONTROL_TOKEN_TYPE and set(token) <= alphabet
    ]
    user_defined = [
        AddedToken(token, normalized=False, special=False)
        for token, kind in zip(tokens, token_types, strict=False)
        if kind == USER_DEFINED_TOKEN_TYPE
    ]
    tokenizer.add_special_tokens(special)
    tokenizer.add_tokens(user_defined)
    return tokenizer


def _token_or_none(metadata: Mapping[str, Any], key: str) -> str | None:
    token_id = metadata.get(f"tokenizer.ggml.{key}")
    if token_id is None:
        return None
    tokens = metadata["tokenizer.ggml.tokens"]
    if not 0 <= int(token_id) < len(tokens):
        raise ValueError(f"GGUF tokenizer.ggml.{key} {token_id} is outside the vocabulary")
    return str(tokens[int(token_id)])


def build_tokenizer_config(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """What a tokenizer_config.json would say: special tokens, BOS/EOS flags, chat template."""
    return {
        "bos_token": _token_or_none(metadata, "bos_token_id"),
        "eos_token": _token_or_none(metadata, "eos_token_id"),
        "unk_token": _token_or_none(metadata, "unknown_token_id"),
        "pad_token": _token_or_none(metadata, "padding_token_id"),
        "add_bos_token": bool(metadata.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(metadata.get("tokenizer.ggml.add_eos_token", False)),
        "chat_template": metadata.get("tokenizer.chat_template"),
    }

"""The model's tokenizer: a `tokenizers` backend plus what Hugging Face keeps beside it.

A checkpoint spreads its text settings over several files: the vocabulary and pipeline in
tokenizer.json, the special tokens, ``add_bos_token`` and the chat template in
tokenizer_config.json (or chat_template.jinja), and the end-of-sequence ids in
generation_config.json and config.json. This class gathers them so the engine asks one object.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import tokenizers

from inference.text.chat_template import ChatTemplateRenderer

_SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


def _token_content(value: object) -> str | None:
    # tokenizer_config.json stores a special token as a string or as a serialized AddedToken.
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _as_id_set(value: object) -> set[int]:
    if isinstance(value, bool):  # bool is an int subclass; never a token id
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, list):
        return {item for item in value if isinstance(item, int) and not isinstance(item, bool)}
    return set()


def _pick_chat_template(value: object, has_tools: bool) -> str | None:
    # A checkpoint may ship several named templates: [{"name": "default", "template": ...}].
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {
            item["name"]: item["template"]
            for item in value
            if isinstance(item, Mapping) and "name" in item and "template" in item
        }
        if has_tools and "tool_use" in named:
            return str(named["tool_use"])
        if "default" in named:
            return str(named["default"])
        raise ValueError(f"named chat templates {sorted(named)} include no 'default'")
    raise ValueError(f"chat_template must be a string or a list, got {type(value).__name__}")


class Tokenizer:
    """Encode, decode and render chat prompts for one model."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        tokenizer_config: Mapping[str, Any],
        generation_config: Mapping[str, Any] | None = None,
        model_config: Mapping[str, Any] | None = None,
    ) -> None:
        self._backend = backend
        self._chat_template_source: object = tokenizer_config.get("chat_template")
        self._renderer = ChatTemplateRenderer()
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=True)

        gen = generation_config or {}
        self.special_tokens: dict[str, str] = {}
        for key in _SPECIAL_TOKEN_KEYS:
            content = _token_content(tokenizer_config.get(key))
            if content is None:  # GGUF and some configs give only the id
                token_id = gen.get(f"{key}_id")
                if isinstance(token_id, int) and not isinstance(token_id, bool):
                    content = backend.id_to_token(token_id)
            if content is not None:
                self.special_tokens[key] = content
        self.bos_token_id: int | None = self._special_id("bos_token")

        eos_ids = _as_id_set(gen.get("eos_token_id"))
        eos_ids |= _as_id_set((model_config or {}).get("eos_token_id"))
        tokenizer_eos = self._special_id("eos_token")
        if tokenizer_eos is not None:
            eos_ids.add(tokenizer_eos)
        self.eos_token_ids: frozenset[int] = frozenset(eos_ids)

        special_ids = {
            token_id
            for token_id, added in backend.get_added_tokens_decoder().items()
            if added.special
        }
        for content in self.special_tokens.values():
            token_id = backend.token_to_id(content)
            if token_id is not None:
                special_ids.add(token_id)
        self.all_special_ids: frozenset[int] = frozenset(special_ids)

        # tokenizer.json's post-processor decides what encode adds (transformers 5 ignores
        # add_bos_token beside a tokenizer.json). A backend without one, as built from GGUF
        # metadata, follows the config's add_bos_token / add_eos_token, as llama.cpp does.
        self._own_special_tokens = backend.post_processor is None
        self._add_bos = (
            bool(tokenizer_config.get("add_bos_token")) and self.bos_token_id is not None
        )
        self._add_eos = bool(tokenizer_config.get("add_eos_token")) and tokenizer_eos is not None
        self._eos_token_id = tokenizer_eos

    @classmethod
    def from_dir(cls, path: str | Path) -> Self:
        directory = Path(path)
        tokenizer_file = directory / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise ValueError(
                f"{directory} has no tokenizer.json: Enclave needs a fast (tokenizers) tokenizer; "
                "convert a SentencePiece-only checkpoint with transformers and save it first"
            )
        try:
            backend = tokenizers.Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # the Rust side raises a bare Exception on a malformed file
            raise ValueError(f"cannot load {tokenizer_file}: {exc}") from exc
        tokenizer_config = _read_json(directory / "tokenizer_config.json") or {}
        template_file = directory / "chat_template.jinja"
        if template_file.is_file():  # newer transformers save the template on its own
            tokenizer_config = {
                **tokenizer_config,
                "chat_template": template_file.read_text(encoding="utf-8"),
            }
        return cls(
            backend,
            tokenizer_config,
            _read_json(directory / "generation_config.json"),
            _read_json(directory / "config.json"),
        )

    @classmethod
    def from_parts(
        cls,
        backend: tokenizers.Tokenizer,
        tokenizer_config: dict[str, Any],
        generation_config: dict[str, Any] | None = None,
    ) -> Self:
        """Build from pieces already in memory (the GGUF loader's).

        ``tokenizer_config`` holds tokenizer_config.json's keys (chat_template, bos_token, ...,
        add_bos_token); ``generation_config`` may give ``bos_token_id`` / ``eos_token_id`` (int
        or list) / ``pad_token_id`` / ``unk_token_id`` where the config names no token string.
        """
        return cls(backend, tokenizer_config, generation_config)

    @property
    def backend(self) -> tokenizers.Tokenizer:
        return self._backend

    @property
    def chat_template(self) -> str | None:
        return _pick_chat_template(self._chat_template_source, has_tools=False)

    def chat_template_for(self, *, tools: bool) -> str | None:
        """The template a conversation with (or without) tools renders with: a checkpoint
        may ship a named "tool_use" template beside its default one."""
        return _pick_chat_template(self._chat_template_source, has_tools=tools)

    def _special_id(self, key: str) -> int | None:
        content = self.special_tokens.get(key)
        return None if content is None else self._backend.token_to_id(content)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not self._own_special_tokens:
            return list(self._backend.encode(text, add_special_tokens=add_special_tokens).ids)
        ids = list(self._backend.encode(text, add_special_tokens=False).ids)
        if add_special_tokens:
            if self._add_bos and self.bos_token_id is not None:
                ids.insert(0, self.bos_token_id)
            if self._add_eos and self._eos_token_id is not None:
                ids.append(self._eos_token_id)
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        tokens = []
        for token_id in ids:
            token = self._backend.id_to_token(token_id)
            if token is None:
                raise ValueError(
                    f"token id {token_id} is outside the vocabulary of {self.vocab_size}"
                )
            tokens.append(token)
        return tokens

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        """Render a conversation to prompt text. Encode it with ``add_special_tokens=False``:
        templates write their own BOS."""
        template = _pick_chat_template(self._chat_template_source, has_tools=tools is not None)
        if template is None:
            raise ValueError(
                "this model has no chat template (none in tokenizer_config.json, "
                "chat_template.jinja or the GGUF metadata): send a plain completion prompt instead"
            )
        if not messages:
            raise ValueError("a chat needs at least one message")
        # Like transformers, every special token string is a template variable; kwargs win.
        variables: dict[str, Any] = {**self.special_tokens, **kwargs}
        bos_token = str(variables.pop("bos_token", ""))
        eos_token = str(variables.pop("eos_token", ""))
        return self._renderer.render(
            template,
            messages,
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            **variables,
        )

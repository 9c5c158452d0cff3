"""Tokenizer.from_dir against transformers on the same checkpoint directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer as BackendTokenizer
from tokenizers import processors
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from inference.text import Tokenizer
from tests.inference.text.conftest import random_texts, write_checkpoint

CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "Hello!"}],
    [
        {"role": "system", "content": "You answer from the quality manual."},
        {"role": "user", "content": "What is a nonconformance report?"},
        {"role": "assistant", "content": "A record of a part that fails a requirement."},
        {"role": "user", "content": "Draft one for a burr on part 7 — 東京 😀"},
    ],
    [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "second", "tool_calls": None},
        {"role": "user", "content": ""},
    ],
]

SPECIAL_TEXT = "<|im_start|>user\nhi there<|im_end|>\n<|endoftext|>Café 東京 😀"


def test_ids_and_special_tokens_match_transformers(chatml_dir: Path) -> None:
    ours = Tokenizer.from_dir(chatml_dir)
    theirs = AutoTokenizer.from_pretrained(chatml_dir)
    assert ours.vocab_size == len(theirs)
    assert ours.bos_token_id == theirs.bos_token_id
    assert ours.all_special_ids == frozenset(theirs.all_special_ids)
    # generation_config.json lists two end-of-sequence ids; the tokenizer's own is among them.
    assert ours.eos_token_ids == frozenset(
        {theirs.convert_tokens_to_ids("<|im_end|>"), theirs.convert_tokens_to_ids("<|endoftext|>")}
    )
    assert theirs.eos_token_id in ours.eos_token_ids


@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_encode_decode_match_transformers(chatml_dir: Path, add_special_tokens: bool) -> None:
    ours = Tokenizer.from_dir(chatml_dir)
    theirs = PreTrainedTokenizerFast(tokenizer_file=str(chatml_dir / "tokenizer.json"))
    for text in [*random_texts(1, 30), SPECIAL_TEXT, "", " leading and trailing "]:
        ids = ours.encode(text, add_special_tokens=add_special_tokens)
        assert ids == theirs.encode(text, add_special_tokens=add_special_tokens)
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(
                ids, skip_special_tokens=skip
            )
        assert ours.convert_ids_to_tokens(ids) == theirs.convert_ids_to_tokens(ids)


def test_special_tokens_are_single_ids_and_skippable(chatml_dir: Path) -> None:
    ours = Tokenizer.from_dir(chatml_dir)
    ids = ours.encode(SPECIAL_TEXT, add_special_tokens=False)
    im_start = ours.encode("<|im_start|>", add_special_tokens=False)
    assert len(im_start) == 1 and im_start[0] in ours.all_special_ids
    assert "<|im_start|>" not in ours.decode(ids, skip_special_tokens=True)
    assert ours.decode(ids, skip_special_tokens=False) == SPECIAL_TEXT


@pytest.mark.parametrize("adds_bos", [True, False])
def test_bos_follows_the_post_processor_like_transformers(
    tmp_path: Path, byte_level_backend: BackendTokenizer, adds_bos: bool
) -> None:
    # transformers 5 ignores add_bos_token beside a tokenizer.json: its post-processor rules.
    backend = BackendTokenizer.from_str(byte_level_backend.to_str())
    bos_id = backend.token_to_id("<|endoftext|>")
    if adds_bos:
        backend.post_processor = processors.TemplateProcessing(
            single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", bos_id)]
        )
    directory = write_checkpoint(
        tmp_path / "bos",
        backend,
        {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "add_bos_token": not adds_bos},
    )
    ours = Tokenizer.from_dir(directory)
    theirs = AutoTokenizer.from_pretrained(directory)
    for text in random_texts(2, 5):
        ids = ours.encode(text)
        assert ids == theirs.encode(text)
        assert (ids[0] == bos_id) is adds_bos
        without = ours.encode(text, add_special_tokens=False)
        assert without == theirs.encode(text, add_special_tokens=False)
        assert without[0] != bos_id


def test_backend_without_post_processor_follows_add_bos_token(
    byte_level_backend: BackendTokenizer,
) -> None:
    backend = BackendTokenizer.from_str(byte_level_backend.to_str())
    backend.post_processor = None  # what a GGUF-built backend looks like
    bos_id = backend.token_to_id("<|endoftext|>")
    plain = backend.encode("Café 東京", add_special_tokens=False).ids
    for add_bos_token in (True, False):
        tokenizer = Tokenizer.from_parts(
            backend, {"add_bos_token": add_bos_token}, {"bos_token_id": bos_id}
        )
        assert tokenizer.encode("Café 東京") == ([bos_id] if add_bos_token else []) + plain
        assert tokenizer.encode("Café 東京", add_special_tokens=False) == plain


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_chat_template_matches_transformers(
    chatml_dir: Path, conversation: list[dict[str, Any]], add_generation_prompt: bool
) -> None:
    ours = Tokenizer.from_dir(chatml_dir)
    theirs = AutoTokenizer.from_pretrained(chatml_dir)
    expected = theirs.apply_chat_template(
        conversation, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    rendered = ours.apply_chat_template(conversation, add_generation_prompt=add_generation_prompt)
    assert rendered == expected
    assert rendered.endswith("<|im_start|>assistant\n") is add_generation_prompt


def test_chat_template_sees_special_tokens_and_kwargs(
    tmp_path: Path, byte_level_backend: BackendTokenizer
) -> None:
    template = (
        "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}"
        "[{{ pad_token }}|{{ unk_token }}|{{ house_style }}]"
        "{% if tools %}{{ tools | tojson }}{% endif %}"
    )
    directory = write_checkpoint(
        tmp_path / "vars",
        byte_level_backend,
        {
            "bos_token": "<|im_start|>",
            "eos_token": {"__type": "AddedToken", "content": "<|im_end|>", "special": True},
            "unk_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>",
            "chat_template": template,
        },
    )
    tools: list[dict[str, Any]] = [
        {"type": "function", "function": {"name": "lookup_part", "parameters": {}}}
    ]
    messages = [{"role": "user", "content": "a < b & c"}]
    ours = Tokenizer.from_dir(directory)
    theirs = AutoTokenizer.from_pretrained(directory)
    rendered = ours.apply_chat_template(messages, tools=tools, house_style="terse")
    assert rendered == theirs.apply_chat_template(
        messages, tools=[*tools], house_style="terse", tokenize=False, add_generation_prompt=True
    )
    assert rendered.startswith("<|im_start|>a < b & c<|im_end|>[<|endoftext|>|<|endoftext|>|terse]")


def test_named_templates_and_template_file(
    tmp_path: Path, byte_level_backend: BackendTokenizer
) -> None:
    named = [
        {"name": "default", "template": "plain:{{ messages[0]['content'] }}"},
        {"name": "tool_use", "template": "tools:{{ tools | length }}"},
    ]
    directory = write_checkpoint(tmp_path / "named", byte_level_backend, {"chat_template": named})
    ours = Tokenizer.from_dir(directory)
    messages = [{"role": "user", "content": "hi"}]
    assert ours.apply_chat_template(messages) == "plain:hi"
    assert ours.apply_chat_template(messages, tools=[{"name": "a"}, {"name": "b"}]) == "tools:2"

    # chat_template.jinja, as transformers writes it, wins over tokenizer_config.json.
    (directory / "chat_template.jinja").write_text("file:{{ messages | length }}")
    assert Tokenizer.from_dir(directory).apply_chat_template(messages) == "file:1"
    assert (
        AutoTokenizer.from_pretrained(directory).apply_chat_template(messages, tokenize=False)
        == "file:1"
    )


def test_missing_pieces_are_clear_errors(tmp_path: Path, chatml_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"tokenizer\.json"):
        Tokenizer.from_dir(tmp_path)

    no_template = tmp_path / "no_template"
    no_template.mkdir()
    (no_template / "tokenizer.json").write_text((chatml_dir / "tokenizer.json").read_text())
    tokenizer = Tokenizer.from_dir(no_template)
    with pytest.raises(ValueError, match="this model has no chat template"):
        tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.convert_ids_to_tokens([tokenizer.vocab_size + 5])

    (no_template / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"tokenizer_config\.json"):
        Tokenizer.from_dir(no_template)


def test_eos_ids_from_every_source(tmp_path: Path, byte_level_backend: BackendTokenizer) -> None:
    directory = write_checkpoint(
        tmp_path / "eos",
        byte_level_backend,
        {"eos_token": "<|im_end|>"},
        {"eos_token_id": byte_level_backend.token_to_id("<|endoftext|>")},  # a bare int
    )
    (directory / "config.json").write_text(json.dumps({"eos_token_id": [7, 8]}))
    tokenizer = Tokenizer.from_dir(directory)
    expected = {7, 8, byte_level_backend.token_to_id("<|im_end|>")}
    expected.add(byte_level_backend.token_to_id("<|endoftext|>"))
    assert tokenizer.eos_token_ids == frozenset(expected)


def test_from_parts_takes_token_ids_when_config_has_no_strings(
    byte_level_backend: BackendTokenizer,
) -> None:
    # The GGUF loader knows ids (tokenizer.ggml.bos_token_id ...), not token strings.
    im_start = byte_level_backend.token_to_id("<|im_start|>")
    im_end = byte_level_backend.token_to_id("<|im_end|>")
    tokenizer = Tokenizer.from_parts(
        byte_level_backend,
        {"chat_template": "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}"},
        {"bos_token_id": im_start, "eos_token_id": im_end},
    )
    assert tokenizer.bos_token_id == im_start
    assert tokenizer.eos_token_ids == frozenset({im_end})
    assert tokenizer.apply_chat_template([{"role": "user", "content": "x"}]) == (
        "<|im_start|>x<|im_end|>"
    )

"""IncrementalDetokenizer: streamed text equals the full decode and never shows a broken char."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from tokenizers import Tokenizer as BackendTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from inference.text import IncrementalDetokenizer, Tokenizer
from tests.inference.text.conftest import CORPUS_LINES, random_texts

REPLACEMENT = "\ufffd"
MULTIBYTE_TEXTS = [
    "😀🎉🚀👍🏽 🇫🇷🇯🇵 👨‍👩‍👧",
    "東京は日本の首都です。数据中心的服务器。",
    "Café naïve façade jalapeño Ångström — «quotes» ½ °C",
    "mixed: a😀b東c é\n\t🚀 end",
]
SPECIAL_TEXT = "Hi<|im_end|>東京<|im_start|>😀<|endoftext|> done"


def _stream(detokenizer: IncrementalDetokenizer, ids: Sequence[int]) -> list[str]:
    return [detokenizer.step(token_id) for token_id in ids]


def _train_byte_fallback_bpe() -> BackendTokenizer:
    """A Llama 2 / Mistral style tokenizer: '▁' for spaces, <0xNN> tokens for unknown bytes,
    and a decoder that strips the text's first space."""
    trainer_model = BackendTokenizer(models.BPE(unk_token="<unk>"))
    trainer_model.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    ascii_lines = [line for line in CORPUS_LINES if line.isascii()]
    trainer_model.train_from_iterator(ascii_lines * 10, trainer)
    model = json.loads(trainer_model.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    merges = [tuple(pair) for pair in model["merges"]]
    backend = BackendTokenizer(
        models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True)
    )
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    backend.add_special_tokens(["<unk>", "<s>", "</s>"])
    return backend


@pytest.fixture(scope="module")
def chatml(chatml_dir: Path) -> Tokenizer:
    return Tokenizer.from_dir(chatml_dir)


def test_byte_level_tokens_really_split_characters(chatml: Tokenizer) -> None:
    # Without split characters the tests below would prove nothing.
    ids = chatml.encode("".join(MULTIBYTE_TEXTS), add_special_tokens=False)
    assert any(REPLACEMENT in chatml.decode([token_id]) for token_id in ids)


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_stream_equals_full_decode_byte_level(chatml: Tokenizer, skip_special_tokens: bool) -> None:
    prompt = chatml.encode("<|im_start|>user\nSay something<|im_end|>\n<|im_start|>assistant\n")
    for text in [*MULTIBYTE_TEXTS, SPECIAL_TEXT, *random_texts(3, 40)]:
        output_ids = chatml.encode(text, add_special_tokens=False)
        detokenizer = IncrementalDetokenizer(chatml, prompt, skip_special_tokens)
        pieces = _stream(detokenizer, output_ids)
        expected = chatml.decode(output_ids, skip_special_tokens=skip_special_tokens)
        assert "".join(pieces) == expected
        assert detokenizer.text == expected
        assert REPLACEMENT not in expected
        assert not any(REPLACEMENT in piece for piece in pieces)


def test_special_tokens_shown_only_when_asked(chatml: Tokenizer) -> None:
    output_ids = chatml.encode(SPECIAL_TEXT, add_special_tokens=False)
    shown = "".join(_stream(IncrementalDetokenizer(chatml, [], False), output_ids))
    hidden = "".join(_stream(IncrementalDetokenizer(chatml, [], True), output_ids))
    assert shown == SPECIAL_TEXT
    assert hidden == "Hi東京😀 done"


def test_prompt_cut_inside_a_character(chatml: Tokenizer) -> None:
    ids = chatml.encode("東京😀 and 👍🏽", add_special_tokens=False)
    cuts = [k for k in range(1, len(ids)) if chatml.decode(ids[:k]).endswith(REPLACEMENT)]
    assert cuts, "the text must split a character somewhere"
    for cut in cuts:
        prompt_text = chatml.decode(ids[:cut]).rstrip(REPLACEMENT)
        streamed = "".join(_stream(IncrementalDetokenizer(chatml, ids[:cut]), ids[cut:]))
        # The character the prompt left open is shown once the output completes it.
        assert streamed == chatml.decode(ids)[len(prompt_text) :]
        assert REPLACEMENT not in streamed


def test_stream_equals_in_context_decode_byte_fallback() -> None:
    tokenizer = Tokenizer.from_parts(_train_byte_fallback_bpe(), {"bos_token": "<s>"})
    byte_token = tokenizer.encode("東", add_special_tokens=False)
    assert len(byte_token) > 1, "CJK must fall back to byte tokens"
    prompt = tokenizer.encode("The quick fox said:", add_special_tokens=False)
    prompt_text = tokenizer.decode(prompt)
    for text in [*MULTIBYTE_TEXTS, *random_texts(4, 20)]:
        output_ids = tokenizer.encode(" " + text, add_special_tokens=False)
        full = tokenizer.decode(prompt + output_ids)
        assert full.startswith(prompt_text)
        streamed = _stream(IncrementalDetokenizer(tokenizer, prompt), output_ids)
        # The output in its context: its first space is kept, as a chat UI must show it.
        assert "".join(streamed) == full[len(prompt_text) :]
        assert not any(REPLACEMENT in piece for piece in streamed)


class _CountingTokenizer(Tokenizer):
    """The real tokenizer, recording how many ids each decode call gets."""

    decode_lengths: list[int]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        self.decode_lengths.append(len(ids))
        return super().decode(ids, skip_special_tokens)


def test_each_step_decodes_a_bounded_window(chatml_dir: Path) -> None:
    tokenizer = _CountingTokenizer.from_dir(chatml_dir)
    tokenizer.decode_lengths = []
    long_text = " ".join(random_texts(5, 40))
    output_ids = tokenizer.encode(long_text, add_special_tokens=False)
    assert len(output_ids) > 500
    prompt = output_ids[:300]
    detokenizer = IncrementalDetokenizer(tokenizer, prompt)
    tokenizer.decode_lengths = []
    streamed = "".join(_stream(detokenizer, output_ids))
    assert streamed == Tokenizer.decode(tokenizer, output_ids)
    assert max(tokenizer.decode_lengths) <= 40
    # About one decode per token, plus an occasional restart of the window.
    assert len(tokenizer.decode_lengths) < 1.2 * len(output_ids)

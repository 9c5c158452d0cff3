"""Tiny tokenizers trained in-process, saved as Hugging Face checkpoint directories."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer as BackendTokenizer
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Multi-byte text on purpose: with a few hundred merges, CJK characters and emoji stay split
# across byte tokens, which is what the detokenizer must survive.
CORPUS_LINES = [
    "The quick brown fox jumps over the lazy dog.",
    "Quality manuals describe every inspection step in detail.",
    "Café, naïve, façade, jalapeño, Ångström, São Paulo, Zürich.",
    "東京は日本の首都です。品質管理の手順を確認してください。",
    "数据中心的服务器正在运行推理引擎。",
    "Emoji time 😀🎉🚀👍🏽 and flags 🇫🇷🇯🇵 and a family 👨‍👩‍👧.",
    "Привет, как дела? Ελληνικά γράμματα. مرحبا بالعالم",
    "def add(a, b):\n    return a + b  # tabs\tand spaces   end",
]


def random_texts(seed: int, count: int) -> list[str]:
    """Texts mixing the corpus's scripts in random order and random cuts."""
    rng = random.Random(seed)
    pieces = " ".join(CORPUS_LINES).split(" ")
    texts = []
    for _ in range(count):
        words = [rng.choice(pieces) for _ in range(rng.randint(3, 25))]
        texts.append(rng.choice([" ", "", "\n"]).join(words))
    return texts


def train_byte_level_bpe(num_merges: int = 300) -> BackendTokenizer:
    backend = BackendTokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=len(alphabet) + len(SPECIAL_TOKENS) + num_merges,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=alphabet,
        show_progress=False,
    )
    backend.train_from_iterator(CORPUS_LINES * 20 + random_texts(0, 200), trainer)
    return backend


def write_checkpoint(
    directory: Path,
    backend: BackendTokenizer,
    tokenizer_config: dict[str, object],
    generation_config: dict[str, object] | None = None,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    backend.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **tokenizer_config}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    if generation_config is not None:
        (directory / "generation_config.json").write_text(json.dumps(generation_config))
    return directory


@pytest.fixture(scope="session")
def byte_level_backend() -> BackendTokenizer:
    return train_byte_level_bpe()


@pytest.fixture(scope="session")
def chatml_dir(
    tmp_path_factory: pytest.TempPathFactory, byte_level_backend: BackendTokenizer
) -> Path:
    """A ChatML checkpoint like SmolLM2's: no BOS added, two end-of-sequence ids."""
    return write_checkpoint(
        tmp_path_factory.mktemp("chatml"),
        byte_level_backend,
        {
            "bos_token": "<|im_start|>",
            "eos_token": "<|im_end|>",
            "unk_token": "<|endoftext|>",
            "pad_token": "<|im_end|>",
            "add_bos_token": False,
            "chat_template": CHATML_TEMPLATE,
        },
        {
            "bos_token_id": byte_level_backend.token_to_id("<|im_start|>"),
            "eos_token_id": [
                byte_level_backend.token_to_id("<|im_end|>"),
                byte_level_backend.token_to_id("<|endoftext|>"),
            ],
        },
    )

"""The grammar compiler (cache, time limit, errors), the tokenizer adapter on both kinds of
tokenizer the engine loads, and the bit-mask unpacking."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import llguidance
import pytest
import torch

from inference.engine.llm_engine import load_tokenizer
from inference.grammar import Constraint, GrammarError
from inference.grammar.compiler import GrammarCompiler
from inference.grammar.masks import MaskFiller, unpack_bitmask
from inference.grammar.tokenizer import ll_tokenizer
from inference.text.tokenizer import Tokenizer
from tests.inference.checkpoints import make_checkpoint

REPO_ROOT = Path(__file__).resolve().parents[3]
OBJECT = Constraint(
    "json_schema",
    json.dumps(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "required": ["a"],
            "additionalProperties": False,
        }
    ),
)


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    return Tokenizer.from_dir(make_checkpoint("llama", tmp_path_factory.mktemp("grammar-tok")))


def compiler_for(tokenizer: Tokenizer, vocab_size: int, **kw: float) -> GrammarCompiler:
    return GrammarCompiler(lambda: ll_tokenizer(tokenizer, vocab_size), **kw)  # type: ignore[arg-type]


def walk(matcher: llguidance.LLMatcher, token_ids: list[int]) -> bool:
    return all(matcher.consume_token(t) for t in token_ids)


def test_the_byte_level_bpe_tokenizer_drives_a_matcher(tiny_tokenizer: Tokenizer) -> None:
    compiler = compiler_for(tiny_tokenizer, 384)
    matcher = compiler.new_matcher(OBJECT)
    assert walk(matcher, tiny_tokenizer.encode('{"a":12}', add_special_tokens=False))
    assert matcher.is_stopped()
    refused = compiler.new_matcher(OBJECT)
    assert not walk(refused, tiny_tokenizer.encode('{"b":1}', add_special_tokens=False))


def test_the_demo_gguf_tokenizer_drives_a_matcher() -> None:
    script = REPO_ROOT / "scripts" / "fetch-demo-model.sh"
    found = subprocess.run([str(script)], check=True, capture_output=True, text=True)
    tokenizer = load_tokenizer(found.stdout.strip().splitlines()[-1])
    compiler = compiler_for(tokenizer, 49152)
    matcher = compiler.new_matcher(OBJECT)
    assert matcher.compute_bitmask()  # llguidance's own buffer: a word past ceil(V / 32)
    ids = tokenizer.encode('{"a":-7}', add_special_tokens=False)
    assert walk(matcher, ids) and matcher.is_stopped()
    # Only "{" (and tokens starting with it that the grammar allows) may come first.
    first = compiler.new_matcher(OBJECT)
    words = torch.frombuffer(bytearray(first.compute_bitmask()), dtype=torch.int32)
    allowed = unpack_bitmask(words.view(1, -1), 49152)[0]
    texts = {tokenizer.decode([int(t)]) for t in allowed.nonzero()[0]}
    assert texts and all(t.startswith("{") for t in texts)


def test_compiled_grammars_are_cached_by_kind_and_source_in_an_lru(
    tiny_tokenizer: Tokenizer,
) -> None:
    compiler = compiler_for(tiny_tokenizer, 384, cache_size=2)
    first = compiler.compile(OBJECT)
    assert compiler.compile(Constraint("json_schema", OBJECT.source)) is first
    assert (compiler.hits, compiler.misses) == (1, 1)
    compiler.compile(Constraint("regex", "a+"))
    compiler.compile(Constraint("regex", "b+"))  # evicts OBJECT, the least recently used
    assert len(compiler) == 2
    assert compiler.compile(OBJECT) is not first
    # A copy advances on its own; the cached matcher stays at the start.
    copy = compiler.new_matcher(Constraint("regex", "a+"))
    assert copy.consume_token(tiny_tokenizer.encode("a", add_special_tokens=False)[0])
    assert not compiler.compile(Constraint("regex", "a+")).is_accepting()


def test_errors_say_why_and_a_slow_compilation_is_cut_off(tiny_tokenizer: Tokenizer) -> None:
    compiler = compiler_for(tiny_tokenizer, 384)
    cases = {
        Constraint("json_schema", '{"not": {"type": "string"}}'): "not",
        Constraint("json_schema", '{"type": "integer", "minimum": 5, "maximum": 3}'): "minimum",
        Constraint("json_schema", "[1, 2]"): "object",
        Constraint("json_schema", "{broken"): "column",
        Constraint("regex", "(unclosed"): "regex",
        Constraint("grammar", "start: nowhere"): "nowhere",
    }
    for constraint, word in cases.items():
        with pytest.raises(GrammarError, match=word):
            compiler.compile(constraint)
    assert len(compiler) == 0  # nothing unusable is cached
    impatient = compiler_for(tiny_tokenizer, 384, timeout_s=1e-6)
    big = {f"p{i}": {"type": "string", "pattern": f"[a-z]{{{i},{i + 40}}}x"} for i in range(200)}
    slow = Constraint("json_schema", json.dumps({"type": "object", "properties": big}))
    with pytest.raises(GrammarError, match="took longer than"):
        impatient.compile(slow)


def test_unpack_bitmask_reads_bit_t_of_word_t_over_32() -> None:
    words = torch.zeros((2, 2), dtype=torch.int32)
    words[0, 0] = 1 | (1 << 5)
    words[0, 1] = -(2**31)  # bit 31 of word 1: token 63
    words[1, 1] = 1  # token 32
    bits = unpack_bitmask(words, 70)
    assert bits.shape == (2, 70)
    assert bits[0].nonzero()[0].tolist() == [0, 5, 63]
    assert bits[1].nonzero()[0].tolist() == [32]
    assert unpack_bitmask(words, 40).shape == (2, 40)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("overlap", [True, False])
def test_masks_touch_only_the_constrained_rows(
    tiny_tokenizer: Tokenizer, dtype: torch.dtype, overlap: bool
) -> None:
    compiler = compiler_for(tiny_tokenizer, 384)
    filler = MaskFiller(384, overlap=overlap)
    logits = torch.randn(3, 400).to(dtype)  # padded past the vocabulary, as a model's may be
    before = logits.clone()
    matcher = compiler.new_matcher(Constraint("choice", '["yes"]'))
    filler.apply(filler.start([(1, matcher)]), logits)
    assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
    kept = torch.isfinite(logits[1]).nonzero().flatten().tolist()
    assert kept and all(tiny_tokenizer.decode([t]) in ("y", "ye", "yes") for t in kept)
    assert torch.equal(logits[1, kept], before[1, kept])
    assert filler.stats.steps == 1 and filler.stats.rows == 1
    assert filler.start([]) is None
    filler.close()

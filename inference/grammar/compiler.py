"""Constraints compiled into llguidance matchers: bounded in time, cached by (kind, source).

A compiled entry is a fresh matcher (never advanced); each constrained sequence takes a
``deep_copy`` of it, which shares the compiled grammar and costs microseconds. Compilation
runs in a small thread pool (llguidance drops the GIL while it builds) and the caller waits
at most ``timeout_s``: past it the request is refused, and the build finishes in the
background, bounded by llguidance's own parser limits.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
from collections import OrderedDict
from collections.abc import Callable

import llguidance
import numpy as np

from inference.grammar.spec import ANY_OBJECT_SCHEMA, Constraint, GrammarError

DEFAULT_CACHE_SIZE = 256
DEFAULT_TIMEOUT_S = 10.0
PROBE_STEPS = 8  # tokens walked after compiling, to catch a parser that fails at once
# JSON is written compactly: no free whitespace between tokens, which a small model could
# otherwise fill until max_tokens.
JSON_OPTIONS: llguidance._lib.JsonCompileOptions = {"whitespace_flexible": False}


def grammar_text(constraint: Constraint) -> str:
    """The llguidance grammar document for ``constraint``; GrammarError if the source
    cannot even be read (the deeper checks happen when a matcher is built)."""
    kind, source = constraint.kind, constraint.source
    try:
        if kind == "json_schema":
            return llguidance.LLMatcher.grammar_from_json_schema(source, defaults=JSON_OPTIONS)
        if kind == "json_object":
            return llguidance.LLMatcher.grammar_from_json_schema(
                ANY_OBJECT_SCHEMA, defaults=JSON_OPTIONS
            )
        if kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(source)
        if kind == "choice":
            choices = json.loads(source)
            lark = "start: " + " | ".join(json.dumps(c) for c in choices)
            return llguidance.LLMatcher.grammar_from_lark(lark)
        # Lark, or GBNF (llama.cpp's EBNF), which llguidance converts to Lark.
        return llguidance.grammar_from("grammar", source)
    except ValueError as exc:
        raise GrammarError(str(exc)) from None


class GrammarCompiler:
    """Thread-safe: the server compiles from worker threads, the engine from its own."""

    def __init__(
        self,
        make_tokenizer: Callable[[], llguidance.LLTokenizer],
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._make_tokenizer = make_tokenizer
        self._tokenizer: llguidance.LLTokenizer | None = None
        self.cache_size = cache_size
        self.timeout_s = timeout_s
        self._cache: OrderedDict[Constraint, llguidance.LLMatcher] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="grammar")
        self.hits = 0
        self.misses = 0

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        """Built on first use (about 0.2 s for a 49k vocabulary), then kept."""
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = self._make_tokenizer()
            return self._tokenizer

    def compile(self, constraint: Constraint) -> llguidance.LLMatcher:
        """The cached fresh matcher for ``constraint`` (do not advance it: copy it);
        GrammarError saying why it cannot be used."""
        with self._lock:
            cached = self._cache.get(constraint)
            if cached is not None:
                self._cache.move_to_end(constraint)
                self.hits += 1
                return cached
            self.misses += 1
        tokenizer = self.tokenizer
        text = grammar_text(constraint)
        future = self._pool.submit(llguidance.LLMatcher, tokenizer, text, log_level=0)
        try:
            matcher = future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            raise GrammarError(
                f"the {constraint.kind} took longer than {self.timeout_s:g} s to compile; "
                "simplify it"
            ) from None
        if matcher.is_error():
            raise GrammarError(_first_lines(matcher.get_error()))
        probe(matcher, tokenizer.eos_tokens)
        with self._lock:
            self._cache[constraint] = matcher
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return matcher

    def new_matcher(self, constraint: Constraint) -> llguidance.LLMatcher:
        """A matcher of its own for one sequence, at the grammar's start."""
        return self.compile(constraint).deep_copy()

    def __len__(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def probe(matcher: llguidance.LLMatcher, eos: list[int], steps: int = PROBE_STEPS) -> None:
    """Walk a copy of ``matcher`` a few tokens (the lowest allowed id that is not EOS each
    time); GrammarError if llguidance's parser fails on the way. A grammar without a finite
    derivation (``start: "x" start``) passes the compiler and fails here, on its first
    token, rather than mid-request."""
    walker = matcher.deep_copy()
    for _ in range(steps):
        if walker.is_stopped():  # complete, or failed (an error stops a matcher too)
            break
        bits = np.unpackbits(np.frombuffer(walker.compute_bitmask(), np.uint8), bitorder="little")
        allowed = [int(t) for t in np.flatnonzero(bits) if int(t) not in eos]
        if walker.is_error() or not allowed:
            break
        walker.consume_token(allowed[0])
    if walker.is_error():
        raise GrammarError(_first_lines(walker.get_error()))


def _first_lines(message: str, limit: int = 600) -> str:
    message = message.split("<state>", 1)[0].strip()  # not the parser state's dump
    return message if len(message) <= limit else message[: limit - 3] + "..."

"""Turning a stream of sampled tokens into a stream of text, one token at a time.

A token is not a unit of text: byte-level vocabularies split one character across tokens,
and a decoder may treat a token differently by what precedes it (a leading space dropped at
the start). So each step decodes a short window of recent tokens, in context, and emits only
what that window adds beyond the text already emitted. Text that ends in U+FFFD is an
unfinished character (or several byte tokens awaiting their last), so it is held back until a
later token completes it. The window slides forward so a step costs the same at token 10 and
token 10,000.
"""

from __future__ import annotations

from collections.abc import Sequence

from inference.text.tokenizer import Tokenizer

_REPLACEMENT_CHAR = "\ufffd"
# Tokens of already-emitted text kept at the start of the window: enough context for any
# decoder we know (a leading-space rule needs one token, a split character at most four).
_CONTEXT_TOKENS = 6
# Once the window is this long and nothing is held back, it restarts from its last tokens.
_MAX_WINDOW_TOKENS = 32
# A window must not start inside a character; step back at most this far looking for a start.
_MAX_START_BACKOFF = 8


class IncrementalDetokenizer:
    """Text for one sample's output tokens, emitted as soon as it is final.

    Invariant: ``self._window`` ends with the newest token and starts on a character boundary;
    ``self._window_emitted`` characters of ``decode(self._window)`` have been emitted (or
    belong to the prompt). Joining every ``step`` result gives ``text``, which equals decoding
    the output tokens in their context after the prompt (byte-level vocabularies: simply
    ``tokenizer.decode(output_ids)``), except for an unfinished character at the very end.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: Sequence[int],
        skip_special_tokens: bool = True,
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._window, window_text = self._clean_window(list(prompt_token_ids))
        # A prompt cut inside a character leaves it open: the output that completes it shows it.
        self._window_emitted = len(window_text.rstrip(_REPLACEMENT_CHAR))
        self._pieces: list[str] = []
        self._joined = ""
        self._num_joined = 0

    @property
    def text(self) -> str:
        """Everything emitted so far (joined lazily: the engine reads it rarely)."""
        if self._num_joined != len(self._pieces):
            self._joined += "".join(self._pieces[self._num_joined :])
            self._num_joined = len(self._pieces)
        return self._joined

    def step(self, token_id: int) -> str:
        """Add one sampled token; return the text it completes ('' while a character is open)."""
        self._window.append(token_id)
        window_text = self._decode(self._window)
        stable_len = len(window_text.rstrip(_REPLACEMENT_CHAR))
        new_text = window_text[self._window_emitted : stable_len]
        # max(): a decoder may drop text it showed before (a leading space once the window has
        # only special tokens); never re-emit, never go backwards.
        self._window_emitted = max(self._window_emitted, stable_len)
        if new_text:
            self._pieces.append(new_text)
        if stable_len == len(window_text) and len(self._window) >= _MAX_WINDOW_TOKENS:
            self._window, restarted_text = self._clean_window(self._window)
            self._window_emitted = len(restarted_text)
        return new_text

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special_tokens)

    def _clean_window(self, ids: list[int]) -> tuple[list[int], str]:
        """The last few of ``ids``, starting where no character is split, and their text.

        A start inside a UTF-8 character decodes to a leading U+FFFD (a lone continuation
        byte), so step back until the window's text starts with something else.
        """
        start = max(0, len(ids) - _CONTEXT_TOKENS)
        lowest = max(0, start - _MAX_START_BACKOFF)
        window_text = self._decode(ids[start:])
        while start > lowest and window_text.startswith(_REPLACEMENT_CHAR):
            start -= 1
            window_text = self._decode(ids[start:])
        return ids[start:], window_text

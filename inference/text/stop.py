"""Stop strings: end a sample when its text contains one, without ever showing it.

Text arrives in deltas (one per token), and a stop string may be split across any number of
them, so the end of the text that could still grow into a stop string is held back until it
either completes one or stops matching.

The sample stops where the first stop string is complete: at the earliest end position in the
text, and of the stop strings ending there, the longest. That point does not depend on how
the text was cut into deltas.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopStringMatcher:
    """Filters one sample's text stream against its stop strings."""

    def __init__(self, stop: Sequence[str]) -> None:
        if isinstance(stop, str):
            raise ValueError("stop must be a list of strings, not one string")
        for item in stop:
            if not isinstance(item, str) or not item:
                raise ValueError(f"each stop string must be a non-empty string, got {item!r}")
        # Longest first, so that of two stop strings ending at one position the longer wins.
        self._stops = tuple(sorted(set(stop), key=len, reverse=True))
        self._held = ""
        self.matched: str | None = None  # the stop string that ended the text, once one has

    def feed(self, delta: str) -> tuple[str, bool]:
        """Take the next piece of text; return (text safe to emit now, whether it stopped)."""
        text = self._held + delta
        match = self._first_match(text)
        if match is not None:
            start, stop_string = match
            self.matched = stop_string
            # Whatever follows the stop string waits here, should the caller feed on.
            self._held = text[start + len(stop_string) :]
            return text[:start], True
        hold = self._longest_partial_suffix(text)
        self._held = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold], False

    def flush(self) -> str:
        """The held-back tail: call once when the sample ends for another reason."""
        tail, self._held = self._held, ""
        return tail

    def _first_match(self, text: str) -> tuple[int, str] | None:
        best: tuple[int, int, str] | None = None  # (end, start, stop string)
        for stop_string in self._stops:
            start = text.find(stop_string)
            if start < 0:
                continue
            end = start + len(stop_string)
            # Strictly earlier end only: at equal ends the longer string, seen first, stays.
            if best is None or end < best[0]:
                best = (end, start, stop_string)
        return None if best is None else (best[1], best[2])

    def _longest_partial_suffix(self, text: str) -> int:
        """Length of the longest end of ``text`` that is the start of a stop string."""
        longest = 0
        for stop_string in self._stops:
            for length in range(min(len(stop_string) - 1, len(text)), longest, -1):
                if text.endswith(stop_string[:length]):
                    longest = length
                    break
        return longest

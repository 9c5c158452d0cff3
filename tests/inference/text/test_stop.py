"""StopStringMatcher against a brute-force reference, over every way to cut the text."""

from __future__ import annotations

import random

import pytest

from inference.text import StopStringMatcher


def _reference(text: str, stop: list[str]) -> tuple[str, bool]:
    """Walk the text one character at a time; stop at the first point a stop string ends
    (the longest of those ending there)."""
    for end in range(1, len(text) + 1):
        ending_here = [s for s in stop if text[:end].endswith(s)]
        if ending_here:
            return text[: end - max(len(s) for s in ending_here)], True
    return text, False


def _run(deltas: list[str], stop: list[str]) -> tuple[str, bool]:
    matcher = StopStringMatcher(stop)
    emitted = []
    for delta in deltas:
        safe, stopped = matcher.feed(delta)
        assert not any(s in safe for s in stop)  # a stop string is never shown
        emitted.append(safe)
        if stopped:
            return "".join(emitted), True
    emitted.append(matcher.flush())
    return "".join(emitted), False


CASES: list[tuple[str, list[str]]] = [
    ("The answer is 42.\nUser: next question", ["\nUser:"]),
    ("alpha beta STOP gamma", ["STOP", "END"]),
    ("one two END three STOP", ["STOP", "END"]),
    ("xxabcxx", ["ab", "abc"]),  # a stop string that is a prefix of another
    ("xxabxx", ["abc", "ab"]),
    ("xxabcdxx", ["abcd", "c"]),  # the shorter one completes first
    ("aaab", ["aab"]),  # the match starts inside a false start
    ("東京😀は<|im_end|>後", ["<|im_end|>", "😀は<"]),
    ("no stop anywhere in this text, only a near miss: </ and <|im", ["</s>", "<|im_end|>"]),
    ("ends with a partial <|im_en", ["<|im_end|>"]),
    ("", ["x"]),
]


@pytest.mark.parametrize(("text", "stop"), CASES)
def test_every_two_piece_split_matches_reference(text: str, stop: list[str]) -> None:
    expected = _reference(text, stop)
    assert _run([text], stop) == expected
    for cut in range(len(text) + 1):
        assert _run([text[:cut], text[cut:]], stop) == expected, cut


@pytest.mark.parametrize(("text", "stop"), CASES)
def test_character_by_character_and_random_splits(text: str, stop: list[str]) -> None:
    expected = _reference(text, stop)
    assert _run(list(text), stop) == expected
    rng = random.Random(len(text))
    for _ in range(50):
        cuts = sorted(rng.sample(range(len(text) + 1), k=min(len(text) + 1, rng.randint(1, 6))))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        assert _run(pieces, stop) == expected


def test_holds_back_only_what_could_still_match() -> None:
    matcher = StopStringMatcher(["</answer>"])
    assert matcher.feed("result: 7 </ans") == ("result: 7 ", False)
    assert matcher.feed("wer is here") == ("</answer is here", False)  # a near miss is released
    assert matcher.feed(" </answer> trailing") == (" ", True)
    assert matcher.matched == "</answer>"


def test_no_stop_flush_returns_the_rest() -> None:
    matcher = StopStringMatcher(["###"])
    assert matcher.feed("text ##") == ("text ", False)
    assert matcher.flush() == "##"
    assert matcher.flush() == ""
    assert matcher.matched is None


def test_feeding_on_after_a_stop_continues_past_it() -> None:
    matcher = StopStringMatcher(["|"])
    assert matcher.feed("a|b") == ("a", True)
    assert matcher.feed("c|d") == ("bc", True)
    assert matcher.flush() == "d"


@pytest.mark.parametrize("stop", [[""], ["ok", ""], "STOP", [None]])
def test_invalid_stop_lists(stop: object) -> None:
    with pytest.raises(ValueError, match="stop"):
        StopStringMatcher(stop)  # type: ignore[arg-type]

"""The engine step's view of constrained samples: which logits rows carry a matcher, and
advancing a matcher with the token its sample drew."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inference.engine.request_state import SampleState

log = logging.getLogger("inference.grammar")


def constrained_rows(samples: Sequence[SampleState]) -> list[tuple[int, Any]]:
    """(logits row, matcher) for each sample of this step that is constrained."""
    return [(row, s.matcher) for row, s in enumerate(samples) if s.matcher is not None]


def advance(sample: SampleState, token_id: int) -> str | None:
    """Feed ``token_id`` to the sample's matcher: None to go on, "stop" when the grammar is
    complete, else why the matcher failed (its parser ran past a limit, or refused a token
    the mask allowed): the sample ends rather than running on unconstrained."""
    matcher = sample.matcher
    accepted = matcher.consume_token(token_id)
    if matcher.is_error() or not accepted:
        error = str(matcher.get_error()).split("<state>", 1)[0].strip()
        log.warning(
            "request %s: its grammar failed at token %d: %s", sample.seq.request_id, token_id, error
        )
        return f"grammar error: {error or 'token refused'}"
    return "stop" if matcher.is_stopped() else None

"""What a stream has already sent of each choice, so each chunk carries only the new part."""

from __future__ import annotations

from dataclasses import dataclass, field

from inference.outputs import CompletionOutput
from inference.sampling.logprobs import TokenLogprobs


@dataclass(slots=True)
class ChoiceDelta:
    text: str
    logprobs: list[TokenLogprobs] | None  # None: logprobs were not asked for
    text_offset: int  # where ``text`` starts in the choice's whole text
    finish_reason: str | None  # set once, on the delta that ends the choice
    stop_reason: str | int | None


@dataclass
class StreamCursor:
    num_text_sent: dict[int, int] = field(default_factory=dict)
    num_logprobs_sent: dict[int, int] = field(default_factory=dict)
    finished: set[int] = field(default_factory=set)

    def advance(self, choice_index: int, completion: CompletionOutput) -> ChoiceDelta | None:
        """The unsent part of ``completion`` (cumulative); None when there is nothing new."""
        if choice_index in self.finished:
            return None
        text_start = self.num_text_sent.get(choice_index, 0)
        new_text = completion.text[text_start:]
        new_logprobs = None
        if completion.logprobs is not None:
            lp_start = self.num_logprobs_sent.get(choice_index, 0)
            new_logprobs = completion.logprobs[lp_start:]
            self.num_logprobs_sent[choice_index] = len(completion.logprobs)
        self.num_text_sent[choice_index] = max(text_start, len(completion.text))
        if completion.finish_reason is not None:
            self.finished.add(choice_index)
        if not new_text and not new_logprobs and completion.finish_reason is None:
            return None
        return ChoiceDelta(
            text=new_text,
            logprobs=new_logprobs,
            text_offset=text_start,
            finish_reason=completion.finish_reason,
            stop_reason=completion.stop_reason,
        )

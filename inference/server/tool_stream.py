"""Tool calls out of a stream of text deltas, sent as OpenAI sends them.

One :class:`ToolStreamer` per choice. Text outside calls goes out as content, held back only
while its tail could still be the start of a call's opening marker. Inside a call nothing
goes out as content: a call's first delta (index, id, type, name, arguments "") leaves as
soon as its name has been written, and the arguments then leave as they are written (the
raw JSON text, up to where the arguments object closes). Llama 3's and Mistral's calls run
to the end of the reply: they stream the same way while they look like a sequence of
``{"name": ..., "arguments"/"parameters": {...}}`` objects, and whatever does not (keys in
another order, Mistral v11's ``name[ARGS]``) is left to the parse at the end, each such call
leaving as its first delta plus one delta with all its arguments.

A call that turns out malformed goes out as content if none of it has been sent yet.
Calls past ``max_calls`` (``parallel_tool_calls`` false) are dropped, as parse drops them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from inference.server.protocol import FunctionCallDelta, ToolCallDelta
from inference.server.tool_calls import (
    HERMES_CLOSE,
    HERMES_OPEN,
    LLAMA_TAG,
    MISTRAL_MARK,
    ToolFormat,
    call_of,
    new_call_id,
    parse,
)

Event = str | ToolCallDelta  # content text, or a tool-call delta
_HEAD = re.compile(
    r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*'
)
_ARGS_KEY = re.compile(r'"(?:arguments|parameters)"\s*:\s*\S')
_MAX_HEAD = 1024  # characters of a call's start that may go by without its name
_BETWEEN = " \t\r\n,;[]}"  # what may come between (and around) calls in a region


@dataclass
class _ObjectEnd:
    """Finds where a JSON object closes, one character at a time."""

    depth: int = 0
    in_string: bool = False
    escaped: bool = False
    done: bool = False

    def feed(self, ch: str) -> None:
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif ch == "\\":
                self.escaped = True
            elif ch == '"':
                self.in_string = False
        elif ch == '"':
            self.in_string = True
        elif ch in "{[":
            self.depth += 1
        elif ch in "}]":
            self.depth -= 1
            self.done = self.depth == 0


@dataclass
class _Call:
    """The Hermes call being written: its body so far and what of it has been sent."""

    index: int
    lead: str = ""  # the whitespace before its marker: content again if the call is bad
    body: str = ""
    sent_head: bool = False
    args_at: int = 0  # where the arguments start in body
    args_sent: int = 0  # how many characters of them have been sent
    scanner: _ObjectEnd = field(default_factory=_ObjectEnd)


@dataclass
class _Region:
    """Llama 3's or Mistral's calls, from where they start to the end of the reply."""

    text: str = ""
    at: int = 0  # where the next call may start
    call: _Call | None = None  # the call whose arguments are being sent
    stopped: bool = False  # the rest is left to the parse at the end


class ToolStreamer:
    def __init__(self, fmt: ToolFormat, max_calls: int | None = None) -> None:
        self.fmt = fmt
        self.max_calls = max_calls  # deltas of later calls are dropped (as in parse)
        self.num_calls = 0
        self._pending = ""  # text not yet sent: a possible marker's start, or a call region
        self._seen_text = False  # content other than whitespace has been sent
        self._region: _Region | None = None  # llama3 / mistral: inside the calls, to the end
        self._call: _Call | None = None  # hermes: inside this call

    def feed(self, text: str) -> list[Event]:
        return self._kept(self._feed(text))

    def finish(self) -> list[Event]:
        """Everything held back, at the end of the reply."""
        return self._kept(self._finish())

    def _kept(self, events: list[Event]) -> list[Event]:
        if self.max_calls is None:
            return events
        limit = self.max_calls
        return [e for e in events if isinstance(e, str) or e.index < limit]

    def _feed(self, text: str) -> list[Event]:
        self._pending += text
        events: list[Event] = []
        while True:
            if self._region is not None:
                self._region.text += self._pending
                self._pending = ""
                return events + self._in_region(self._region)
            before = (self._pending, self._call is None)
            if self._call is not None:
                events += self._in_call()
            else:
                events += self._in_text()
            if (self._pending, self._call is None) == before and self._region is None:
                return events

    def _finish(self) -> list[Event]:
        events: list[Event] = []
        if self._call is not None:
            events += self._close_call(self._call.body + self._pending)
        elif self._region is not None:
            events += self._close_region(self._region)
        elif self._pending and (self._pending.strip() or not self.num_calls):
            events.append(self._pending)
        self._pending = ""
        return events

    # -- outside calls ----------------------------------------------------------------------

    def _in_text(self) -> list[Event]:
        text = self._pending
        if self.fmt == "llama3":
            return self._llama_text(text)
        marker = HERMES_OPEN if self.fmt == "hermes" else MISTRAL_MARK
        at = text.find(marker)
        if at >= 0:
            self._pending = text[at + len(marker) :]
            before = text[:at].rstrip()
            if self.fmt == "hermes":
                self._call = _Call(self.num_calls, lead=text[len(before) : at])
            else:
                self._region = _Region(text[len(before) :])
                self._pending = ""
            return self._content(before)
        # Held back: what could begin the marker, and whitespace (it may precede a call).
        cut = len(text) - _marker_prefix_len(text, marker)
        cut = len(text[:cut].rstrip())
        self._pending = text[cut:]
        return self._content(text[:cut])

    def _llama_text(self, text: str) -> list[Event]:
        # Llama 3 calls are the whole reply: only its start can open them.
        if self._seen_text:
            self._pending = ""
            return [text] if text else []
        body = text.lstrip()
        if body.startswith("{") or body.startswith(LLAMA_TAG):
            self._region = _Region(text)
            self._pending = ""
            return []
        if not body or LLAMA_TAG.startswith(body):
            return []
        self._pending = ""
        return self._content(text)

    def _content(self, text: str) -> list[Event]:
        if not text.strip():  # whitespace around calls is not content (as in tool_calls.parse)
            return []
        self._seen_text = True
        return [text]

    # -- inside a Hermes call ---------------------------------------------------------------

    def _in_call(self) -> list[Event]:
        call = self._call
        assert call is not None
        at = self._pending.find(HERMES_CLOSE)
        if at >= 0:
            body, self._pending = (
                call.body + self._pending[:at],
                self._pending[at + len(HERMES_CLOSE) :],
            )
            return self._close_call(body)
        keep = _marker_prefix_len(self._pending, HERMES_CLOSE)
        call.body += self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(self._pending) - keep :]
        events: list[Event] = []
        if not call.sent_head:
            head = _HEAD.match(call.body)
            if head is None or not call.body[head.end() :].startswith("{"):
                return events
            try:
                name = json.loads(f'"{head.group(1)}"')
            except ValueError:  # a bad escape: the call is judged when it closes
                return events
            events.append(self._head(call.index, name))
            call.sent_head, call.args_at = True, head.end()
        events += self._more_arguments(call)
        return events

    def _more_arguments(self, call: _Call) -> list[Event]:
        start = call.args_at + call.args_sent
        sent = 0
        for ch in call.body[start:]:
            if call.scanner.done:
                break
            call.scanner.feed(ch)
            sent += 1
        if not sent:
            return []
        call.args_sent += sent
        return [_arguments(call.index, call.body[start : start + sent])]

    def _close_call(self, body: str) -> list[Event]:
        call = self._call
        assert call is not None
        self._call = None
        call.body = body
        try:
            parsed = call_of(json.loads(body))
        except (ValueError, RecursionError):  # deep nesting: RecursionError
            parsed = None
        if not call.sent_head:
            if parsed is None:
                return self._content(call.lead + HERMES_OPEN + body + HERMES_CLOSE)
            return self._whole_call(parsed.name, parsed.arguments)
        self.num_calls = max(self.num_calls, call.index + 1)
        events = self._more_arguments(call)
        if parsed is not None and not call.scanner.done:  # the arguments were JSON text
            events.append(_arguments(call.index, parsed.arguments))
        return events

    # -- inside Llama 3's or Mistral's calls ------------------------------------------------

    def _in_region(self, region: _Region) -> list[Event]:
        events: list[Event] = []
        text = region.text
        while not region.stopped:
            call = region.call
            if call is not None:
                call.body = text
                events += self._more_arguments(call)
                if not call.scanner.done:
                    return events
                region.call, region.at = None, call.args_at + call.args_sent
                continue
            region.at = _skip_between(text, region.at)
            if region.at == len(text):
                return events
            head = _HEAD.match(text, region.at) if text[region.at] == "{" else None
            if head is None or not text.startswith("{", head.end()):
                waiting = text[region.at] == "{" and len(text) - region.at <= _MAX_HEAD
                if head is None and waiting and not _ARGS_KEY.search(text, region.at):
                    return events  # the call's start, still being written
                if head is not None and len(text) == head.end():
                    return events  # the arguments are next
                region.stopped = True  # not a call this scanner follows
                break
            try:
                name = json.loads(f'"{head.group(1)}"')
            except ValueError:
                region.stopped = True
                break
            region.call = _Call(self.num_calls, body=text, sent_head=True, args_at=head.end())
            events.append(self._head(self.num_calls, name))
        return events

    def _close_region(self, region: _Region) -> list[Event]:
        events: list[Event] = []
        if region.call is not None:  # cut short: send what was written
            region.call.body = region.text
            events += self._more_arguments(region.call)
        parsed = parse(region.text, self.fmt)
        if not self.num_calls and parsed.content is not None:
            events.append(parsed.content)
        for call in parsed.calls[self.num_calls :]:  # those the scanner did not follow
            events += self._whole_call(call.name, call.arguments)
        return events

    def _head(self, index: int, name: str) -> ToolCallDelta:
        self.num_calls = max(self.num_calls, index + 1)
        return ToolCallDelta(
            index=index,
            id=new_call_id(),
            type="function",
            function=FunctionCallDelta(name=name, arguments=""),
        )

    def _whole_call(self, name: str, arguments: str) -> list[Event]:
        index = self.num_calls
        return [self._head(index, name), _arguments(index, arguments)]


def _arguments(index: int, text: str) -> ToolCallDelta:
    return ToolCallDelta(index=index, function=FunctionCallDelta(arguments=text))


def _skip_between(text: str, at: int) -> int:
    """Past separators and markers: what a region may hold between calls."""
    while at < len(text):
        if text.startswith(MISTRAL_MARK, at):
            at += len(MISTRAL_MARK)
        elif text.startswith(LLAMA_TAG, at):
            at += len(LLAMA_TAG)
        elif text[at] in _BETWEEN:
            at += 1
        else:
            break
    return at


def _marker_prefix_len(text: str, marker: str) -> int:
    """The length of the longest end of ``text`` that begins ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0

"""Chat templates: the Jinja programs that models ship to turn a conversation into a prompt.

Templates come from checkpoints we did not write, so they run in jinja2's immutable sandbox:
no attribute starting with an underscore, no mutation of the caller's lists and dicts. The
environment offers what Hugging Face templates expect (``raise_exception``, ``strftime_now``,
a ``tojson`` that does not HTML-escape, ``namespace``, ``dict``, loop controls and the
``{% generation %}`` block) so that a template renders here as it does in ``transformers``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import jinja2.utils
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` marks assistant text for training masks;
    rendering a prompt only needs its body, so the tag renders what it wraps unchanged."""

    tags = {"generation"}  # noqa: RUF012 (jinja2 reads this class attribute)

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_render_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_body(self, caller: Any) -> str:
        return str(caller())


class _TemplateNamespace(jinja2.utils.Namespace):
    """``namespace(...)`` that refuses underscore names, so a template cannot plant dunders."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        # Positional self, as in jinja2's Namespace, so that namespace(self=...) still works.
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _check_namespace_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _check_namespace_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)


def _check_namespace_name(name: object) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise SecurityError(f"a chat template may not set the attribute {name!r} on a namespace")


class _DictConstructor:
    """``dict(...)`` for templates, without exposing the ``dict`` type object itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, keys: Sequence[Any], value: Any = None) -> dict[Any, Any]:
        return dict.fromkeys(keys, value)


def _raise_exception(message: str) -> NoReturn:
    raise TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # jinja2's own tojson escapes <, > and & for HTML; prompts must carry them verbatim.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _plain_data(value: Any) -> Any:
    """A copy of ``value`` made of JSON types only.

    The sandbox lets a template call any public method of what it is given; plain data has
    none that do harm, whereas a caller's rich objects (pydantic models, file handles) might.
    """
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):  # subclasses (enums) may carry extra methods
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {_plain_data(key): _plain_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_data(item) for item in value]
    return f"<{type(value).__name__}>"


def _plain_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    plain = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise ValueError(f"a chat message must be a dict, got {type(message).__name__}")
        # Keys whose value is None (OpenAI clients send content=None with tool calls) are
        # dropped: templates test `'key' in message` and would otherwise print "None".
        plain.append({key: _plain_data(item) for key, item in message.items() if item is not None})
    return plain


class ChatTemplateRenderer:
    """A sandboxed Jinja environment plus the templates it has compiled, each compiled once."""

    def __init__(self) -> None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_GenerationBlock, jinja2.ext.loopcontrols],
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        env.globals["namespace"] = _TemplateNamespace
        env.globals["dict"] = _DictConstructor()
        self._env = env
        self._compiled: dict[str, jinja2.Template] = {}

    def compile(self, template: str) -> jinja2.Template:
        compiled = self._compiled.get(template)
        if compiled is None:
            try:
                compiled = self._env.from_string(template)
            except TemplateError as exc:
                raise ValueError(f"invalid chat template: {exc}") from exc
            self._compiled[template] = compiled
        return compiled

    @property
    def num_compiled(self) -> int:
        return len(self._compiled)

    def render(
        self,
        template: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        bos_token: str,
        eos_token: str,
        add_generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> str:
        compiled = self.compile(template)
        variables: dict[str, Any] = {"bos_token": bos_token, "eos_token": eos_token}
        variables.update(_plain_data(extra))
        variables["messages"] = _plain_messages(messages)
        variables["tools"] = _plain_data(tools)
        variables["add_generation_prompt"] = add_generation_prompt
        try:
            return compiled.render(**variables)
        # TemplateError covers raise_exception, sandbox refusals and undefined names; the rest are
        # a template's own bugs (adding a string to None, indexing past the end).
        except (TemplateError, TypeError, ArithmeticError, LookupError) as exc:
            raise ValueError(f"chat template error: {exc}") from exc


def render_chat_template(
    template: str,
    messages: list[dict[str, Any]],
    *,
    bos_token: str,
    eos_token: str,
    add_generation_prompt: bool,
    tools: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> str:
    """Render one conversation. Callers that render often keep a ChatTemplateRenderer instead,
    which compiles each template once."""
    return ChatTemplateRenderer().render(
        template,
        messages,
        bos_token=bos_token,
        eos_token=eos_token,
        add_generation_prompt=add_generation_prompt,
        tools=tools,
        **extra,
    )

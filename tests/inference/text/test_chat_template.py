"""The sandboxed chat-template renderer: HF-compatible output, refusals, compile caching."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import gguf
import pytest
from transformers import AutoTokenizer

from inference.text import ChatTemplateRenderer, render_chat_template

REPO_ROOT = Path(__file__).resolve().parents[3]

MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "What torque for an M8 bolt?"},
    {"role": "assistant", "content": "25 N·m for class 8.8."},
    {"role": "user", "content": "And M10 — 東京 😀?"},
]


def _render(template: str, messages: list[dict[str, Any]] | None = None, **extra: Any) -> str:
    return render_chat_template(
        template,
        messages if messages is not None else MESSAGES,
        bos_token="<s>",
        eos_token="</s>",
        add_generation_prompt=False,
        **extra,
    )


@pytest.fixture(scope="module")
def demo_gguf_template() -> str:
    path = subprocess.run(
        [str(REPO_ROOT / "scripts" / "fetch-demo-model.sh")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    field = gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    template = field.contents()
    assert isinstance(template, str) and "<|im_start|>" in template
    return template


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize(
    "messages",
    [
        MESSAGES,
        [{"role": "system", "content": "Answer from the manual."}, *MESSAGES],
        [{"role": "user", "content": ""}],
    ],
)
def test_demo_gguf_template_renders_like_transformers(
    demo_gguf_template: str,
    chatml_dir: Path,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool,
) -> None:
    theirs = AutoTokenizer.from_pretrained(chatml_dir)
    expected = theirs.apply_chat_template(
        messages,
        chat_template=demo_gguf_template,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
    )
    rendered = render_chat_template(
        demo_gguf_template,
        messages,
        bos_token=theirs.bos_token,
        eos_token=theirs.eos_token,
        add_generation_prompt=add_generation_prompt,
    )
    assert rendered == expected
    # SmolLM2's template adds its default system prompt only when none is given.
    has_system = messages[0]["role"] == "system"
    assert ("You are a helpful AI assistant named SmolLM" in rendered) is not has_system


def test_hf_helpers_match_transformers(chatml_dir: Path) -> None:
    template = (
        "{%- set ns = namespace(count=0) -%}"
        "{%- for m in messages -%}"
        "{%- if loop.index > 2 %}{% break %}{% endif -%}"
        "{%- set ns.count = ns.count + 1 -%}"
        "{% generation %}[{{ m['content'] }}]{% endgeneration %}"
        "{%- endfor -%}"
        "{{ ns.count }}|{{ tools | tojson(indent=2) }}|{{ tools | tojson(ensure_ascii=True) }}"
        "|{{ dict(a=1) | tojson }}"
    )
    tools: list[dict[str, Any]] = [{"name": "lookup", "description": "a < b & 東京"}]
    theirs = AutoTokenizer.from_pretrained(chatml_dir)
    expected = theirs.apply_chat_template(
        MESSAGES, chat_template=template, tools=[*tools], tokenize=False
    )
    rendered = _render(template, tools=tools)
    assert rendered == expected
    assert json.dumps(tools, indent=2, ensure_ascii=False) in rendered  # no HTML escaping
    assert json.dumps(tools, ensure_ascii=True) in rendered


def test_strftime_now_and_variables() -> None:
    rendered = _render(
        "{{ strftime_now('%Y') }}|{{ bos_token }}{{ eos_token }}|{{ house }}"
        "|{{ messages | length }}",
        house="style",
    )
    year = rendered.split("|")[0]
    assert year in {str(datetime.now().year - 1), str(datetime.now().year)}  # midnight on 1 Jan
    assert rendered.endswith("|<s></s>|style|3")


def test_none_valued_keys_are_dropped() -> None:
    template = (
        "{% for m in messages %}{{ 'content' in m }}{{ m.tool_calls is defined }}{% endfor %}"
    )
    assert _render(template, [{"role": "assistant", "content": None, "tool_calls": None}]) == (
        "FalseFalse"
    )


def test_raise_exception_is_a_value_error_with_the_message() -> None:
    template = (
        "{% if messages[0]['role'] != 'system' %}{{ raise_exception('System first!') }}{% endif %}"
    )
    with pytest.raises(ValueError, match="System first!"):
        _render(template)


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__init__.__globals__ }}",
        "{{ raise_exception.__globals__['__builtins__'] }}",
        "{% set ns = namespace() %}{% set ns.__class__ = 1 %}",
        "{{ messages.append({'role': 'user', 'content': 'injected'}) }}",
        "{{ messages[0].update({'role': 'system'}) }}",
    ],
)
def test_sandbox_refuses_python_internals_and_mutation(template: str) -> None:
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="chat template error"):
        _render(template, messages)
    assert messages == [{"role": "user", "content": "hi"}]


class _RichContent:
    """Stands for a caller's object with a method a template must never reach."""

    def __init__(self) -> None:
        self.deleted = False

    def delete_everything(self) -> str:
        self.deleted = True
        return "deleted"


def test_templates_see_plain_data_only() -> None:
    content = _RichContent()
    template = "{{ messages[0]['content'].delete_everything() }}|{{ extra.delete_everything() }}"
    with pytest.raises(ValueError, match="chat template error"):
        _render(template, [{"role": "user", "content": content}])
    with pytest.raises(ValueError, match="chat template error"):
        _render(template, [{"role": "user", "content": "hi"}], extra=content)
    assert not content.deleted
    assert _render("{{ messages[0]['content'] }}", [{"role": "user", "content": content}]) == (
        "<_RichContent>"
    )


@pytest.mark.parametrize("template", ["{% for m in messages %}", "{{ messages[0]['role'] + 1 }}"])
def test_broken_templates_are_value_errors(template: str) -> None:
    with pytest.raises(ValueError, match="chat template"):
        _render(template)


def test_each_template_is_compiled_once() -> None:
    renderer = ChatTemplateRenderer()
    first, second = "{{ messages | length }}", "{{ messages[0]['content'] }}"
    for _ in range(3):
        renderer.render(first, MESSAGES, bos_token="", eos_token="", add_generation_prompt=True)
    assert renderer.num_compiled == 1
    assert renderer.compile(first) is renderer.compile(first)
    rendered = renderer.render(
        second, MESSAGES, bos_token="", eos_token="", add_generation_prompt=True
    )
    assert rendered == MESSAGES[0]["content"]
    assert renderer.num_compiled == 2
    # A fresh renderer has its own cache: nothing is shared through module state.
    assert ChatTemplateRenderer().num_compiled == 0

"""The system message an assistant's requests begin with.

The proxy prepends it to every request that names the assistant, and the warmer pins it in
a worker's prefix cache: both must send the very same text, or the pinned blocks are never
hit. This module is the one place that text is made.
"""

from __future__ import annotations

import json
from typing import Any

# Asked of the model when the assistant has a response template. The text is part of the
# cached prefix: changing it changes every assistant's prefix (they are re-warmed anyway).
TEMPLATE_INSTRUCTION = (
    "Answer with one JSON object and nothing else. It fills this form; its fields are "
    "described by the following JSON Schema:"
)


def system_text(system_prompt: str, response_template: dict[str, Any] | None) -> str:
    """The assistant's system message content."""
    if not response_template:
        return system_prompt
    schema = json.dumps(response_template, ensure_ascii=False, sort_keys=True, indent=1)
    return f"{system_prompt}\n\n{TEMPLATE_INSTRUCTION}\n{schema}"


def system_message(system_prompt: str, response_template: dict[str, Any] | None) -> dict[str, str]:
    return {"role": "system", "content": system_text(system_prompt, response_template)}

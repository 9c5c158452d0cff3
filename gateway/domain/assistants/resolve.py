"""A request that names an assistant (``"model": "<slug>"``), made into the request it stands for.

Only a model no worker has ever listed is looked up as an assistant: a request for a served
model never touches the assistants' cache or the database, so an outage of the database
cannot fail it. Slugs never equal a served model's name (checked when they are made); were a
worker to start serving a model of that name later, the model wins.

The caller's department is the only one whose assistants it can name: another department's
slug, or an archived one, is just an unknown model (the usual 404). A found assistant's
request is rewritten to its current version (docs/assistants.md, "Requests"):

- ``model`` is the version's model, or the pool's default (the first model it serves);
- its system message (prompt.system_text, as the warmer pins it) comes first, before the
  client's messages, a client's own system messages included;
- its sampling defaults fill only what the client left out (absent or null): temperature,
  top_p, and max_tokens unless the client set max_completion_tokens;
- its response template, when it has one, becomes a json_schema ``response_format``
  (structured outputs: the worker's answer is the template's JSON object), unless the
  client asked for a shape of its own or offers tools (their calls are its shape).

The rewritten body is parsed again, so the token estimate, the reservation, the allow-lists
and the prefix-affinity key all see the request the worker gets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.domain.assistants.cache import AssistantCache, AssistantsUnavailable, Resolved
from gateway.domain.identity.principal import Principal
from gateway.domain.proxy.body import ApiRequest, parse_body
from gateway.domain.proxy.openai_errors import ApiError
from gateway.domain.workers.pool import WorkerPool

HEADER = "x-enclave-assistant"
# A request's own structured-output fields: with any of them, the assistant's response
# template does not constrain the answer (the client asked for its own shape).
CONSTRAINTS = (
    "response_format",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
)


async def resolve(
    cache: AssistantCache, pool: WorkerPool, principal: Principal, model: str
) -> Resolved | None:
    """The assistant ``model`` names for ``principal``, or None when it names none."""
    department = principal.department
    if department is None or pool.knows(model):
        return None
    try:
        assistants = await cache.of_department(department.id)
    except AssistantsUnavailable:
        raise ApiError(
            503,
            f"{model!r} is not a model a worker serves, and the assistants cannot be looked "
            "up right now (the database is unreachable); try again shortly",
            reason="database_unavailable",
            headers={"retry-after": "2"},
        ) from None
    return assistants.get(model)


def rewrite(request: ApiRequest, assistant: Resolved, pool: WorkerPool) -> ApiRequest:
    """``request`` as the assistant's current version makes it (see the module's doc)."""
    if request.endpoint != "chat.completions":
        raise ApiError(
            400, "assistants answer chat completions only", param="model", reason="bad_request"
        )
    body = dict(request.body)
    body["model"] = assistant.model or default_model(pool)
    system = {"role": "system", "content": assistant.system_text}
    body["messages"] = [system, *request.body["messages"]]
    for name, value in assistant.sampling.items():
        if name == "max_tokens" and body.get("max_completion_tokens") is not None:
            continue
        if body.get(name) is None:
            body[name] = value
    # A client that offers tools asks for calls, which a response template would forbid.
    offers_tools = body.get("tools") is not None and body.get("tool_choice") != "none"
    if (
        assistant.response_format is not None
        and not offers_tools
        and all(body.get(name) is None for name in CONSTRAINTS)
    ):
        body["response_format"] = dict(assistant.response_format)
    return parse_body("chat.completions", body)


def default_model(pool: WorkerPool) -> str:
    """The model of an assistant that names none: the first a healthy worker serves."""
    served = pool.models()
    if not served:
        raise ApiError(
            503,
            "no healthy worker serves a model right now; try again shortly",
            reason="no_upstream",
            headers={"retry-after": "2"},
        )
    return served[0]


def model_cards(
    assistants: dict[str, Resolved],
    owner: str,
    admits: Callable[[str], bool],
    served: list[str],
) -> list[dict[str, Any]]:
    """/v1/models cards for a department's assistants whose model ``admits(model)``."""
    default = served[0] if served else None
    cards = []
    for slug, assistant in sorted(assistants.items()):
        model = assistant.model or default
        if model is not None and not admits(model):
            continue
        card = {"id": slug, "object": "model", "created": assistant.created, "owned_by": owner}
        cards.append(card)
    return cards

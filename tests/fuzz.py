"""Schemathesis over an OpenAPI document: a bounded, reproducible fuzz run for CI.

Every operation gets ``max_examples`` valid and as many invalid generated requests,
derandomized (CI replays the same ones), without Hypothesis's example database.
Each answer must not be a 5xx and must match the document: a documented status code, a
documented content type, a body that fits its schema. The failures of every operation are
gathered and returned, so one run names every bug rather than the first.

The Python API is used rather than schemathesis's pytest plugin: the plugin's lazy schema
(``from_fixture``) reads a pytest internal that pytest 9 removed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

# Valid requests, and requests that break the document (which must be a 4xx, not a 5xx).
MODES = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def fuzz(
    schema: schemathesis.BaseSchema,
    prepare: Callable[[schemathesis.Case], dict[str, str]],
    *,
    max_examples: int,
) -> list[str]:
    """Run every operation of ``schema``; the failures, one line each (empty: all held).

    ``prepare(case)`` returns the headers that authenticate the case, and may adjust it
    (point some requests at data that exists, which random values would never hit).
    """
    failures: list[str] = []
    for result, mode in itertools.product(schema.get_all_operations(), MODES):
        operation = result.ok()
        label = f"{operation.method.upper()} {operation.path} ({mode.value})"

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=max_examples,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
        def run(case: schemathesis.Case) -> None:
            # Into the case itself: headers given to the call would lose to the credentials
            # schemathesis generates from the security schemes.
            case.headers = {**(case.headers or {}), **prepare(case)}
            case.call_and_validate(checks=CHECKS, timeout=60)

        try:
            run()
        except Unsatisfiable:  # nothing in the operation to break (no body, no parameters)
            if mode is not schemathesis.GenerationMode.NEGATIVE:
                raise
        except (Exception, BaseExceptionGroup) as exc:  # a failed check: go on, report all
            failures.append(f"{label}: {exc}")
    return failures


def served_model(model: str) -> Callable[[schemathesis.Case], None]:
    """Points every other generated body that names a model at ``model``: a random name
    never reaches the engine (or the worker, behind the gateway)."""
    turns = itertools.cycle((True, False))

    def aim(case: schemathesis.Case) -> None:
        if isinstance(case.body, dict) and "model" in case.body and next(turns):
            case.body["model"] = model

    return aim


def check_cases(
    schema: schemathesis.BaseSchema,
    cases: list[tuple[str, str, dict[str, object]]],
    headers: dict[str, str],
) -> list[str]:
    """The same checks on hand-written requests (method, path, body): the valid shapes
    random generation rarely hits, such as a stream that the engine answers."""
    failures: list[str] = []
    for method, path, body in cases:
        case = schema[path][method].Case(body=body, headers=dict(headers))
        try:
            case.call_and_validate(checks=CHECKS, timeout=60)
        except (Exception, BaseExceptionGroup) as exc:
            failures.append(f"{method} {path} {body}: {exc}")
    return failures


def fuzz_stateful(
    schema: schemathesis.BaseSchema,
    prepare: Callable[[schemathesis.Case], dict[str, str]],
    *,
    max_examples: int,
    steps: int,
) -> list[str]:
    """Sequences of calls that feed one answer's ids into the next request (links that
    schemathesis infers from the document: a department created, then a key for it,
    then that key revoked), each step under the same checks; the failure, if any."""
    base: Any = schema.as_state_machine()

    class Sequences(base):  # type: ignore[misc,valid-type]
        def before_call(self, case: schemathesis.Case) -> None:
            case.headers = {**(case.headers or {}), **prepare(case)}

        def validate_response(
            self, response: Any, case: schemathesis.Case, *args: Any, **kwargs: Any
        ) -> None:
            case.validate_response(response, checks=CHECKS)

    try:
        Sequences.run(
            settings=settings(
                max_examples=max_examples,
                stateful_step_count=steps,
                derandomize=True,
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                report_multiple_bugs=False,
            )
        )
    except (Exception, BaseExceptionGroup) as exc:
        return [f"stateful: {exc}"]
    return []

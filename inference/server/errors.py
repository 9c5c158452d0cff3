"""OpenAI-shaped error bodies: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import msgspec

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    503: "service_unavailable",
}


class APIError(Exception):
    """An error the client should see as it is; raised anywhere in a handler."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> bytes:
        return error_body(self.message, self.status, param=self.param, code=self.code)


def error_body(
    message: str, status: int, *, param: str | None = None, code: str | None = None
) -> bytes:
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return msgspec.json.encode(
        {"error": {"message": message, "type": kind, "param": param, "code": code}}
    )


def bad_param(param: str, message: str) -> APIError:
    return APIError(message, param=param)


def unsupported(param: str, why: str = "is not supported") -> APIError:
    return APIError(f"{param} {why}", param=param, code="unsupported_parameter")


def param_of_value_error(message: str) -> str | None:
    """SamplingParams' messages start with the field name ("top_p must be in (0, 1]...")."""
    first = message.split(" ", 1)[0]
    return first if first.isidentifier() else None

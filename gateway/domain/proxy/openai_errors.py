"""OpenAI's error body, as the official client expects it: {"error": {message, type, ...}}."""

from __future__ import annotations

import msgspec

# The `type` OpenAI uses for each status the gateway answers with.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
    499: "client_closed_request",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout",
}


class ApiError(Exception):
    """Answer the request with ``status`` and OpenAI's error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        reason: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        # What the audit record says about it ("rate_limit:requests_per_minute", ...).
        self.reason = reason or (code or _TYPES.get(status, "error"))
        self.headers = headers or {}


def error_body(
    status: int, message: str, code: str | None = None, param: str | None = None
) -> bytes:
    error = {
        "message": message,
        "type": _TYPES.get(status, "api_error"),
        "param": param,
        "code": code,
    }
    return msgspec.json.encode({"error": error})


def error_event(status: int, message: str, code: str | None = None) -> bytes:
    """An SSE event carrying an error, for a stream that breaks after it started."""
    return b"data: " + error_body(status, message, code) + b"\n\n"

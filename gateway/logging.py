"""structlog set-up: one canonical line per request, JSON off a terminal, no secrets."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from gateway.settings import LogFormat, LogLevel

# Keys whose values never reach a log line, whatever logs them.
SECRET_KEYS = frozenset(
    {"authorization", "api_key", "apikey", "password", "secret", "token", "cookie", "set-cookie"}
)
REDACTED = "[redacted]"
# Libraries that log each HTTP request they make.
CHATTY_LOGGERS = ("httpx", "httpcore")


def redact_secrets(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Replace the value of any secret-looking key, at the top level or one level down."""
    for key, value in list(event.items()):
        if _is_secret(key):
            event[key] = REDACTED
        elif isinstance(value, dict):
            event[key] = {k: REDACTED if _is_secret(k) else v for k, v in value.items()}
    return event


def _is_secret(key: str) -> bool:
    lowered = key.lower()
    return lowered in SECRET_KEYS or lowered.endswith(("_token", "_secret", "_password"))


def configure_logging(level: LogLevel, fmt: LogFormat, stream: Any = None) -> None:
    """Configure structlog (and the stdlib root logger) for this process."""
    out = sys.stdout if stream is None else stream
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    numeric = logging.getLevelName(level.upper())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_secrets,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=numeric, stream=out, format="%(name)s %(levelname)s %(message)s")
    # httpx logs every request at INFO, the health checks of every worker every two seconds
    # among them: only at debug level are they worth an operator's screen.
    for chatty in CHATTY_LOGGERS:
        logging.getLogger(chatty).setLevel(numeric if numeric <= logging.DEBUG else logging.WARNING)

"""Logging: every record one JSON object on one line, on standard error.

Under uWSGI a worker's standard error is uWSGI's log (the server's output), so the access lines,
warnings and errors of every worker arrive in one stream, one line each. Each line has ``time``
(RFC 3339, UTC, milliseconds), ``level``, ``logger``, ``pid`` (the worker) and ``message``, the
fields the caller gave (``extra={"fields": {...}}``), and the ``request_id`` of the request being
served, if any.

Lines are bounded: a string field keeps at most :data:`MAX_FIELD_CHARS` characters and a
traceback at most :data:`MAX_TRACEBACK_CHARS`, so no request, however large its path or headers,
makes a large line. Nothing here ever sees a token: callers log a token's id, never its secret.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import Any

MAX_FIELD_CHARS = 256
MAX_TRACEBACK_CHARS = 4096

#: The id of the request this thread serves (set by the access log middleware).
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "simplefeed_request_id", default=None
)


def clip(value: str, limit: int = MAX_FIELD_CHARS) -> str:
    """``value`` cut to ``limit`` characters, marked with an ellipsis when cut."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return clip(repr(value))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        seconds = int(record.created)
        millis = int((record.created - seconds) * 1000)
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": clip(record.getMessage(), 2 * MAX_FIELD_CHARS),
        }
        rid = request_id.get()
        if rid is not None:
            line["request_id"] = rid
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                line.setdefault(str(key), _bounded(value))
        if record.exc_info:
            line["exception"] = clip(self.formatException(record.exc_info), MAX_TRACEBACK_CHARS)
        return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


def configure(level: str) -> None:
    """Send every ``simplefeed`` record at ``level`` or above to standard error, as JSON lines
    (the root logger gets warnings from libraries the same way)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("simplefeed").setLevel(level)

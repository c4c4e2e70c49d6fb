"""Logging: every record one JSON object on one line, on standard error.

Under uWSGI, a worker's standard error is uWSGI's log, the server's output. So the access lines,
warnings and errors of every worker arrive in one stream, one line each. Each line has ``time``
(RFC 3339, UTC, milliseconds), ``level``, ``logger``, ``pid`` (the worker) and ``message``. It
also has the fields the caller gave (``extra={"fields": {...}}``), and the ``request_id`` of the
request being served, if any.

Lines are bounded. A string field keeps at most :data:`MAX_FIELD_CHARS` characters, and a
traceback at most :data:`MAX_TRACEBACK_CHARS`. So no request makes a large line, however large
its path or headers. A line takes at most :data:`MAX_LINE_BYTES` with its newline. So one write
puts it out whole, whatever the other threads and processes write beside it. A longer line loses
the end of its traceback. If that is not enough, it keeps only its time, level, logger, pid,
request id and message. It then says ``"clipped": true``. Nothing here ever sees a token,
because callers log a token's id, never its secret.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import json
import logging
import os
import select
import threading
import time
import weakref
from typing import Any

from simplefeed import jsontext

MAX_FIELD_CHARS = 256
MAX_TRACEBACK_CHARS = 4096
#: PIPE_BUF: what one write to a pipe (uWSGI's log) puts out whole (4,096 bytes on Linux).
MAX_LINE_BYTES = select.PIPE_BUF

#: The id of the request this thread serves (set by the access log middleware).
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "simplefeed_request_id", default=None
)


def clip(value: str, limit: int = MAX_FIELD_CHARS) -> str:
    """``value`` cut to ``limit`` characters, marked with an ellipsis when cut."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _bounded(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return clip(value)
    if kind is int or kind is float or kind is bool or value is None:
        return value
    return clip(value if isinstance(value, str) else repr(value))


#: One encoder for every line, because ``json.dumps`` with options builds a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
#: Lines hold no container to check for cycles (:func:`_bounded`).
_encode = jsontext.writer(ensure_ascii=False)
_encode_string = jsontext.string_writer(ensure_ascii=False)


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        # The time prefix of the second last formatted: one strftime per second, not per line.
        self._second: tuple[int, str] = (-1, "")
        #: (level, logger, pid) -> those keys and values, encoded.
        self._heads: dict[tuple[str, str, int | None], str] = {}

    def _time(self, created: float) -> str:
        seconds = int(created)
        cached_second, text = self._second
        if cached_second != seconds:
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
            self._second = (seconds, text)
        return f"{text}.{int((created - seconds) * 1000):03d}Z"

    def head(self, level: str, logger: str, pid: int | None) -> str:
        """The keys and values of ``level``, ``logger`` and ``pid``, encoded, without braces.

        They are the same on every line of a logger, so they are encoded once. What varies is
        encoded apart and joined to them, because the encoder's cost is per key.
        """
        head = self._heads.get((level, logger, pid))
        if head is None:
            head = _ENCODER.encode({"level": level, "logger": logger, "pid": pid})[1:-1]
            self._heads[(level, logger, pid)] = head
        return head

    def format(self, record: logging.LogRecord) -> str:
        exception = None
        if record.exc_info:
            exception = clip(self.formatException(record.exc_info), MAX_TRACEBACK_CHARS)
        return self.line(
            record.created,
            record.levelname,
            record.name,
            record.process,
            record.getMessage(),
            getattr(record, "fields", None),
            exception,
        )

    def line(
        self,
        created: float,
        level: str,
        logger: str,
        pid: int | None,
        message: str,
        fields: Any,
        exception: str | None = None,
    ) -> str:
        """One line from what a record holds (:func:`info` makes one without a record)."""
        rest: dict[str, Any] = {"message": clip(message, 2 * MAX_FIELD_CHARS)}
        rid = request_id.get()
        if rid is not None:
            rest["request_id"] = rid
        if isinstance(fields, dict):
            for key, value in fields.items():
                if key not in _HEAD_KEYS:
                    rest.setdefault(str(key), _bounded(value))
        if exception is not None:
            rest["exception"] = exception
        stamp = self._time(created)
        text = f'{{"time":"{stamp}",{self.head(level, logger, pid)},{_encode(rest)[1:]}'
        # A character takes at most 6 bytes as written (a lone surrogate, backslash-escaped).
        if len(text) * 6 < MAX_LINE_BYTES:
            return text
        line = {"time": stamp, "level": level, "logger": logger, "pid": pid, **rest}
        return _fit(line, text)


#: The keys every line begins with. A field of the same name is left out.
_HEAD_KEYS = frozenset({"time", "level", "logger", "pid", "message"})


def _bytes(text: str) -> bytes:
    """A line as written, with a lone surrogate in a field backslash-escaped.

    Such a surrogate may come from a decoded path.
    """
    return text.encode("utf-8", "backslashreplace")


def _fit(line: dict[str, Any], text: str) -> str:
    """``text``, the encoding of ``line``, cut to MAX_LINE_BYTES with its newline."""
    excess = len(_bytes(text)) + 1 - MAX_LINE_BYTES
    if excess <= 0:
        return text
    exception = line.get("exception")
    if isinstance(exception, str):
        # Cut the traceback's end until the line fits, in proportion to the bytes it must lose.
        # Its characters take 1 to 6 bytes each as written.
        for _ in range(4):
            size = len(_bytes(_ENCODER.encode(exception)))
            keep = len(exception) * (size - excess - 4) // size
            if keep <= 0:
                break
            exception = exception[:keep]
            text = _ENCODER.encode({**line, "exception": exception + "…"})
            excess = len(_bytes(text)) + 1 - MAX_LINE_BYTES
            if excess <= 0:
                return text
    kept = {k: line[k] for k in ("time", "level", "logger", "pid", "request_id") if k in line}
    return _ENCODER.encode({**kept, "message": clip(line["message"]), "clipped": True})


#: How long an INFO line (an access line) may wait to be written with the others. Each write is
#: a system call, which lets another thread take the interpreter. Under uWSGI's threads, every
#: such hand-over costs both threads CPU. One write per access line would be 70 us of a /recent
#: 304's 170 us (docs/explanation/decisions/interpreter.md). Warnings and errors are written at
#: once, after the lines waiting.
BATCH_S = 0.1
#: Lines waiting beyond this many are written by the thread that adds one. So a log that does not
#: take them holds requests up, as one write per line would, and no memory grows.
MAX_WAITING_LINES = 10_000


class LineHandler(logging.Handler):
    """Write each record as one line, batching whole lines into atomic writes.

    Each line holds at most MAX_LINE_BYTES (:class:`JsonFormatter`). Lines go to a file
    descriptor in writes of whole lines, at most PIPE_BUF bytes together. A write that small is
    atomic on a pipe, and on a file opened for appending, such as uWSGI's log. So lines of
    threads and processes writing at once never interleave.

    INFO lines wait, at most ``batch_s`` (:data:`BATCH_S`), for a thread of the handler's to
    write them together. A WARNING or above is written at once by its own thread, after the
    lines waiting. So the order of a process's lines is the order they were logged in. The
    threads adding lines take no lock. ``StreamHandler`` holds its lock across the write and the
    flush (docs/explanation/decisions/long-poll.md). :meth:`flush` writes what waits. The
    logging module calls it at exit, and a uWSGI worker at its end (runtime/wsgi.py). A process
    killed outright loses at most ``batch_s`` of INFO lines.
    """

    def __init__(self, fd: int, batch_s: float = BATCH_S) -> None:
        super().__init__()
        self.fd = fd
        self.batch_s = batch_s
        self._waiting: collections.deque[bytes] = collections.deque()
        self._forked()
        forked = weakref.WeakMethod(self._forked)

        def in_child() -> None:
            method = forked()
            if method is not None:
                method()

        os.register_at_fork(after_in_child=in_child)

    def _forked(self) -> None:
        """A new process: its own lock, no writer yet; the lines waiting are the parent's."""
        self.pid = os.getpid()
        self._waiting.clear()
        self._writing = threading.Lock()
        self._due = threading.Event()
        self._writer: threading.Thread | None = None

    def handle(self, record: logging.LogRecord) -> bool:
        if not self.filter(record):
            return False
        self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self.add(line, record.levelno)

    def add(self, line: str, level: int) -> None:
        """Write ``line`` (formatted, without its newline) as a record of ``level`` is."""
        data = _bytes(line + "\n")
        if level >= logging.WARNING or self.batch_s <= 0:
            with self._writing:
                self._write([*self._take(), data])
            return
        self._waiting.append(data)
        if len(self._waiting) > MAX_WAITING_LINES:
            self.flush()
        elif not self._due.is_set():
            self._due.set()
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_later, name="simplefeed-log-writer", daemon=True
                )
                self._writer.start()

    def flush(self) -> None:
        with self._writing:
            self._write(self._take())

    def _write_later(self) -> None:
        due = self._due
        while True:
            due.wait()
            time.sleep(self.batch_s)
            due.clear()  # Before taking the lines, so one added from now on sets it again.
            self.flush()

    def _take(self) -> list[bytes]:
        lines = []
        with contextlib.suppress(IndexError):
            while True:
                lines.append(self._waiting.popleft())
        return lines

    def _write(self, lines: list[bytes]) -> None:
        chunk = b""
        for line in lines:
            if len(chunk) + len(line) > MAX_LINE_BYTES:
                self._write_chunk(chunk)
                chunk = b""
            chunk += line
        if chunk:
            self._write_chunk(chunk)

    def _write_chunk(self, chunk: bytes) -> None:
        # A log that cannot be written (a closed pipe, a full disk) has nowhere to say so.
        with contextlib.suppress(OSError):
            view = memoryview(chunk)
            while view:  # One write, unless a signal or a full disk cuts it short.
                view = view[os.write(self.fd, view) :]


def info(logger: logging.Logger, message: str, fields: dict[str, Any]) -> None:
    """Write the line ``logger.info("%s", message, extra={"fields": fields})`` writes, for less.

    It costs less where :func:`configure`'s handler alone takes the line, because then no record
    is made and passed along. Every answered request writes an access line. The logging
    module's record, its handlers and its formatting would take 108,000 of a /recent 304's
    288,000 instructions (docs/benchmarks.md, "Hot paths").
    """
    if not logger.isEnabledFor(logging.INFO):
        return
    handler = _sole_handler(logger)
    if handler is None:
        logger.info("%s", message, extra={"fields": fields})
        return
    formatter = handler.formatter
    assert isinstance(formatter, JsonFormatter)
    line = formatter.line(time.time(), "INFO", logger.name, handler.pid, message, fields)
    handler.add(line, logging.INFO)


class RepeatedLine:
    """INFO lines of ``logger`` that differ only in their time, request id and one number.

    The number is the field ``key`` of ``fields``. The rest of the line is encoded once, here.
    :meth:`write` writes the line that :func:`info` writes for ``message`` and ``fields``, key
    for key, for a fraction of its cost. An answer given again writes such a line
    (:mod:`simplefeed.app.answers`).
    """

    def __init__(
        self, logger: logging.Logger, message: str, fields: dict[str, Any], key: str
    ) -> None:
        self.logger = logger
        self.message = message
        self.fields = fields
        self.key = key
        own = [str(k) for k in fields if k not in _HEAD_KEYS and k != "request_id"]
        at = own.index(key)
        before = {k: _bounded(fields[k]) for k in own[:at]}
        after = {k: _bounded(fields[k]) for k in own[at + 1 :]}
        self._message = _encode({"message": clip(message, 2 * MAX_FIELD_CHARS)})[1:-1]
        self._before = "".join("," + part for part in [_encode(before)[1:-1]] if before)
        self._key = f",{_encode(key)}:"
        self._after = "".join("," + part for part in [_encode(after)[1:-1]] if after)

    def write(self, number: float, rid: str) -> None:
        """Write the line with ``number`` (finite) at ``key``, for the request ``rid``."""
        if not self.logger.isEnabledFor(logging.INFO):
            return
        handler = _sole_handler(self.logger)
        if handler is not None:
            formatter = handler.formatter
            assert isinstance(formatter, JsonFormatter)
            text = (
                f'{{"time":"{formatter._time(time.time())}",'
                f"{formatter.head('INFO', self.logger.name, handler.pid)},{self._message},"
                f'"request_id":{_encode_string(rid)}{self._before}{self._key}{number!r}'
                f"{self._after}}}"
            )
            if len(text) * 6 < MAX_LINE_BYTES:  # As JsonFormatter.line, else it cuts the line.
                handler.add(text, logging.INFO)
                return
        token = request_id.set(rid)
        try:
            info(self.logger, self.message, {**self.fields, self.key: number})
        finally:
            request_id.reset(token)


def _sole_handler(logger: logging.Logger) -> LineHandler | None:
    """The handler an INFO record of ``logger`` would reach, or None.

    It is returned only if it is the only one, it writes with :class:`JsonFormatter`, and
    nothing filters the record on its way. Logger.handle applies the filters of the record's
    own logger, and each handler its own.
    """
    if logger.disabled or logger.filters:
        return None
    found: LineHandler | None = None
    node: logging.Logger | None = logger
    while node is not None:
        for handler in node.handlers:
            if (
                found is not None
                or type(handler) is not LineHandler
                or handler.filters
                or handler.level > logging.INFO
                or type(handler.formatter) is not JsonFormatter
            ):
                return None
            found = handler
        node = node.parent if node.propagate else None
    return found


def configure(level: str) -> None:
    """Send every ``simplefeed`` record at ``level`` or above to standard error, as JSON lines.

    The root logger gets warnings from libraries the same way.
    """
    handler = LineHandler(2)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("simplefeed").setLevel(level)
    # Every answered request writes a line, so a line's cost is on every request's path. The
    # lines carry no source location, thread or multiprocessing name. So the logging module
    # does not look them up (the Logging HOWTO's "Optimization"). That leaves 0.74 of the
    # instructions per access line, with the shared encoder above (docs/benchmarks.md, "An
    # access line").
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False

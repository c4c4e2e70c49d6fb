"""``consume --jsonl``: entries as JSON lines on standard output, in large writes.

A line per entry is what :func:`~simplefeed.client.entry.entry_json` gives, in UTF-8.

With checkpoints per page, :class:`JsonLines` gathers lines and writes them together. It is
an :class:`~simplefeed.client.consumer.AcknowledgingHandler`: an entry is acknowledged once
its line is written and flushed. So the checkpoint never moves past a line still in memory.
With checkpoints per entry, :func:`print_json` writes and flushes each line before its
checkpoint is stored, as before.

Output that cannot be written stops the consumer (exit 3), whatever ``--on-error`` says,
because no entry can be handled without it.
"""

from __future__ import annotations

import sys
from typing import BinaryIO

from simplefeed.client.entry import FeedEntry, entry_json
from simplefeed.client.errors import HandlerError

__all__ = ["FLUSH_BYTES", "JsonLines", "OutputFailed", "print_json"]

#: Lines waiting in memory are written once they reach this size. The consumer asks for an
#: acknowledgement only when its window is full or it is caught up, and writes them then too.
FLUSH_BYTES = 1 << 20


class OutputFailed(Exception):
    """Standard output could not be written."""


def _stdout() -> BinaryIO:
    """Standard output as bytes, after whatever its layers hold.

    It is the file itself when there is one, because the lines come in large writes already.
    A buffer would also keep what a failed write left, and fail again at exit (status 120).
    """
    sys.stdout.flush()
    buffer = sys.stdout.buffer
    raw: BinaryIO = getattr(buffer, "raw", buffer)
    return raw


def _write(out: BinaryIO, data: bytes) -> None:
    """Write all of ``data`` and flush, because an unbuffered stream may write only part."""
    view = memoryview(data)
    while view:
        view = view[out.write(view) :]
    out.flush()


def print_json(entry: FeedEntry) -> None:
    """Write the entry's line and flush it (a handler for :meth:`Consumer.run`)."""
    try:
        _write(_stdout(), entry_json(entry).encode("utf-8") + b"\n")
    except OSError as exc:
        raise HandlerError(entry, OutputFailed(f"standard output: {exc}")) from exc


class JsonLines:
    """Lines gathered for standard output, acknowledged once written and flushed."""

    def __init__(self) -> None:
        self._out = _stdout()
        self._lines: list[str] = []
        self._size = 0
        #: Entries sent, written (and flushed), and acknowledged, oldest first.
        self._sent = self._written = self._acknowledged = 0

    def send(self, entry: FeedEntry) -> None:
        line = entry_json(entry)
        self._lines.append(line)
        self._sent += 1
        self._size += len(line)
        if self._size >= FLUSH_BYTES:
            self._flush(entry)

    def acknowledgement(self, entry: FeedEntry) -> Exception | None:
        self._acknowledged += 1
        if self._acknowledged > self._written:  # Its line waits, so write every waiting one.
            self._flush(entry)
        return None

    def _flush(self, entry: FeedEntry) -> None:
        self._lines.append("")  # The last line's break.
        data = "\n".join(self._lines).encode("utf-8")
        self._lines, self._size = [], 0
        try:
            _write(self._out, data)
        except OSError as exc:
            raise HandlerError(entry, OutputFailed(f"standard output: {exc}")) from exc
        self._written = self._sent

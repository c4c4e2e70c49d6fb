"""``consume --exec-stream CMD``: one long-lived process handles every entry.

The process reads one entry per line on its standard input. Each line is the JSON object
``--jsonl`` prints. The process writes one acknowledgement line per entry on its standard
output, in the same order. The line is ``ok``, or any other line, which is the entry's error.

Entries are written ahead of the acknowledgements, at most the consumer's window of them
(:meth:`Consumer.run_acknowledged`). So a round trip per entry does not bound the rate. Lines
are handed over in batches of :data:`_BATCH_BYTES`, or when an acknowledgement is awaited. A
thread of its own writes them. Otherwise a process that writes acknowledgements before it
reads on would block on a full pipe, while this one blocks on the other.

Some processes stop the consumer (:class:`~simplefeed.client.errors.HandlerError`), with the
checkpoint on the last acknowledged entry. That happens when the process:

- exits or closes its standard output;
- writes a line longer than :data:`MAX_ACK_BYTES`;
- writes more lines than it was written entries;
- acknowledges nothing for ``ack_timeout`` seconds while entries await;
- closes its standard input with entries still to read. It is terminated, because it can
  never acknowledge them.

When the consumer is done, the process is asked to end. Its standard input is closed. After
:data:`GRACE_SECONDS` it is terminated.
"""

from __future__ import annotations

import os
import queue
import select
import subprocess
import threading
from collections import deque
from collections.abc import Sequence
from types import TracebackType

from simplefeed.client.entry import FeedEntry, entry_json
from simplefeed.client.errors import HandlerError
from simplefeed.lines import one_line

__all__ = ["GRACE_SECONDS", "MAX_ACK_BYTES", "ExecStream", "HandlerGone", "ReportedError"]

#: The longest acknowledgement line, in bytes, its line break included.
MAX_ACK_BYTES = 65_536
#: Seconds the process has to exit once its standard input is closed. It has as long again
#: once it is sent SIGTERM, before SIGKILL.
GRACE_SECONDS = 10.0
#: The most bytes one write hands the pipe. A write joins the entries waiting.
_WRITE_BYTES = 1 << 20
#: The bytes of lines gathered before they go to the writer thread. Each hand-over wakes the
#: thread, so a hand-over per entry would cost more than the entry's line.
_BATCH_BYTES = 1 << 16


class ReportedError(Exception):
    """The error line a handler process wrote for an entry."""


class HandlerGone(Exception):
    """The handler process can acknowledge no more entries."""


class ExecStream:
    """A handler process fed entries on its standard input.

    It is a :class:`~simplefeed.client.consumer.AcknowledgingHandler`. Use it as a context
    manager. Leaving it ends the process.
    """

    def __init__(
        self, argv: Sequence[str], command: str, *, ack_timeout: float | None = None
    ) -> None:
        self.command = command
        self.ack_timeout = ack_timeout
        self.sent = 0
        self.acknowledged = 0
        self._lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        #: Lines not yet handed to the writer thread, and how many bytes they hold.
        self._batch: list[bytes] = []
        self._batch_bytes = 0
        self._write_error: OSError | None = None
        #: Acknowledgement lines read and not yet taken, without their line breaks. Then the
        #: start of the next one. Then whether standard output is closed.
        self._acks: deque[bytes] = deque()
        self._partial = b""
        self._eof = False
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.process.stdin is not None and self.process.stdout is not None
        self._stdin, self._stdout = self.process.stdin, self.process.stdout
        self._writer = threading.Thread(
            target=self._write, name="simplefeed-exec-stream", daemon=True
        )
        self._writer.start()

    def send(self, entry: FeedEntry) -> None:
        line = entry_json(entry).encode("utf-8") + b"\n"
        self._batch.append(line)
        self._batch_bytes += len(line)
        if self._batch_bytes >= _BATCH_BYTES:
            self._hand_over()

    def acknowledgement(self, entry: FeedEntry) -> Exception | None:
        while not self._acks:
            if self._batch:  # The process may wait for these lines before it answers.
                self._hand_over()
            problem = self._read()
            if problem is not None:
                raise HandlerError(entry, self._gone(problem))
        text = self._acks.popleft().removesuffix(b"\r")  # A line may end in CR LF.
        self.acknowledged += 1
        if text == b"ok":
            return None
        message = one_line(text.decode("utf-8", errors="replace"))
        return ReportedError(message or "an empty line (not ok)")

    def close(self) -> None:
        """Close the process's standard input and wait for it to exit.

        After :data:`GRACE_SECONDS` the process is terminated. Entries not written yet are
        dropped. The consumer stopped before they were acknowledged, so they come again on its
        next run.
        """
        while True:
            try:
                self._lines.get_nowait()
            except queue.Empty:
                break
        self._lines.put(None)
        try:
            self.process.wait(GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self._end()
        self._writer.join()
        self._stdout.close()

    def __enter__(self) -> ExecStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- inside --------------------------------------------------------------------------

    def _hand_over(self) -> None:
        """Give the lines gathered to the writer thread, as one."""
        self._lines.put(b"".join(self._batch))
        self.sent += len(self._batch)
        self._batch, self._batch_bytes = [], 0

    def _read(self) -> str | None:
        """Read what standard output has. Return what keeps the next acknowledgement away."""
        if self._eof:
            if self._write_error is not None:
                return f"stopped reading its standard input ({self._write_error.strerror})"
            return "closed its standard output" + (" within a line" if self._partial else "")
        fd = self._stdout.fileno()
        ready, _, _ = select.select([fd], [], [], self.ack_timeout)
        if not ready:
            self._end()
            return f"acknowledged nothing for {self.ack_timeout:g} seconds (--ack-timeout)"
        chunk = os.read(fd, MAX_ACK_BYTES)
        if not chunk:
            self._eof = True
            return None
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        self._acks.extend(lines)
        if len(self._partial) >= MAX_ACK_BYTES:
            self._end()
            return f"wrote an acknowledgement over {MAX_ACK_BYTES} bytes"
        if self.acknowledged + len(self._acks) > self.sent:
            # An answer to an entry not written yet would be taken for that entry's.
            self._end()
            return "answered more lines than the entries written to it"
        return None

    def _write(self) -> None:
        """Write the lines as they come, on the writer thread.

        It writes several at once when several wait. It stops when told (``None``) or when the
        pipe breaks.
        """
        fd = self._stdin.fileno()
        stopping = False
        try:
            while not stopping:
                line = self._lines.get()
                if line is None:
                    break
                chunk = [line]
                size = len(line)
                while size < _WRITE_BYTES and not self._lines.empty():
                    more = self._lines.get()
                    if more is None:
                        stopping = True
                        break
                    chunk.append(more)
                    size += len(more)
                data = memoryview(b"".join(chunk))
                while data:
                    data = data[os.write(fd, data) :]
        except OSError as exc:  # The process closed its standard input, or exited.
            self._write_error = exc
            # It can never acknowledge what it did not read, so end it. Its standard output
            # closes, and the consumer stops on the first entry not acknowledged.
            self._end()
        finally:
            self._stdin.close()

    def _gone(self, detail: str) -> HandlerGone:
        """Describe why the process cannot go on: what it did, and its exit status.

        The status is waited for up to :data:`GRACE_SECONDS`. Then the process is terminated.
        """
        status = self.process.poll()
        if status is None:
            try:
                status = self.process.wait(GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                status = self._end()
        exited = (
            f"exited with status {status}" if status >= 0 else f"was killed by signal {-status}"
        )
        return HandlerGone(
            f"{self.command!r} {detail} and {exited}, after acknowledging"
            f" {self.acknowledged} of {self.sent} entries written"
        )

    def _end(self) -> int:
        """Terminate the process, and kill it after :data:`GRACE_SECONDS`. Return its status."""
        if self.process.poll() is not None:
            return self.process.returncode
        self.process.terminate()
        try:
            return self.process.wait(GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

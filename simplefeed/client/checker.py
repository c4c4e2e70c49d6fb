"""feedparser's check of the pages a catch-up reads, in a process of its own.

With ``parser="feedparser"``, every document is read twice. The strict reading gives the entries
(:mod:`simplefeed.client.tree`). The document must also pass feedparser, which must take it for Atom
1.0 (:func:`~simplefeed.client.parse.feedparser_verdict`). The feedparser reading is pure Python and
takes about 13 times the strict one's time. Its answer is small: a reason to refuse the document,
and warnings. So the walk may read pages ahead going forward. Then a :class:`Checker` has a child
process (``python -m simplefeed.client.checker``) give feedparser's verdict on the next page.
Meanwhile this process reads that page strictly and hands over the entries of the page before. On
two cores, the catch-up goes at about feedparser's own rate
(docs/explanation/decisions/consumer-reading.md). Nothing changes in what is accepted. A page's
entries are handed over only after the verdict on it, and the verdict is the same. A page both
readings refuse fails with feedparser's error, as :func:`~simplefeed.client.parse.parse_page` raises
it.

The child is a plain subprocess of the same interpreter, not :mod:`multiprocessing`. The
``spawn`` method of :mod:`multiprocessing` imports the caller's main module again in the child.
Its ``fork`` method would copy a process with threads running.

The protocol runs on the child's standard input and output. The child says :data:`HELLO` first,
within :data:`HELLO_S`. Otherwise it is not taken for the child, because ``sys.executable`` may
be another program where Python is embedded. Then, for each document, the parent writes an
8-byte big-endian length and the document's bytes. The child answers with a 4-byte length and a
JSON object ``{"reason": str | null, "warnings": [str, ...]}``. End of input ends the child.
So does the parent's end, which closes the pipe. The child is detached from the terminal's
process group, so a Ctrl-C at the terminal is the parent's to handle. The child may fail to
start, stop, or answer anything else. Then the check is made in this process for the rest of
the checker's life, and a warning says so once. The catch-up is slower, never different.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

from simplefeed.client.parse import Page, Verdict, accepted, feedparser_verdict, parse_page

log = logging.getLogger(__name__)

__all__ = ["Checker", "helps"]

_LENGTH = struct.Struct(">Q")
_ANSWER = struct.Struct(">I")
#: What the child says first. A command that is not this module says something else, or
#: nothing. ``sys.executable`` may be another program where Python is embedded.
HELLO = b"simplefeed.client.checker 1\n"
#: How long the child may take to say it. It starts in about 0.17 s.
HELLO_S = 10.0
#: A verdict is a reason and a few warnings. An answer longer than this is not one.
MAX_ANSWER_BYTES = 1 << 20
#: The child, by default.
COMMAND = (sys.executable, "-m", __name__)


def helps() -> bool:
    """Whether a child process would run beside this one: this process may use more than one CPU."""
    try:
        return len(os.sched_getaffinity(0)) > 1
    except (AttributeError, OSError):  # Not on Linux.
        return (os.cpu_count() or 1) > 1


class Checker:
    """Pages parsed as ``parse_page(url, body, parser="feedparser")`` parses them.

    The feedparser part runs in a child process (see the module's docstring). It takes one
    document at a time. The caller serialises, and a lock guards it anyway. :meth:`close` stops
    the child.
    """

    def __init__(self, command: Sequence[str] = COMMAND, hello_s: float = HELLO_S) -> None:
        self.command = list(command)
        self.hello_s = hello_s
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._greeted = False
        self._failed = False

    def parse(self, url: str, body: bytes) -> Page:
        with self._lock:
            asked = self._ask(body)
            if not asked:
                return parse_page(url, body, parser="feedparser")
            try:
                page = parse_page(url, body, parser="lxml")
            except Exception:
                accepted(url, self._answer(body))  # feedparser's refusal first, as parse_page
                raise
            return dataclasses.replace(page, warnings=accepted(url, self._answer(body)))

    def start(self) -> None:
        """Start the child now, so it loads feedparser meanwhile. Else the first page starts it."""
        with self._lock:
            self._started()

    def close(self) -> None:
        with self._lock:
            child, self._child = self._child, None
        if child is not None:
            _stop(child)

    # -- the child --------------------------------------------------------------------------

    def _ask(self, body: bytes) -> bool:
        """Send ``body`` to the child, started if need be; False if there is none."""
        child = self._started()
        if child is None or not self._greeting(child):
            return False
        try:
            stdin = _pipe(child.stdin)
            stdin.write(_LENGTH.pack(len(body)))
            stdin.write(body)
            stdin.flush()
        except (OSError, ValueError) as exc:
            self._give_up(f"cannot send it a document: {exc}")
            return False
        return True

    def _started(self) -> subprocess.Popen[bytes] | None:
        if self._child is None and not self._failed:
            try:
                self._child = subprocess.Popen(
                    self.command,
                    # The modules this process imports, not another installed copy. A checkout
                    # on sys.path is one example.
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, sys.path))},
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except (OSError, ValueError) as exc:
                self._give_up(f"cannot start it: {exc}")
        return self._child

    def _greeting(self, child: subprocess.Popen[bytes]) -> bool:
        """The child said :data:`HELLO` within :attr:`hello_s` of its start (read once)."""
        if self._greeted:
            return True
        said = b""
        try:
            fd = _pipe(child.stdout).fileno()
            deadline = time.monotonic() + self.hello_s
            while len(said) < len(HELLO) and HELLO.startswith(said):
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    break
                got = os.read(fd, len(HELLO) - len(said))
                if not got:
                    break
                said += got
        except (OSError, ValueError) as exc:
            said = repr(exc).encode()
        if said != HELLO:
            self._give_up(f"it did not say it was one ({said[:80]!r})")
            return False
        self._greeted = True
        return True

    def _answer(self, body: bytes) -> Verdict:
        """The child's verdict on the document sent, or this process's own if it gave none."""
        try:
            stdout = _pipe(self._child.stdout if self._child is not None else None)
            head = stdout.read(_ANSWER.size)
            if len(head) != _ANSWER.size:
                raise ValueError("it stopped")
            (size,) = _ANSWER.unpack(head)
            if size > MAX_ANSWER_BYTES:
                raise ValueError(f"an answer of {size} bytes")
            answer = json.loads(stdout.read(size))
            reason, warnings = answer["reason"], answer["warnings"]
            if (
                not (reason is None or isinstance(reason, str))
                or not isinstance(warnings, list)
                or not all(isinstance(w, str) for w in warnings)
            ):
                raise ValueError(f"an answer of the wrong shape: {answer!r}")
            return reason, tuple(warnings)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._give_up(f"no verdict from it: {exc}")
            return feedparser_verdict(body)

    def _give_up(self, why: str) -> None:
        self._failed = True
        log.warning(
            "feedparser checks pages in this process from now on (checker process: %s)", why
        )
        child, self._child = self._child, None
        if child is not None:
            _stop(child)


def _pipe(stream: IO[bytes] | None) -> IO[bytes]:
    if stream is None:
        raise ValueError("no pipe")
    return stream


def _stop(child: subprocess.Popen[bytes]) -> None:
    """End of input ends the child; one that does not end within a second is killed."""
    for stream in (child.stdin, child.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        child.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def main() -> None:
    """The child: verdicts on the documents of standard input, until its end."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(HELLO)
    stdout.flush()
    while True:
        head = stdin.read(_LENGTH.size)
        if len(head) != _LENGTH.size:
            return
        (size,) = _LENGTH.unpack(head)
        body = stdin.read(size)
        if len(body) != size:
            return
        reason, warnings = feedparser_verdict(body)
        answer = json.dumps({"reason": reason, "warnings": list(warnings)}).encode()
        stdout.write(_ANSWER.pack(len(answer)) + answer)
        stdout.flush()


if __name__ == "__main__":
    main()

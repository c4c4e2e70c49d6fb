"""Waiting for a feed to change (``Prefer: wait``, RFC 7240): one watcher per process.

A request whose client holds the current document waits here, on a condition shared by every
waiting request of the process, holding no database connection: one thread per process
(started by the first wait) watches the database for commits, by any process or node
(:meth:`~simplefeed.store.interface.Store.watch`: SQLite's ``data_version``, PostgreSQL's
``LISTEN``), and wakes the waiters at each; each then asks whether its client's copy is still
current (the same precondition evaluation as a 304), and goes on waiting if so.

The watcher wakes one waiter, and each waiter woken with news wakes the next, in the order they
began waiting: the 125 waiters of a process, all woken at once, spent their CPU handing the GIL
and the condition's lock to each other (500 consumers: the server's CPU per publish 0.89 of
what it was, the median consumer's delay 0.85; docs/benchmarks.md, "Long-poll").

Waiters read their feed with :meth:`Changes.seen`: one lookup per feed and commit seen, shared
by every waiter of the process (500 waiters woken by a publish made 500 lookups, queueing for a
few connections: docs/benchmarks.md, "Long-poll").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from simplefeed.locks import Striped
from simplefeed.model import Feed

Watch = Callable[[Callable[[], None], threading.Event], None]


class Changes:
    """A counter of the commits seen by the process's watcher, and a condition to wait on."""

    def __init__(self, watch: Watch, look_up: Callable[[str], Feed]) -> None:
        self._watch = watch
        self._look_up = look_up
        #: Per feed name: the watcher's version when it was last looked up, and the feed then.
        self._heads: dict[str, tuple[int, Feed]] = {}
        self._looking = Striped()
        self._changed = threading.Condition()
        self._version = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _seen(self) -> None:
        with self._changed:
            self._version += 1
            self._changed.notify()  # one waiter; each waiter woken wakes the next

    def version(self) -> int:
        """The commits seen so far; starts the watcher on first use."""
        if self._thread is None:
            with self._changed:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._watch,
                        args=(self._seen, self._stop),
                        name="simplefeed-changes",
                        daemon=True,
                    )
                    self._thread.start()
        return self._version

    def seen(self, name: str) -> Feed:
        """The feed as committed when the watcher last saw a commit, or later: looked up once
        per commit seen, by the first waiter that asks; the others wait for that lookup and
        share it. For waiting requests only (a commit the watcher has not seen yet wakes them
        when it does, within its interval): any other request looks the feed up itself, so
        that it sees what was committed before it came.

        Only feeds that exist are remembered (the lookup raises for others), so this holds
        what the database holds, not what requests name.

        A feed already looked up for this version is read without the lock (a dict read is
        atomic): every waiter of the process comes here as it starts waiting and as it wakes,
        and when the lock was taken each time, a holder preempted inside it made the others
        queue for it, each handing the interpreter lock over as it blocked (the waiting
        threads' CPU per answer 0.84 of before, their voluntary context switches 2.7 against
        4.7: docs/benchmarks.md, "Long-poll", session 11)."""
        version = self.version()
        known = self._heads.get(name)
        if known is not None and known[0] >= version:
            return known[1]
        with self._looking(name):
            known = self._heads.get(name)
            if known is not None and known[0] >= version:
                return known[1]
            feed = self._look_up(name)
            self._heads[name] = (version, feed)
            return feed

    def wait(self, current: Callable[[], bool], seconds: float) -> bool:
        """Return once ``current()`` is False, or after ``seconds``. False if it was False to
        begin with (nothing waited for), True otherwise.

        ``current`` is asked again after each commit the watcher sees; the version is read
        before each asking, so a commit made while it runs is never missed.
        """
        deadline = time.monotonic() + seconds
        seen = self.version()
        if not current():
            return False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            with self._changed:
                if self._version == seen:
                    self._changed.wait(remaining)
                    if self._version != seen:
                        self._changed.notify()  # pass the news on
                seen = self._version
            if not current():
                return True

    def stop(self) -> None:
        """Stop the watcher and wait for it to end (within about a second), its connection
        closed; waiters wait out their time."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

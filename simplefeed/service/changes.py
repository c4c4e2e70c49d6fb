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
what it was, the median consumer's delay 0.85; docs/explanation/decisions/long-poll.md).

Waiters read their feed with :meth:`Changes.seen`: one lookup per feed and commit seen, shared
by every waiter of the process (500 waiters woken by a publish made 500 lookups, queueing for a
few connections: docs/explanation/decisions/long-poll.md).

A watcher that polls (SQLite's) looks every few milliseconds; a publish made by a process of
the node rings a :class:`Bell` (:meth:`Changes.committed`), and every watcher of the node looks
at once instead of at its next turn (a waiting consumer had an entry 2 ms after the publish's
201 instead of 5-7: docs/explanation/decisions/long-poll.md). The bell only hastens a look:
what changed is still read from the database, so a ring lost or never sent costs the interval.
Where the bell is the node's (:class:`NodeBell`), every publish of the node rings it, and the
watcher's own looks, for commits made elsewhere, come every :data:`UNANNOUNCED_LOOK_S` only.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

from simplefeed.locks import Striped
from simplefeed.model import Feed
from simplefeed.store.interface import Pause

Watch = Callable[[Callable[[], None], Pause], None]


class Bell(Protocol):
    """Commits announced to the watchers of a node."""

    #: Every commit a process of the node makes rings it (:class:`NodeBell`): a watcher that
    #: polls then looks only every :data:`UNANNOUNCED_LOOK_S`, for commits made elsewhere.
    announces_node: bool

    def ring(self) -> None:
        """Wake every watcher of the node waiting in :meth:`wait`, this process's included;
        never blocks, never raises."""

    def wait(self, seconds: float) -> bool:
        """Until the bell rings (True) or ``seconds`` pass (False): a ring while nobody
        waited ends the next wait at once."""

    def close(self) -> None:
        """Stop hearing the bell."""


class ThreadBell:
    """A bell heard by this process only: a publish wakes its own process's watcher (any WSGI
    server; tests)."""

    announces_node = False

    def __init__(self) -> None:
        self._rung = threading.Event()

    def ring(self) -> None:
        self._rung.set()

    def wait(self, seconds: float) -> bool:
        rung = self._rung.wait(seconds)
        self._rung.clear()  # before the look that follows: a ring from now on is heard
        return rung

    def close(self) -> None:
        self._rung.set()


class NodeBell:
    """A bell heard by every process of a node: ``members`` processes numbered 1 to
    ``members`` (uWSGI's workers), each with a datagram socket named for ``node`` and its
    number in Linux's abstract namespace (no file; the name goes with the process). A ring is
    a byte sent to each name, its own included: a few microseconds per process. Raises OSError
    where the name cannot be had (another system than Linux, the name taken): the caller
    falls back to a :class:`ThreadBell`.

    Any local process can send to such a name: what it sends is never read, and the bell is
    heard at most once per :data:`RING_GAP_S`, so a flood of rings costs the watcher a bounded
    number of looks a second, never a spinning thread."""

    announces_node = True

    def __init__(self, node: str, me: int, members: int) -> None:
        self._names = [self._name(node, m) for m in range(1, members + 1)]
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._socket.bind(self._name(node, me))
            self._socket.setblocking(False)
        except OSError:
            self._socket.close()
            raise
        self._ringer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._ringer.setblocking(False)
        # poll, not select: a worker's descriptors may number past select's 1,024.
        self._poll = select.poll()
        self._poll.register(self._socket, select.POLLIN)
        self._heard = 0.0

    @staticmethod
    def _name(node: str, member: int) -> bytes:
        return f"\0simplefeed-changes-{node}-{member}".encode()

    def ring(self) -> None:
        for name in self._names:
            # Not listening (not started, gone), its queue full (it will look anyway), or
            # anything else: the bell only hastens a look, a publish never fails for it.
            with contextlib.suppress(OSError):
                self._ringer.sendto(b"!", name)

    def wait(self, seconds: float) -> bool:
        gap = self._heard + RING_GAP_S - time.monotonic()
        if gap > 0:
            time.sleep(min(gap, seconds))  # heard a moment ago: rings meanwhile wait
        if not self._poll.poll(max(0.0, seconds - max(gap, 0.0)) * 1000):
            return False
        with contextlib.suppress(OSError):  # drained (or closed: stopping)
            while self._socket.recv(64):
                pass
        self._heard = time.monotonic()
        return True

    def close(self) -> None:
        with contextlib.suppress(KeyError, ValueError):  # closed before
            self._poll.unregister(self._socket)
        self._socket.close()
        self._ringer.close()


#: The least time between two rings a :class:`NodeBell` hears: publishes closer together are
#: seen by one look (it reads every commit since the last), at most 1,000 looks a second.
RING_GAP_S = 0.001

#: The longest a watcher that polls goes without looking when its bell announces every commit
#: of the node (:attr:`Bell.announces_node`): its looks are then for commits made elsewhere
#: (a ``simplefeed`` command's, another server's on the same SQLite file), seen this much later
#: at most. Each look woken by a timer cost this machine about 160 us of CPU (a thread woken,
#: SQLite's locks taken), so looking every 10 ms kept a node of 4 processes with waiting
#: consumers at 44-54 ms of CPU a second doing nothing; 5-7 ms looking so
#: (docs/explanation/decisions/long-poll.md).
UNANNOUNCED_LOOK_S = 0.1


class _Pause:
    """What a store's watcher waits on between looks (:class:`~simplefeed.store.interface.
    Pause`): the store's interval, cut short by the bell or by ``stop``; at least
    :data:`UNANNOUNCED_LOOK_S` when the bell announces every commit of the node."""

    def __init__(self, stop: threading.Event, bell: Bell) -> None:
        self._stop = stop
        self._bell = bell

    def is_set(self) -> bool:
        return self._stop.is_set()

    def wait(self, timeout: float) -> bool:
        if not self._stop.is_set():
            if self._bell.announces_node:
                timeout = max(timeout, UNANNOUNCED_LOOK_S)
            self._bell.wait(timeout)
        return self._stop.is_set()


class Changes:
    """A counter of the commits seen by the process's watcher, and a condition to wait on."""

    def __init__(
        self, watch: Watch, look_up: Callable[[str], Feed], bell: Bell | None = None
    ) -> None:
        self._watch = watch
        self._bell: Bell = bell if bell is not None else ThreadBell()
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
                        args=(self._seen, _Pause(self._stop, self._bell)),
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
        4.7: docs/explanation/decisions/long-poll.md)."""
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

    def committed(self) -> None:
        """This process committed a change to a feed: the node's watchers look now."""
        self._bell.ring()

    def stop(self) -> None:
        """Stop the watcher and wait for it to end (within about a second), its connection
        closed; waiters wait out their time."""
        self._stop.set()
        self._bell.ring()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._bell.close()

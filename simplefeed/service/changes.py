"""Wait for a feed to change (``Prefer: wait``, RFC 7240), with one watcher per process.

A request whose client holds the current document waits here. It waits on a condition shared by
every waiting request of the process, and holds no database connection. One thread per process
watches the database for commits, by any process or node. The first wait starts it. It uses
:meth:`~simplefeed.store.interface.Store.watch`, which is SQLite's ``data_version`` or
PostgreSQL's ``LISTEN``. At each commit it wakes the waiters. Each then asks whether its
client's copy is still current, by the same precondition evaluation as a 304. If so, it goes on
waiting.

The watcher wakes one waiter. Each waiter woken with news wakes the next, in the order they
began waiting. All woken at once, the 125 waiters of a process would spend their CPU handing
the GIL and the condition's lock to each other. Take 500 consumers. Against waking all,
waking one at a time brings the server's CPU per publish to 0.89. It brings the median
consumer's delay to 0.85 (docs/explanation/decisions/long-poll.md).

Waiters read their feed with :meth:`Changes.seen`. It makes one lookup per feed and commit
seen, shared by every waiter of the process. Else 500 waiters woken by a publish would make 500
lookups, queueing for a few connections (docs/explanation/decisions/long-poll.md).

A watcher that polls, as SQLite's does, looks every few milliseconds. A publish made by a
process of the node rings a :class:`Bell` (:meth:`Changes.committed`). Then every watcher of
the node looks at once, instead of at its next turn. So a waiting consumer has an entry 2 ms
after the publish's 201, instead of 5-7 ms (docs/explanation/decisions/long-poll.md). The bell
only hastens a look. What changed is still read from the database. So a ring lost or never
sent costs only the interval. Where the bell is the node's (:class:`NodeBell`), every publish
of the node rings it. Then the watcher's own looks are for commits made elsewhere. They come
only every :data:`UNANNOUNCED_LOOK_S`.
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

    #: Every commit a process of the node makes rings it (:class:`NodeBell`). A watcher that
    #: polls then looks only every :data:`UNANNOUNCED_LOOK_S`, for commits made elsewhere.
    announces_node: bool

    def ring(self) -> None:
        """Wake every watcher of the node waiting in :meth:`wait`, this process's included.

        It never blocks and never raises.
        """

    def wait(self, seconds: float) -> bool:
        """Wait until the bell rings (True) or ``seconds`` pass (False).

        A ring while nobody waited ends the next wait at once.
        """

    def close(self) -> None:
        """Stop hearing the bell."""


class ThreadBell:
    """A bell heard by this process only.

    A publish wakes its own process's watcher. It serves any WSGI server, and tests.
    """

    announces_node = False

    def __init__(self) -> None:
        self._rung = threading.Event()

    def ring(self) -> None:
        self._rung.set()

    def wait(self, seconds: float) -> bool:
        rung = self._rung.wait(seconds)
        self._rung.clear()  # Before the look that follows, so a ring from now on is heard.
        return rung

    def close(self) -> None:
        self._rung.set()


class NodeBell:
    """A bell heard by every process of a node.

    The node has ``members`` processes, numbered 1 to ``members``. They are uWSGI's workers.
    Each has a datagram socket named for ``node`` and its number, in Linux's abstract
    namespace. So there is no file, and the name goes with the process. A ring is a byte sent
    to each name, its own included. It costs a few microseconds per process. Raises OSError
    where the name cannot be had, as on another system than Linux or with the name taken. The
    caller then falls back to a :class:`ThreadBell`.

    Any local process can send to such a name. What it sends is never read. The bell is heard
    at most once per :data:`RING_GAP_S`. So a flood of rings costs the watcher a bounded number
    of looks a second, never a spinning thread.
    """

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
        # Use poll, not select, because a worker's descriptors may number past select's 1,024.
        self._poll = select.poll()
        self._poll.register(self._socket, select.POLLIN)
        self._heard = 0.0

    @staticmethod
    def _name(node: str, member: int) -> bytes:
        return f"\0simplefeed-changes-{node}-{member}".encode()

    def ring(self) -> None:
        for name in self._names:
            # The process may not listen, not started or gone. Its queue may be full, and then
            # it will look anyway. Whatever the cause, the bell only hastens a look. So a
            # publish never fails for it.
            with contextlib.suppress(OSError):
                self._ringer.sendto(b"!", name)

    def wait(self, seconds: float) -> bool:
        gap = self._heard + RING_GAP_S - time.monotonic()
        if gap > 0:
            time.sleep(min(gap, seconds))  # Heard a moment ago, so rings meanwhile wait.
        if not self._poll.poll(max(0.0, seconds - max(gap, 0.0)) * 1000):
            return False
        with contextlib.suppress(OSError):  # Drained, or closed while stopping.
            while self._socket.recv(64):
                pass
        self._heard = time.monotonic()
        return True

    def close(self) -> None:
        with contextlib.suppress(KeyError, ValueError):  # Closed before.
            self._poll.unregister(self._socket)
        self._socket.close()
        self._ringer.close()


#: The least time between two rings a :class:`NodeBell` hears. Publishes closer together are
#: seen by one look, which reads every commit since the last. So there are at most 1,000 looks
#: a second.
RING_GAP_S = 0.001

#: The longest a watcher that polls goes without looking, when its bell announces every commit
#: of the node (:attr:`Bell.announces_node`). Its looks are then for commits made elsewhere.
#: Such a commit is a ``simplefeed`` command's, or another server's on the same SQLite file. It
#: is seen this much later at most. Each look woken by a timer costs about 160 us of CPU. It
#: wakes a thread and takes SQLite's locks. Take a node of 4 processes with waiting consumers.
#: Looking every 10 ms keeps it at 44-54 ms of CPU a second doing nothing. Looking this often
#: keeps it at 5-7 ms (docs/explanation/decisions/long-poll.md).
UNANNOUNCED_LOOK_S = 0.1


class _Pause:
    """What a store's watcher waits on between looks.

    It is a :class:`~simplefeed.store.interface.Pause`. It waits the store's interval, cut
    short by the bell or by ``stop``. It waits at least :data:`UNANNOUNCED_LOOK_S` when the
    bell announces every commit of the node.
    """

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
        #: Per feed name, the watcher's version when it was last looked up, and the feed then.
        self._heads: dict[str, tuple[int, Feed]] = {}
        self._looking = Striped()
        self._changed = threading.Condition()
        self._version = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _seen(self) -> None:
        with self._changed:
            self._version += 1
            self._changed.notify()  # One waiter. Each waiter woken wakes the next.

    def version(self) -> int:
        """Return the commits seen so far, and start the watcher on first use."""
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
        """Return the feed as committed when the watcher last saw a commit, or later.

        The feed is looked up once per commit seen, by the first waiter that asks. The others
        wait for that lookup and share it. This is for waiting requests only. A commit the
        watcher has not seen yet wakes them when it does, within its interval. Any other
        request looks the feed up itself, so that it sees what was committed before it came.

        Only feeds that exist are remembered, because the lookup raises for others. So this
        holds what the database holds, not what requests name.

        A feed already looked up for this version is read without the lock. A dict read is
        atomic. Every waiter of the process comes here as it starts waiting and as it wakes.
        Taking the lock each time would let a holder preempted inside it make the others queue.
        Each would hand the interpreter lock over as it blocked. Against taking it, reading
        without the lock cuts the waiting threads' CPU per answer to 0.84. It cuts their
        voluntary context switches from 4.7 to 2.7 (docs/explanation/decisions/long-poll.md).
        """
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
        """Return once ``current()`` is False, or after ``seconds``.

        Return False if it was False to begin with, so nothing was waited for. Else return
        True. ``current`` is asked again after each commit the watcher sees. The version is
        read before each asking, so a commit made while it runs is never missed.
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
                        self._changed.notify()  # Pass the news on.
                seen = self._version
            if not current():
                return True

    def committed(self) -> None:
        """Tell the node's watchers to look now, after this process committed to a feed."""
        self._bell.ring()

    def stop(self) -> None:
        """Stop the watcher, and wait for it to end within about a second.

        Its connection is closed. Waiters wait out their time.
        """
        self._stop.set()
        self._bell.ring()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._bell.close()

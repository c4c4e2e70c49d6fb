"""Long-polls (``Prefer: wait``) wait in front of the application, not inside it.

A consumer answered by a long-poll asks again at once, with the new ETag and ``Prefer: wait``.
At 500 waiting consumers, a publish brings 500 such requests in a burst. Each one's way through
falcon and the middleware to the point where it waits costs as much as a plain request
(docs/explanation/decisions/long-poll.md). So :class:`WaitingRoom` holds them before the app
instead.

The app teaches the room whenever one of its long-polls finds the client's copy current
(:meth:`WaitingRoom.learn`). It says that this path, while the feed is exactly this version,
serves a document with these ETags. A request may then wait here while its feed stays that
version. It must be for a learnt path, with an ``If-None-Match`` that is one of those ETags. It
must hold nothing else that could change the answer. So it has no other precondition and no
query, a head within the app's bounds, and a valid ``wait``. The wait uses
:meth:`Changes.wait <simplefeed.service.changes.Changes.wait>` and holds one of the node's
waiting slots. With none free, the room declines the request, as the app does.

When the wait ends, the first of the requests that waited alike goes to the app, marked as
waited (:data:`WAITED`). Alike means the same method, path, ``Accept-Encoding``,
``If-None-Match`` and ``Prefer``. The app answers it as it answers a long-poll it held itself,
with ``Preference-Applied``, ``Vary: Prefer`` and the feed as last seen. The room keeps that
answer (:class:`~simplefeed.app.answers.Answers`). The others that saw the same feed version get
it without the app. Each gets its own ``Date``, ``X-Request-Id``, access line and metrics.
Anything else goes to the app as it came, and the app may hold it itself. So the room only ever
waits where the app would have.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from simplefeed.app import access, limits, preconditions
from simplefeed.app.answers import MAX_DOCUMENTS, Answers, StartResponse, WsgiApp
from simplefeed.errors import FeedNotFound, StoreUnavailable
from simplefeed.locks import Striped
from simplefeed.model import Feed
from simplefeed.service.changes import Changes

#: The environ key of a request that waited in the room: the feed as last seen.
WAITED = "simplefeed.waited"


class WaitingSlots(Protocol):
    """Room for long-polls (``Prefer: wait``) to wait, shared by the processes of a node.

    Under uWSGI, it is :class:`simplefeed.runtime.wsgi.NodeWaitingSlots`.
    """

    def acquire(self) -> bool:
        """Take a place to wait, or return False at once if none is free."""

    def release(self) -> None:
        """Give back a place taken."""

    def waiting(self) -> int:
        """How many long-polls wait now, on the whole node."""


@dataclasses.dataclass(frozen=True)
class Held:
    """What the app said of a path: while its feed is ``feed``, its document's ETags are ``etags``.

    There is one ETag per coding.
    """

    name: str
    feed: Feed
    etags: frozenset[str]


class WaitingRoom:
    """A WSGI wrapper around ``app``: see the module's docstring.

    ``waits`` holds the node's waiting slots (None means no bound). ``max_wait`` is
    SIMPLEFEED_MAX_WAIT. ``date`` gives the ``Date`` header's value now.
    """

    def __init__(
        self,
        app: WsgiApp,
        changes: Changes,
        waits: WaitingSlots | None,
        max_wait: int,
        date: Callable[[], str],
    ) -> None:
        self.changes = changes
        self.waits = waits
        self.max_wait = max_wait
        self.date = date
        #: PATH_INFO -> what the app last said of it (one entry per live document's URL).
        self._held: dict[str, Held] = {}
        #: The app's answers to requests that waited, by the feed version they saw.
        self.answers = Answers(date)
        self._answering = Striped()
        self.app = app

    def learn(self, path: str, name: str, feed: Feed, etags: Iterable[str]) -> None:
        """The app found a long-poll for ``path`` current.

        Its document is ``etags`` while ``name`` is ``feed``.
        """
        held = self._held.get(path)
        if held is None or held.feed != feed:
            if held is None and len(self._held) >= MAX_DOCUMENTS:
                self._held.clear()
            self._held[path] = Held(name, feed, frozenset(etags))

    def holds(self, env: dict[str, Any]) -> tuple[Held, int] | None:
        """What the request would wait for, and how long; None to hand it to the app as is."""
        prefer = env.get("HTTP_PREFER")
        if prefer is None:
            return None
        held = self._held.get(env.get("PATH_INFO", ""))
        if (
            held is None
            or env.get("HTTP_IF_NONE_MATCH") not in held.etags
            or env.get("REQUEST_METHOD") not in ("GET", "HEAD")
            or "HTTP_IF_MATCH" in env
            or "HTTP_IF_UNMODIFIED_SINCE" in env
            or env.get("QUERY_STRING")
            or env.get("CONTENT_LENGTH", "") not in ("", "0")
            or "HTTP_TRANSFER_ENCODING" in env
            or limits.head_problem(env) is not None
        ):
            return None
        seconds = preconditions.preferred_wait(prefer, self.max_wait)
        return None if seconds is None else (held, seconds)

    def __call__(self, env: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        env[access.STARTED] = time.perf_counter()
        holding = self.holds(env)
        if holding is None or (self.waits is not None and not self.waits.acquire()):
            return self.app(env, start_response)
        held, seconds = holding
        last = [held.feed]
        ended = ["timeout"]

        def unchanged() -> bool:
            ended[0] = "woken"
            try:
                last[0] = self.changes.seen(held.name)
            except (StoreUnavailable, FeedNotFound):
                return False
            if last[0] != held.feed:
                return False
            ended[0] = "timeout"
            return True

        try:
            waited = self.changes.wait(unchanged, seconds)
        finally:
            if self.waits is not None:
                self.waits.release()
        if not waited:
            return self.app(env, start_response)
        env[WAITED] = last[0]
        env[access.WAIT_ENDED] = ended[0]
        return self._answer(env, start_response, last[0])

    def _answer(
        self, env: dict[str, Any], start_response: StartResponse, feed: Feed
    ) -> Iterable[bytes]:
        """The app's answer to a request that waited here, given once per document, version and way.

        The others that waited alike get the same answer.
        """
        path = env["PATH_INFO"]
        way = (
            env["REQUEST_METHOD"],
            env.get("HTTP_ACCEPT_ENCODING", ""),
            env["HTTP_IF_NONE_MATCH"],
            env["HTTP_PREFER"],
        )
        known = self.answers.get(path, way, feed)
        if known is not None:
            return self.answers.again(known, env, start_response)
        with self._answering((path, *way)):  # One asks the app. Those alike that woke wait.
            known = self.answers.get(path, way, feed)
            if known is not None:
                return self.answers.again(known, env, start_response)
            return self.answers.ask(self.app, env, start_response, way, feed)

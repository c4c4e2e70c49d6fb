"""The app's answers to requests for live documents, given again while the feed is unchanged.

A live document (the recent document, the working page) changes only when its feed does. So
the app's answer to one request holds for every request asked alike while the feed stays that
version. Alike means the same method, path, ``Accept-Encoding`` and ``If-None-Match``, and the
same ``Prefer`` for a long-poll. :class:`Answers` keeps such answers for the feed's current
version only, at most :data:`MAX_VARIANTS` ways of asking per document. Each answer given again
has the request's own ``Date``, ``X-Request-Id``, access line and metrics
(:meth:`Answers.again`). So it is the app's answer, by construction.

Two fronts use it. :class:`~simplefeed.app.waiting.WaitingRoom` uses it for long-polls woken
alike. :class:`~simplefeed.app.repeats.Repeats` uses it for the plain polls of a document.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import Any

from simplefeed import logs
from simplefeed.app import access
from simplefeed.model import Feed

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

#: The environ key where a resource leaves the feed it answered from. It does so when the answer
#: holds for every request asked alike while the feed stays that version. That is a live
#: document with final validators. Last-Modified is left out while its second runs. A stale
#: copy served while the database does not answer never qualifies.
SERVED = "simplefeed.served"


@dataclasses.dataclass(frozen=True)
class Answer:
    """The app's answer to a request, as it answers every request asked alike at version ``feed``.

    It holds everything but the ``Date`` and ``X-Request-Id`` headers. It also holds what its
    access line said.
    """

    feed: Feed
    status: str
    headers: list[tuple[str, str]]
    body: bytes
    document: str | None
    #: Its access line, but for the time, request id and duration.
    line: logs.RepeatedLine


#: The most documents (paths) kept. Past that, all are forgotten and learnt again. Otherwise
#: working pages that froze would pile up, one entry each.
MAX_DOCUMENTS = 1024
#: The answers kept per document and version, one per way of asking. Clients choose the ways.
#: The app answers the others each time.
MAX_VARIANTS = 16

#: Headers each answer has of its own.
_OWN_HEADERS = frozenset({"date", access.REQUEST_ID_HEADER.lower()})


class Answers:
    """Answers kept per document (``PATH_INFO``) for one version of its feed, one per way of asking.

    ``date`` gives the ``Date`` header's value now.
    """

    def __init__(self, date: Callable[[], str]) -> None:
        self.date = date
        #: PATH_INFO -> the feed version answered, and the answer to each way of asking. The
        #: previous version's answers are dropped with it.
        self._kept: dict[str, tuple[Feed, dict[tuple[str, ...], Answer]]] = {}

    def feed(self, path: str) -> Feed | None:
        """The feed version of the answers kept for ``path``, if any."""
        kept = self._kept.get(path)
        return kept[0] if kept is not None else None

    def ways(self, path: str) -> int:
        """How many ways of asking for ``path`` have an answer kept."""
        kept = self._kept.get(path)
        return len(kept[1]) if kept is not None else 0

    def get(self, path: str, way: tuple[str, ...], feed: Feed) -> Answer | None:
        """The answer kept for ``way`` of asking for ``path`` while the feed is ``feed``."""
        kept = self._kept.get(path)
        if kept is None or (kept[0] is not feed and kept[0] != feed):
            return None
        return kept[1].get(way)

    def ask(
        self,
        app: WsgiApp,
        env: dict[str, Any],
        start_response: StartResponse,
        way: tuple[str, ...],
        feed: Feed | None = None,
    ) -> Iterable[bytes]:
        """The app's answer to the request, kept for ``way`` when it holds for all asked alike.

        That is a 200 or 304 with its body in memory. It comes from the feed the resource served
        (:data:`SERVED`). Or it comes from ``feed``, when the caller gave the app that version
        to answer.
        """
        got: list[Any] = []

        def keep(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            got[:] = [status, headers]
            return start_response(status, headers, exc_info)

        body = app(env, keep)
        served = feed if feed is not None else env.get(SERVED)
        logged = env.get(access.LOGGED)
        if (
            served is not None
            and got
            and got[0][:3] in ("200", "304")
            and logged is not None
            and isinstance(body, list)
            and all(isinstance(part, bytes) for part in body)
        ):
            answer = Answer(
                served,
                got[0],
                [(k, v) for k, v in got[1] if k.lower() not in _OWN_HEADERS],
                b"".join(body),
                logged[1],
                access.line_again(
                    env["REQUEST_METHOD"], env["PATH_INFO"], int(got[0][:3]), logged[0]
                ),
            )
            self._keep(env["PATH_INFO"], way, answer)
        return body

    def _keep(self, path: str, way: tuple[str, ...], answer: Answer) -> None:
        kept = self._kept.get(path)
        if kept is None or kept[0] != answer.feed:
            if kept is None and len(self._kept) >= MAX_DOCUMENTS:
                self._kept.clear()
            self._kept[path] = (answer.feed, {way: answer})
        elif len(kept[1]) < MAX_VARIANTS:
            kept[1][way] = answer

    def again(
        self, known: Answer, env: dict[str, Any], start_response: StartResponse
    ) -> list[bytes]:
        """``known`` once more, with this request's own ``Date``, request id and access line."""
        rid = access.request_id(env)
        start_response(
            known.status,
            [*known.headers, ("Date", self.date()), (access.REQUEST_ID_HEADER, rid)],
        )
        seconds = time.perf_counter() - (env.get(access.STARTED) or time.perf_counter())
        access.answered_again(known.line, int(known.status[:3]), known.document, seconds, rid)
        return [known.body]

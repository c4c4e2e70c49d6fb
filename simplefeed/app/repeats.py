"""Plain polls of a live document, answered in front of the app while the feed is unchanged.

Most requests a feed server answers are polls of ``/recent``. The answer is a 304, else the
same bytes again. Through falcon, its middleware and the resource, such a poll costs four times
the instructions of a minimal falcon app's 304 (docs/benchmarks.md, "Hot paths").
:class:`Repeats` asks the app once per way of asking and feed version. It keeps the app's answer
(:class:`~answers.Answers`). It gives that answer to the next requests asked alike while the
feed's head is the same. It looks the head up as the app does
(:meth:`Simplefeed.feed_head <simplefeed.service.Simplefeed.feed_head>`).

Only plain requests come here. That means GET or HEAD, no query, no body, and a head within the
app's bounds. It also means no ``Prefer``, because long-polls go to the
:class:`~simplefeed.app.waiting.WaitingRoom`. The only precondition allowed is
``If-None-Match``. ``If-Modified-Since`` may come only beside it, and then decides nothing
(RFC 9110 13.1.3). Anything else goes to the app, and so do a feed that is not found and a
database that does not answer. The app answers as it always does: a 404, a stale copy, a 503.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from simplefeed.app import limits
from simplefeed.app.answers import Answers, StartResponse, WsgiApp
from simplefeed.errors import FeedNotFound, StoreUnavailable
from simplefeed.model import Feed


def plain(env: dict[str, Any]) -> bool:
    """Whether the app answers this request as it answers any other asked alike.

    Alike means the same method, path, ``Accept-Encoding`` and ``If-None-Match``, while the feed
    is unchanged.
    """
    return (
        env.get("REQUEST_METHOD") in ("GET", "HEAD")
        and not env.get("QUERY_STRING")
        and env.get("CONTENT_LENGTH", "") in ("", "0")
        and "HTTP_PREFER" not in env
        and "HTTP_IF_MATCH" not in env
        and "HTTP_IF_UNMODIFIED_SINCE" not in env
        and "HTTP_TRANSFER_ENCODING" not in env
        and ("HTTP_IF_MODIFIED_SINCE" not in env or "HTTP_IF_NONE_MATCH" in env)
        and limits.head_problem(env) is None
    )


class Repeats:
    """A WSGI wrapper around ``app``: see the module's docstring.

    ``feed_head`` gives the feed as committed now, by name. ``date`` gives the ``Date`` header's
    value now.
    """

    def __init__(
        self, app: WsgiApp, feed_head: Callable[[str], Feed], date: Callable[[], str]
    ) -> None:
        self.app = app
        self.feed_head = feed_head
        self.answers = Answers(date)

    def __call__(self, env: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if not plain(env):
            return self.app(env, start_response)
        path = env["PATH_INFO"]
        way = (
            env["REQUEST_METHOD"],
            env.get("HTTP_ACCEPT_ENCODING", ""),
            env.get("HTTP_IF_NONE_MATCH", ""),
        )
        kept = self.answers.feed(path)
        if kept is not None:
            try:
                feed = self.feed_head(kept.name)
            except (StoreUnavailable, FeedNotFound):
                return self.app(env, start_response)
            known = self.answers.get(path, way, feed)
            if known is not None:
                return self.answers.again(known, env, start_response)
        return self.answers.ask(self.app, env, start_response, way)

"""The HTTP application (falcon): ``create_app(settings)`` wires resources to a core."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import falcon

from simplefeed.app import (
    access,
    compression,
    errors,
    html,
    limits,
    repeats,
    resources,
    waiting,
)
from simplefeed.app.caching import http_date
from simplefeed.errors import NotFound
from simplefeed.service import Clock, Simplefeed, random_uuid, system_clock
from simplefeed.settings import Settings

__all__ = ["create_app", "requests_only"]

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def create_app(
    settings: Settings,
    *,
    core: Simplefeed | None = None,
    clock: Clock = system_clock,
    new_uuid: Callable[[], str] = random_uuid,
    threads: int | None = None,
    waits: waiting.WaitingSlots | None = None,
) -> WsgiApp:
    """The app: falcon's, behind two fronts.

    :class:`~repeats.Repeats` answers plain polls of a live document again while the feed is
    unchanged. The :class:`~waiting.WaitingRoom` holds long-polls. ``threads`` is how many
    requests a process serves at once (uWSGI's threads per worker). It keeps publishes waiting
    for the database from taking them all (:func:`resources.writer_slots`). ``waits`` is where
    long-polls wait, so they never take every thread of the node. None means no such bound,
    for one request at a time, or tests.
    """
    core = core if core is not None else Simplefeed(settings, clock=clock, new_uuid=new_uuid)
    # The access log comes first. It sees every request, and its response hook runs last.
    rules = HttpRules(core.clock)
    middleware: list[access.Access | HttpRules | compression.Compress] = [
        access.Access(settings.default_feed),
        rules,
        compression.Compress(),
    ]
    app = falcon.App(cors_enable=False, middleware=middleware)
    app.req_options.strip_url_path_trailing_slash = False
    errors.install(app)

    front = repeats.Repeats(app, core.feed_head, rules.date)
    room = waiting.WaitingRoom(front, core.changes, waits, settings.max_wait, rules.date)
    recent = resources.Recent(core, room)
    page = resources.Page(core, room)
    entries = resources.Entries(core, resources.writer_slots(threads))
    locator = resources.EntryLocator(core)
    app.add_route("/recent", recent)
    app.add_route("/pages/{n}", page)
    app.add_route("/entries", entries)
    # {entry_id:path}: the id as decoded from the URL, '/' included (sent as %2F).
    app.add_route("/entries/{entry_id:path}", locator)
    app.add_route("/feeds/{feed}/recent", recent)
    app.add_route("/feeds/{feed}/pages/{n}", page)
    app.add_route("/feeds/{feed}/entries", entries)
    app.add_route("/feeds/{feed}/entries/{entry_id:path}", locator)
    app.add_route("/", html.Index(core))
    app.add_route("/feeds/{feed}", html.FeedPage(core))
    app.add_route("/healthz", resources.Health(core))
    app.add_route("/openapi.json", resources.OpenApi())
    if settings.metrics:
        app.add_route("/metrics", resources.Metrics(core, waits))
    return room


class HttpRules:
    """What every request and response share.

    - ``Date`` on every response, formatted once per second. RFC 9110 6.6.1 says an origin
      with a clock MUST send it.
    - One document, one URL. An empty path segment (``//recent``) names nothing (404). An
      entry locator's id may hold one, because ``/entries/http:%2F%2F...`` arrives decoded.
    - Request heads within bounds (:func:`limits.head_problem`): a 414 or 431 with a JSON body.
    - A method this server does not know (``BREW``) is not implemented. It gets a 501 with a
      JSON body, as RFC 9110 15.6.2 says. A known method a resource does not allow gets a 405.
    - ``Connection: close`` when the request's body may be left unread (:func:`body_unread`).
      uWSGI's http11-socket then closes the connection after the response, and says nothing.
      A pooled client told so opens a new connection instead of sending into a closed one.
    - ``X-Content-Type-Options: nosniff`` on every response with a body. JSON replies quote
      what a request sent, so a browser must never read one as anything but its type.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._date = (-1, "")

    def date(self) -> str:
        """The ``Date`` header's value now."""
        second = self.clock() // 1_000_000
        if second != self._date[0]:
            self._date = (second, http_date(second))
        return self._date[1]

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        problem = limits.head_problem(req.env)
        if problem is not None:
            raise problem
        if req.method not in falcon.COMBINED_METHODS:
            raise falcon.HTTPNotImplemented(
                description=f"the method {req.method[:40]!r} is not implemented here"
            )
        route, locator, _ = req.path.partition("/entries/")
        if "//" in route + locator:
            raise NotFound(f"no resource at {req.path!r}")

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        resp.set_header("Date", self.date())
        if resp.status_code != 304:
            resp.set_header("X-Content-Type-Options", "nosniff")
        if body_unread(req.env, resp.status_code):
            resp.set_header("Connection", "close")


def body_unread(env: Mapping[str, Any], status: int) -> bool:
    """Whether a request's body may be left unread by its response.

    That is a body on anything but a publish, or a publish refused. The refusal may come before
    the body is read: 401, 413, 415, and so on. It is also a chunked body, because uWSGI does
    not decode those. A publish that succeeded read its whole body.
    """
    if env.get("HTTP_TRANSFER_ENCODING"):
        return True
    if env.get("CONTENT_LENGTH", "") in ("", "0"):
        return False
    return env.get("REQUEST_METHOD") != "POST" or not 200 <= status < 300


#: What a connection kept alive carries after a body that uWSGI did not read, if the client sends
#: it anyway. Such a body is a chunked one, which uWSGI's http-socket does not decode. uWSGI
#: parses those bytes as a request without a method or path. Falcon cannot take that, and would
#: answer a 500 with a traceback (KeyError). So it is answered here instead, and the connection
#: closed.
_NOT_A_REQUEST = (
    b'{"title": "400 Bad Request", "description": "not an HTTP request (a request line with'
    b' a method and a path)"}'
)


def requests_only(app: WsgiApp) -> WsgiApp:
    """``app`` behind a check that the server parsed a request line.

    Otherwise the answer is a 400 with a JSON body and ``Connection: close`` (see
    :data:`_NOT_A_REQUEST`).
    """

    def application(env: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if "PATH_INFO" in env and env.get("REQUEST_METHOD"):
            return app(env, start_response)
        start_response(
            "400 Bad Request",
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(_NOT_A_REQUEST))),
                ("Connection", "close"),
            ],
        )
        return [_NOT_A_REQUEST]

    return application

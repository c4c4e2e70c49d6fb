"""The HTTP application (falcon): ``create_app(settings)`` wires resources to a core."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import falcon

from simplefeed.app import access, compression, errors, html, resources
from simplefeed.app.caching import http_date
from simplefeed.core import Clock, Simplefeed, random_uuid, system_clock
from simplefeed.errors import NotFound
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
    waits: resources.WaitingSlots | None = None,
) -> falcon.App[falcon.Request, falcon.Response]:
    """The app. ``threads``: how many requests a process serves at once (uWSGI's threads per
    worker), so that publishes waiting for the database never take them all
    (:func:`resources.writer_slots`); ``waits``: where long-polls wait, so that they never
    take every thread of the node. None: no such bound (one request at a time, or tests)."""
    core = core if core is not None else Simplefeed(settings, clock=clock, new_uuid=new_uuid)
    # The access log first: it sees every request, and its response hook runs last.
    middleware: list[access.Access | HttpRules | compression.Compress] = [
        access.Access(settings.default_feed),
        HttpRules(core.clock),
        compression.Compress(),
    ]
    app = falcon.App(cors_enable=False, middleware=middleware)
    app.req_options.strip_url_path_trailing_slash = False
    errors.install(app)

    recent = resources.Recent(core, waits)
    page = resources.Page(core, waits)
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
        app.add_route("/metrics", resources.Metrics(core))
    return app


#: RFC 9110 4.1 asks for at least 8,000 octets of request target; nginx's default is 8 KiB a line.
MAX_TARGET_BYTES = 8192
#: The header fields of one request, names and values: 16 KiB (nginx: 4 lines of 8 KiB each).
MAX_HEADER_BYTES = 16384
#: And no more than 100 of them (nginx and uWSGI count no fields; 100 is ample for any client).
MAX_HEADER_FIELDS = 100


class HttpRules:
    """What every request and response share.

    - ``Date`` on every response (RFC 9110 6.6.1: an origin with a clock MUST send it),
      formatted once per second.
    - One document, one URL: an empty path segment (``//recent``) names nothing (404), but
      in an entry locator's id (``/entries/http:%2F%2F...`` arrives decoded).
    - Request heads within bounds: a target over MAX_TARGET_BYTES is a 414, header fields over
      MAX_HEADER_BYTES in all or more than MAX_HEADER_FIELDS a 431, each with a JSON body.
      (uwsgi.ini lets heads of up to 64 KiB and about 490 fields reach the app; uWSGI drops
      larger ones.)
    - ``Connection: close`` when the request's body may be left unread (:func:`body_unread`):
      uWSGI's http11-socket then closes the connection after the response, and says nothing;
      a pooled client told so opens a new one instead of sending into a closed one.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.second = -1
        self.date = ""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        env = req.env
        target = len(env.get("PATH_INFO", "")) + len(env.get("QUERY_STRING", ""))
        if target > MAX_TARGET_BYTES:
            raise falcon.HTTPUriTooLong(
                description=f"the request target is over {MAX_TARGET_BYTES} bytes"
            )
        fields = [len(k) + len(v) for k, v in env.items() if k.startswith("HTTP_")]
        if sum(fields) > MAX_HEADER_BYTES or len(fields) > MAX_HEADER_FIELDS:
            raise falcon.HTTPRequestHeaderFieldsTooLarge(
                description=f"the header fields are over {MAX_HEADER_BYTES} bytes in all,"
                f" or more than {MAX_HEADER_FIELDS}"
            )
        route, locator, _ = req.path.partition("/entries/")
        if "//" in route + locator:
            raise NotFound(f"no resource at {req.path!r}")

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        second = self.clock() // 1_000_000
        if second != self.second:
            self.date, self.second = http_date(second), second
        resp.set_header("Date", self.date)
        if body_unread(req.env, resp.status_code):
            resp.set_header("Connection", "close")


def body_unread(env: Mapping[str, Any], status: int) -> bool:
    """Whether a request's body may be left unread by its response: a body on anything but a
    publish, or a publish refused (the refusal may come before the body is read: 401, 413,
    415, ...), or a chunked body (uWSGI does not decode those). A publish that succeeded read
    its whole body."""
    if env.get("HTTP_TRANSFER_ENCODING"):
        return True
    if env.get("CONTENT_LENGTH", "") in ("", "0"):
        return False
    return env.get("REQUEST_METHOD") != "POST" or not 200 <= status < 300


#: What a connection kept alive carries after a body that uWSGI did not read (a chunked one,
#: which its http-socket does not decode), if the client sends it anyway: uWSGI parses those
#: bytes as a request without a method or path, which falcon cannot take (KeyError, a 500 with
#: a traceback). Answered here instead, and the connection closed.
_NOT_A_REQUEST = (
    b'{"title": "400 Bad Request", "description": "not an HTTP request (a request line with'
    b' a method and a path)"}'
)


def requests_only(app: WsgiApp) -> WsgiApp:
    """``app`` behind a check that the server parsed a request line: a 400 with a JSON body
    and ``Connection: close`` otherwise (see :data:`_NOT_A_REQUEST`)."""

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

"""The HTTP application (falcon): ``create_app(settings)`` wires resources to a core."""

from __future__ import annotations

from collections.abc import Callable

import falcon

from simplefeed.app import access, compression, errors, html, resources
from simplefeed.app.caching import http_date
from simplefeed.core import Clock, Simplefeed, random_uuid, system_clock
from simplefeed.errors import NotFound
from simplefeed.settings import Settings

__all__ = ["create_app"]


def create_app(
    settings: Settings,
    *,
    core: Simplefeed | None = None,
    clock: Clock = system_clock,
    new_uuid: Callable[[], str] = random_uuid,
) -> falcon.App[falcon.Request, falcon.Response]:
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

    recent = resources.Recent(core)
    page = resources.Page(core)
    entries = resources.Entries(core)
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

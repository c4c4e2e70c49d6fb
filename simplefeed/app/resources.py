"""Falcon resources. They translate HTTP to calls on :class:`~simplefeed.core.Simplefeed` and back;
domain errors propagate to the handlers in :mod:`simplefeed.app.errors`."""

from __future__ import annotations

from typing import Any

import falcon

from simplefeed import auth, paging
from simplefeed.app import caching
from simplefeed.app.caching import ArchivedPage, LiveValidators
from simplefeed.core import Live, Simplefeed
from simplefeed.errors import (
    FeedNotFound,
    LengthRequired,
    PayloadTooLarge,
    UnsupportedMediaType,
)
from simplefeed.model import ATOM_MEDIA_TYPE, Appended, Event, Feed
from simplefeed.settings import FEED_NAME_RE
from simplefeed.validation import parse_events, read_body


class _FeedResource:
    def __init__(self, core: Simplefeed) -> None:
        self.core = core
        self.settings = core.settings
        self.heads = caching.FeedHeads(core)
        self.live_cache_control = f"public, max-age={self.settings.recent_max_age}"

    def feed_name(self, feed: str | None) -> str:
        if feed is None:
            return self.settings.default_feed  # validated when the settings were read
        if not FEED_NAME_RE.match(feed):
            raise FeedNotFound(feed)
        return feed

    def send_live(self, req: falcon.Request, resp: falcon.Response, v: LiveValidators) -> None:
        """A live document: 304 from the validators alone, else the bytes rendered once per
        version and process (:meth:`Simplefeed.live_body`)."""
        resp.set_header("Cache-Control", self.live_cache_control)
        resp.set_header("ETag", v.etag)
        if v.last_modified is not None:
            resp.set_header("Last-Modified", v.last_modified)
        if caching.not_modified(req, v.etag, v.last_modified_s):
            resp.status = falcon.HTTP_304
            return
        resp.content_type = ATOM_MEDIA_TYPE
        resp.data = self.core.live_body(v.live)


class Recent(_FeedResource):
    """``GET /recent``, ``GET /feeds/{feed}/recent``: the published entry point.

    A 304 costs one indexed lookup of the feed row and no rendering; a 200 for an unchanged
    document serves the bytes kept in memory (:mod:`simplefeed.app.caching`).
    """

    def on_get(self, req: falcon.Request, resp: falcon.Response, feed: str | None = None) -> None:
        self.send_live(req, resp, self.heads.live(self.feed_name(feed), "recent"))

    on_head = on_get


class Page(_FeedResource):
    """``GET /pages/{n}``: an archived page (immutable) or the working page (live).

    Deployed as shipped, archived pages whose static file exists never reach Python (uWSGI's
    routing, or nginx, serve the file). When they do (another WSGI server, a file not written
    yet), the first request reads the page from the database (writing a missing file back);
    later ones take the validators from memory and send the file with ``wsgi.file_wrapper``
    (sendfile under uWSGI): no query, no copy.
    """

    def __init__(self, core: Simplefeed) -> None:
        super().__init__(core)
        self.archived = caching.ArchivedPages(core.page_path)

    def on_get(
        self, req: falcon.Request, resp: falcon.Response, n: int, feed: str | None = None
    ) -> None:
        name = self.feed_name(feed)
        known = self.archived.get(name, n)
        if known is not None and self.send_known(req, resp, known):
            return
        row = self.heads.row(name)
        f = Feed(*row)
        if n == paging.working_page(f.head_seq, f.page_size):
            self.send_live(req, resp, self.heads.live(name, "working", row))
            return
        page = self.core.page(f, n)  # the database's bytes; writes a missing file back
        if isinstance(page, Live):  # pragma: no cover - the working page is handled above
            self.send_live(req, resp, self.heads.live(name, "working", row))
            return
        known = self.archived.remember(name, page)
        if not self.send_validators(req, resp, known):
            resp.content_type = ATOM_MEDIA_TYPE
            resp.data = page.body

    on_head = on_get

    @staticmethod
    def send_validators(req: falcon.Request, resp: falcon.Response, page: ArchivedPage) -> bool:
        """Headers of an archived page; True if that is the whole answer (a 304)."""
        resp.set_header("Cache-Control", caching.ARCHIVE_CACHE_CONTROL)
        resp.set_header("ETag", page.etag)
        resp.set_header("Last-Modified", page.last_modified)
        if caching.not_modified(req, page.etag, page.last_modified_s):
            resp.status = falcon.HTTP_304
            return True
        return False

    def send_known(self, req: falcon.Request, resp: falcon.Response, page: ArchivedPage) -> bool:
        """An archived page seen before, from memory and its file; False if the file is not
        there (then the database's bytes are sent, and the file is written back)."""
        stream = page.open()
        if stream is None:
            return False
        if self.send_validators(req, resp, page):  # a 304
            stream.close()
            return True
        resp.content_type = ATOM_MEDIA_TYPE
        resp.content_length = page.size
        if req.method == "HEAD":
            stream.close()
        else:
            resp.stream = stream  # falcon hands it to wsgi.file_wrapper when the server has one
        return True


def _json_media_type(content_type: str | None) -> bool:
    if not content_type:
        return False
    media, _, params = content_type.partition(";")
    media = media.strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        return False
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip().strip('"').lower() != "utf-8":
            return False
    return True


class Entries(_FeedResource):
    """``POST /entries``: publish one event (a JSON object) or a batch (an array of them)."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, feed: str | None = None) -> None:
        requested = feed if feed is not None else self.settings.default_feed
        # Authenticate before anything else: an anonymous client learns nothing, not even
        # whether a feed exists. A malformed or missing token is refused here; a well-formed one
        # is checked against the database by the append itself (no round trip of its own), or
        # here first if the request is refused for another reason.
        credentials = auth.parse_authorization(req.get_header("Authorization"))
        try:
            name, events, batch = self._read_events(req, feed)
        except Exception:
            self.core.check_credentials(credentials, requested)
            raise
        results = self.core.publish(name, events, credentials=credentials)
        urls = self.core.urls(name)
        created = any(r.created for r in results)
        resp.status = falcon.HTTP_201 if created else falcon.HTTP_200
        resp.cache_control = ["no-store"]
        if batch:
            resp.media = {"entries": [self._entry(r, urls.page(r.page)) for r in results]}
        else:
            (result,) = results
            resp.media = self._entry(result, urls.page(result.page))
            resp.location = urls.page(result.page)

    def _read_events(self, req: falcon.Request, feed: str | None) -> tuple[str, list[Event], bool]:
        """The feed's name, the request's events, and whether they came as a batch."""
        name = self.feed_name(feed)
        if not _json_media_type(req.content_type):
            raise UnsupportedMediaType(
                f"Content-Type must be application/json (UTF-8), got {req.content_type!r}"
            )
        limit = self.settings.limits.max_body_bytes
        if req.content_length is None and req.get_header("Transfer-Encoding"):
            # uWSGI's http-socket does not decode chunked request bodies.
            raise LengthRequired("send the body with a Content-Length (chunked bodies are refused)")
        if req.content_length is not None and req.content_length > limit:
            raise PayloadTooLarge(f"body is {req.content_length} bytes; the limit is {limit}")
        body = req.bounded_stream.read(limit + 1)
        if len(body) > limit:
            raise PayloadTooLarge(f"body is over the limit of {limit} bytes")
        payload = read_body(body)
        events, batch = parse_events(payload, self.settings.limits, self.core.clock())
        return name, events, batch

    @staticmethod
    def _entry(result: Appended, url: str) -> dict[str, Any]:
        return {
            "id": result.entry_id,
            "seq": result.seq,
            "page": result.page,
            "url": url,
            "created": result.created,
        }


class Health:
    """``GET /healthz``: the process answers and the database does too."""

    def __init__(self, core: Simplefeed) -> None:
        self.core = core

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.cache_control = ["no-store"]
        resp.media = {"status": "ok", "database": self.core.ping()}

    on_head = on_get


class OpenApi:
    """``GET /openapi.json``: the API description (simplefeed.app.openapi)."""

    def __init__(self) -> None:
        from simplefeed.app import openapi

        self.body = openapi.render().encode()

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = falcon.MEDIA_JSON
        resp.cache_control = ["public, max-age=300"]
        resp.data = self.body

"""Falcon resources. They translate HTTP to calls on :class:`~simplefeed.core.Simplefeed` and back;
domain errors propagate to the handlers in :mod:`simplefeed.app.errors`."""

from __future__ import annotations

from typing import Any

import falcon
from sqlalchemy import text

from simplefeed.app import caching
from simplefeed.core import Live, Simplefeed
from simplefeed.errors import (
    FeedNotFound,
    LengthRequired,
    PayloadTooLarge,
    UnsupportedMediaType,
)
from simplefeed.model import ATOM_MEDIA_TYPE, Appended, FrozenPage
from simplefeed.settings import FEED_NAME_RE
from simplefeed.validation import parse_events, read_body


class _FeedResource:
    def __init__(self, core: Simplefeed) -> None:
        self.core = core
        self.settings = core.settings

    def feed_name(self, feed: str | None) -> str:
        name = feed if feed is not None else self.settings.default_feed
        if not FEED_NAME_RE.match(name):
            raise FeedNotFound(name)
        return name

    def send_live(self, req: falcon.Request, resp: falcon.Response, live: Live) -> None:
        resp.cache_control = [f"public, max-age={self.settings.recent_max_age}"]
        last_modified = caching.settled_second(live.feed.modified_us, self.core.clock())
        caching.set_validators(resp, live.etag, last_modified)
        if caching.not_modified(req, live.etag, last_modified):
            resp.status = falcon.HTTP_304
            return
        resp.content_type = ATOM_MEDIA_TYPE
        resp.data = self.core.live_body(live)


class Recent(_FeedResource):
    """``GET /recent``, ``GET /feeds/{feed}/recent``: the published entry point."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, feed: str | None = None) -> None:
        f = self.core.feed(self.feed_name(feed))
        self.send_live(req, resp, self.core.live(f, "recent"))

    on_head = on_get


class Page(_FeedResource):
    """``GET /pages/{n}``: an archived page (immutable) or the working page (live)."""

    def on_get(
        self, req: falcon.Request, resp: falcon.Response, n: int, feed: str | None = None
    ) -> None:
        f = self.core.feed(self.feed_name(feed))
        page = self.core.page(f, n)
        if isinstance(page, Live):
            self.send_live(req, resp, page)
            return
        self.send_frozen(req, resp, page)

    on_head = on_get

    def send_frozen(self, req: falcon.Request, resp: falcon.Response, page: FrozenPage) -> None:
        resp.cache_control = [caching.ARCHIVE_CACHE_CONTROL]
        last_modified = page.frozen_us // 1_000_000
        caching.set_validators(resp, page.etag, last_modified)
        if caching.not_modified(req, page.etag, last_modified):
            resp.status = falcon.HTTP_304
            return
        resp.content_type = ATOM_MEDIA_TYPE
        resp.data = page.body


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
        name = feed if feed is not None else self.settings.default_feed
        # Authenticate before anything else: an anonymous client learns nothing, not even
        # whether a feed exists.
        self.core.authorize(req.get_header("Authorization"), name)
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
        results = self.core.publish(name, events)
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
        with self.core.db.read() as conn:
            conn.execute(text("SELECT 1"))
        resp.media = {"status": "ok", "database": self.core.db.dialect}

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

"""Falcon resources: HTTP to calls on :class:`~simplefeed.service.Simplefeed`, and back.

Domain errors propagate to the handlers in :mod:`simplefeed.app.errors`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import falcon

from simplefeed import archive, codings, metrics
from simplefeed.app import (
    access,
    answers,
    caching,
    compression,
    errors,
    openapi,
    preconditions,
    waiting,
)
from simplefeed.app.caching import LiveValidators, ServedPage
from simplefeed.codings import IDENTITY
from simplefeed.door.events import parse_events, read_body
from simplefeed.errors import (
    FeedNotFound,
    LengthRequired,
    MalformedRequest,
    NotFound,
    PageNotFound,
    PayloadTooLarge,
    PublishingBusy,
    StoreUnavailable,
    UnsupportedContentCoding,
    UnsupportedMediaType,
)
from simplefeed.model import (
    ATOM_MEDIA_TYPE,
    Appended,
    ArchivedPage,
    DocumentKind,
    Event,
    Feed,
)
from simplefeed.rules import auth, paging
from simplefeed.service import Simplefeed
from simplefeed.settings import FEED_NAME_RE

#: A page number as URLs spell it: canonical decimal digits, no sign, no leading zero, at most
#: 18 digits. The static routes in uwsgi.ini and deploy/nginx match the same.
_PAGE_NUMBER = re.compile(r"[1-9][0-9]{0,17}")
#: The same number with leading zeros. It is an alias, redirected to its canonical URL.
_ZERO_PADDED = re.compile(r"0+([1-9][0-9]{0,17})")

#: What the feed documents, /healthz and /openapi.json allow. The 405's Allow says the same.
READ_METHODS = "GET, HEAD, OPTIONS"


def send_options(resp: falcon.Response, allow: str) -> None:
    resp.set_header("Allow", allow)
    resp.content_length = 0


class _FeedResource:
    def __init__(self, core: Simplefeed, room: waiting.WaitingRoom | None = None) -> None:
        self.core = core
        #: Where long-polls wait before the app. It is told what a long-poll here found current.
        #: The documents' resources have one. Publishing and entry locators hold no long-poll.
        self.room = room
        #: The node's room for long-polls to wait, the room's and the app's. None means no bound.
        self.waits = room.waits if room is not None else None
        self.settings = core.settings
        self.heads = caching.FeedHeads(core)
        self.bodies = caching.LiveBodies(core)
        self.live_cache_control = f"public, max-age={self.settings.recent_max_age}"

    def feed_name(self, req: falcon.Request, feed: str | None) -> str:
        """The feed a URL names.

        The default feed has one URL per document, without ``/feeds/<name>``. Its
        ``/feeds/<name>/...`` form redirects there (308).
        """
        if feed is None:
            return self.settings.default_feed  # Validated when the settings were read.
        if not FEED_NAME_RE.match(feed):
            raise FeedNotFound(feed)
        if feed == self.settings.default_feed:
            raise redirect(self.core.urls(feed).prefix + req.path[len(f"/feeds/{feed}") :])
        return feed

    def any_feed_name(self, feed: str | None) -> str:
        """The feed a URL names, where the URL is no document (publishing, entry locators).

        ``/feeds/<default feed>/...`` is taken as well as the default feed's own URL.
        """
        if feed is None or feed == self.settings.default_feed:
            return self.settings.default_feed
        if not FEED_NAME_RE.match(feed):
            raise FeedNotFound(feed)
        return feed

    def live(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        name: str,
        kind: DocumentKind,
        feed: Feed | None = None,
    ) -> None:
        """The recent document or the working page as committed now.

        While the database does not answer, it is the version this process last served, marked
        stale. That is a 503 if the process has none. A cold process has none, and so does a
        version whose bytes it never rendered.
        """
        try:
            v = self.heads.validators(name, kind, feed)
            self.send_live(req, resp, v)
            if v.last_modified_s is not None:  # Final validators, so the answer may be kept.
                req.env[answers.SERVED] = v.live.feed
        except StoreUnavailable:
            stale = self.heads.last_known(name, kind)
            if stale is None or not self.bodies.has(stale.live):
                raise
            self.send_live(req, resp, stale, stale=True)

    def precondition(
        self, req: falcon.Request, v: LiveValidators, coding: str | None = None
    ) -> int | None:
        """304, 412 or None for a live document in ``coding``.

        ``coding`` defaults to the one the request accepts best. :func:`preconditions.evaluate`
        runs against that coding's ETag.
        """
        return preconditions.evaluate(
            req.env,
            v.etags[compression.negotiate(req) if coding is None else coding],
            v.live.feed.modified_us // 1_000_000,
            settled=v.last_modified_s is not None,
            now_s=self.core.clock() // 1_000_000,
        )

    def has_current(self, req: falcon.Request, v: LiveValidators) -> bool:
        """Whether the client's copy is the current version, in any coding.

        A long-poll waits on this. A cache in between may have given the client another coding
        than this request is answered in. Varnish fetches gzip for its copies, and passes a
        long-poll on with the client's own Accept-Encoding. The client's copy is current all the
        same. Answering it at once would only make it ask again.
        """
        return any(self.precondition(req, v, coding) == 304 for coding in v.etags)

    def hold(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        name: str,
        document: Callable[[Feed], LiveValidators | None],
    ) -> Feed | None:
        """``Prefer: wait=N`` (RFC 7240): while the client's copy is current, wait for a change.

        The copy is current by :meth:`has_current` of ``document(feed)``. That gives the
        validators of the live document the URL names as of ``feed``, or None if it names none
        then. The wait lasts at most N seconds, capped by SIMPLEFEED_MAX_WAIT. It holds no
        database connection (:class:`~simplefeed.service.changes.Changes`). If it waited, it
        returns the feed as last seen. The caller answers from it, 200 or 304. That is the
        lookup a publish's waiters share. Otherwise it returns None, and the caller looks the
        feed up itself, as for any request.

        ``Preference-Applied: wait=N`` says it waited, or would have. A client whose copy is
        older than the document is answered at once, with that header too. So it asks again at
        once rather than taking the server for one that does not hold long-polls. Otherwise one
        publish between a consumer's answer and its next long-poll would send it to polling at
        max-age. Responses to such a request vary by ``Prefer``. Nothing else changes, and a
        request without ``Prefer`` costs one header lookup here. While the database does not
        answer, nothing is waited for, and the caller answers as it does then.

        A request that waited in the :class:`~waiting.WaitingRoom` is answered as if it waited
        here. Each time a wait here finds the client's copy current, the room learns it. It then
        holds the next such requests itself.
        """
        header = req.get_header("Prefer")
        if header is None:
            return None
        wait = preconditions.preferred_wait(header, self.settings.max_wait)
        if wait is None:
            return None
        resp.append_header("Vary", "Prefer")
        seen: Feed | None = req.env.get(waiting.WAITED)
        if seen is not None:  # It waited in the room, before the app.
            resp.set_header("Preference-Applied", f"wait={wait}")
            return seen
        if self.waits is not None and not self.waits.acquire():
            metrics.wait_declined()
            return None  # Answered at once, as without Prefer. The client polls at max-age.
        try:
            return self._wait(req, name, document, wait, resp)
        finally:
            if self.waits is not None:
                self.waits.release()

    def _wait(
        self,
        req: falcon.Request,
        name: str,
        document: Callable[[Feed], LiveValidators | None],
        wait: int,
        resp: falcon.Response,
    ) -> Feed | None:
        last: list[Feed] = []
        newer: list[bool] = []  # A document the client's copy is not, answered now as held.
        ended: list[bool] = []  # A look found the copy no longer current.

        def still_current() -> bool:
            ended[:] = [True]
            try:
                feed = self.core.changes.seen(name)
            except StoreUnavailable:
                return False
            last[:] = [feed]
            v = document(feed)
            if v is None:
                return False
            if not self.has_current(req, v):
                newer[:] = [True]
                return False
            ended.clear()
            if self.room is not None:
                self.room.learn(req.path, name, feed, v.etags.values())
            return True

        waited = self.core.changes.wait(still_current, wait)
        if waited:
            # A wait ends early only when a look finds the copy no longer current.
            req.env[access.WAIT_ENDED] = "woken" if ended else "timeout"
        if waited or newer:
            resp.set_header("Preference-Applied", f"wait={wait}")
        return last[0] if waited and last else None

    def send_live(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        v: LiveValidators,
        *,
        stale: bool = False,
    ) -> None:
        """A live document: 304 from the validators alone, else the bytes.

        The bytes are rendered and encoded once per version and process
        (:class:`caching.LiveBodies`). ``stale`` is served while the database does not answer.
        It is a version shown before, so it is durable. It is never newer than what was
        committed, but perhaps older. It goes out with a short max-age and ``Simplefeed-Stale``.
        """
        coding = compression.negotiate(req)
        etag = v.etags[coding]
        status = self.precondition(req, v, coding)
        if status == 412:
            errors.precondition_failed(resp)
            return
        # The bytes come before any header, because rendering needs the database, which may fail.
        body = self.bodies.body(v.live, coding) if status is None else b""
        if stale:
            resp.set_header("Cache-Control", STALE_CACHE_CONTROL)
            resp.set_header("Simplefeed-Stale", STALE_REASON)
        else:
            resp.set_header("Cache-Control", self.live_cache_control)
        resp.set_header("ETag", etag)
        if v.last_modified is not None:
            resp.set_header("Last-Modified", v.last_modified)
        compression.mark(req, resp, coding, body=status != 304)
        if status == 304:
            resp.status = falcon.HTTP_304
            return
        send_atom(resp)
        resp.data = body


#: A live document served while the database does not answer is the version last seen. It is
#: fresh for a second at most. A consumer polling at max-age comes back soon, and a cache keeps
#: it no longer.
STALE_CACHE_CONTROL = "public, max-age=1"
STALE_REASON = "database unavailable; this is the feed as this server last saw it"


def redirect(location: str) -> falcon.HTTPPermanentRedirect:
    """308 to a document's one URL. An alias is never served, so never cached as a copy."""
    return falcon.HTTPPermanentRedirect(location, headers={"Cache-Control": REDIRECT_CACHE_CONTROL})


#: How long an archived page whose file could not be written is served from the database's
#: bytes before its file is tried again. Also how many such pages a process remembers.
UNFILED_RETRY_S = 60.0
UNFILED_PAGES = 1024

#: Aliases redirect for a day. That is long enough to spare a cache the round trip. It is short
#: enough that a changed SIMPLEFEED_DEFAULT_FEED is not remembered for long.
REDIRECT_CACHE_CONTROL = "public, max-age=86400"


class Recent(_FeedResource):
    """``GET /recent``, ``GET /feeds/{feed}/recent``: the published entry point.

    A 304 costs one indexed lookup of the feed row and no rendering. A 200 for an unchanged
    document serves the bytes kept in memory (:mod:`simplefeed.app.caching`).
    """

    def on_get(self, req: falcon.Request, resp: falcon.Response, feed: str | None = None) -> None:
        name = self.feed_name(req, feed)
        seen = self.hold(
            req,
            resp,
            name,
            lambda f: self.heads.validators(name, "recent", f),
        )
        self.live(req, resp, name, "recent", seen)

    on_head = on_get

    def on_options(
        self, req: falcon.Request, resp: falcon.Response, feed: str | None = None
    ) -> None:
        self.heads.feed(self.feed_name(req, feed))  # 404 for a feed that does not exist.
        send_options(resp, READ_METHODS)


class Page(_FeedResource):
    """``GET /pages/{n}``: an archived page (immutable) or the working page (live).

    An archived page is served from its static files. That is the page file, or its
    precompressed copy in the coding the request accepts best. It is sent with
    ``wsgi.file_wrapper``, which is sendfile under uWSGI. Its validators derive from the page
    file alone, and each process remembers them (:class:`caching.ServedPages`). The first
    request for a page in a process asks the database only whether the page is frozen (the
    feed's head). A missing file is written back from the database's bytes. No query follows
    after that. The shipped uWSGI and nginx configurations send archived pages here too. So
    every route evaluates conditional requests alike and sends the same validators
    (docs/explanation/decisions/one-answer-per-url.md).
    """

    def __init__(self, core: Simplefeed, room: waiting.WaitingRoom | None = None) -> None:
        super().__init__(core, room)
        self.archived = caching.ServedPages(core.page_path)
        #: Pages whose file could not be written back, served from the database's bytes. An
        #: archive that cannot be written causes this. The map gives, by page, when to try the
        #: file again. Each try reads and compares the file, and logs why it failed with a
        #: traceback. So that happens once per UNFILED_RETRY_S, not on every request.
        self.unfiled: dict[tuple[str, int], float] = {}

    def locate(self, req: falcon.Request, n: str, feed: str | None) -> tuple[str, int]:
        """The feed and page number a URL names.

        An alias redirects to the page's one URL in one step. Leading zeros and the default feed
        by name are aliases. Any other spelling is a 404.
        """
        padded = _ZERO_PADDED.fullmatch(n)
        if padded is None and not _PAGE_NUMBER.fullmatch(n):
            raise NotFound(
                f"{n!r} is not a page number (pages are numbered from 1, in decimal digits)"
            )
        number = int(n)
        if padded is not None or feed == self.settings.default_feed:
            name = self.settings.default_feed if feed is None else feed
            if FEED_NAME_RE.match(name):
                raise redirect(self.core.urls(name).page(number))
        return self.feed_name(req, feed), number

    def on_get(
        self, req: falcon.Request, resp: falcon.Response, n: str, feed: str | None = None
    ) -> None:
        name, number = self.locate(req, n, feed)
        seen = self.hold(req, resp, name, lambda f: self.working(f, number))
        known = self.archived.get(name, number)
        if known is not None and self.send_archived(req, resp, known):
            return
        try:
            f = seen if seen is not None else self.heads.feed(name)
        except StoreUnavailable:
            self.send_without_database(req, resp, name, number)
            return
        working = paging.working_page(f.head_seq, f.page_size)
        if number == working:
            self.live(req, resp, name, "working", f)
            return
        if number > working:
            raise PageNotFound(name, number)
        # The database's bytes, which the file must hold. The file is written from them if
        # missing. They are read once per page and process, then the file alone (archived.get).
        frozen = self.core.page(f, number)
        key = (name, number)
        if self.unfiled.get(key, 0.0) <= time.monotonic():
            known = self.archived.load(name, number, frozen.body)
            if known is None:  # A damaged file, written again from the database.
                self.core.restore_page_file(name, frozen)
                known = self.archived.load(name, number, frozen.body)
            if known is not None and self.send_archived(req, resp, known):
                self.unfiled.pop(key, None)
                return
            if len(self.unfiled) >= UNFILED_PAGES:
                self.unfiled.clear()
            self.unfiled[key] = time.monotonic() + UNFILED_RETRY_S
        # The archive cannot be written, so the database's bytes are encoded here.
        self.send_unfiled(req, resp, frozen)

    on_head = on_get

    def working(self, f: Feed, number: int) -> LiveValidators | None:
        """The validators of page ``number`` if it is ``f``'s working page."""
        if number != paging.working_page(f.head_seq, f.page_size):
            return None
        return self.heads.validators(f.name, "working", f)

    def send_without_database(
        self, req: falcon.Request, resp: falcon.Response, name: str, number: int
    ) -> None:
        """A page while the database does not answer.

        An archived page comes from its file alone, because a page file is only ever written for a
        archived page. Otherwise it is the working page as last served.
        """
        known = self.archived.load(name, number)
        if known is not None and self.send_archived(req, resp, known):
            return
        stale = self.heads.last_known(name, "working")
        if stale is None or stale.live.number != number or not self.bodies.has(stale.live):
            raise StoreUnavailable(f"no file for page {number} of {name!r}, and no database")
        self.send_live(req, resp, stale, stale=True)

    def on_options(
        self, req: falcon.Request, resp: falcon.Response, n: str, feed: str | None = None
    ) -> None:
        name, number = self.locate(req, n, feed)
        if self.archived.get(name, number) is None:
            f = self.core.feed(name)
            if number > paging.working_page(f.head_seq, f.page_size):
                raise PageNotFound(name, number)
        send_options(resp, READ_METHODS)

    def send_validators(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        page: ServedPage | ArchivedPage,
        coding: str,
    ) -> bool:
        """Send headers of an archived page in ``coding``; True for a whole answer (304, 412)."""
        if isinstance(page, ArchivedPage):
            etag, modified_s = archive.strong_etag(page.body), page.frozen_us // 1_000_000
            last_modified = caching.http_date(modified_s)
        else:
            etag, modified_s, last_modified = page.etag, page.last_modified_s, page.last_modified
        etag = codings.tagged(etag, coding)
        now_s = self.core.clock() // 1_000_000
        # A clock that ran fast may have frozen the page. Send no Last-Modified later than the
        # response's Date (RFC 9110 8.8.2.1). The ETag validates it.
        settled = modified_s <= now_s
        status = preconditions.evaluate(req.env, etag, modified_s, settled=settled, now_s=now_s)
        if status == 412:
            errors.precondition_failed(resp)
            return True
        resp.set_header("Cache-Control", caching.ARCHIVE_CACHE_CONTROL)
        resp.set_header("ETag", etag)
        if settled:
            resp.set_header("Last-Modified", last_modified)
        compression.mark(req, resp, coding, body=status != 304)
        if status == 304:
            resp.status = falcon.HTTP_304
            return True
        return False

    def send_archived(self, req: falcon.Request, resp: falcon.Response, page: ServedPage) -> bool:
        """An archived page from its file in the coding the request accepts best.

        Return False if that file is not there, as it was when the page was read.
        """
        coding = compression.negotiate(req)
        if coding not in page.files:
            coding = IDENTITY  # Its copy could not be written (a read-only archive).
        opened = self.archived.file(page, coding)
        if opened is None:
            return False
        if self.send_validators(req, resp, page, coding):  # A 304 or 412.
            return True
        send_atom(resp)
        resp.content_length = page.files[coding].size
        if req.method != "HEAD":
            # Falcon hands it to wsgi.file_wrapper (sendfile under uWSGI), or reads it.
            resp.stream = caching.PageStream(opened)
        return True

    def send_unfiled(self, req: falcon.Request, resp: falcon.Response, page: ArchivedPage) -> None:
        """An archived page whose file cannot be written: its bytes from the database, encoded now.

        They are the same bytes its copy would hold.
        """
        coding = compression.negotiate(req)
        if self.send_validators(req, resp, page, coding):
            return
        send_atom(resp)
        resp.data = page.body if coding == IDENTITY else codings.encode(page.body, coding)


#: What a browser that shows an Atom document may do with it: nothing loaded, nothing run. SVG or
#: XHTML content would be live where a browser renders the document as XML. The styles a
#: browser's own XML viewer needs are allowed. Every response has ``nosniff`` (app.HttpRules).
ATOM_CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; sandbox"


def send_atom(resp: falcon.Response) -> None:
    """The headers of an Atom document's body. A 304 has none."""
    resp.content_type = ATOM_MEDIA_TYPE
    resp.set_header("Content-Security-Policy", ATOM_CONTENT_SECURITY_POLICY)


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


def writer_slots(threads: int | None) -> threading.BoundedSemaphore | None:
    """How many publishes of a process may be at the database at once.

    That is half of its threads, at least one. So the other half always answers reads, however
    many producers queue for a held SQLite write lock or a busy PostgreSQL. None means no bound.
    """
    return None if threads is None else threading.BoundedSemaphore(max(1, threads // 2))


class Entries(_FeedResource):
    """``POST /entries``: publish one event (a JSON object) or a batch (an array of them).

    A publish past the process's writer slots (:func:`writer_slots`) is answered 503 with
    ``Retry-After`` at once, without waiting for the database.
    """

    def __init__(self, core: Simplefeed, slots: threading.BoundedSemaphore | None = None) -> None:
        super().__init__(core)
        self.slots = slots

    def on_post(self, req: falcon.Request, resp: falcon.Response, feed: str | None = None) -> None:
        requested = feed if feed is not None else self.settings.default_feed
        # Authenticate before anything else. So an anonymous client learns nothing, not even
        # whether a feed exists. It costs a token lookup, never the parsing of its body. Refusing
        # 24 KB of HTML content takes seconds of CPU.
        credentials = auth.parse_authorization(req.get_header("Authorization"))
        self.core.screen_credentials(credentials, requested)
        name, events, batch = self._read_events(req, feed)
        req.context.token_id = credentials.token_id
        results = self._publish(name, events, credentials)
        req.context.appended = results
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

    def _publish(
        self, name: str, events: list[Event], credentials: auth.Credentials
    ) -> list[Appended]:
        if self.slots is None:
            return self.core.publish(name, events, credentials=credentials)
        if not self.slots.acquire(blocking=False):
            raise PublishingBusy(
                "every publishing slot of this process is taken by a publish waiting for the"
                " database"
            )
        try:
            return self.core.publish(name, events, credentials=credentials)
        finally:
            self.slots.release()

    def _read_events(self, req: falcon.Request, feed: str | None) -> tuple[str, list[Event], bool]:
        """The feed's name, the request's events, and whether they came as a batch."""
        name = self.any_feed_name(feed)
        if not _json_media_type(req.content_type):
            raise UnsupportedMediaType(
                f"Content-Type must be application/json (UTF-8), got {req.content_type!r}"
            )
        coding = (req.get_header("Content-Encoding") or "").strip(" \t").lower()
        if coding not in ("", IDENTITY):
            # Read as it came, a gzipped body would be "not valid UTF-8". A plain one
            # mislabelled would be taken as plain.
            raise UnsupportedContentCoding(
                f"Content-Encoding {coding[:40]!r} is not accepted on a publish: send the body"
                " as it is, without Content-Encoding"
            )
        if req.query_string:
            # Otherwise `POST /entries?feed=orders` would publish to the default feed, for good.
            raise MalformedRequest(
                "a publish takes no query parameters (got"
                f" {req.query_string[:40]!r}): a feed's events go to POST /feeds/NAME/entries"
            )
        length = (req.get_header("Content-Length") or "").strip(" \t")  # Empty means absent.
        if length and not (length.isascii() and length.isdigit()):
            # RFC 9110 8.6 says 1*DIGIT. int() also takes a sign and other scripts' digits,
            # which uWSGI does not. uWSGI reads no body for "+5".
            raise MalformedRequest(f"Content-Length must be decimal digits, got {length[:40]!r}")
        if length and req.get_header("Transfer-Encoding"):
            # RFC 9112 6.1 says a request with both may be an attempt at smuggling. uWSGI reads the
            # Content-Length, and a proxy in front might read the chunks.
            raise MalformedRequest(
                "a body with both Transfer-Encoding and Content-Length: send a Content-Length alone"
            )
        limit = self.settings.limits.max_body_bytes
        if req.content_length is None and req.get_header("Transfer-Encoding"):
            # uWSGI's http-socket does not decode chunked request bodies.
            raise LengthRequired("send the body with a Content-Length (chunked bodies are refused)")
        if req.content_length is not None and req.content_length > limit:
            raise PayloadTooLarge(f"body is {req.content_length} bytes; the limit is {limit}")
        try:
            body = req.bounded_stream.read(limit + 1)
        except OSError:
            # uWSGI raises when the client stops sending before Content-Length bytes arrived.
            # That happens after its socket timeout, 4 s by default. The request is incomplete.
            raise MalformedRequest(
                f"body ended before its Content-Length ({req.content_length} bytes)"
            ) from None
        if len(body) > limit:
            raise PayloadTooLarge(f"body is over the limit of {limit} bytes")
        if req.content_length is not None and len(body) < req.content_length:
            raise MalformedRequest(
                f"body is {len(body)} bytes, shorter than its Content-Length "
                f"({req.content_length} bytes)"
            )
        payload = read_body(body)
        events, batch = parse_events(payload, self.settings.limits, self.core.clock())
        return name, events, batch

    def on_options(
        self, req: falcon.Request, resp: falcon.Response, feed: str | None = None
    ) -> None:
        self.heads.feed(self.any_feed_name(feed))  # 404 for a feed that does not exist.
        send_options(resp, "OPTIONS, POST")

    @staticmethod
    def _entry(result: Appended, url: str) -> dict[str, Any]:
        return {
            "id": result.entry_id,
            "seq": result.seq,
            "page": result.page,
            "url": url,
            "created": result.created,
        }


class EntryLocator(_FeedResource):
    """``GET /entries/{id}``, ``GET /feeds/{feed}/entries/{id}``: where an entry is.

    The id is percent-encoded. The answer is a 303 to the permanent URL of the page that holds
    the entry, with its sequence number in ``Simplefeed-Seq``. An unknown id is a 404. Once
    that page is frozen, the answer is cacheable for a year. While it is the working page, it
    is cacheable for the live documents' time. Its URL is the same either way, because an
    entry's page never changes. The page is just not frozen yet.
    """

    def on_get(
        self, req: falcon.Request, resp: falcon.Response, entry_id: str, feed: str | None = None
    ) -> None:
        found = self.core.locate(self.any_feed_name(feed), entry_id)
        resp.status = falcon.HTTP_303
        resp.location = found.page_url
        resp.set_header("Simplefeed-Seq", str(found.seq))
        frozen = found.frozen
        resp.set_header(
            "Cache-Control", caching.ARCHIVE_CACHE_CONTROL if frozen else self.live_cache_control
        )
        resp.content_length = 0

    on_head = on_get

    def on_options(
        self, req: falcon.Request, resp: falcon.Response, entry_id: str, feed: str | None = None
    ) -> None:
        self.core.locate(self.any_feed_name(feed), entry_id)  # 404 for an unknown entry or feed.
        send_options(resp, READ_METHODS)


#: A time to the second in UTC, as RFC 3339 writes it.
_RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


class Health:
    """``GET /healthz``: 200 when the process, the database and publishing all work.

    Otherwise it answers 503 (with ``Retry-After``) naming the problems. The app's error handler
    answers 503 when the database does not answer at all. Either way, ``warnings`` names what
    needs an operator without keeping the service from working. A clock behind the feeds is one
    such case. A clock that ran fast takes weeks to catch up. Failing every node's health for
    that long would take the whole service down.
    """

    def __init__(self, core: Simplefeed) -> None:
        self.core = core

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.cache_control = ["no-store"]
        report = self.core.health()
        body: dict[str, object] = {"status": "ok", "database": report.database}
        if report.problems:
            resp.status = falcon.HTTP_503
            resp.set_header("Retry-After", "1")
            body.update(status="unhealthy", problems=report.problems)
        if report.warnings:
            body["warnings"] = report.warnings
        if report.uploads is not None:
            since = report.uploads.since_s
            body["archive_bucket"] = {
                "waiting_pages": report.uploads.pages,
                "waiting_since": (
                    None if since is None else time.strftime(_RFC3339, time.gmtime(since))
                ),
            }
        resp.media = body

    on_head = on_get

    def on_options(self, req: falcon.Request, resp: falcon.Response) -> None:
        send_options(resp, READ_METHODS)


class Metrics:
    """``GET /metrics``: Prometheus text format (simplefeed.metrics).

    SIMPLEFEED_METRICS=off leaves the route out.
    """

    def __init__(self, core: Simplefeed, waits: waiting.WaitingSlots | None) -> None:
        self.core = core
        self.waits = waits

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = metrics.CONTENT_TYPE
        resp.cache_control = ["no-store"]
        waiting_now = self.waits.waiting() if self.waits is not None else None
        resp.data = metrics.scrape(
            self.core.feeds, self.core.clock(), waiting_now, self.core.uploads_waiting
        )


class OpenApi:
    """``GET /openapi.json``: the API description (simplefeed.app.openapi)."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = falcon.MEDIA_JSON
        resp.cache_control = ["public, max-age=300"]
        resp.data = openapi.served()

    on_head = on_get

    def on_options(self, req: falcon.Request, resp: falcon.Response) -> None:
        send_options(resp, READ_METHODS)

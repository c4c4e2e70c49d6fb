"""Retrieve documents over HTTP. This is the consumer's only user of httpx and tenacity.

Producers have their own door to the service: ``simplefeed publish`` and the relay send their
events through :class:`simplefeed.producer.Publisher`.

One :class:`Fetcher` holds one transport (httpx's, over one connection pool). So every request
of a consumer goes through one pool. The fetcher sends its requests to the transport itself,
not through an :class:`httpx.Client`. The client's layers are cookies, auth, redirects, event
hooks, and merging URLs and headers. A consumer does not use them or does that work itself.
They cost about a fifth of a request's CPU time. For each URL, the fetcher asks its
:class:`~simplefeed.client.state.PageCache` first:

* An *immutable* document is served from the cache without a request, for as long as the cache
  keeps it. That is an archived page, pinned with :meth:`Fetcher.remember` once it parsed as
  one. The state file drops a page once the checkpoint has left it.
* A document still fresh by its ``Cache-Control: max-age`` (minus ``Age``) is served from the
  cache too. So the entry point is never polled faster than its max-age allows.
* Otherwise the request is conditional (``If-None-Match`` / ``If-Modified-Since`` from the
  stored validators). A ``304`` reuses the stored body.

Retrieval and parsing are separate. :meth:`Fetcher.get` returns a :class:`Fetched` and does not
write the cache. The caller parses the body and then calls :meth:`Fetcher.remember`. So a body
that fails to parse is never cached, such as an error page or truncated XML. The cache keeps a
body as it came over the wire, in its content coding. The class
:func:`simplefeed.codings.Decoder` decodes it as it arrives and again when it is reused. An
archived page of 100 entries takes 0.06 of its decoded size there. Storing it costs a fifth of
the time (docs/benchmarks.md, "Consuming").

Every response is bounded (:class:`Bounds`). Its body is streamed and given up on past
``max_bytes``, both as received and once decompressed. So a gzip bomb stops at the bound and is
never inflated whole. The whole response, headers and body, must arrive within
``max_seconds``. Each read on the socket waits at most for what is left of that time. So a
server that drips one byte at a time is cut off. Redirects are followed, and pages fetched,
only within allowed origins. These are the entry point's origin and the origins named in
``allow_redirect_origins``. Others raise :class:`~simplefeed.client.errors.RedirectRefused` or
:class:`~simplefeed.client.errors.LinkRefused`. At most :data:`MAX_REDIRECTS` redirects are
followed in a row. Some header values overflow, such as a 400-digit ``max-age``, ``Age`` or
``Retry-After``. They are taken at the bound RFC 9111 gives (2**31 seconds), never a traceback.

Network errors, timeouts, ``5xx`` and ``429`` are retried with exponential backoff and jitter.
The backoff honours ``Retry-After`` up to the maximum wait. After
:attr:`RetryPolicy.attempts` failed attempts, the fetcher raises
:class:`~simplefeed.client.errors.RetriesExhausted`. Other statuses raise
:class:`~simplefeed.client.errors.UnexpectedStatus` at once. The error quotes the ``message``
of a JSON error body. A Simplefeed server's looks like ``{"error": "not_found", "message":
"no feed named 'x'"}``. Each :class:`Fetched` says its Content-Type and where permanent
redirects led (:attr:`Fetched.moved_to`). The sleep between attempts and the clock are
injected.

:meth:`Fetcher.interrupt` may be called from any thread, or a signal handler. It ends what the
fetcher waits for within :data:`STOP_CHECK_S`. Socket reads wait that long at most at a time,
and so do the fetcher's pauses. The request gives up with
:class:`~simplefeed.client.errors.Stopped`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import time
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Literal

import httpx
import tenacity

from simplefeed import codings
from simplefeed.client.errors import (
    FetchError,
    LinkRefused,
    MalformedPage,
    RedirectRefused,
    ResponseTooLarge,
    RetriesExhausted,
    Stopped,
    UnexpectedStatus,
    quoted,
)
from simplefeed.client.state import CachedDocument, PageCache
from simplefeed.client.transport import STOP_CHECK_S, BoundedTransport, Deadlines, Interruption

log = logging.getLogger(__name__)

__all__ = ["MAX_REDIRECTS", "Bounds", "Fetched", "Fetcher", "RetryPolicy", "Transport", "origin"]

#: Redirects followed in a row before giving up (:class:`UnexpectedStatus` with the 3xx).
MAX_REDIRECTS = 5
#: RFC 9111 1.2.2 takes a delta-seconds value too large to hold as this.
MAX_DELTA_SECONDS = 2**31
#: The largest error body whose JSON ``message`` is read. A Simplefeed server's are ~100 bytes.
ERROR_BODY_READ = 64 * 1024

#: What :class:`Fetcher` accepts as a transport (``httpx.WSGITransport`` in tests).
Transport = httpx.BaseTransport

USER_AGENT = "simplefeed-consumer/0.1 (+https://simplefeed.dev/)"
ACCEPT = "application/atom+xml, application/xml;q=0.9, */*;q=0.1"
#: The codings Simplefeed servers offer. httpx decodes them, br through the brotli package. So
#: every body is checked as decoded, its sf:sha256 digest included.
ACCEPT_ENCODING = "br, gzip"

Source = Literal["network", "revalidated", "cache"]


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried.

    There are ``attempts`` in all, and 1 means no retry. Between attempts, the fetcher waits
    ``initial * 2**n`` seconds plus up to ``jitter`` seconds of random jitter. It waits at
    most ``max_wait`` seconds.
    """

    attempts: int = 6
    initial: float = 0.5
    max_wait: float = 30.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if not all(finite_seconds(s) for s in (self.initial, self.max_wait, self.jitter)):
            raise ValueError("initial, max_wait and jitter must be finite and not negative")


@dataclass(frozen=True)
class Bounds:
    """What one response may cost.

    ``max_bytes`` bounds the body, both as received and once decompressed. ``max_seconds``
    bounds the whole response, from sending the request to the last byte.
    """

    max_bytes: int = 64 * 1024 * 1024
    max_seconds: float = 120.0

    def __post_init__(self) -> None:
        if self.max_bytes < 1 or not (finite_seconds(self.max_seconds) and self.max_seconds > 0):
            raise ValueError("bounds must be positive and finite")


def finite_seconds(value: float) -> bool:
    """Whether ``value`` is a number of seconds: finite and not negative.

    ``float()`` reads NaN and infinity from text. They would make every comparison with a
    deadline false, or the deadline never come.
    """
    return math.isfinite(value) and value >= 0


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a consumer's entry point or a redirect origin, or None if it can.

    It must be an absolute http(s) URL with a host and a port that can be. It must hold no user
    name or password, because the consumer sends none from a URL. The consumer also prints its
    URL in every message.
    """
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        return f"is not a URL ({exc})"
    if parsed.scheme not in ("http", "https"):
        return "is not an http:// or https:// URL"
    if not parsed.host:
        return "has no host"
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        return f"has port {parsed.port}, outside 1-65535"
    if parsed.userinfo:
        return (
            "holds a user name or password, which the consumer would not send and would show"
            " in every message"
        )
    return None


def origin(url: str | httpx.URL) -> str:
    """``scheme://host:port`` of a URL, with the default port written out.

    Raises ``httpx.InvalidURL`` for a URL that has none (``http://[::1``, a host IDNA refuses).
    """
    if isinstance(url, str):
        return _origin(url)
    try:
        port = url.port or {"http": 80, "https": 443}.get(url.scheme, 0)
        return f"{url.scheme}://{url.host}:{port}"
    except ValueError as exc:  # idna's errors (http://xn--a.com/), UnicodeError
        raise httpx.InvalidURL(f"{exc}") from None


@functools.lru_cache(maxsize=256)
def _origin(url: str) -> str:
    """:func:`origin` of a URL as text, cached.

    A consumer asks it of the same entry point for every request. Parsing a URL costs about
    20 us.
    """
    return origin(httpx.URL(url))


@dataclass(frozen=True)
class Fetched:
    """A document's body and where it came from.

    ``document`` is what the cache should hold once the caller has accepted the body (see
    :meth:`Fetcher.remember`).
    """

    url: str
    body: bytes
    source: Source
    document: CachedDocument
    #: The server held the request as a ``Prefer: wait`` asked (``Preference-Applied: wait``).
    waited: bool = False
    #: The response's Content-Type. None if it gave none, or the body came from the cache.
    content_type: str | None = None
    #: The URL the document now lives at, or None if not redirected so. Permanent redirects
    #: (301, 308) from ``url`` lead there, until a temporary one or the answer ends the way.
    moved_to: str | None = None

    @property
    def max_age(self) -> float | None:
        return self.document.max_age


@dataclass
class FetchStats:
    requests: int = 0
    not_modified: int = 0
    cache_hits: int = 0
    retries: int = 0
    #: Body bytes as they came over the wire (compressed), and once decoded.
    bytes_received: int = 0
    bytes_decoded: int = 0


class _TooSlow(Exception):
    """The response did not arrive whole within :attr:`Bounds.max_seconds`.

    It is retried as a timeout is.
    """


class _StopWhen(tenacity.stop.stop_base):
    """Tenacity's stop condition for an interrupted fetcher: no attempt after the one it cut."""

    def __init__(self, interruption: Interruption) -> None:
        self._interruption = interruption

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self._interruption.requested


class _Transient(Exception):
    """A status worth retrying (5xx, 429)."""

    def __init__(self, status: int, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after = retry_after


_RETRYABLE = (
    httpx.NetworkError,
    httpx.TimeoutException,
    httpx.RemoteProtocolError,
    _Transient,
    _TooSlow,
)
#: Made once, because each one is a reference cycle that only the garbage collector frees.
_RETRY_IF = tenacity.retry_if_exception_type(_RETRYABLE)


class _Answer(typing.NamedTuple):
    status: int
    headers: httpx.Headers
    #: The body decoded, and as it came (in ``coding``, its Content-Encoding).
    body: bytes
    raw: bytes = b""
    coding: str = codings.IDENTITY
    #: :attr:`Fetched.moved_to`.
    moved_to: str | None = None


class Fetcher:
    def __init__(
        self,
        cache: PageCache,
        *,
        transport: Transport | None = None,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        bounds: Bounds | None = None,
        allow_redirect_origins: Iterable[str] = (),
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        """Make a fetcher.

        ``sleep`` is how to wait between attempts. The default is :meth:`pause`, which an
        :meth:`interrupt` ends.
        """
        self.cache = cache
        self.retry = retry if retry is not None else RetryPolicy()
        self.bounds = bounds if bounds is not None else Bounds()
        allowed = tuple(allow_redirect_origins)
        for other in allowed:
            problem = url_problem(other)
            if problem is not None:
                raise ValueError(f"a redirect origin {problem}")
        self.allow_redirect_origins = frozenset(origin(o) for o in allowed)
        self.clock = clock
        self._interruption = Interruption()
        self.sleep = sleep if sleep is not None else self.pause
        self.stats = FetchStats()
        if not (finite_seconds(timeout) and timeout > 0):
            raise ValueError("timeout must be positive and finite")
        self.timeout = timeout
        self._deadlines = Deadlines()
        self._transport = (
            transport
            if transport is not None
            else BoundedTransport(self._deadlines, self._interruption)
        )
        # The headers of every request, as an httpx.Client with these would send them. There
        # is no cookie jar, because a feed needs no cookies. A server might set a new cookie
        # with every answer. That would grow the jar, and every request's Cookie header, for as
        # long as the consumer follows the feed.
        self._headers = {
            "Connection": "keep-alive",
            "User-Agent": user_agent,
            "Accept": ACCEPT,
            "Accept-Encoding": ACCEPT_ENCODING,
        }
        self._timeouts = httpx.Timeout(timeout).as_dict()

    def get(
        self, url: str, *, entry_point: str | None = None, wait: float | None = None
    ) -> Fetched:
        """The document at ``url``, from the cache when allowed, else over the network.

        ``url`` and its redirects stay within the allowed origins. These are the origin of
        ``entry_point`` (by default ``url``) and the allowed ones. Otherwise a hostile feed
        could make the consumer fetch any URL it reaches. A refused URL raises
        :class:`~simplefeed.client.errors.LinkRefused` before any request. ``wait`` makes a long
        poll. A cached copy with an ETag is revalidated with ``Prefer: wait`` (RFC 7240). A
        server honours it by answering when the document changes or the time is up
        (:attr:`Fetched.waited`). The wait adds to the response's time bounds.
        """
        if entry_point is not None and not self._within(url, entry_point):
            raise LinkRefused(url, entry_point)
        cached, cached_body = self._cached(url)
        now = self.clock()
        long_poll = wait is not None and wait > 0 and cached is not None and bool(cached.etag)
        if cached is not None and cached.fresh(now) and not long_poll:
            self.stats.cache_hits += 1
            return Fetched(url, cached_body, "cache", cached)
        headers = _validators(cached)
        extra = 0.0
        if long_poll:
            assert wait is not None
            extra = float(math.ceil(wait))
            headers["Prefer"] = f"wait={extra:.0f}"
        response = self._request(url, headers, origin(entry_point or url), extra)
        waited = long_poll and _wait_applied(response.headers)
        now = self.clock()
        max_age = _max_age(response.headers)
        if response.status == 304 and cached is not None:
            self.stats.not_modified += 1
            document = _revalidated(cached, response.headers, now, max_age)
            return Fetched(
                url, cached_body, "revalidated", document, waited, moved_to=response.moved_to
            )
        if response.status != 200:
            raise UnexpectedStatus(url, response.status, _server_message(response.body))
        document = CachedDocument(
            url=url,
            body=response.raw,
            etag=response.headers.get("ETag"),
            last_modified=response.headers.get("Last-Modified"),
            immutable=False,
            fetched_at=now,
            max_age=max_age,
            coding=response.coding,
        )
        return Fetched(
            url,
            response.body,
            "network",
            document,
            waited,
            response.headers.get("Content-Type"),
            response.moved_to,
        )

    def _cached(self, url: str) -> tuple[CachedDocument | None, bytes]:
        """The cache's copy of ``url`` and its body, decoded. A damaged copy is forgotten."""
        cached = self.cache.get_document(url)
        if cached is None:
            return None, b""
        try:
            return cached, self._decoded(cached)
        except ValueError as exc:  # A damaged cache: ask the network.
            log.warning("%s: the cached copy is not usable (%s); fetching it again", url, exc)
            self.cache.delete_document(url)
            return None, b""

    def _decoded(self, cached: CachedDocument) -> bytes:
        """The body a cached document holds, decoded (ValueError if it cannot be)."""
        if cached.coding == codings.IDENTITY:
            return cached.body
        decoder = codings.Decoder(cached.coding, self.bounds.max_bytes)
        return decoder.decode(cached.body) + decoder.end()

    def remember(self, fetched: Fetched, *, immutable: bool) -> None:
        """Store an accepted body.

        ``immutable`` marks an archived page, never to be asked for again while the cache keeps
        it.
        """
        if fetched.source == "cache" and (fetched.document.immutable or not immutable):
            return
        self.cache.put_document(replace(fetched.document, immutable=immutable))

    def holds(self, url: str) -> bool:
        """Whether the cache keeps an archived page under ``url``, which :meth:`get` answers."""
        return self.cache.holds_archived_page(url)

    def forget(self, url: str) -> None:
        """Drop what the cache holds for ``url``, a body that turned out not to be usable."""
        self.cache.delete_document(url)

    def forget_archived_pages(self) -> None:
        """Drop every archived page the cache holds (copies the server no longer vouches for)."""
        self.cache.delete_archived_pages()

    def interrupt(self) -> None:
        """Give up what this fetcher is doing within :data:`STOP_CHECK_S`.

        It may be called from any thread, or a signal handler. It ends a read waiting on the
        socket, a long poll, or a pause between attempts. It refuses new requests, each with
        :class:`Stopped`, until :meth:`resume`.
        """
        self._interruption.requested = True

    def resume(self) -> None:
        """Take requests again after :meth:`interrupt`."""
        self._interruption.requested = False

    @property
    def interrupted(self) -> bool:
        return self._interruption.requested

    def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or until :meth:`interrupt` (looked at every :data:`STOP_CHECK_S`)."""
        end = time.monotonic() + seconds
        while not self._interruption.requested:
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, STOP_CHECK_S))

    def _request(self, url: str, headers: dict[str, str], home: str, extra: float = 0.0) -> _Answer:
        policy = self.retry
        exponential = tenacity.wait_exponential(
            multiplier=policy.initial, max=policy.max_wait
        ) + tenacity.wait_random(0, policy.jitter)

        def wait(state: tenacity.RetryCallState) -> float:
            seconds: float = exponential(state)
            exc = state.outcome.exception() if state.outcome is not None else None
            if isinstance(exc, _Transient) and exc.retry_after is not None:
                seconds = min(max(seconds, exc.retry_after), policy.max_wait)
            return seconds

        def before_sleep(state: tenacity.RetryCallState) -> None:
            self.stats.retries += 1
            exc = state.outcome.exception() if state.outcome is not None else None
            log.warning(
                "GET %s failed (attempt %d of %d): %s; retrying in %.1f s",
                url,
                state.attempt_number,
                policy.attempts,
                _describe(exc),
                state.upcoming_sleep,
            )

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(policy.attempts) | _StopWhen(self._interruption),
            wait=wait,
            retry=_RETRY_IF,
            sleep=self.sleep,
            before_sleep=before_sleep,
        )
        try:
            for attempt in retrying:
                with attempt:
                    if self.interrupted:
                        raise Stopped(url)
                    self.stats.requests += 1
                    answer = self._follow(url, headers, home, extra)
                    if answer.status >= 500 or answer.status == 429:
                        retry_after = _retry_after(answer.headers, self.clock())
                        raise _Transient(answer.status, retry_after)
                    return answer
        except tenacity.RetryError as exc:
            last = exc.last_attempt.exception()
            if self.interrupted:
                raise Stopped(url) from last
            raise RetriesExhausted(url, policy.attempts, _describe(last)) from last
        except httpx.HTTPError as exc:  # Not retryable: a redirect loop, a bad encoding...
            if self.interrupted:
                raise Stopped(url) from exc
            raise FetchError(url, _describe(exc)) from exc
        except httpx.InvalidURL as exc:
            raise FetchError(url, f"invalid URL: {exc}") from exc
        raise AssertionError("unreachable: tenacity either returns, retries or raises")

    def _within(self, url: str, entry_point: str) -> bool:
        """Whether ``url`` is on the entry point's origin or an allowed one."""
        scheme, sep, rest = entry_point.partition("://")
        prefix = f"{scheme}{sep}{rest.partition('/')[0]}/"
        if url.startswith(prefix):  # The common case, without parsing (about 20 us a URL).
            return True
        try:
            return origin(url) in self.allow_redirect_origins | {origin(entry_point)}
        except httpx.InvalidURL as exc:  # "http://[::1", a port of "19110:80"
            raise MalformedPage(url, f"a link to an invalid URL ({exc})") from None

    def _follow(self, url: str, headers: dict[str, str], home: str, extra: float) -> _Answer:
        """One answer to GET ``url``, following redirects within the allowed origins.

        Also return where the permanent ones led (:attr:`Fetched.moved_to`).
        """
        allowed = self.allow_redirect_origins | {home}
        target = httpx.URL(url)
        moved_to: str | None = None
        permanent = True  # Every redirect so far was permanent.
        for _ in range(MAX_REDIRECTS + 1):
            answer = self._once(url, target, headers, extra)
            location = answer.headers.get("Location")
            if answer.status not in (301, 302, 303, 307, 308) or location is None:
                return answer._replace(moved_to=moved_to)
            try:
                target = target.join(location)
                elsewhere = origin(target) not in allowed
            except httpx.InvalidURL as exc:
                raise FetchError(url, f"redirect to an invalid URL: {exc}") from exc
            if elsewhere:
                raise RedirectRefused(url, str(target))
            permanent = permanent and answer.status in (301, 308)
            if permanent:
                moved_to = str(target)
            log.info("GET %s: redirected to %s", url, target)
        raise UnexpectedStatus(
            url,
            answer.status,
            why=f"over {MAX_REDIRECTS} redirects in a row, the last to {quoted(str(target))}",
        )

    def _once(self, url: str, target: httpx.URL, headers: dict[str, str], extra: float) -> _Answer:
        """One request and its whole body, within the bounds plus ``extra`` (a long poll's wait)."""
        bounds = self.bounds
        deadline = time.monotonic() + bounds.max_seconds + extra
        self._deadlines.set(deadline)
        timeouts = self._timeouts
        if extra:
            timeouts = httpx.Timeout(self.timeout, read=self.timeout + extra).as_dict()
        request = httpx.Request(
            "GET",
            target,
            headers={**self._headers, **headers} if headers else self._headers,
            extensions={"timeout": timeouts},
        )
        try:
            # Closed however it ends: its connection back in the pool, or dropped.
            with contextlib.closing(self._transport.handle_request(request)) as response:
                if response.status_code in (301, 302, 303, 307, 308) or (
                    response.status_code >= 500 or response.status_code == 429
                ):
                    return _Answer(response.status_code, response.headers, b"")
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and (len(declared) > 18 or int(declared) > bounds.max_bytes):
                    raise ResponseTooLarge(url, "Content-Length", bounds.max_bytes)
                try:
                    decoder = codings.Decoder(
                        response.headers.get("Content-Encoding"), bounds.max_bytes
                    )
                except ValueError as exc:
                    raise FetchError(url, str(exc)) from exc
                raw = bytearray()
                body = bytearray()
                try:
                    for chunk in response.iter_raw():
                        raw += chunk
                        if len(raw) > bounds.max_bytes:
                            raise ResponseTooLarge(url, "the body as received", bounds.max_bytes)
                        if decoder.codings:
                            body += decoder.decode(chunk)
                        if time.monotonic() > deadline:
                            raise _TooSlow(f"the response took over {bounds.max_seconds:g} s")
                    if decoder.codings and raw:  # A 304 may name a coding, with no body.
                        body += decoder.end()
                except codings.TooLarge:
                    raise ResponseTooLarge(url, "the decompressed body", bounds.max_bytes) from None
                except ValueError as exc:
                    raise FetchError(url, f"the body: {exc}") from exc
                received = bytes(raw)
                decoded = bytes(body) if decoder.codings else received
                self.stats.bytes_received += len(received)
                self.stats.bytes_decoded += len(decoded)
                coding = ", ".join(decoder.codings) or codings.IDENTITY
                return _Answer(response.status_code, response.headers, decoded, received, coding)
        except httpx.TimeoutException as exc:
            if time.monotonic() >= deadline:
                raise _TooSlow(f"the response took over {bounds.max_seconds:g} s") from exc
            raise
        finally:
            self._deadlines.set(None)

    def close(self) -> None:
        self._transport.close()


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no error"
    text = str(exc)
    name = type(exc).__name__
    if name.startswith("_"):  # Ours and private (_TooSlow). Its words say what it is.
        return text or "failed"
    return f"{name}: {text}" if text else name


def _server_message(body: bytes) -> str | None:
    """The ``message`` of the JSON object an error body holds, or None.

    That is a Simplefeed server's error shape. It is read only from a body of at most
    :data:`ERROR_BODY_READ` bytes. The body was received within the bounds, but parsing a
    bigger one is not worth its memory. It is given up on when it is not JSON, or nested too
    deep to parse.
    """
    if len(body) > ERROR_BODY_READ or not body.lstrip().startswith(b"{"):
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    message = value.get("message") if isinstance(value, dict) else None
    return message if isinstance(message, str) else None


def _revalidated(
    cached: CachedDocument, headers: httpx.Headers, now: float, max_age: float | None
) -> CachedDocument:
    """The cached document as a 304 leaves it: its new validators, fresh from ``now``."""
    return replace(
        cached,
        etag=headers.get("ETag", cached.etag),
        last_modified=headers.get("Last-Modified", cached.last_modified),
        fetched_at=now,
        max_age=max_age,
    )


def _validators(cached: CachedDocument | None) -> dict[str, str]:
    """The headers that make a request for a cached document conditional."""
    headers: dict[str, str] = {}
    if cached is not None:
        if cached.etag:
            headers["If-None-Match"] = cached.etag
        if cached.last_modified:
            headers["If-Modified-Since"] = cached.last_modified
    return headers


def _directives(headers: httpx.Headers) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in headers.get_list("Cache-Control"):
        for part in value.split(","):
            name, _, arg = part.strip().partition("=")
            if name:
                out[name.lower()] = arg.strip().strip('"')
    return out


def _delta_seconds(text: str) -> float | None:
    """RFC 9111 delta-seconds: None unless digits; over :data:`MAX_DELTA_SECONDS`, that."""
    text = text.strip()
    if not text.isascii() or not text.isdigit():
        return None
    if len(text) > 10:
        return float(MAX_DELTA_SECONDS)
    return float(min(int(text), MAX_DELTA_SECONDS))


def _wait_applied(headers: httpx.Headers) -> bool:
    """Whether ``Preference-Applied`` names the ``wait`` preference (RFC 7240 section 3)."""
    applied = headers.get("Preference-Applied", "")
    return any(token.split("=", 1)[0].strip().lower() == "wait" for token in applied.split(","))


def _max_age(headers: httpx.Headers) -> float | None:
    """Freshness lifetime left (RFC 9111 4.2.1), for a private cache: max-age minus Age."""
    directives = _directives(headers)
    if "no-store" in directives or "no-cache" in directives:
        return 0.0
    raw = directives.get("max-age")
    if raw is None:
        return None
    max_age = _delta_seconds(raw)
    if max_age is None:
        return 0.0
    age = _delta_seconds(headers.get("Age", "0")) or 0.0
    return max(0.0, max_age - age)


def _retry_after(headers: httpx.Headers, now: float) -> float | None:
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    seconds = _delta_seconds(raw)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(raw)
        return max(0.0, when.timestamp() - now)
    except (TypeError, ValueError, OverflowError, IndexError):
        return None

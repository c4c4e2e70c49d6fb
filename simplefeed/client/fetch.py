"""Retrieving documents over HTTP: the only user of httpx (and of tenacity).

One :class:`Fetcher` holds one :class:`httpx.Client`, so every request of a consumer goes through
one connection pool. For each URL it asks its :class:`~simplefeed.client.state.PageCache` first:

* an *immutable* document (an archived page, pinned with :meth:`Fetcher.remember` once it parsed
  as one) is served from the cache for good: walking the same history twice costs no network;
* a document still fresh by its ``Cache-Control: max-age`` (minus ``Age``) is served from the
  cache too: the entry point is never polled faster than its max-age allows;
* otherwise the request is conditional (``If-None-Match`` / ``If-Modified-Since`` from the stored
  validators) and a ``304`` reuses the stored body.

Retrieval and parsing are separate: :meth:`Fetcher.get` returns a :class:`Fetched` and does not
write the cache; the caller parses the body and then calls :meth:`Fetcher.remember`, so a body
that fails to parse (an error page, truncated XML) is never cached.

Network errors, timeouts, ``5xx`` and ``429`` are retried with exponential backoff and jitter
(honouring ``Retry-After`` up to the maximum wait) until :attr:`RetryPolicy.attempts` attempts
have failed; then :class:`~simplefeed.client.errors.RetriesExhausted`. Other statuses raise
:class:`~simplefeed.client.errors.UnexpectedStatus` at once. The sleep between attempts and the
clock are injected.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Literal

import httpx
import tenacity

from simplefeed.client.errors import FetchError, RetriesExhausted, UnexpectedStatus
from simplefeed.client.state import CachedDocument, PageCache

log = logging.getLogger(__name__)

__all__ = ["Fetched", "Fetcher", "RetryPolicy", "Transport"]

#: What :class:`Fetcher` accepts as a transport (``httpx.WSGITransport`` in tests).
Transport = httpx.BaseTransport

USER_AGENT = "simplefeed-consumer/0.1 (+https://simplefeed.dev/)"
ACCEPT = "application/atom+xml, application/xml;q=0.9, */*;q=0.1"

Source = Literal["network", "revalidated", "cache"]


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried: ``attempts`` in all (1 = no retry), waiting
    ``initial * 2**n`` seconds plus up to ``jitter`` seconds of random jitter, at most
    ``max_wait`` seconds, between attempts."""

    attempts: int = 6
    initial: float = 0.5
    max_wait: float = 30.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")


@dataclass(frozen=True)
class Fetched:
    """A document's body and where it came from. ``document`` is what the cache should hold
    once the caller has accepted the body (see :meth:`Fetcher.remember`)."""

    url: str
    body: bytes
    source: Source
    document: CachedDocument

    @property
    def max_age(self) -> float | None:
        return self.document.max_age


@dataclass
class FetchStats:
    requests: int = 0
    not_modified: int = 0
    cache_hits: int = 0
    retries: int = 0


class _Transient(Exception):
    """A status worth retrying (5xx, 429)."""

    def __init__(self, status: int, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after = retry_after


_RETRYABLE = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError, _Transient)
#: Made once: each one is a reference cycle, which only the garbage collector frees.
_RETRY_IF = tenacity.retry_if_exception_type(_RETRYABLE)


class Fetcher:
    def __init__(
        self,
        cache: PageCache,
        *,
        transport: Transport | None = None,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.cache = cache
        self.retry = retry if retry is not None else RetryPolicy()
        self.clock = clock
        self.sleep = sleep
        self.stats = FetchStats()
        self._client = httpx.Client(
            transport=transport,
            timeout=timeout,
            follow_redirects=True,
            headers={"User-Agent": user_agent, "Accept": ACCEPT},
        )

    def get(self, url: str) -> Fetched:
        """The document at ``url``: from the cache when allowed, else over the network."""
        cached = self.cache.get_document(url)
        now = self.clock()
        if cached is not None and cached.fresh(now):
            self.stats.cache_hits += 1
            return Fetched(url, cached.body, "cache", cached)
        headers: dict[str, str] = {}
        if cached is not None:
            if cached.etag:
                headers["If-None-Match"] = cached.etag
            if cached.last_modified:
                headers["If-Modified-Since"] = cached.last_modified
        response = self._request(url, headers)
        now = self.clock()
        max_age = _max_age(response.headers)
        if response.status_code == 304 and cached is not None:
            self.stats.not_modified += 1
            document = replace(
                cached,
                etag=response.headers.get("ETag", cached.etag),
                last_modified=response.headers.get("Last-Modified", cached.last_modified),
                fetched_at=now,
                max_age=max_age,
            )
            return Fetched(url, cached.body, "revalidated", document)
        if response.status_code != 200:
            raise UnexpectedStatus(url, response.status_code)
        body = response.content
        document = CachedDocument(
            url=url,
            body=body,
            etag=response.headers.get("ETag"),
            last_modified=response.headers.get("Last-Modified"),
            immutable=False,
            fetched_at=now,
            max_age=max_age,
        )
        return Fetched(url, body, "network", document)

    def remember(self, fetched: Fetched, *, immutable: bool) -> None:
        """Store an accepted body; ``immutable`` pins it for good (an archived page)."""
        if fetched.source == "cache" and (fetched.document.immutable or not immutable):
            return
        self.cache.put_document(replace(fetched.document, immutable=immutable))

    def forget(self, url: str) -> None:
        """Drop what the cache holds for ``url`` (a body that turned out not to be usable)."""
        self.cache.delete_document(url)

    def _request(self, url: str, headers: dict[str, str]) -> httpx.Response:
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
            stop=tenacity.stop_after_attempt(policy.attempts),
            wait=wait,
            retry=_RETRY_IF,
            sleep=self.sleep,
            before_sleep=before_sleep,
        )
        try:
            for attempt in retrying:
                with attempt:
                    self.stats.requests += 1
                    response = self._client.get(url, headers=headers)
                    _release(response)
                    if response.status_code >= 500 or response.status_code == 429:
                        retry_after = _retry_after(response.headers, self.clock())
                        raise _Transient(response.status_code, retry_after)
                    return response
        except tenacity.RetryError as exc:
            last = exc.last_attempt.exception()
            raise RetriesExhausted(url, policy.attempts, _describe(last)) from last
        except httpx.HTTPError as exc:  # not retryable: redirect loop, bad encoding...
            raise FetchError(url, _describe(exc)) from exc
        except httpx.InvalidURL as exc:
            raise FetchError(url, f"invalid URL: {exc}") from exc
        raise AssertionError("unreachable: tenacity either returns, retries or raises")

    def close(self) -> None:
        self._client.close()


def _release(response: httpx.Response) -> None:
    """httpx binds a response and its (already read and closed) stream to each other; cut that
    loop, so that the response and its body go with the last reference to them rather than at
    the next garbage collection: a long catch-up then holds one body at a time."""
    response.stream = httpx.ByteStream(b"")


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no error"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _directives(headers: httpx.Headers) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in headers.get_list("Cache-Control"):
        for part in value.split(","):
            name, _, arg = part.strip().partition("=")
            if name:
                out[name.lower()] = arg.strip().strip('"')
    return out


def _max_age(headers: httpx.Headers) -> float | None:
    """Freshness lifetime left (RFC 9111 4.2.1), for a private cache: max-age minus Age."""
    directives = _directives(headers)
    if "no-store" in directives or "no-cache" in directives:
        return 0.0
    raw = directives.get("max-age")
    if raw is None:
        return None
    try:
        max_age = float(int(raw))
    except ValueError:
        return 0.0
    try:
        age = float(int(headers.get("Age", "0")))
    except ValueError:
        age = 0.0
    return max(0.0, max_age - age)


def _retry_after(headers: httpx.Headers, now: float) -> float | None:
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    try:
        return max(0.0, float(int(raw)))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)

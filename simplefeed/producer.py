"""Publishing events from Python: :class:`Publisher` and :class:`AsyncPublisher`, on httpx.

An event is checked here with the server's own door (:mod:`simplefeed.door.events`). That
happens before any request. So an event the server would refuse fails at once, with the same
error. Each event without an ``id`` gets a UUIDv7 one before the first try. So every retry is
a replay that the server recognises, and a retried event is in the feed once.

A publish retries with tenacity on network errors and on 429, 502, 503 and 504. It honours
``Retry-After``. It goes on for ``retry_for`` seconds (60 by default). Any other error answer
is final.

The errors::

    SimplefeedError
    ├── RequestError                the event breaks the server's rules (raised locally)
    │   ├── MalformedRequest        not strict JSON (NaN, a name twice)
    │   ├── PayloadTooLarge         one event over the body limit
    │   └── InvalidEvent            .index, .field: a field breaks the schema or a limit
    └── PublishError                the server did not take the events
        ├── PublishRefused          .status, .error, .index, .field, .body: a final error answer
        └── PublishUnavailable      .cause: still failing when ``retry_for`` ran out
"""

from __future__ import annotations

import email.utils
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import httpx
import tenacity

from simplefeed.door.events import parse_event, read_body
from simplefeed.errors import PayloadTooLarge, SimplefeedError
from simplefeed.settings import Limits

__all__ = [
    "AsyncPublisher",
    "Prepared",
    "PublishError",
    "PublishRefused",
    "PublishUnavailable",
    "Published",
    "Publisher",
    "prepare",
    "uuid7",
]

#: How long a publish goes on retrying by default. A server restart takes seconds.
RETRY_FOR_S = 60.0
#: The longest pause between two tries when the server gives no ``Retry-After``.
MAX_PAUSE_S = 1.0
#: The time one request may take, by default.
TIMEOUT_S = 10.0
#: The statuses that say "try again later". The request changed nothing.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: The bytes a batch adds around its events. That is the brackets, and a comma each.
_BATCH_OVERHEAD = 2


def uuid7() -> uuid.UUID:
    """Make a UUID version 7 (RFC 9562): 48 bits of Unix milliseconds, then 74 random bits."""
    value = (time.time_ns() // 1_000_000 & (2**48 - 1)) << 80 | int.from_bytes(os.urandom(10))
    value = value & ~(0xF << 76) | 0x7 << 76  # The version.
    value = value & ~(0x3 << 62) | 0x2 << 62  # The variant.
    return uuid.UUID(int=value)


@dataclass(frozen=True)
class Prepared:
    """An event ready to send. It holds its entry id, and its JSON text with that id in it."""

    id: str
    body: str


@dataclass(frozen=True)
class Published:
    """What the server answered for one event."""

    #: The entry id.
    id: str
    #: The entry's sequence number in its feed.
    seq: int
    #: The number of the page that holds it.
    page: int
    #: The permanent URL of that page.
    url: str
    #: False when the feed already held the event (a replay).
    created: bool


class PublishError(SimplefeedError):
    """The server did not take the events."""


class PublishRefused(PublishError):
    """The server refused the request with a final error answer (a 4xx other than 429)."""

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        *,
        index: int | None = None,
        field: str | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {error}: {message}")
        self.status = status
        self.error = error
        self.message = message
        self.index = index
        self.field = field
        #: The server's JSON error as it answered it. Its ``index`` is within the request.
        self.body = dict(body) if body is not None else {"error": error, "message": message}


class PublishUnavailable(PublishError):
    """The server was still unreachable, or still answered "later", when retrying ran out."""

    def __init__(self, cause: str) -> None:
        super().__init__(f"the server did not take the events in time: {cause}")
        self.cause = cause


def prepare(
    event: Mapping[str, Any], limits: Limits | None = None, index: int | None = None
) -> Prepared:
    """Check ``event`` with the server's door, and give it an id if it has none.

    Raises the door's :class:`~simplefeed.errors.RequestError` for an event the server would
    refuse. ``index`` names the event's place in a batch in the error.
    """
    limits = limits or Limits()
    fields = dict(event)
    if fields.get("id") is None:
        fields["id"] = f"urn:uuid:{uuid7()}"
    body = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
    if len(body.encode()) + _BATCH_OVERHEAD > limits.max_body_bytes:
        raise PayloadTooLarge(
            f"the event is over the body limit of {limits.max_body_bytes} bytes on its own"
        )
    parse_event(read_body(body.encode()), limits, time.time_ns() // 1000, index)
    return Prepared(id=str(fields["id"]), body=body)


def batches(events: Sequence[Prepared], limits: Limits) -> Iterator[tuple[int, list[Prepared]]]:
    """Split ``events`` in order into batches within the server's limits, each with its offset."""
    start, size, batch = 0, _BATCH_OVERHEAD, list[Prepared]()
    for i, prepared in enumerate(events):
        length = len(prepared.body.encode()) + 1
        if batch and (len(batch) >= limits.max_batch or size + length > limits.max_body_bytes):
            yield start, batch
            start, size, batch = i, _BATCH_OVERHEAD, []
        batch.append(prepared)
        size += length
    if batch:
        yield start, batch


def _batch_body(batch: Sequence[Prepared]) -> bytes:
    return ("[" + ",".join(p.body for p in batch) + "]").encode()


class _Later(Exception):
    """An answer that says "try again later", and how long it asks to wait."""

    def __init__(self, status: int, retry_after: float | None) -> None:
        super().__init__(f"the server answered {status}")
        self.status = status
        self.retry_after = retry_after


def _retry_after(value: str | None) -> float | None:
    """Read ``Retry-After`` in seconds. It is delay-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _answer(response: httpx.Response, batch: Sequence[Prepared], start: int) -> list[Published]:
    """Read the server's answer to a batch. Return what it stored, or raise the error it means."""
    status = response.status_code
    if status in RETRY_STATUSES:
        raise _Later(status, _retry_after(response.headers.get("Retry-After")))
    try:
        body = response.json()
    except ValueError:
        body = None
    if status in (200, 201) and isinstance(body, dict):
        entries = body.get("entries")
        if isinstance(entries, list) and len(entries) == len(batch):
            return [
                Published(
                    id=e["id"], seq=e["seq"], page=e["page"], url=e["url"], created=e["created"]
                )
                for e in entries
            ]
    if not isinstance(body, dict):
        body = {"message": response.text[:200]}
    index = body.get("index")
    raise PublishRefused(
        status,
        str(body.get("error", "unexpected_answer")),
        str(body.get("message", "")),
        index=start + index if isinstance(index, int) else None,
        field=body.get("field"),
        body=body,
    )


def _pause(state: tenacity.RetryCallState) -> float:
    """Pause for the server's ``Retry-After`` if it gave one, else a growing pause with jitter."""
    outcome = state.outcome
    error = outcome.exception() if outcome is not None else None
    if isinstance(error, _Later) and error.retry_after is not None:
        return error.retry_after
    backoff = tenacity.wait_random_exponential(multiplier=0.05, max=MAX_PAUSE_S)
    return float(backoff(state))


def _retryable(error: BaseException) -> bool:
    """Say whether a try may succeed later.

    It may after an answer that says so, or after a network error. A URL without http or
    https never will. Nor will a request that httpx itself refuses to send.
    """
    if isinstance(error, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
        return False
    return isinstance(error, _Later | httpx.TransportError)


def _retrying(retry_for: float) -> dict[str, Any]:
    """Give tenacity's arguments for a publish: retry what changed nothing, ``retry_for`` s."""
    return {
        "retry": tenacity.retry_if_exception(_retryable),
        "wait": _pause,
        "stop": tenacity.stop_after_delay(retry_for),
        "reraise": True,
    }


def _unavailable(error: _Later | httpx.TransportError) -> PublishUnavailable:
    if isinstance(error, _Later):
        return PublishUnavailable(str(error))
    return PublishUnavailable(f"{type(error).__name__}: {error}")


class _Base:
    def __init__(
        self, url: str, token: str, limits: Limits | None, retry_for: float, timeout: float
    ) -> None:
        if httpx.URL(url).scheme not in ("http", "https"):
            raise ValueError(f"{url!r} is not an http or https URL")
        self.url = url
        self.limits = limits or Limits()
        self.retry_for = retry_for
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.timeout = timeout

    def prepare_all(self, events: Sequence[Mapping[str, Any]]) -> list[Prepared]:
        return [prepare(event, self.limits, i) for i, event in enumerate(events)]


class Publisher(_Base):
    """Publishes events to one feed.

    ``url`` is its entries URL, such as ``https://feeds.example/feeds/orders/entries``. Use it
    as a context manager, or :meth:`close` it. ``client`` is an httpx client of the caller's,
    which stays open.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        limits: Limits | None = None,
        retry_for: float = RETRY_FOR_S,
        timeout: float = TIMEOUT_S,
        client: httpx.Client | None = None,
    ) -> None:
        super().__init__(url, token, limits, retry_for, timeout)
        self._own = client is None
        self.client = client or httpx.Client(timeout=timeout)

    def publish(self, event: Mapping[str, Any]) -> Published:
        """Publish one event. Return what the server answered for it."""
        (published,) = self.publish_many([event])
        return published

    def publish_many(self, events: Sequence[Mapping[str, Any]]) -> list[Published]:
        """Publish events in order, in as few requests as the server's limits allow.

        Every event is checked before the first request. A batch is all or nothing. So after
        an error, the events of earlier batches are in the feed and the others are not.
        """
        return self.send(self.prepare_all(events))

    def send(self, events: Sequence[Prepared]) -> list[Published]:
        """Publish events that :func:`prepare` made."""
        found: list[Published] = []
        for start, batch in batches(events, self.limits):
            found += self._send_batch(batch, start)
        return found

    def _send_batch(self, batch: list[Prepared], start: int) -> list[Published]:
        body = _batch_body(batch)
        try:
            for attempt in tenacity.Retrying(**_retrying(self.retry_for)):
                with attempt:
                    response = self.client.post(self.url, content=body, headers=self.headers)
                    return _answer(response, batch, start)
        except (_Later, httpx.TransportError) as exc:
            raise _unavailable(exc) from exc
        raise AssertionError("tenacity ends with a result or an error")  # pragma: no cover

    def close(self) -> None:
        if self._own:
            self.client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncPublisher(_Base):
    """:class:`Publisher` for asyncio, on an ``httpx.AsyncClient``."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        limits: Limits | None = None,
        retry_for: float = RETRY_FOR_S,
        timeout: float = TIMEOUT_S,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(url, token, limits, retry_for, timeout)
        self._own = client is None
        self.client = client or httpx.AsyncClient(timeout=timeout)

    async def publish(self, event: Mapping[str, Any]) -> Published:
        """Publish one event. Return what the server answered for it."""
        (published,) = await self.publish_many([event])
        return published

    async def publish_many(self, events: Sequence[Mapping[str, Any]]) -> list[Published]:
        """Publish events in order (:meth:`Publisher.publish_many`)."""
        return await self.send(self.prepare_all(events))

    async def send(self, events: Sequence[Prepared]) -> list[Published]:
        """Publish events that :func:`prepare` made."""
        found: list[Published] = []
        for start, batch in batches(events, self.limits):
            found += await self._send_batch(batch, start)
        return found

    async def _send_batch(self, batch: list[Prepared], start: int) -> list[Published]:
        body = _batch_body(batch)
        try:
            async for attempt in tenacity.AsyncRetrying(**_retrying(self.retry_for)):
                with attempt:
                    response = await self.client.post(self.url, content=body, headers=self.headers)
                    return _answer(response, batch, start)
        except (_Later, httpx.TransportError) as exc:
            raise _unavailable(exc) from exc
        raise AssertionError("tenacity ends with a result or an error")  # pragma: no cover

    async def aclose(self) -> None:
        if self._own:
            await self.client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

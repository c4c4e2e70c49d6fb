"""The one exception hierarchy of Simplefeed.

::

    SimplefeedError
    ├── ConfigError                 bad SIMPLEFEED_* setting or CLI argument
    │   ├── BaseUrlMismatch         .problems: archived pages link to another base URL
    │   ├── DefaultFeedMismatch     .problems: archived pages at another feed's URLs
    │   └── DefaultFeedMissing      SIMPLEFEED_DEFAULT_FEED names no feed
    ├── NotFound                    -> 404
    │   ├── FeedNotFound            .feed
    │   ├── PageNotFound            .feed, .number
    │   └── EntryNotFound           .feed, .entry_id
    ├── FeedRetired                 -> 410 .feed: publishing to a retired feed
    ├── Conflict                    -> 409
    │   ├── EntryConflict           .entry_id, .index: same id, different content
    │   └── FeedExists              .feed
    ├── AuthError                   -> 401 / 403
    │   ├── Unauthorized            no token, or not a valid one
    │   └── Forbidden               .feed: a valid token for another feed
    ├── RequestError                the client sent something we refuse; .status
    │   ├── MalformedRequest        -> 400 (not JSON, not UTF-8)
    │   ├── LengthRequired          -> 411 (a chunked body: send Content-Length)
    │   ├── PayloadTooLarge         -> 413
    │   ├── UnsupportedMediaType    -> 415
    │   └── InvalidEvent            -> 422, .index (in a batch), .field
    ├── StoreError                  the database failed a request (a bug or a fault) -> 500
    │   └── StoreUnavailable        -> 503 + Retry-After: unreachable, locked, read-only, ...
    │       ├── PublishingBusy      every publishing slot of the process is waiting
    │       └── StorageLow          free space below SIMPLEFEED_MIN_FREE_BYTES
    ├── DatabaseNotReady            .url (masked), .answered: missing, unreachable or not migrated
    ├── ArchiveUnreadable           .path: the archive could not be checked (missing, unreadable)
    ├── ArchiveUnavailable          .where: the object store did not answer or refused
    ├── PageConflict                .where: the archive holds other bytes for a page
    └── ClientError                 the consumer's branch: see simplefeed.client.errors

Each error carries the attributes that identify what failed. The HTTP layer maps them to a
status and a JSON body in one place (``simplefeed.app.errors``).
"""

from __future__ import annotations

from pathlib import Path


class SimplefeedError(Exception):
    """Base of every error raised on purpose by Simplefeed."""


class ConfigError(SimplefeedError):
    pass


class BaseUrlMismatch(ConfigError):
    """Feeds whose archived pages were rendered with another base URL than the configured one.

    Serving them as they are would mix two sets of links. ``problems`` holds one line per feed,
    and the message joins them.
    """

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class DefaultFeedMismatch(ConfigError):
    """Feeds whose archived pages are at URLs of the wrong feed.

    Their pages may be at the default feed's URLs (``/pages/N``) while SIMPLEFEED_DEFAULT_FEED
    names another. Or they may be at ``/feeds/NAME/pages/N`` while it names them. Serving them
    so would give their pages' URLs to another feed's. ``problems`` holds one line per feed, and
    the message joins them.
    """

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class ArchiveAhead(ConfigError):
    """Feeds whose archive has a page file past the database's archived pages.

    The database is older than the archive, because it was restored from a backup. So its next
    pages would freeze with other entries under URLs that readers and caches already hold. They
    would land over files holding entries the database lacks. ``problems`` holds one line per
    feed, and the message joins them.
    """

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class DefaultFeedMissing(ConfigError):
    """SIMPLEFEED_DEFAULT_FEED names no feed, so /recent and ``POST /entries`` would answer 404."""


class NotFound(SimplefeedError):
    pass


class FeedNotFound(NotFound):
    def __init__(self, feed: str) -> None:
        super().__init__(f"no feed named {feed!r}")
        self.feed = feed


class PageNotFound(NotFound):
    def __init__(self, feed: str, number: int) -> None:
        super().__init__(f"feed {feed!r} has no page {number}")
        self.feed = feed
        self.number = number


class EntryNotFound(NotFound):
    def __init__(self, feed: str, entry_id: str) -> None:
        super().__init__(f"feed {feed!r} has no entry {entry_id!r}")
        self.feed = feed
        self.entry_id = entry_id


class FeedRetired(SimplefeedError):
    """The feed is retired: it is read as ever, but takes no more events."""

    def __init__(self, feed: str) -> None:
        super().__init__(
            f"feed {feed!r} is retired: its pages are still served, but it takes no more events"
        )
        self.feed = feed


class Conflict(SimplefeedError):
    pass


class EntryConflict(Conflict):
    """An entry id the feed holds with other content, or that a batch gives twice differently.

    ``earlier`` is the index of its first appearance in the batch.
    """

    def __init__(
        self, entry_id: str, index: int | None = None, *, earlier: int | None = None
    ) -> None:
        if earlier is None:
            said = "is already in the feed with different content"
        else:
            said = (
                "is given twice in this batch with different content"
                f" (events {earlier} and {index})"
            )
        super().__init__(f"entry id {entry_id!r} {said}")
        self.entry_id = entry_id
        self.index = index


class InvalidFeed(SimplefeedError):
    """A feed's name or title its documents could not carry."""


class InvalidLabel(SimplefeedError):
    """A token's label that ``token list`` could not show as it was given."""


class FeedExists(Conflict):
    def __init__(self, feed: str) -> None:
        super().__init__(f"feed {feed!r} already exists")
        self.feed = feed


class AuthError(SimplefeedError):
    pass


class Unauthorized(AuthError):
    def __init__(self, message: str, *, invalid_token: bool = False) -> None:
        super().__init__(message)
        self.invalid_token = invalid_token


class Forbidden(AuthError):
    def __init__(self, feed: str) -> None:
        super().__init__(f"this token may not publish to feed {feed!r}")
        self.feed = feed


class RequestError(SimplefeedError):
    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MalformedRequest(RequestError):
    status = 400


class LengthRequired(RequestError):
    status = 411


class PayloadTooLarge(RequestError):
    status = 413


class UnsupportedMediaType(RequestError):
    status = 415


class UnsupportedContentCoding(UnsupportedMediaType):
    """A request body in a content coding the door does not decode. It reads identity only."""


class InvalidEvent(RequestError):
    status = 422

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.index = index
        self.field = field


class StoreError(SimplefeedError):
    """The database refused or failed a statement.

    The store raises this, never its driver's or SQLAlchemy's exceptions. It chains those as
    ``__cause__``.
    """


class StoreUnavailable(StoreError):
    """The database cannot serve us now, but retrying later may succeed.

    It may be unreachable, shut down, or read-only. It may be locked for longer than the busy
    timeout, or out of resources.
    """


class PublishingBusy(StoreUnavailable):
    """Every publishing slot of this process is taken by publishes waiting for the database.

    A held SQLite write lock or a busy PostgreSQL causes this. It is back-pressure, answered at
    once.
    """


class StorageLow(StoreUnavailable):
    """A directory the service writes has less free space than the configured floor.

    Such directories are the SQLite database's and the archive. Publishing is refused before it
    could fail halfway.
    """


class DatabaseNotReady(SimplefeedError):
    """The database is missing, does not answer, or is not at the newest schema.

    The message is one line naming the database (password masked) and what to do.
    """

    def __init__(
        self,
        url: str,
        problem: str,
        fix: str = "run `simplefeed db upgrade`",
        *,
        answered: bool = True,
    ) -> None:
        super().__init__(f"database {url} {problem}; {fix}")
        self.url = url
        #: False when the database did not answer, because a server that is down may come up.
        #: True when it answered and is not what Simplefeed needs: missing, empty, or an older
        #: schema.
        self.answered = answered


class ArchiveUnreadable(SimplefeedError):
    """The archive directory could not be checked against the database.

    It may not be a directory, or a file in it cannot be read. Or it holds no page file at all
    while the database has archived pages, most likely because it is the wrong directory.
    ``path`` names it, and the message is one line.
    """

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


class ArchiveUnavailable(SimplefeedError):
    """The archive store did not do what was asked. Trying again later may work.

    It was unreachable or too slow, or it refused: no credentials, no such bucket, or no
    permission. ``where`` names the store, and the message is one line.
    """

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where


class PageConflict(SimplefeedError):
    """The archive already holds other bytes where a page was to be written.

    A page is written once, so nothing was overwritten. ``where`` names the page's object or
    file.
    """

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where

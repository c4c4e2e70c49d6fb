"""The store's interface: everything the rest of Simplefeed may ask of the database.

The core, and through it the app and the command line, holds a :class:`Store`. It receives
:mod:`simplefeed.model` types from it, never rows, connections or SQL. Each backend implements
it in a module of its own (:mod:`simplefeed.store.sqlite`, :mod:`simplefeed.store.postgres`).
A backend raises only the project's errors, never SQLAlchemy's or its driver's.
:class:`~simplefeed.errors.StoreUnavailable` says the database cannot serve now.
:class:`~simplefeed.errors.StoreError` is anything else it refused. The domain has its own
too (:class:`~simplefeed.errors.FeedNotFound`, ...).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from simplefeed.model import (
    ArchivedPage,
    Entry,
    Feed,
    PageRecord,
    PendingEntry,
    StoredEntry,
    TokenRecord,
)


@dataclass(frozen=True)
class TokenCheck:
    """A producer token to check in the append itself, as its id and its secret's SHA-256."""

    token_id: int
    secret_hash: str


class Appending(ABC):
    """An append under way, one write transaction.

    :attr:`feed` is the feed as locked, with its head before this append. Appenders of a feed
    queue for its lock, from every process and node. :attr:`found` holds the entries stored
    under the ids asked for. They are read after the lock was granted, so no replay committed
    meanwhile is missed.
    """

    feed: Feed
    found: dict[str, StoredEntry]

    @abstractmethod
    def entries_between(self, first: int, last: int) -> list[Entry]:
        """Entries with ``first <= seq <= last``, newest first, in this transaction."""

    @abstractmethod
    def page(self, number: int) -> PageRecord | None:
        """The feed's archived page ``number``, in this transaction.

        A second connection from the pool would deadlock on PostgreSQL. The append would wait
        for it while holding the feed's lock. Other appends would hold the pool's every
        connection, waiting for that lock.
        """

    @abstractmethod
    def write(
        self,
        new: Sequence[tuple[Entry, PendingEntry]],
        *,
        modified_us: int,
        pages: Sequence[ArchivedPage] = (),
        base_url: str | None,
    ) -> None:
        """Insert the entries ``new``, move the head to the last, and record the pages filled.

        The entries are numbered ``feed.head_seq + 1 ...``. The pending entry each was made
        from gives what is stored of its event. Pages are recorded as digests, not bytes.
        ``base_url`` is recorded as the base URL the feed's archived pages are rendered with.
        This is committed when the append's block ends without an error. A duplicate sequence
        number, entry id or page is a :class:`StoreError` and writes nothing.
        """


class Rebasing(ABC):
    """Archived pages being rendered again, one write transaction.

    :attr:`feed` is the feed as locked. No append to it runs until the block ends.
    """

    feed: Feed

    @abstractmethod
    def entries_between(self, first: int, last: int) -> list[Entry]:
        """Entries with ``first <= seq <= last``, newest first, in this transaction."""

    @abstractmethod
    def page(self, number: int) -> PageRecord | None:
        """The feed's archived page ``number`` as it is before this transaction replaces it."""

    @abstractmethod
    def replace_page(self, page: ArchivedPage) -> None:
        """Record ``page``'s digest and freeze time in place of the archived page of its number."""


class Pause(Protocol):
    """What a watcher (:meth:`Store.watch`) waits on between looks, as on a ``threading.Event``.

    ``wait`` returns whether to stop. It may return before its timeout, when a commit is
    announced, so the watcher looks now. It may return after it, when every commit of the node
    is announced (:attr:`simplefeed.service.changes.Bell.announces_node`). The looks are then
    for commits made elsewhere, :data:`simplefeed.service.changes.UNANNOUNCED_LOOK_S` apart.
    """

    def is_set(self) -> bool: ...

    def wait(self, timeout: float) -> bool: ...


class Store(ABC):
    #: ``sqlite`` or ``postgresql``, as /healthz reports it.
    backend: str
    #: Whether :meth:`append_in_one_round_trip` may append. Else it always gives way.
    one_round_trip: bool = False
    #: Whether :meth:`watch` looks for commits at intervals. Then a commit announced by a
    #: process of the node makes it look sooner. Else it is told of each commit.
    watch_polls: bool = False
    #: The database's file on this machine, if it is one. /healthz watches its free space.
    database_file: Path | None = None

    # -- feeds ---------------------------------------------------------------------------

    @abstractmethod
    def create_feed(self, *, name: str, title: str, page_size: int, uuid: str, now_us: int) -> Feed:
        """Create a new, empty feed, or raise :class:`~simplefeed.errors.FeedExists`.

        The error means the name is taken.
        """

    @abstractmethod
    def feed(self, name: str) -> Feed:
        """The feed as committed now, or :class:`~simplefeed.errors.FeedNotFound` if none."""

    @abstractmethod
    def feed_head(self, name: str) -> Feed:
        """:meth:`feed` for the hot path, the validators of a 304 on ``/recent``.

        It runs on a direct connection, with nothing around the lookup, or less. The backends
        say how. Nothing is cached for a time, so every call sees the latest commit.
        """

    @abstractmethod
    def feeds(self) -> list[Feed]: ...

    @abstractmethod
    def set_retired(self, name: str, retired_us: int | None) -> Feed:
        """Retire a feed at ``retired_us``, or bring it back with None.

        Returns the feed as now. Every append that starts after this returns sees it.
        """

    # -- producer tokens -----------------------------------------------------------------

    @abstractmethod
    def create_token(
        self, *, secret_hash: str, feed: str | None, label: str | None, now_us: int
    ) -> int:
        """Store a token, limited to ``feed`` if given, and return its id."""

    @abstractmethod
    def token(self, token_id: int) -> TokenRecord | None:
        """The token with this id.

        Every publish looks one up first, so this is the fast way.
        """

    @abstractmethod
    def tokens(self) -> list[TokenRecord]: ...

    @abstractmethod
    def revoke_token(self, token_id: int, now_us: int) -> bool:
        """Revoke a live token; False if there is none with that id."""

    @abstractmethod
    def rotate_token(self, token_id: int, secret_hash: str) -> bool:
        """Give a live token a new secret, or return False if there is no live one with that id.

        Its id, feed and label stay. Every publish that starts after this returns refuses the
        old secret.
        """

    # -- entries and pages ---------------------------------------------------------------

    @abstractmethod
    def entries_between(self, feed_id: int, first: int, last: int) -> list[Entry]:
        """Entries with ``first <= seq <= last``, newest first, in document order."""

    @abstractmethod
    def find_entries(self, feed_id: int, entry_ids: Iterable[str]) -> dict[str, StoredEntry]:
        """The entries stored under these ids, by id.

        Ids not in the feed are left out.
        """

    @abstractmethod
    def page(self, feed_id: int, number: int) -> PageRecord | None:
        """An archived page, or None if that page is not frozen."""

    @abstractmethod
    def iter_pages(self, feed_id: int) -> Iterator[PageRecord]:
        """Every archived page of a feed in order, a few at a time."""

    # -- appending -----------------------------------------------------------------------

    @abstractmethod
    def append(self, feed: str, look_up: Iterable[str]) -> AbstractContextManager[Appending]:
        """Lock ``feed`` for an append and find the stored entries of ``look_up``.

        Leaving the block commits. On an exception it rolls back.
        """

    @abstractmethod
    def rebase(self, feed: str, base_url: str) -> AbstractContextManager[Rebasing]:
        """Lock ``feed`` against appends to replace its archived pages.

        Leaving the block records ``base_url`` as the base URL they are rendered with, and
        commits. On an exception it rolls back, and every page keeps its bytes.
        """

    def append_in_one_round_trip(
        self,
        feed: Feed,
        pending: Sequence[PendingEntry],
        *,
        now_us: int,
        token: TokenCheck | None,
    ) -> int | None:
        """Append ``pending`` in one round trip if the database can number them itself.

        That needs new ids only, staying within the working page. ``token`` must be live and
        allowed on the feed. Returns the new head, durable, or None if nothing was appended.
        The caller then goes the ordinary way. ``feed`` is only the feed's identity. Its head is
        read under the lock. Backends without such a path always give way.
        """
        return None

    def flush_barrier(self) -> None:  # noqa: B027 - nothing to do for most backends
        """Return once everything committed so far is durable.

        It does nothing where every commit is synchronous.
        """

    def analyze_entries_once(self) -> bool:
        """Gather the planner's statistics on entries if that never happened.

        Returns True if it ran. It is called when a feed's first page freezes. Backends
        without such statistics have nothing to do.
        """
        return False

    # -- changes -------------------------------------------------------------------------

    @abstractmethod
    def watch(self, changed: Callable[[], None], stop: Pause) -> None:
        """Call ``changed`` soon after each commit that may have moved a feed's head.

        The commit may come from any process or node. It runs until ``stop`` is set. It also
        calls after losing sight of the database for a while, because anything may have changed
        then. A watcher that polls waits on ``stop`` between looks. The wait ends early when a
        process of the node announces a commit. It blocks, so run it in a thread of its own
        (:class:`simplefeed.service.changes.Changes`). It holds one connection of its own, none
        of the store's others.
        """

    # -- the database itself -------------------------------------------------------------

    @abstractmethod
    def ping(self) -> None:
        """Raise :class:`~simplefeed.errors.StoreUnavailable` unless the database answers."""

    def problems(self) -> list[str]:
        """What keeps the database from taking writes although it answers, for ``/healthz``.

        It may be read-only, or its file replaced or deleted, ... Empty when all is well.
        """
        return []

    @abstractmethod
    def close(self) -> None:
        """Close every connection.

        The store may be used again, because it reconnects.
        """

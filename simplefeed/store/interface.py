"""The store's interface: everything the rest of Simplefeed may ask of the database.

The core (and through it the app and the command line) holds a :class:`Store` and receives
:mod:`simplefeed.model` types from it, never rows, connections or SQL. Each backend implements
it in a module of its own (:mod:`simplefeed.store.sqlite`, :mod:`simplefeed.store.postgres`)
and raises only the project's errors: :class:`~simplefeed.errors.StoreUnavailable` (the
database cannot serve now), :class:`~simplefeed.errors.StoreError` (anything else it refused)
and the domain's own (:class:`~simplefeed.errors.FeedNotFound`, ...), never SQLAlchemy's or its
driver's.
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
    """A producer token to check in the append itself: its id and the SHA-256 of its secret."""

    token_id: int
    secret_hash: str


class Appending(ABC):
    """An append under way, one write transaction. :attr:`feed` is the feed as locked: its
    head before this append (appenders of a feed queue for its lock, from every process and
    node); :attr:`found` holds the entries stored under the ids asked for, read after the
    lock was granted, so no replay committed meanwhile is missed."""

    feed: Feed
    found: dict[str, StoredEntry]

    @abstractmethod
    def entries_between(self, first: int, last: int) -> list[Entry]:
        """Entries with ``first <= seq <= last``, newest first, in this transaction."""

    @abstractmethod
    def page(self, number: int) -> PageRecord | None:
        """The feed's frozen page ``number``, in this transaction: an append that needed a
        second connection from the pool for it waited, holding the feed's lock, for appends
        that held the pool's every connection waiting for that lock (PostgreSQL)."""

    @abstractmethod
    def write(
        self,
        new: Sequence[tuple[Entry, PendingEntry]],
        *,
        modified_us: int,
        pages: Sequence[ArchivedPage] = (),
        base_url: str | None,
    ) -> None:
        """Insert the entries ``new`` (numbered ``feed.head_seq + 1 ...``; the pending entry
        each was made from gives what is stored of its event), move the head to the last, and
        record the pages they filled (digests, not bytes), recording ``base_url`` as the base
        URL the feed's frozen pages are rendered with. Committed when the append's block ends
        without an error. A duplicate sequence number, entry id or page is a
        :class:`StoreError` and writes nothing."""


class Rebasing(ABC):
    """Frozen pages being rendered again under way, one write transaction. :attr:`feed` is
    the feed as locked: no append to it runs until the block ends."""

    feed: Feed

    @abstractmethod
    def entries_between(self, first: int, last: int) -> list[Entry]:
        """Entries with ``first <= seq <= last``, newest first, in this transaction."""

    @abstractmethod
    def page(self, number: int) -> PageRecord | None:
        """The feed's frozen page ``number`` as it is before this transaction replaces it."""

    @abstractmethod
    def replace_page(self, page: ArchivedPage) -> None:
        """Record ``page`` (digest, freeze time) in place of the frozen page of its number."""


class Pause(Protocol):
    """What a watcher (:meth:`Store.watch`) waits on between looks, as on a
    ``threading.Event``: ``wait`` returns whether to stop, and may return before its timeout
    (a commit announced: look now), or after it, when every commit of the node is announced
    (:attr:`simplefeed.service.changes.Bell.announces_node`: the looks are then for commits made
    elsewhere, :data:`simplefeed.service.changes.UNANNOUNCED_LOOK_S` apart)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float) -> bool: ...


class Store(ABC):
    #: ``sqlite`` or ``postgresql`` (what /healthz reports).
    backend: str
    #: Whether :meth:`append_in_one_round_trip` may append (else it always gives way).
    one_round_trip: bool = False
    #: Whether :meth:`watch` looks for commits at intervals, so that a commit announced by a
    #: process of the node makes it look sooner (else it is told of each commit).
    watch_polls: bool = False
    #: The database's file on this machine, if it is one: /healthz watches its free space.
    database_file: Path | None = None

    # -- feeds ---------------------------------------------------------------------------

    @abstractmethod
    def create_feed(self, *, name: str, title: str, page_size: int, uuid: str, now_us: int) -> Feed:
        """A new, empty feed; :class:`~simplefeed.errors.FeedExists` if the name is taken."""

    @abstractmethod
    def feed(self, name: str) -> Feed:
        """The feed as committed now; :class:`~simplefeed.errors.FeedNotFound` if none."""

    @abstractmethod
    def feed_head(self, name: str) -> Feed:
        """:meth:`feed` for the hot path (the validators of a 304 on ``/recent``): on a
        direct connection, with nothing around the lookup, or less (the backends say
        how). Nothing is cached for a time: every call sees the latest commit."""

    @abstractmethod
    def feeds(self) -> list[Feed]: ...

    @abstractmethod
    def set_retired(self, name: str, retired_us: int | None) -> Feed:
        """Retire a feed (``retired_us``: when) or bring it back (None); the feed as now.
        Every append that starts after this returns sees it."""

    # -- producer tokens -----------------------------------------------------------------

    @abstractmethod
    def create_token(
        self, *, secret_hash: str, feed: str | None, label: str | None, now_us: int
    ) -> int:
        """Store a token (limited to ``feed`` if given); returns its id."""

    @abstractmethod
    def token(self, token_id: int) -> TokenRecord | None:
        """The token with this id (every publish looks one up first: the fast way)."""

    @abstractmethod
    def tokens(self) -> list[TokenRecord]: ...

    @abstractmethod
    def revoke_token(self, token_id: int, now_us: int) -> bool:
        """Revoke a live token; False if there is none with that id."""

    @abstractmethod
    def rotate_token(self, token_id: int, secret_hash: str) -> bool:
        """Give a live token a new secret (its id, feed and label stay; the old secret is
        refused by every publish that starts after this returns); False if there is no live
        token with that id."""

    # -- entries and pages ---------------------------------------------------------------

    @abstractmethod
    def entries_between(self, feed_id: int, first: int, last: int) -> list[Entry]:
        """Entries with ``first <= seq <= last``, newest first (document order)."""

    @abstractmethod
    def find_entries(self, feed_id: int, entry_ids: Iterable[str]) -> dict[str, StoredEntry]:
        """The entries stored under these ids, by id (ids not in the feed are left out)."""

    @abstractmethod
    def page(self, feed_id: int, number: int) -> PageRecord | None:
        """A frozen page, or None if that page is not frozen."""

    @abstractmethod
    def iter_pages(self, feed_id: int) -> Iterator[PageRecord]:
        """Every frozen page of a feed in order, a few at a time."""

    # -- appending -----------------------------------------------------------------------

    @abstractmethod
    def append(self, feed: str, look_up: Iterable[str]) -> AbstractContextManager[Appending]:
        """Lock ``feed`` for an append and find the stored entries of ``look_up``; leaving
        the block commits (or, on an exception, rolls back)."""

    @abstractmethod
    def rebase(self, feed: str, base_url: str) -> AbstractContextManager[Rebasing]:
        """Lock ``feed`` against appends to replace its frozen pages; leaving the block records
        ``base_url`` as the base URL they are rendered with and commits (or, on an exception,
        rolls back: every page keeps its bytes)."""

    def append_in_one_round_trip(
        self,
        feed: Feed,
        pending: Sequence[PendingEntry],
        *,
        now_us: int,
        token: TokenCheck | None,
    ) -> int | None:
        """Append ``pending`` in one round trip if the database can number them itself: new
        ids only, staying within the working page, ``token`` live and allowed on the feed.
        Returns the new head, durable, or None if nothing was appended (the caller then goes
        the ordinary way). ``feed`` is only the feed's identity; its head is read under the
        lock. Backends without such a path always give way."""
        return None

    def flush_barrier(self) -> None:  # noqa: B027 - nothing to do for most backends
        """Return once everything committed so far is durable (a no-op where every commit is
        synchronous)."""

    def analyze_entries_once(self) -> bool:
        """Gather the planner's statistics on entries if that never happened; True if it ran.
        Called when a feed's first page freezes. Nothing to do for backends without them."""
        return False

    # -- changes -------------------------------------------------------------------------

    @abstractmethod
    def watch(self, changed: Callable[[], None], stop: Pause) -> None:
        """Call ``changed`` soon after each commit that may have moved a feed's head, made by
        any process or node, until ``stop`` is set; also after losing sight of the database
        for a while (anything may have changed then). A watcher that polls waits on ``stop``
        between looks: the wait ends early when a process of the node announces a commit.
        Blocks: run it in a thread of its own (:class:`simplefeed.service.changes.Changes`).
        It holds
        one connection of its own, none of the store's others."""

    # -- the database itself -------------------------------------------------------------

    @abstractmethod
    def ping(self) -> None:
        """Raise :class:`~simplefeed.errors.StoreUnavailable` unless the database answers."""

    def problems(self) -> list[str]:
        """What keeps the database from taking writes although it answers (for ``/healthz``):
        read-only, its file replaced or deleted, ... Empty when all is well."""
        return []

    @abstractmethod
    def close(self) -> None:
        """Close every connection (the store may be used again: it reconnects)."""

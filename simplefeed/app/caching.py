"""HTTP validators and conditional requests (RFC 9110 section 13, RFC 9111), and the cheap reads
behind them.

Live documents (the recent document and the working page) change; their Last-Modified is only
sent once the second it names is over (RFC 9110 8.8.2.2): a change later in that same second
would otherwise keep the same Last-Modified, and a client revalidating with If-Modified-Since
would be told "not modified" while it is. The ETag is always sent and always exact.

The hot path of a feed server is the poll of ``/recent``: mostly a 304, else the same bytes again.
:class:`FeedHeads` gives its validators for the price of one indexed lookup of the feed row, with
nothing around it, or on SQLite usually less (see its docstring); :class:`ArchivedPages`
remembers the validators of archived pages, which never change, so serving one from Python costs
no query at all after the first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import weakref
from collections.abc import Callable
from email.utils import formatdate
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy import bindparam, select

from simplefeed.core import Live, Simplefeed
from simplefeed.errors import FeedNotFound
from simplefeed.model import DocumentKind, Feed, FrozenPage
from simplefeed.store.tables import feeds

log = logging.getLogger(__name__)

ARCHIVE_CACHE_CONTROL = "public, max-age=31536000, immutable"


def http_date(seconds: int) -> str:
    return formatdate(seconds, usegmt=True)


def settled_second(modified_us: int, now_us: int) -> int | None:
    """Last-Modified (whole seconds) for a live document, or None while its second is running."""
    second = modified_us // 1_000_000
    return second if second < now_us // 1_000_000 else None


# -- live documents ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LiveValidators:
    """What a request for a live document needs before any rendering."""

    live: Live
    etag: str
    #: Whole seconds, or None while the second of the last change is still running.
    last_modified_s: int | None
    #: ``last_modified_s`` as an HTTP date (formatted once per version).
    last_modified: str | None


_FEED_FIELDS = tuple(f.name for f in dataclasses.fields(Feed))


class _ThreadReader:
    """One thread's connection for :class:`FeedHeads`, and what it last read (SQLite)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.data_version: int | None = None
        self.rows: dict[str, tuple[Any, ...]] = {}


class FeedHeads:
    """The feed rows behind the live documents' validators: one indexed lookup, or less.

    Every request sees the feed as committed at that moment, by any process, node or the CLI:
    nothing is cached for a time. But nothing surrounds the lookup either: each thread keeps its
    own DB-API connection in autocommit mode and runs one statement, compiled once from the
    store's table. Through SQLAlchemy's pool and a transaction the same lookup costs about
    130 us of Python on the benchmark machine (checkout, BEGIN, statement cache, result proxy,
    COMMIT, return), ten times the rest of a 304; this way it is about 3 us on SQLite.

    On SQLite it is less than a lookup: ``PRAGMA data_version`` (about 1 us) changes whenever
    another connection commits to the database, so while it stays the same the row this thread
    read last is still the row. On PostgreSQL it is one indexed SELECT (prepared by psycopg
    after a few uses).

    Any error on that connection drops it, and the request goes the ordinary way
    (:meth:`Simplefeed.feed`), whose errors the app maps to HTTP (a 503 when the database is
    down). The validators (ETag, Last-Modified) are derived once per row version.
    """

    def __init__(self, core: Simplefeed) -> None:
        self.core = core
        engine = core.db.engine
        stmt = select(*(feeds.c[name] for name in _FEED_FIELDS)).where(
            feeds.c.name == bindparam("name")
        )
        self._sql = str(stmt.compile(dialect=engine.dialect))
        self._positional = bool(engine.dialect.positional)
        self._sqlite = core.db.dialect == "sqlite"
        self._local = threading.local()
        self._connections: list[Any] = []
        self._lock = threading.Lock()
        self._validators: dict[tuple[str, DocumentKind], tuple[tuple[Any, ...], LiveValidators]]
        self._validators = {}
        # Close what this object opened when it goes away (tests build many apps) or at exit.
        self._finalizer = weakref.finalize(self, _close_all, self._connections, self._lock)

    def close(self) -> None:
        self._finalizer()

    def _reader(self) -> _ThreadReader:
        reader: _ThreadReader | None = getattr(self._local, "reader", None)
        if reader is None:
            # A connection of the store's engine (its connect-time settings applied: autocommit
            # on SQLite), taken out of the pool for good: it is this thread's.
            fairy = self.core.db.engine.raw_connection()
            conn = fairy.driver_connection
            fairy.detach()
            if not self._sqlite:
                # No transaction left open between polls: each SELECT sees the latest commit.
                conn.autocommit = True  # type: ignore[union-attr]
            with self._lock:
                self._connections.append(conn)
            reader = self._local.reader = _ThreadReader(conn)
        return reader

    def _drop(self, reader: _ThreadReader) -> None:
        self._local.reader = None
        with self._lock, contextlib.suppress(ValueError):
            self._connections.remove(reader.conn)
        with contextlib.suppress(Exception):
            reader.conn.close()

    def row(self, name: str) -> tuple[Any, ...]:
        """The feed's row (the fields of :class:`Feed`, in order); FeedNotFound if none."""
        reader = None
        try:
            reader = self._reader()
            if self._sqlite:
                row = self._sqlite_row(reader, name)
            else:
                cursor = reader.conn.cursor()
                try:
                    params = (name,) if self._positional else {"name": name}
                    cursor.execute(self._sql, params)
                    row = cursor.fetchone()
                finally:
                    cursor.close()
        except Exception:
            log.warning("fast feed lookup failed; using the pool", exc_info=True)
            if reader is not None:
                self._drop(reader)
            f = self.core.feed(name)
            return tuple(getattr(f, field) for field in _FEED_FIELDS)
        if row is None:
            raise FeedNotFound(name)
        return tuple(row)

    def _sqlite_row(self, reader: _ThreadReader, name: str) -> tuple[Any, ...] | None:
        conn = reader.conn
        # fetchall, not fetchone: the statement runs to its end, so no read transaction (no
        # WAL snapshot) stays open on this connection between requests.
        ((version,),) = conn.execute("PRAGMA data_version").fetchall()
        if version == reader.data_version:
            known = reader.rows.get(name)
            if known is not None:
                return known
        else:
            reader.data_version = version
            reader.rows.clear()
        found = conn.execute(self._sql, (name,)).fetchall()
        if not found:
            return None
        row: tuple[Any, ...] = tuple(found[0])
        reader.rows[name] = row
        return row

    def live(
        self, name: str, kind: DocumentKind, row: tuple[Any, ...] | None = None
    ) -> LiveValidators:
        """Validators of ``name``'s recent document or working page, as of this moment (or as of
        ``row``, the feed's row just read with :meth:`row`)."""
        if row is None:
            row = self.row(name)
        key = (name, kind)
        known = self._validators.get(key)
        if known is not None and known[0] == row:
            if known[1].last_modified_s is not None:
                return known[1]
            live = known[1].live  # the same version; only Last-Modified may have settled
        else:
            live = self.core.live(Feed(*row), kind)
        second = settled_second(live.feed.modified_us, self.core.clock())
        validators = LiveValidators(
            live, live.etag, second, http_date(second) if second is not None else None
        )
        self._validators[key] = (row, validators)
        return validators


def _close_all(connections: list[Any], lock: threading.Lock) -> None:
    with lock:
        pending = list(connections)
        connections.clear()
    for conn in pending:
        with contextlib.suppress(Exception):
            conn.close()


# -- archived pages ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ArchivedPage:
    """An archived page's validators and where its static file is: fixed once frozen."""

    path: Path
    size: int
    etag: str
    last_modified_s: int
    last_modified: str

    @classmethod
    def of(cls, page: FrozenPage, path: Path) -> ArchivedPage:
        second = page.frozen_us // 1_000_000
        return cls(path, len(page.body), page.etag, second, http_date(second))

    def open(self) -> BinaryIO | None:
        """The static file, if it is there with the page's length; None otherwise.

        (Its bytes are the page's: written atomically from them, repaired by ``archive
        rebuild``; the length check catches a truncated copy without reading it.)
        """
        try:
            f = self.path.open("rb")
        except FileNotFoundError:
            return None
        if os.fstat(f.fileno()).st_size != self.size:
            f.close()
            log.warning("archive file %s does not have the page's length", self.path)
            return None
        return f


class ArchivedPages:
    """Validators of archived pages, remembered per process: a frozen page never changes.

    At most ``limit`` pages (a few hundred bytes each); past that the memory starts again.
    """

    def __init__(self, path_of: Callable[[str, int], Path], limit: int = 100_000) -> None:
        self._path_of = path_of
        self._limit = limit
        self._known: dict[tuple[str, int], ArchivedPage] = {}

    def get(self, feed: str, number: int) -> ArchivedPage | None:
        return self._known.get((feed, number))

    def remember(self, feed: str, page: FrozenPage) -> ArchivedPage:
        known = ArchivedPage.of(page, self._path_of(feed, page.number))
        if len(self._known) >= self._limit:
            self._known.clear()
        self._known[(feed, page.number)] = known
        return known

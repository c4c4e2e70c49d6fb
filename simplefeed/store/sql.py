"""What both backends share: SQLAlchemy Core over the tables, and more.

It also holds rows made into model types, transactions and the direct connections. It is the one
place where SQLAlchemy's and the drivers' exceptions become the project's (:data:`translated`).

Transactions are the store's own business::

    with store.write() as conn:   # appenders serialise in the backend's append()
        ...
    with store.read() as conn:
        ...

Nothing here knows a dialect. What differs between SQLite and PostgreSQL is in
:mod:`simplefeed.store.sqlite` and :mod:`simplefeed.store.postgres`. They hold subclasses of
:class:`SqlStore`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Row, Select, bindparam, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError, IntegrityError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from simplefeed.errors import FeedExists, FeedNotFound, StoreError, StoreUnavailable
from simplefeed.model import (
    ArchivedPage,
    Entry,
    Event,
    Feed,
    PageRecord,
    StoredEntry,
    TokenRecord,
)
from simplefeed.store.interface import Appending, Rebasing, Store
from simplefeed.store.tables import entries, feeds, pages, tokens


class SqlAppending(Appending):
    """What an append under way is on both backends.

    It holds its connection, the feed as locked and the entries found under the ids asked for.
    It reads back the older entries of a page it fills. Each backend writes in its own way
    (:meth:`write`).
    """

    def __init__(self, conn: Connection, feed: Feed, found: dict[str, StoredEntry]) -> None:
        self.conn = conn
        self.feed = feed
        self.found = found

    def entries_between(self, first: int, last: int) -> list[Entry]:
        return entries_between(self.conn, self.feed.id, first, last)

    def page(self, number: int) -> PageRecord | None:
        return page_in(self.conn, self.feed.id, number)


class SqlRebasing(Rebasing):
    def __init__(self, conn: Connection, feed: Feed) -> None:
        self.conn = conn
        self.feed = feed

    def entries_between(self, first: int, last: int) -> list[Entry]:
        return entries_between(self.conn, self.feed.id, first, last)

    def page(self, number: int) -> PageRecord | None:
        return page_in(self.conn, self.feed.id, number)

    def replace_page(self, page: ArchivedPage) -> None:
        self.conn.execute(
            update(pages)
            .where(pages.c.feed_id == page.feed_id, pages.c.number == page.number)
            .values(sha256=page.sha256, frozen_us=page.frozen_us)
        )


log = logging.getLogger(__name__)

# -- errors -----------------------------------------------------------------------------------

#: SQLSTATE classes and codes of PostgreSQL errors that say "not now" rather than "never".
#: They are connection exceptions, insufficient resources and operator intervention (shutdown,
#: recovery). A read-only transaction is one too, on a standby or with
#: default_transaction_read_only. So are the two a retry resolves, serialization failure and
#: deadlock.
_UNAVAILABLE_SQLSTATES = ("08", "53", "57", "25006", "40001", "40P01")


def store_error(exc: BaseException) -> StoreError:
    """The project's error for an exception of SQLAlchemy or of a driver.

    The DB-API names ``OperationalError`` and ``InterfaceError`` mean a database we cannot use
    now.
    """
    unavailable = isinstance(exc, DisconnectionError | PoolTimeout) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    unavailable = unavailable or any(
        kind.__name__ in ("OperationalError", "InterfaceError") for kind in type(exc).__mro__
    )
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate.startswith(_UNAVAILABLE_SQLSTATES):
        unavailable = True
    text = str(exc).strip()
    message = text.splitlines()[0] if text else type(exc).__name__
    return (StoreUnavailable if unavailable else StoreError)(message)


#: A URL's scheme, lower case, without its driver (``postgresql`` of ``postgresql+psycopg://``).
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9]*)(\+[A-Za-z0-9_]+)?://")


def url_scheme(url: str) -> str | None:
    """The scheme of a database URL without its driver, lower case; None if it has none."""
    found = _SCHEME.match(url)
    return found.group(1).lower() if found else None


#: What the store translates. These are SQLAlchemy's errors and those of each backend's driver.
_TRANSLATED: tuple[type[BaseException], ...] = (SQLAlchemyError,)


def translate_driver_errors(kind: type[BaseException]) -> None:
    """Translate a driver's errors too. Each backend calls it with its driver's base error."""
    global _TRANSLATED
    _TRANSLATED = (*_TRANSLATED, kind)


class _Translated:
    """Raise what SQLAlchemy or a driver raised in its block as the project's own error.

    The error comes from :func:`store_error`, with the original as its cause. Every way out of
    the store passes one. It is a class, not a generator, because it is on the path of every
    request.
    """

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if exc is not None and isinstance(exc, _TRANSLATED):
            raise store_error(exc) from exc


translated = _Translated()

# -- statements and rows ----------------------------------------------------------------------

# Built once, so SQLAlchemy reuses the compiled form without rebuilding it per call.
FEED_BY_NAME = select(feeds).where(feeds.c.name == bindparam("name"))
#: The feed's row, held until the transaction ends (PostgreSQL; SQLite ignores FOR UPDATE).
LOCK_FEED = FEED_BY_NAME.with_for_update()
ADVANCE_HEAD = (
    update(feeds)
    .where(feeds.c.id == bindparam("feed_id"))
    .values(
        head_seq=bindparam("new_head_seq"),
        head_updated_us=bindparam("new_head_updated_us"),
        modified_us=bindparam("new_modified_us"),
        base_url=bindparam("new_base_url"),
    )
)
INSERT_PAGE = pages.insert()
#: The columns of an entry's row, in the order :func:`entry_rows` gives them.
ENTRY_COLUMNS = (
    "feed_id",
    "seq",
    "entry_id",
    "updated_us",
    "published_us",
    "fingerprint",
    "data",
)
INSERT_ENTRY = entries.insert().values({c: bindparam(c) for c in ENTRY_COLUMNS})
_FIND = select(entries.c.entry_id, entries.c.seq, entries.c.fingerprint).where(
    entries.c.feed_id == bindparam("feed_id"),
    entries.c.entry_id.in_(bindparam("ids", expanding=True)),
)
_BETWEEN = (
    select(entries)
    .where(
        entries.c.feed_id == bindparam("feed_id"),
        entries.c.seq >= bindparam("first"),
        entries.c.seq <= bindparam("last"),
    )
    .order_by(entries.c.seq.desc())
)
_PAGE = select(pages).where(
    pages.c.feed_id == bindparam("feed_id"), pages.c.number == bindparam("n")
)
_PAGES_AFTER = (
    select(pages)
    .where(pages.c.feed_id == bindparam("feed_id"), pages.c.number > bindparam("after"))
    .order_by(pages.c.number)
    .limit(bindparam("n"))
)
_TOKENS = select(tokens, feeds.c.name.label("feed_name")).outerjoin(
    feeds, feeds.c.id == tokens.c.feed_id
)
_TOKEN = _TOKENS.where(tokens.c.id == bindparam("token_id"))


def feed_from(m: Mapping[Any, Any]) -> Feed:
    """A feed from its row's columns by name."""
    return Feed(
        id=m["id"],
        name=m["name"],
        uuid=m["uuid"],
        title=m["title"],
        page_size=m["page_size"],
        created_us=m["created_us"],
        head_seq=m["head_seq"],
        head_updated_us=m["head_updated_us"],
        modified_us=m["modified_us"],
        base_url=m["base_url"],
        retired_us=m["retired_us"],
    )


def _token_from(m: Mapping[Any, Any]) -> TokenRecord:
    return TokenRecord(
        id=m["id"],
        secret_hash=m["secret_hash"],
        feed=m["feed_name"],
        label=m["label"],
        created_us=m["created_us"],
        revoked_us=m["revoked_us"],
    )


def _entry_from(row: Row[tuple[object, ...]]) -> Entry:
    m = row._mapping
    entry_id = m["entry_id"]
    return Entry(
        seq=m["seq"],
        id=entry_id,
        updated_us=m["updated_us"],
        published_us=m["published_us"],
        event=Event.from_json(json.loads(m["data"]), entry_id),
    )


def _page_from(row: Row[tuple[object, ...]]) -> PageRecord:
    m = row._mapping
    return PageRecord(
        feed_id=m["feed_id"], number=m["number"], sha256=m["sha256"], frozen_us=m["frozen_us"]
    )


def page_row(page: ArchivedPage, page_size: int) -> dict[str, object]:
    """The parameters of :data:`INSERT_PAGE` for a page of a feed with ``page_size``."""
    return {
        "feed_id": page.feed_id,
        "number": page.number,
        "first_seq": (page.number - 1) * page_size + 1,
        "last_seq": page.number * page_size,
        "frozen_us": page.frozen_us,
        "sha256": page.sha256,
    }


def head_row(feed: Feed, last: Entry, modified_us: int, base_url: str | None) -> dict[str, object]:
    """The parameters of :data:`ADVANCE_HEAD` once ``last`` is the feed's newest entry."""
    return {
        "feed_id": feed.id,
        "new_head_seq": last.seq,
        "new_head_updated_us": last.updated_us,
        "new_modified_us": modified_us,
        "new_base_url": base_url,
    }


def find_entries(
    conn: Connection, feed_id: int, entry_ids: Iterable[str]
) -> dict[str, StoredEntry]:
    ids = list(set(entry_ids))
    found: dict[str, StoredEntry] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        for entry_id, seq, fingerprint in conn.execute(_FIND, {"feed_id": feed_id, "ids": chunk}):
            found[entry_id] = StoredEntry(entry_id, seq, fingerprint)
    return found


def entries_between(conn: Connection, feed_id: int, first: int, last: int) -> list[Entry]:
    rows = conn.execute(_BETWEEN, {"feed_id": feed_id, "first": first, "last": last})
    return [_entry_from(r) for r in rows]


def page_in(conn: Connection, feed_id: int, number: int) -> PageRecord | None:
    row = conn.execute(_PAGE, {"feed_id": feed_id, "n": number}).first()
    return None if row is None else _page_from(row)


# -- the direct connections -------------------------------------------------------------------

#: Direct connections per process (:class:`DirectConnections`). Requests borrow one for a
#: lookup or a one-round-trip append. A lookup takes microseconds on SQLite and one round trip
#: on PostgreSQL. So a few serve the hundreds of threads of a uWSGI worker. The database sees a
#: bounded number per process, whatever the thread count. It is this, the engine's pool and
#: one listener.
DIRECT_CONNECTIONS = 4
#: A request that finds every direct connection busy for this long is answered 503.
DIRECT_WAIT_S = 10.0


class DirectConnections:
    """A small pool of DB-API connections for single statements with nothing around them.

    They have the engine's connect-time settings but live outside SQLAlchemy's pool. There are
    at most ``size`` per process. A request borrows one at a time (:meth:`use`), the most
    recently returned first.

    A connection opened before a fork is the parent's, and the child never uses it. Else two
    processes would share one socket or SQLite handle. The first use in a new process forgets
    them.
    """

    def __init__(self, engine: Engine, autocommit: bool, size: int = DIRECT_CONNECTIONS) -> None:
        self.engine = engine
        self.autocommit = autocommit
        self.size = size
        self.compiled: dict[Select[Any], tuple[str, tuple[str, ...] | None]] = {}
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()
        self.available = threading.Condition()
        self.idle: list[Any] = []
        self.open: list[Any] = []
        #: Counts the calls of :meth:`close`. A connection opened across one is closed at the
        #: end of its block, because the closed pool no longer has its place.
        self.closings = 0

    def open_one(self) -> Any:
        """A connection of the same kind, outside this pool, for the caller alone to close."""
        fairy = self.engine.raw_connection()  # Connect-time settings applied.
        conn = fairy.driver_connection
        fairy.detach()
        if self.autocommit:
            conn.autocommit = True  # type: ignore[union-attr]
        return conn

    def _take(self) -> tuple[Any, int]:
        """An idle connection, or None if one may be opened, and :attr:`closings` then.

        Waits while all are busy.
        """
        with self.available:
            if self.pid != os.getpid():
                self._reset()
            ready = self.available.wait_for(
                lambda: self.idle or len(self.open) < self.size, DIRECT_WAIT_S
            )
            if not ready:
                raise StoreUnavailable(
                    f"all {self.size} direct database connections of this process stayed busy"
                    f" for {DIRECT_WAIT_S:.0f} s"
                )
            if self.idle:
                return self.idle.pop(), self.closings
            self.open.append(None)  # A place taken while the connection opens.
            return None, self.closings

    @contextmanager
    def use(self) -> Iterator[Any]:
        """A connection for this block.

        An error in the block closes it, and the next use opens another. So nothing is left
        open on a connection between uses.
        """
        mine, closings = self._take()
        if mine is None:
            try:
                mine = self.open_one()
            except BaseException:
                self._forget(None)
                raise
            with self.available:
                if closings == self.closings:
                    self.open[self.open.index(None)] = mine
        try:
            yield mine
        except BaseException:
            self._forget(mine)
            with contextlib.suppress(Exception):
                mine.close()
            raise
        with self.available:
            if closings == self.closings:
                self.idle.append(mine)
                self.available.notify()
                return
        with contextlib.suppress(Exception):
            mine.close()

    def _forget(self, conn: Any) -> None:
        with self.available:
            with contextlib.suppress(ValueError):
                self.open.remove(conn)
            self.available.notify()

    def sql(self, stmt: Select[Any]) -> tuple[str, tuple[str, ...] | None]:
        """``stmt`` compiled once for the engine, and its parameters' order if positional."""
        found = self.compiled.get(stmt)
        if found is None:
            compiled: Any = stmt.compile(dialect=self.engine.dialect)
            order = tuple(compiled.positiontup or ()) if self.engine.dialect.positional else None
            found = self.compiled[stmt] = (str(compiled), order)
        return found

    def close(self) -> None:
        """Close every connection. One being opened now is closed at the end of its block."""
        with self.available:
            pending = [c for c in self.open if c is not None]
            self.idle, self.open = [], []
            self.closings += 1
        for conn in pending:
            with contextlib.suppress(Exception):
                conn.close()


# -- the store --------------------------------------------------------------------------------


class SqlStore(Store):
    """:class:`~simplefeed.store.interface.Store` over SQLAlchemy Core.

    It does all but what a backend does its own way. That is its engine, the fast head lookup
    and appending.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.database_file = self.local_file(url)
        self.engine = self.make_engine(url)
        self.connections = DirectConnections(self.engine, autocommit=self.autocommit_direct)

    #: Whether the direct connections are switched to autocommit at the driver.
    autocommit_direct = False

    @staticmethod
    @abstractmethod
    def make_engine(url: str) -> Engine:
        """The process's engine and pool for ``url``, with the backend's settings."""

    # -- what a backend knows of its URLs and files --------------------------------------

    #: The backend's name as messages say it, and the form of its URLs.
    title: str
    url_form: str

    @staticmethod
    @abstractmethod
    def takes(url: str) -> bool:
        """Whether ``url`` names a database of this backend."""

    @staticmethod
    def url_problem(url: str) -> str | None:
        """Why this backend cannot open ``url``, a URL it takes, or None."""
        return None

    @staticmethod
    def local_file(url: str) -> Path | None:
        """The database's file, absolute, if the backend keeps it in a file on this machine."""
        return None

    @staticmethod
    def check_file(url: str, *, must_exist: bool) -> None:
        """Raise :class:`~simplefeed.errors.DatabaseNotReady` for a file the service must not use.

        Backends without a file have nothing to check.
        """

    @staticmethod
    def make_file(url: str) -> None:
        """Make the database's file, if the backend keeps one, before a migration fills it."""

    # -- transactions (the backends' and the tests' own) --------------------------------

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with translated, self.engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def read_one(self) -> Iterator[Connection]:
        """A connection for a single read statement, which needs no transaction to be consistent."""
        with self.read() as conn:
            yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        with translated, self.engine.connect() as conn:
            conn = conn.execution_options(simplefeed_write=True)
            with conn.begin():
                yield conn

    def lookup(self, stmt: Select[Any], params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The first row of one read statement, as a mapping, or None.

        It runs on a direct connection (:class:`DirectConnections`), with the statement
        compiled once. There is no SQLAlchemy checkout, no transaction and no result object
        around it. That takes about 5 us instead of 70 on SQLite, and one round trip on
        PostgreSQL. Nothing is cached, so every call reads the latest committed state. On any
        error the connection is closed and the statement runs the ordinary way.
        """
        sql, order = self.connections.sql(stmt)
        bound: Any = tuple(params[name] for name in order) if order is not None else params
        try:
            with self.connections.use() as mine:
                cursor = mine.cursor()
                try:
                    cursor.execute(sql, bound)
                    row = cursor.fetchone()
                    names = [d[0] for d in cursor.description or ()]
                finally:
                    cursor.close()
        except StoreUnavailable:
            raise
        except Exception:
            log.warning("direct lookup failed; using the pool", exc_info=True)
            with self.read_one() as conn:
                result = conn.execute(stmt, dict(params)).first()
            return None if result is None else dict(result._mapping)
        return None if row is None else dict(zip(names, row, strict=True))

    # -- feeds ---------------------------------------------------------------------------

    def create_feed(self, *, name: str, title: str, page_size: int, uuid: str, now_us: int) -> Feed:
        with self.write() as conn:
            try:
                with conn.begin_nested():
                    conn.execute(
                        feeds.insert().values(
                            name=name,
                            uuid=uuid,
                            title=title,
                            page_size=page_size,
                            created_us=now_us,
                            head_seq=0,
                            head_updated_us=None,
                            modified_us=now_us,
                        )
                    )
            except IntegrityError:
                raise FeedExists(name) from None
            return self._feed(conn, name)

    @staticmethod
    def _feed(conn: Connection, name: str) -> Feed:
        row = conn.execute(FEED_BY_NAME, {"name": name}).first()
        if row is None:
            raise FeedNotFound(name)
        return feed_from(row._mapping)

    def feed(self, name: str) -> Feed:
        with self.read_one() as conn:
            return self._feed(conn, name)

    def feed_head(self, name: str) -> Feed:
        row = self.lookup(FEED_BY_NAME, {"name": name})
        if row is None:
            raise FeedNotFound(name)
        return feed_from(row)

    def feeds(self) -> list[Feed]:
        with self.read_one() as conn:
            return [feed_from(r._mapping) for r in conn.execute(select(feeds).order_by(feeds.c.id))]

    def set_retired(self, name: str, retired_us: int | None) -> Feed:
        with self.write() as conn:
            conn.execute(update(feeds).where(feeds.c.name == name).values(retired_us=retired_us))
            return self._feed(conn, name)

    @contextmanager
    def rebase(self, feed: str, base_url: str) -> Iterator[Rebasing]:
        with self.write() as conn:
            self.lock_appends(conn, feed)
            row = conn.execute(LOCK_FEED, {"name": feed}).first()
            if row is None:
                raise FeedNotFound(feed)
            locked = feed_from(row._mapping)
            yield SqlRebasing(conn, locked)
            conn.execute(update(feeds).where(feeds.c.id == locked.id).values(base_url=base_url))

    def lock_appends(self, conn: Connection, feed: str) -> None:
        """Hold off the feed's appenders until ``conn``'s transaction ends.

        There is nothing to do where a write transaction excludes every other writer, as on
        SQLite.
        """

    # -- producer tokens -----------------------------------------------------------------

    def create_token(
        self, *, secret_hash: str, feed: str | None, label: str | None, now_us: int
    ) -> int:
        with self.write() as conn:
            feed_id = self._feed(conn, feed).id if feed is not None else None
            result = conn.execute(
                tokens.insert().values(
                    secret_hash=secret_hash, feed_id=feed_id, label=label, created_us=now_us
                )
            )
        key = result.inserted_primary_key
        assert key is not None
        token_id: int = key[0]
        return token_id

    def token(self, token_id: int) -> TokenRecord | None:
        row = self.lookup(_TOKEN, {"token_id": token_id})
        return None if row is None else _token_from(row)

    def tokens(self) -> list[TokenRecord]:
        with self.read_one() as conn:
            return [_token_from(r._mapping) for r in conn.execute(_TOKENS.order_by(tokens.c.id))]

    def revoke_token(self, token_id: int, now_us: int) -> bool:
        return self._update_live_token(token_id, revoked_us=now_us)

    def rotate_token(self, token_id: int, secret_hash: str) -> bool:
        return self._update_live_token(token_id, secret_hash=secret_hash)

    def _update_live_token(self, token_id: int, **values: object) -> bool:
        """Set ``values`` on the token if it exists and is not revoked, and say whether it did."""
        with self.write() as conn:
            result = conn.execute(
                update(tokens)
                .where(tokens.c.id == token_id, tokens.c.revoked_us.is_(None))
                .values(**values)
            )
        return result.rowcount == 1

    # -- entries and pages ---------------------------------------------------------------

    def entries_between(self, feed_id: int, first: int, last: int) -> list[Entry]:
        with self.read_one() as conn:
            return entries_between(conn, feed_id, first, last)

    def find_entries(self, feed_id: int, entry_ids: Iterable[str]) -> dict[str, StoredEntry]:
        with self.read() as conn:
            return find_entries(conn, feed_id, entry_ids)

    def page(self, feed_id: int, number: int) -> PageRecord | None:
        with self.read_one() as conn:
            return page_in(conn, feed_id, number)

    def iter_pages(self, feed_id: int, chunk: int = 1000) -> Iterator[PageRecord]:
        """Every archived page of a feed in order, ``chunk`` at a time.

        A feed of millions of entries has thousands of pages, read in few round trips.
        """
        after = 0
        while True:
            with self.read_one() as conn:
                rows = conn.execute(
                    _PAGES_AFTER, {"feed_id": feed_id, "after": after, "n": chunk}
                ).all()
            for row in rows:
                yield _page_from(row)
            if len(rows) < chunk:
                return
            after = rows[-1]._mapping["number"]

    # -- the database itself -------------------------------------------------------------

    def ping(self) -> None:
        with self.read_one() as conn:
            conn.exec_driver_sql("SELECT 1")

    def close(self) -> None:
        self.connections.close()
        self.engine.dispose()

"""Entries: appending under the feed lock, and reading ranges of sequence numbers."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ARRAY, Connection, Row, String, any_, bindparam, select
from sqlalchemy.exc import DBAPIError

from simplefeed.errors import FeedNotFound
from simplefeed.model import Entry, Event, Feed, FrozenPage
from simplefeed.store.feeds import ADVANCE as _ADVANCE
from simplefeed.store.feeds import LOCK as _LOCK
from simplefeed.store.feeds import feed_from, lock_feed
from simplefeed.store.pages import INSERT as _INSERT_PAGE
from simplefeed.store.tables import entries, feeds

# Built once: SQLAlchemy then reuses the compiled form without rebuilding it per call.
_FIND = select(entries.c.entry_id, entries.c.seq, entries.c.fingerprint).where(
    entries.c.feed_id == bindparam("feed_id"),
    entries.c.entry_id.in_(bindparam("ids", expanding=True)),
)
# PostgreSQL only (ANY of an array): the feed by name, so it can go in the same pipeline as the
# lock, before the feed's id is known.
_FIND_BY_NAME = select(entries.c.entry_id, entries.c.seq, entries.c.fingerprint).where(
    entries.c.feed_id
    == select(feeds.c.id).where(feeds.c.name == bindparam("name")).scalar_subquery(),
    entries.c.entry_id == any_(bindparam("ids", type_=ARRAY(String))),
)
_INSERT_COLUMNS = (
    "feed_id",
    "seq",
    "entry_id",
    "updated_us",
    "published_us",
    "fingerprint",
    "data",
)
_COMPILED: dict[tuple[str, str], tuple[str, tuple[str, ...] | None]] = {}


def _compiled(conn: Connection, which: str) -> str:
    """A statement of the append compiled once for the connection's dialect, to be handed
    straight to the driver (named parameters on psycopg, ``?`` on SQLite)."""
    return _compile(conn, which)[0]


def _compile(conn: Connection, which: str) -> tuple[str, tuple[str, ...] | None]:
    key = (conn.dialect.name, which)
    found = _COMPILED.get(key)
    if found is None:
        if which == "entries":
            stmt: Any = entries.insert().values({c: bindparam(c) for c in _INSERT_COLUMNS})
        elif which == "head":
            stmt = _ADVANCE
        elif which == "lock":
            stmt = _LOCK
        elif which == "find":
            stmt = _FIND_BY_NAME
        else:
            stmt = _INSERT_PAGE
        compiled = stmt.compile(dialect=conn.dialect)
        order = tuple(compiled.positiontup or ()) if conn.dialect.positional else None
        if which == "entries" and order is not None:
            assert order == _INSERT_COLUMNS, order
        found = _COMPILED[key] = (str(compiled), order)
    return found


def _sqlite(conn: Connection, which: str, params: Mapping[str, Any]) -> Any:
    """Run a statement of the append on SQLite's own connection (inside the caller's
    transaction): a few microseconds instead of SQLAlchemy's tens, and this runs under the
    database's write lock, which every writer waits for."""
    sql, order = _compile(conn, which)
    assert order is not None
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, tuple(params[name] for name in order))
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, None, exc, sqlite3.Error, dialect=conn.dialect) from exc
    return cursor


_BETWEEN = (
    select(entries)
    .where(
        entries.c.feed_id == bindparam("feed_id"),
        entries.c.seq >= bindparam("first"),
        entries.c.seq <= bindparam("last"),
    )
    .order_by(entries.c.seq.desc())
)


@dataclass(frozen=True)
class Existing:
    entry_id: str
    seq: int
    fingerprint: str


@dataclass(frozen=True)
class NewEntry:
    entry: Entry
    fingerprint: str
    #: The event as stored (``Event.to_json`` as compact JSON); computed here when not given,
    #: so callers can prepare it before they take the feed lock.
    data: str | None = None


def event_data(event: Event) -> str:
    """The ``data`` column for an event: its normalised JSON, compact."""
    return event.stored_json()


def find_entries(conn: Connection, feed_id: int, entry_ids: Iterable[str]) -> dict[str, Existing]:
    ids = list(set(entry_ids))
    found: dict[str, Existing] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        rows = conn.execute(_FIND, {"feed_id": feed_id, "ids": chunk})
        for entry_id, seq, fingerprint in rows:
            found[entry_id] = Existing(entry_id, seq, fingerprint)
    return found


def lock_feed_and_find(
    conn: Connection, name: str, entry_ids: Iterable[str]
) -> tuple[Feed, dict[str, Existing]]:
    """:func:`~simplefeed.store.feeds.lock_feed`, then :func:`find_entries` for ``entry_ids``.

    On PostgreSQL the transaction's ``BEGIN``, the lock and the lookup go in one round trip
    (psycopg's pipeline mode) instead of three. The lookup still runs after the lock is
    granted, so (READ COMMITTED: a snapshot per statement) it sees every entry committed by the
    appenders before; a lookup before the lock could miss a replay committed meanwhile.
    """
    ids = sorted(set(entry_ids))
    driver: Any = conn.connection.driver_connection
    if conn.dialect.name == "sqlite":
        cursor = _sqlite(conn, "lock", {"name": name})
        row = cursor.fetchone()
        names = [d[0] for d in cursor.description or ()]
        cursor.close()
        if row is None:
            raise FeedNotFound(name)
        feed = feed_from(dict(zip(names, row, strict=True)))
        return feed, find_entries(conn, feed.id, ids) if ids else {}
    if conn.dialect.name != "postgresql" or not _pipeline_supported(driver):
        feed = lock_feed(conn, name)
        return feed, find_entries(conn, feed.id, ids) if ids else {}
    try:
        with driver.pipeline(), driver.cursor() as lock, driver.cursor() as find:
            lock.execute(_compiled(conn, "lock"), {"name": name})
            if ids:
                find.execute(_compiled(conn, "find"), {"name": name, "ids": ids})
            row = lock.fetchone()
            names = [d[0] for d in lock.description or ()]
            found = find.fetchall() if ids else []
    except conn.dialect.loaded_dbapi.Error as exc:
        raise DBAPIError.instance(
            None, None, exc, conn.dialect.loaded_dbapi.Error, dialect=conn.dialect
        ) from exc
    if row is None:
        raise FeedNotFound(name)
    feed = feed_from(dict(zip(names, row, strict=True)))
    return feed, {i: Existing(i, seq, fp) for i, seq, fp in found}


def append_entries(
    conn: Connection,
    feed: Feed,
    new: Sequence[NewEntry],
    *,
    modified_us: int,
    pages: Sequence[FrozenPage] = (),
) -> None:
    """Insert entries whose sequence numbers continue ``feed.head_seq``, move the head, and
    store the pages they filled (rendered by the caller), all in the caller's transaction.

    The caller holds the feed lock (:func:`simplefeed.store.feeds.lock_feed`) and has numbered
    the entries ``head_seq + 1 ...``; the primary key (feed_id, seq) and the unique
    (feed_id, entry_id) make a duplicate impossible even if that contract were broken, and the
    primary key of ``pages`` a second freeze.

    On PostgreSQL the statements go in one round trip (psycopg's pipeline mode): every round
    trip here is spent holding the feed lock, which every appender of the feed waits for.
    """
    if not new:
        return
    expected = feed.head_seq + 1
    for n in new:
        if n.entry.seq != expected:
            raise AssertionError(f"sequence {n.entry.seq} appended where {expected} was due")
        expected += 1
    rows = [
        (
            feed.id,
            n.entry.seq,
            n.entry.id,
            n.entry.updated_us,
            n.entry.published_us,
            n.fingerprint,
            n.data if n.data is not None else event_data(n.entry.event),
        )
        for n in new
    ]
    last = new[-1].entry
    head = {
        "feed_id": feed.id,
        "new_head_seq": last.seq,
        "new_head_updated_us": last.updated_us,
        "new_modified_us": modified_us,
    }
    size = feed.page_size
    page_rows = [
        {
            "feed_id": page.feed_id,
            "number": page.number,
            "first_seq": (page.number - 1) * size + 1,
            "last_seq": page.number * size,
            "frozen_us": page.frozen_us,
            "etag": page.etag,
            "body": page.body,
        }
        for page in pages
    ]
    if conn.dialect.name == "postgresql":
        _append_pipelined(conn, rows, head, page_rows)
        return
    if conn.dialect.name == "sqlite":
        # Straight to the driver: SQLAlchemy's per-statement and per-row costs were most of
        # the time spent under the write lock.
        sql = _compiled(conn, "entries")
        try:
            conn.connection.driver_connection.executemany(sql, rows)  # type: ignore[union-attr]
        except sqlite3.Error as exc:
            raise DBAPIError.instance(sql, None, exc, sqlite3.Error, dialect=conn.dialect) from exc
        _sqlite(conn, "head", head).close()
        for page_row in page_rows:
            _sqlite(conn, "page", page_row).close()
        return
    conn.exec_driver_sql(  # pragma: no cover - another dialect
        _compiled(conn, "entries"), [dict(zip(_INSERT_COLUMNS, r, strict=True)) for r in rows]
    )
    conn.execute(_ADVANCE, head)  # pragma: no cover
    for page_row in page_rows:  # pragma: no cover
        conn.execute(_INSERT_PAGE, page_row)


def _pipeline_supported(driver: Any) -> bool:
    """psycopg's pipeline mode needs libpq 14 or later (psycopg[binary] bundles a newer one)."""
    supported: bool = type(driver).__module__.startswith("psycopg") and bool(
        getattr(sys.modules.get("psycopg"), "Pipeline", None)
        and sys.modules["psycopg"].Pipeline.is_supported()
    )
    return supported


def _append_pipelined(
    conn: Connection,
    rows: Sequence[tuple[object, ...]],
    head: Mapping[str, object],
    page_rows: Sequence[Mapping[str, object]],
) -> None:
    """The writes of an append on psycopg, sent together and synchronised once."""
    driver: Any = conn.connection.driver_connection
    named = [dict(zip(_INSERT_COLUMNS, r, strict=True)) for r in rows]
    pipeline = driver.pipeline() if _pipeline_supported(driver) else contextlib.nullcontext()
    try:
        with pipeline, driver.cursor() as cursor:
            cursor.executemany(_compiled(conn, "entries"), named)
            cursor.execute(_compiled(conn, "head"), head)
            for page_row in page_rows:
                cursor.execute(_compiled(conn, "page"), page_row)
    except conn.dialect.loaded_dbapi.Error as exc:
        # As SQLAlchemy would have raised it (IntegrityError for a duplicate, ...).
        raise DBAPIError.instance(
            None, None, exc, conn.dialect.loaded_dbapi.Error, dialect=conn.dialect
        ) from exc


def _entry(row: Row[tuple[object, ...]]) -> Entry:
    m = row._mapping
    entry_id = m["entry_id"]
    return Entry(
        seq=m["seq"],
        id=entry_id,
        updated_us=m["updated_us"],
        published_us=m["published_us"],
        event=Event.from_json(json.loads(m["data"]), entry_id),
    )


def entries_between(conn: Connection, feed_id: int, first: int, last: int) -> list[Entry]:
    """Entries with ``first <= seq <= last``, newest first (document order)."""
    rows = conn.execute(_BETWEEN, {"feed_id": feed_id, "first": first, "last": last})
    return [_entry(r) for r in rows]

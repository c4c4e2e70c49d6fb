"""Entries: appending under the feed lock, and reading ranges of sequence numbers."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ARRAY, Connection, Row, String, any_, bindparam, select
from sqlalchemy.exc import DBAPIError

from simplefeed.errors import FeedNotFound
from simplefeed.model import Entry, Event, Feed, FrozenPage
from simplefeed.store.db import (
    FLUSH_MARK,
    as_sqlalchemy_errors,
    owns_transaction,
    pipeline_supported,
)
from simplefeed.store.feeds import ADVANCE as _ADVANCE
from simplefeed.store.feeds import ADVISORY_LOCK as _ADVISORY_LOCK
from simplefeed.store.feeds import ADVISORY_LOCK_SPACE, feed_from, lock_feed
from simplefeed.store.feeds import LOCK as _LOCK
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
_BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED"
_COMMIT = "COMMIT"
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
        elif which == "advisory":
            stmt = _ADVISORY_LOCK
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

    On PostgreSQL the lock and the lookup go in one round trip (psycopg's pipeline mode), with
    the transaction's ``BEGIN`` when the connection comes from
    :meth:`~simplefeed.store.db.Database.append`. The lookup still runs after the lock is
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
    if conn.dialect.name != "postgresql" or not pipeline_supported(driver):
        feed = lock_feed(conn, name)
        return feed, find_entries(conn, feed.id, ids) if ids else {}
    # Results are fetched after the pipeline's single Sync: fetching inside the block would
    # flush and wait, and the Sync at its end would then cost one more round trip.
    begin, advisory, lock, find = cursors = [driver.cursor() for _ in range(4)]
    try:
        with as_sqlalchemy_errors(conn.dialect):
            with driver.pipeline():
                if owns_transaction(conn):
                    begin.execute(_BEGIN, prepare=False)
                advisory.execute(_compiled(conn, "advisory"), {"name": name})
                lock.execute(_compiled(conn, "lock"), {"name": name})
                if ids:
                    find.execute(_compiled(conn, "find"), {"name": name, "ids": ids})
            row = lock.fetchone()
            names = [d[0] for d in lock.description or ()]
            found = find.fetchall() if ids else []
    finally:
        for cursor in cursors:
            cursor.close()
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


def _append_pipelined(
    conn: Connection,
    rows: Sequence[tuple[object, ...]],
    head: Mapping[str, object],
    page_rows: Sequence[Mapping[str, object]],
) -> None:
    """The writes of an append on psycopg, sent together and synchronised once; with the
    ``COMMIT`` when the store owns the transaction (:meth:`~simplefeed.store.db.Database.append`),
    so the feed's lock is released one round trip after it was granted."""
    driver: Any = conn.connection.driver_connection
    named = [dict(zip(_INSERT_COLUMNS, r, strict=True)) for r in rows]
    pipelined = pipeline_supported(driver)
    pipeline = driver.pipeline() if pipelined else contextlib.nullcontext()
    with as_sqlalchemy_errors(conn.dialect), pipeline, driver.cursor() as cursor:
        cursor.executemany(_compiled(conn, "entries"), named)
        cursor.execute(_compiled(conn, "head"), head)
        for page_row in page_rows:
            cursor.execute(_compiled(conn, "page"), page_row)
        if pipelined and owns_transaction(conn):
            cursor.execute(_COMMIT, prepare=False)


@dataclass(frozen=True)
class Pending:
    """An event to append in one round trip: its id (the producer's or a fresh one), the time
    it happened, and what is stored of it."""

    entry_id: str
    published_us: int
    fingerprint: str
    data: str


# One round trip, and no client between the feed's lock (its advisory lock, see
# simplefeed.store.feeds.ADVISORY_LOCK_SPACE) and the commit (PostgreSQL). The two statements
# go in one pipeline on an autocommit connection, so the server runs them as one implicit
# transaction, committed at the pipeline's first Sync (no BEGIN or COMMIT to send or run).
# Under READ COMMITTED (the session default, see simplefeed.store.db.make_engine) each statement
# takes a new snapshot when the one before it has finished, so the statement after the lock
# sees every entry the feed's previous appenders committed. It inserts only when the events stay
# within the working page (a page to freeze needs the client to render it) and none of their ids
# is in the feed (a replay or a conflict needs the client to answer); otherwise it writes
# nothing, the head does not move, and the caller appends the ordinary way. Only the feeds row
# (by primary key) and the unique index on (feed_id, entry_id) are read.
#
# That transaction commits without waiting for its WAL to reach the disk (synchronous_commit off
# for it alone): it becomes visible and releases the feed's lock at once, so the feed's appends
# no longer queue behind one another's WAL flushes (about 0.4 ms each under load, most of the
# time the lock was held). Their order is unchanged: an append is visible before the next one is
# numbered. Durability comes from the flush barrier in the same pipeline, after the Sync: a
# write committed in its own transaction with the session's synchronous_commit
# (simplefeed.store.db.FLUSH_MARK), which returns once the WAL up to its own commit record, so
# also the append's, is on disk; the appends of every process share those flushes, as
# independent commits do. Nothing is acknowledged before its barrier has returned; a server
# crash can lose only a suffix of such appends, none acknowledged, and readers do not expose
# them before that either (Database.flush_barrier's callers).
#
# `updated` follows Simplefeed.publish's rule, u_i = max(p_i, u_(i-1) + 1) with u_0 the feed's
# head_updated_us, in closed form: u_i = i + max(u_0, m_i), m_i = max over j <= i of (p_j - j),
# the m_i computed by the client (for one event: max(u_0 + 1, p_1)).
#
# With a producer token, the append also requires it to be live and allowed on the feed (a
# primary-key lookup in the same snapshot): the request's authorization costs no round trip of
# its own, and a revocation committed before the append is honoured by it.
_TOKEN_ALLOWS = """
      AND EXISTS (SELECT 1 FROM tokens AS tk
                  WHERE tk.id = %(token_id)s AND tk.secret_hash = %(secret_hash)s
                    AND tk.revoked_us IS NULL
                    AND (tk.feed_id IS NULL OR tk.feed_id = %(feed_id)s))"""
_ONE_TRIP_LOCK = (
    "SELECT pg_advisory_xact_lock(%(lock_space)s, %(feed_id)s),"
    " set_config('synchronous_commit', 'off', true)"
)
_ONE_TRIP_APPEND = """
WITH inserted AS (
    INSERT INTO entries (feed_id, seq, entry_id, updated_us, published_us, fingerprint, data)
    SELECT f.id, f.head_seq + t.ord, t.entry_id,
           t.ord + GREATEST(COALESCE(f.head_updated_us, %(minus_infinity)s), t.prefix_max),
           t.published_us, t.fingerprint, t.data
    FROM feeds AS f
    CROSS JOIN {events}
    WHERE f.id = %(feed_id)s AND f.name = %(name)s{token}
      AND (f.head_seq + %(n)s) / f.page_size = f.head_seq / f.page_size{not_stored}
    {on_conflict}RETURNING seq, updated_us
)
UPDATE feeds
SET head_seq = (SELECT max(seq) FROM inserted),
    head_updated_us = (SELECT max(updated_us) FROM inserted),
    modified_us = GREATEST(%(now_us)s, modified_us + 1)
WHERE id = %(feed_id)s AND EXISTS (SELECT 1 FROM inserted)
RETURNING head_seq
"""
# One event: plain parameters, and the unique index on (feed_id, entry_id) as the arbiter of
# ON CONFLICT DO NOTHING: an id already in the feed inserts nothing. (A NOT EXISTS lookup here
# would leave the choice of index to the planner, and on a table of a few rows the primary key,
# (feed_id, seq), costs the same: a connection whose cached generic plan took it then read
# every entry of the feed on every append, slower with each one, until the table was analysed;
# seen as runs of the publish benchmark that fell from 1,460 to 1,090 appends/s in 8 s.)
# Several: arrays, all or nothing (ON CONFLICT would insert the others), so NOT EXISTS with
# `= ANY`, which the unique index answers once the table has been analysed (before that a plan
# may scan the feed's index entries: slower, as correct).
_ONE_EVENT = dict(
    events="(SELECT %(entry_id)s::text AS entry_id, %(published)s::bigint AS published_us,"
    " %(prefix_max)s::bigint AS prefix_max, %(fingerprint)s::text AS fingerprint,"
    " %(data)s::text AS data, 1::bigint AS ord) AS t",
    not_stored="",
    on_conflict="ON CONFLICT ON CONSTRAINT uq_entries_feed_id_entry_id DO NOTHING\n    ",
)
_EVENTS = dict(
    events="unnest(%(entry_id)s::text[], %(published)s::bigint[], %(prefix_max)s::bigint[],"
    " %(fingerprint)s::text[], %(data)s::text[])"
    " WITH ORDINALITY AS t(entry_id, published_us, prefix_max, fingerprint, data, ord)",
    not_stored="""
      AND NOT EXISTS (SELECT 1 FROM entries AS e
                      WHERE e.feed_id = %(feed_id)s AND e.entry_id = ANY(%(entry_id)s::text[]))""",
    on_conflict="",
)
#: (lock, append) by (one event, with a token).
_ONE_TRIP_SQL = {
    (one, token): (
        _ONE_TRIP_LOCK,
        _ONE_TRIP_APPEND.format(
            token=_TOKEN_ALLOWS if token else "",
            **(_ONE_EVENT if one else _EVENTS),
        ),
    )
    for one in (True, False)
    for token in (True, False)
}
_MINUS_INFINITY = -(2**62)


@dataclass(frozen=True)
class TokenCheck:
    """A producer token to check in the append itself: its id and the SHA-256 of its secret."""

    token_id: int
    secret_hash: str


def append_in_one_round_trip(
    driver: Any,
    feed: Feed,
    events: Sequence[Pending],
    *,
    now_us: int,
    token: TokenCheck | None = None,
) -> int | None:
    """Append ``events`` to ``feed`` in one transaction sent as one pipeline: the feed's
    advisory lock, then the insert with the head, committed at the pipeline's Sync, then the
    flush barrier. Returns the new head, durable, or None when nothing was appended (the events
    would fill a page, an id is in the feed already, ``feed`` no longer names this feed row,
    or ``token`` is not a live token allowed on the feed): the caller then checks the token and
    appends the ordinary way.

    ``feed`` is only the feed's identity (id, name): its head is read under the lock.
    ``driver`` is psycopg's connection from :meth:`~simplefeed.store.db.Database.direct`
    (PostgreSQL, :attr:`~simplefeed.store.db.Database.one_round_trip`: autocommit, no
    transaction open); the ids in ``events`` are unique. The lock is held while the server
    runs one statement and commits, with no round trip to the client, which on a busy machine
    may not even be scheduled, and no WAL flush.
    """
    if not events:
        raise ValueError("nothing to append")
    prefix_max: list[int] = []
    best = _MINUS_INFINITY
    for position, event in enumerate(events, 1):
        best = max(best, event.published_us - position)
        prefix_max.append(best)
    params: dict[str, object] = {
        "lock_space": ADVISORY_LOCK_SPACE,
        "feed_id": feed.id,
        "name": feed.name,
        "n": len(events),
        "now_us": now_us,
        "minus_infinity": _MINUS_INFINITY,
    }
    if token is not None:
        params.update(token_id=token.token_id, secret_hash=token.secret_hash)
    lock_sql, append_sql = _ONE_TRIP_SQL[len(events) == 1, token is not None]
    if len(events) == 1:
        (one,) = events
        params.update(
            entry_id=one.entry_id,
            published=one.published_us,
            prefix_max=prefix_max[0],
            fingerprint=one.fingerprint,
            data=one.data,
        )
    else:
        params.update(
            entry_id=[e.entry_id for e in events],
            published=[e.published_us for e in events],
            prefix_max=prefix_max,
            fingerprint=[e.fingerprint for e in events],
            data=[e.data for e in events],
        )
    lock, append = driver.cursor(), driver.cursor()
    try:
        with driver.pipeline() as pipeline:
            lock.execute(lock_sql, params)
            append.execute(append_sql, params)
            pipeline.sync()  # the append commits here (asynchronously): the lock is free
            lock.execute(FLUSH_MARK, prepare=True)  # the flush barrier: its own transaction
        row = append.fetchone()
    finally:
        lock.close()
        append.close()
    return None if row is None else int(row[0])


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

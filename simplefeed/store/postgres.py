"""The PostgreSQL backend (psycopg 3 with pipeline mode): many processes and nodes, one feed
lock each, and as few round trips as possible on the append path.

Round trips are what a publish costs here (every one is spent holding the feed's lock or waiting
for it), so: the pool pings a connection only when it has been idle for a while
(:data:`PING_AFTER_IDLE_S`) instead of on every checkout; single-statement reads run in
autocommit; the lookups every request makes (the feed's head, the producer's token) run on a
direct autocommit connection outside the pool
(:class:`~simplefeed.store.sql.DirectConnections`); an append is two pipelines
(:meth:`PostgresStore.append`), or, most of the time, one (:func:`append_in_one_round_trip`).

Appenders of a feed queue for the feed's advisory lock (:data:`ADVISORY_LOCK_SPACE`), from
every process and node, and commit in the order they got their sequence numbers.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import (
    ARRAY,
    Connection,
    String,
    any_,
    bindparam,
    create_engine,
    event,
    func,
    literal_column,
    select,
)
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DisconnectionError

from simplefeed.errors import ConfigError, FeedNotFound, StoreError
from simplefeed.model import ArchivedPage, Entry, Feed, PendingEntry, StoredEntry
from simplefeed.store import sql
from simplefeed.store.interface import Appending, Pause, TokenCheck
from simplefeed.store.tables import entries, feeds

log = logging.getLogger(__name__)

#: A pooled connection idle for longer than this is pinged before use (a server restart or an
#: idle timeout on the way may have closed it); a connection in steady use is not.
PING_AFTER_IDLE_S = 1.0

#: The first key of the transaction-level advisory lock that serialises the appenders of a feed
#: (the second key is the feed's id): ``pg_advisory_xact_lock(ADVISORY_LOCK_SPACE, feeds.id)``.
#: Taken before the feed's row is read or written. Appenders wait for it in a queue and are
#: woken one at a time; waiting on the row lock instead, every waiter woke at each commit to
#: fight for the row again, which halved throughput on a busy machine (and grew the feeds
#: table, one row, to 21 pages of dead versions in ten seconds). An application sharing the
#: database must not take advisory locks in this space ("SFd0").
ADVISORY_LOCK_SPACE = int.from_bytes(b"SFd0", "big")

#: The write whose synchronous commit is :meth:`PostgresStore.flush_barrier`: one row per
#: server backend (no two sessions contend for it), updated in place.
FLUSH_MARK = (
    "INSERT INTO flush_marks (backend_pid, n) VALUES (pg_backend_pid(), 1)"
    " ON CONFLICT (backend_pid) DO UPDATE SET n = flush_marks.n + 1"
)

#: The channel of the notifications an append sends in its own transaction (payload: the
#: feed's id), so PostgreSQL delivers them when it commits, to every process of every node
#: that listens (:meth:`PostgresStore.watch`): what wakes the requests waiting for a change
#: (``Prefer: wait``). A woken request shows the new head only through a live document, which
#: passes the flush barrier first (``Simplefeed.live_body``): nothing is shown before it is
#: durable, although the notification comes at the (asynchronous) commit.
CHANGES_CHANNEL = "simplefeed_changes"
_NOTIFY = f"SELECT pg_notify('{CHANGES_CHANNEL}', %(feed_id)s::text)"
_LISTEN = f"LISTEN {CHANGES_CHANNEL}"

_DIALECT = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]


def _compiled(stmt: Any) -> str:
    """A statement compiled once, for psycopg (named ``%(name)s`` parameters)."""
    return str(stmt.compile(dialect=_DIALECT))


_BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED"
_COMMIT = "COMMIT"
#: The appenders' lock, by the feed's name (so it goes in the same pipeline as the row).
_ADVISORY_LOCK_STMT = select(
    func.pg_advisory_xact_lock(
        literal_column(str(ADVISORY_LOCK_SPACE)),
        select(feeds.c.id).where(feeds.c.name == bindparam("name")).scalar_subquery(),
    )
)
_ADVISORY_LOCK = _compiled(_ADVISORY_LOCK_STMT)
_LOCK_FEED = _compiled(sql.LOCK_FEED)
#: The stored entries of some ids, by the feed's name (ANY of an array), so the lookup goes in
#: the same pipeline as the lock, before the feed's id is known.
_FIND_BY_NAME = _compiled(
    select(entries.c.entry_id, entries.c.seq, entries.c.fingerprint).where(
        entries.c.feed_id
        == select(feeds.c.id).where(feeds.c.name == bindparam("name")).scalar_subquery(),
        entries.c.entry_id == any_(bindparam("ids", type_=ARRAY(String))),
    )
)
_INSERT_ENTRY = _compiled(sql.INSERT_ENTRY)
_ADVANCE_HEAD = _compiled(sql.ADVANCE_HEAD)
_INSERT_PAGE = _compiled(sql.INSERT_PAGE)


# One round trip, and no client between the feed's lock (its advisory lock, see
# ADVISORY_LOCK_SPACE) and the commit (PostgreSQL). The two statements
# go in one pipeline on an autocommit connection, so the server runs them as one implicit
# transaction, committed at the pipeline's first Sync (no BEGIN or COMMIT to send or run).
# Under READ COMMITTED (the session default, see PostgresStore.make_engine) each statement
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
# (FLUSH_MARK), which returns once the WAL up to its own commit record, so
# also the append's, is on disk; the appends of every process share those flushes, as
# independent commits do. Nothing is acknowledged before its barrier has returned; a server
# crash can lose only a suffix of such appends, none acknowledged, and readers do not expose
# them before that either (PostgresStore.flush_barrier's callers).
#
# `updated` follows the append decision's rule (simplefeed.rules.appending),
# u_i = max(p_i, u_(i-1) + 1) with u_0 the feed's head_updated_us, in closed form:
# u_i = i + max(u_0, m_i), m_i = max over j <= i of (p_j - j), the m_i computed by the client
# (for one event: max(u_0 + 1, p_1)).
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
    WHERE f.id = %(feed_id)s AND f.name = %(name)s AND f.retired_us IS NULL{token}
      AND (f.head_seq + %(n)s) / f.page_size = f.head_seq / f.page_size{not_stored}
    {on_conflict}RETURNING seq, updated_us
)
UPDATE feeds
SET head_seq = (SELECT max(seq) FROM inserted),
    head_updated_us = (SELECT max(updated_us) FROM inserted),
    modified_us = GREATEST(%(now_us)s, modified_us + 1)
WHERE id = %(feed_id)s AND EXISTS (SELECT 1 FROM inserted)
RETURNING head_seq, pg_notify('{channel}', id::text)
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
            channel=CHANGES_CHANNEL,
            **(_ONE_EVENT if one else _EVENTS),
        ),
    )
    for one in (True, False)
    for token in (True, False)
}
_MINUS_INFINITY = -(2**62)


def append_in_one_round_trip(
    driver: Any,
    feed: Feed,
    events: Sequence[PendingEntry],
    *,
    now_us: int,
    token: TokenCheck | None = None,
) -> int | None:
    """Append ``events`` to ``feed`` in one transaction sent as one pipeline: the feed's
    advisory lock, then the insert with the head, committed at the pipeline's Sync, then the
    flush barrier. Returns the new head, durable, or None when nothing was appended (the events
    would fill a page, an id is in the feed already, ``feed`` no longer names this feed row
    or is retired, or ``token`` is not a live token allowed on the feed): the caller then
    checks the token and appends the ordinary way.

    ``feed`` is only the feed's identity (id, name): its head is read under the lock.
    ``driver`` is psycopg's connection from :meth:`PostgresStore.direct` (autocommit, no
    transaction open); the ids in ``events`` are unique. The lock is held while the server
    runs one statement and commits, with no round trip to the client, which on a busy machine
    may not even be scheduled, and no WAL flush.
    """
    if not events:
        raise ValueError("nothing to append")
    prefix_max: list[int] = []
    best = _MINUS_INFINITY
    for position, one in enumerate(events, 1):
        best = max(best, one.published_us - position)
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
            entry_id=one.id,
            published=one.published_us,
            prefix_max=prefix_max[0],
            fingerprint=one.fingerprint,
            data=one.data,
        )
    else:
        params.update(
            entry_id=[e.id for e in events],
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


class _PostgresAppending(sql.SqlAppending):
    def __init__(
        self, conn: Connection, driver: Any, feed: Feed, found: dict[str, StoredEntry]
    ) -> None:
        super().__init__(conn, feed, found)
        self.driver = driver

    def write(
        self,
        new: Sequence[tuple[Entry, PendingEntry]],
        *,
        modified_us: int,
        pages: Sequence[ArchivedPage] = (),
        base_url: str | None,
    ) -> None:
        """The writes sent together and synchronised once, with the ``COMMIT``: the feed's
        lock is released one round trip after the writes were sent."""
        if not new:
            return
        feed = self.feed
        rows = [
            {
                "feed_id": feed.id,
                "seq": e.seq,
                "entry_id": e.id,
                "updated_us": e.updated_us,
                "published_us": e.published_us,
                "fingerprint": p.fingerprint,
                "data": p.data,
            }
            for e, p in new
        ]
        with self.driver.pipeline(), self.driver.cursor() as cursor:
            cursor.executemany(_INSERT_ENTRY, rows)
            cursor.execute(_ADVANCE_HEAD, sql.head_row(feed, new[-1][0], modified_us, base_url))
            for page in pages:
                cursor.execute(_INSERT_PAGE, sql.page_row(page, feed.page_size))
            cursor.execute(_NOTIFY, {"feed_id": feed.id})
            cursor.execute(_COMMIT, prepare=False)


sql.translate_driver_errors(psycopg.Error)


class PostgresStore(sql.SqlStore):
    """:class:`~simplefeed.store.interface.Store` on a PostgreSQL database."""

    backend = "postgresql"
    title = "PostgreSQL"
    url_form = "postgresql+psycopg://..."
    one_round_trip = True
    # No transaction left open between statements: each read sees the latest commit.
    autocommit_direct = True

    @staticmethod
    def takes(url: str) -> bool:
        return sql.url_scheme(url) in ("postgresql", "postgres")

    @staticmethod
    def url_problem(url: str) -> str | None:
        if sql.url_scheme(url) == "postgres":
            return (
                "uses the scheme postgres://, which SQLAlchemy does not know: write postgresql://"
            )
        return None

    def __init__(self, url: str) -> None:
        if not psycopg.Pipeline.is_supported():
            raise ConfigError("PostgreSQL needs psycopg with libpq 14 or later (pipeline mode)")
        super().__init__(url)

    @staticmethod
    def make_engine(url: str) -> Engine:
        # psycopg 3 whatever driver the URL names (postgresql:// alone means psycopg2).
        sa_url = make_url(url).set(drivername="postgresql+psycopg")
        # READ COMMITTED whatever the server's default: appending relies on it (after waiting
        # for the feed's lock, the next statement takes a new snapshot, which sees the row and
        # the entries the previous appender committed); under REPEATABLE READ the snapshot
        # would be older than the lock, and the append would number from a stale head.
        # At most 8 pooled connections per process (with DirectConnections' 4 and the change
        # listener's one: 13), whatever the number of threads: 4 processes are 52 connections
        # per node, within PostgreSQL's default max_connections of 100 for a node.
        engine = create_engine(
            sa_url, pool_size=4, max_overflow=4, isolation_level="READ COMMITTED"
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # READ COMMITTED also for the transactions no BEGIN opens: the implicit transaction
            # of a pipeline on an autocommit connection (the one-round-trip append relies on a
            # new snapshot per statement) and single statements in autocommit.
            autocommit = dbapi_connection.autocommit
            dbapi_connection.autocommit = True
            try:
                dbapi_connection.execute("SET default_transaction_isolation = 'read committed'")
            finally:
                dbapi_connection.autocommit = autocommit

        # Pessimistic disconnect handling, but only for connections that sat idle in the pool:
        # pool_pre_ping would spend a round trip on every checkout; under load a connection
        # comes back to work within milliseconds, and a dead one is then found by the
        # statement itself (SQLAlchemy invalidates the pool on a disconnect error).
        @event.listens_for(engine, "checkin")
        def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
            record.info["simplefeed_idle_since"] = time.monotonic()

        @event.listens_for(engine, "checkout")
        def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
            since = record.info.get("simplefeed_idle_since")
            if since is None or time.monotonic() - since < PING_AFTER_IDLE_S:
                return
            try:
                engine.dialect.do_ping(dbapi_connection)
            except psycopg.Error as exc:
                # The pool replaces this connection and tries again.
                raise DisconnectionError(f"connection found dead after idling: {exc}") from exc

        return engine

    @contextmanager
    def read_one(self) -> Iterator[Connection]:
        """Autocommit: a single statement is one round trip instead of three."""
        with sql.translated, self.engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def direct(self) -> Iterator[Any]:
        """A direct psycopg connection (autocommit), outside the pool, for the
        statements a publish sends straight to the driver: no checkout, no isolation level set
        and reset: about 0.1 ms of CPU less per publish than a pooled connection (cProfile of
        the app in one process; 3,000 publishes).

        On an error the connection is closed (the next call opens a new one). Nothing is left
        open between calls: every use is whole implicit transactions.
        """
        with sql.translated, self.connections.use() as mine:
            yield mine

    @contextmanager
    def append(self, feed: str, look_up: Iterable[str]) -> Iterator[Appending]:
        """The feed's advisory lock, its row and the stored entries of ``look_up``, in one
        round trip; the writes and the ``COMMIT`` are another (:class:`_PostgresAppending`).

        psycopg would open the transaction with a ``BEGIN`` of its own and, in pipeline mode,
        wait for it: one round trip; the commit another. So the connection is in autocommit at
        the driver, and the append sends ``BEGIN`` in its first pipeline and ``COMMIT`` in its
        second: three round trips instead of six, one of them under the lock. The lookup runs
        after the lock is granted, so (READ COMMITTED: a snapshot per statement) it sees every
        entry committed by the appenders before. Leaving the block commits what is still open
        (an append of replays only) or, on an exception, rolls back; both are no-ops when the
        pipeline has committed.
        """
        ids = sorted(set(look_up))
        with sql.translated, self.engine.connect() as pooled:
            driver: Any = pooled.connection.driver_connection
            conn = pooled.execution_options(isolation_level="AUTOCOMMIT")
            try:
                # Results are fetched after the pipeline's single Sync: fetching inside the
                # block would flush and wait, and the Sync at its end cost one more round trip.
                begin, advisory, lock, find = cursors = [driver.cursor() for _ in range(4)]
                try:
                    with driver.pipeline():
                        begin.execute(_BEGIN, prepare=False)
                        advisory.execute(_ADVISORY_LOCK, {"name": feed})
                        lock.execute(_LOCK_FEED, {"name": feed})
                        if ids:
                            find.execute(_FIND_BY_NAME, {"name": feed, "ids": ids})
                    row = lock.fetchone()
                    names = [d[0] for d in lock.description or ()]
                    found = find.fetchall() if ids else []
                finally:
                    for cursor in cursors:
                        cursor.close()
                if row is None:
                    raise FeedNotFound(feed)
                locked = sql.feed_from(dict(zip(names, row, strict=True)))
                stored = {i: StoredEntry(i, seq, fp) for i, seq, fp in found}
                yield _PostgresAppending(conn, driver, locked, stored)
            except BaseException:
                with contextlib.suppress(Exception):
                    driver.rollback()  # ROLLBACK if a transaction is open
                raise
            driver.commit()  # COMMIT if a transaction is still open, else nothing

    def lock_appends(self, conn: Connection, feed: str) -> None:
        """The appenders' advisory lock (both append paths take it first)."""
        conn.execute(_ADVISORY_LOCK_STMT, {"name": feed})

    def append_in_one_round_trip(
        self,
        feed: Feed,
        pending: Sequence[PendingEntry],
        *,
        now_us: int,
        token: TokenCheck | None,
    ) -> int | None:
        with self.direct() as conn:
            return append_in_one_round_trip(conn, feed, pending, now_us=now_us, token=token)

    def flush_barrier(self) -> None:
        """Return once everything committed so far, by any session, is durable.

        Appends in one round trip commit without waiting for their WAL flush, so that the
        feed's next appender need not wait for it (see :func:`append_in_one_round_trip`).
        Whatever exposes what such a commit wrote calls this first: the append itself before
        it is acknowledged, a replay answered from the stored entry, a newly rendered live
        document. It commits a write (this backend's row of ``flush_marks``) with the
        session's own ``synchronous_commit``; that commit waits for the WAL up to its own
        record, which is after every commit already visible (and, with synchronous
        replication, for the standby as well).
        """
        try:
            with self.direct() as conn:
                conn.execute(FLUSH_MARK, prepare=True)
        except StoreError:
            # Most likely the direct connection died (a server restart, an idle timeout):
            # direct() dropped it, and the barrier is idempotent. A second failure is real.
            log.info("flush barrier failed; once more on a new connection", exc_info=True)
            with self.direct() as conn:
                conn.execute(FLUSH_MARK, prepare=True)

    def watch(self, changed: Callable[[], None], stop: Pause) -> None:
        """``LISTEN`` on a connection of its own: the appends of every process and node notify
        :data:`CHANGES_CHANNEL` in their transaction. A connection that fails is closed and
        another opened a second later (and ``changed`` called: notifications sent meanwhile
        were missed)."""
        while not stop.is_set():
            conn = None
            try:
                conn = self.connections.open_one()
                conn.execute(_LISTEN)
                changed()  # whatever happened before we listened
                while not stop.is_set():
                    for _ in conn.notifies(timeout=1.0):
                        changed()
            except Exception:
                log.warning("listening for changes failed", exc_info=True)
                stop.wait(1.0)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()

    def problems(self) -> list[str]:
        with self.read_one() as conn:
            recovery, read_only = conn.exec_driver_sql(
                "SELECT pg_is_in_recovery(), current_setting('transaction_read_only')"
            ).one()
        if recovery:
            return ["the database is read-only: the server is a standby (in recovery)"]
        if read_only == "on":
            return ["the database is read-only (default_transaction_read_only)"]
        return []

    def analyze_entries_once(self) -> bool:
        """``ANALYZE entries`` if it never has been; True if it ran.

        Until then the planner knows nothing of the table, and on a table of a few rows a
        lookup by (feed, entry id) costs the same through the primary key (feed, seq) as
        through the unique index; a connection that caches such a plan reads every entry of
        the feed on every lookup, a little slower with each append, until autovacuum analyses
        the table (a minute or more). Called when a feed's first page freezes, so statistics
        exist from then on, and every cached plan is made again with them.
        """
        with self.direct() as conn:
            (tuples,) = conn.execute(
                "SELECT reltuples FROM pg_class WHERE oid = 'entries'::regclass"
            ).fetchone()
            if tuples >= 0:
                return False
            conn.execute("ANALYZE entries")  # a warning, not an error, if we may not
        return True

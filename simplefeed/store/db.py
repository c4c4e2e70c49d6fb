"""Engine and transactions. One :class:`Database` (one engine, one pool) per process.

Transactions are owned by the caller::

    with db.write() as conn:   # appenders serialise here (see below)
        ...
    with db.read() as conn:
        ...

SQLite runs in WAL mode, so readers never wait for the writer. A write transaction starts with
``BEGIN IMMEDIATE``: it takes the write lock up front (waiting up to the busy timeout) instead of
failing with SQLITE_BUSY when it upgrades a read lock half-way through. ``synchronous=FULL``
makes every acknowledged commit durable against power loss, not only against a process crash.
A writer waiting for the write lock retries every few hundred microseconds
(:func:`_begin_immediate`) rather than in SQLite's busy handler, whose sleeps grow to 100 ms.

On PostgreSQL the append path takes the feed's advisory lock instead
(:data:`simplefeed.store.feeds.ADVISORY_LOCK_SPACE`), and most appends are a single pipeline
(:func:`simplefeed.store.entries.append_in_one_round_trip`).

Round trips are what a publish costs on PostgreSQL (every one is spent holding the feed lock or
waiting for it), so the pool pings a connection only when it has been idle for a while
(:data:`PING_AFTER_IDLE_S`) instead of on every checkout, single-statement reads
(:meth:`Database.read_one`) run in autocommit (no ``BEGIN``/``COMMIT`` round trips), and a
publish's token lookup, when it is not part of the append itself, runs on a per-thread
autocommit DB-API connection (:meth:`Database.lookup`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Select, create_engine, event
from sqlalchemy.engine import Dialect, Engine, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from simplefeed.errors import StoreError, StoreUnavailable

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_S = 30.0
#: A pooled connection idle for longer than this is pinged before use (a server restart or an
#: idle timeout on the way may have closed it); a connection in steady use is not.
PING_AFTER_IDLE_S = 1.0


def make_engine(url: str) -> Engine:
    sa_url = make_url(url)
    if sa_url.get_backend_name() == "sqlite":
        database = sa_url.database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            sa_url,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
        )
        _configure_sqlite(engine)
        return engine
    # READ COMMITTED whatever the server's default: appending relies on it (after waiting for
    # the feed's lock, the next statement takes a new snapshot, which sees the row and the
    # entries the previous appender committed); under REPEATABLE READ the snapshot would be
    # older than the lock, and the append would number from a stale head.
    engine = create_engine(sa_url, pool_size=5, max_overflow=5, isolation_level="READ COMMITTED")
    _read_committed_by_default(engine)
    _ping_when_idle(engine)
    return engine


def _read_committed_by_default(engine: Engine) -> None:
    """READ COMMITTED also for the transactions no ``BEGIN`` opens: the implicit transaction of a
    pipeline on an autocommit connection (the one-round-trip append relies on a new snapshot
    per statement) and single statements in autocommit."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        try:
            dbapi_connection.execute("SET default_transaction_isolation = 'read committed'")
        finally:
            dbapi_connection.autocommit = autocommit


def _ping_when_idle(engine: Engine) -> None:
    """Pessimistic disconnect handling, but only for connections that sat idle in the pool.

    ``pool_pre_ping`` would spend a round trip on every checkout; under load a connection comes
    back to work within milliseconds, and a dead one is then found by the statement itself
    (SQLAlchemy invalidates the pool on a disconnect error).
    """

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
        except engine.dialect.loaded_dbapi.Error as exc:
            # The pool replaces this connection and tries again.
            raise DisconnectionError(f"connection found dead after idling: {exc}") from exc


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let us issue BEGIN ourselves (pysqlite's own transaction handling is off).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get("simplefeed_write", False):
            try:
                _begin_immediate(conn.connection.driver_connection)
            except sqlite3.Error as exc:  # as SQLAlchemy raises a failed statement
                raise DBAPIError.instance(
                    "BEGIN IMMEDIATE", None, exc, sqlite3.Error, dialect=conn.dialect
                ) from exc
        else:
            conn.exec_driver_sql("BEGIN")


#: A writer that finds the database locked tries again after this long, doubling up to
#: ``_RETRY_MAX_S`` (with jitter), until the busy timeout. SQLite's own busy handler sleeps 1, 2,
#: 5, 10, 15, 20, 25, ... 100 ms between tries: with several uWSGI workers the write lock sat
#: idle while its waiters slept, and a few requests waited for a second.
_RETRY_MIN_S = 0.0002
_RETRY_MAX_S = 0.002


def _begin_immediate(dbapi_connection: Any) -> None:
    """``BEGIN IMMEDIATE``, waiting for the write lock with short sleeps of our own."""
    dbapi_connection.execute("PRAGMA busy_timeout = 0")
    try:
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
        delay = _RETRY_MIN_S
        while True:
            try:
                dbapi_connection.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                busy = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY
                if not busy or time.monotonic() > deadline:
                    raise
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, _RETRY_MAX_S)
    finally:
        dbapi_connection.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")


def pipeline_supported(driver: Any) -> bool:
    """psycopg's pipeline mode needs libpq 14 or later (psycopg[binary] bundles a newer one)."""
    module = sys.modules.get("psycopg")
    pipeline = getattr(module, "Pipeline", None)
    return bool(
        type(driver).__module__.startswith("psycopg")
        and pipeline is not None
        and pipeline.is_supported()
    )


def owns_transaction(conn: Connection) -> bool:
    """Whether the store's statements open and commit this connection's transaction
    (:meth:`Database.append` on PostgreSQL)."""
    return bool(conn.get_execution_options().get("simplefeed_own_tx", False))


@contextmanager
def as_sqlalchemy_errors(dialect: Dialect) -> Iterator[None]:
    """Errors of statements handed straight to the driver, raised as SQLAlchemy raises them
    (``IntegrityError`` for a duplicate, ``OperationalError`` for a lost connection, ...)."""
    error = dialect.loaded_dbapi.Error
    try:
        yield
    except error as exc:
        raise DBAPIError.instance(None, None, exc, error, dialect=dialect) from exc


#: SQLSTATE classes (and codes) of PostgreSQL errors that say "not now" rather than "never":
#: connection exceptions, insufficient resources, operator intervention (shutdown, recovery),
#: a read-only transaction (a standby, or default_transaction_read_only), and the two a retry
#: resolves (serialization failure, deadlock).
_UNAVAILABLE_SQLSTATES = ("08", "53", "57", "25006", "40001", "40P01")


def store_error(exc: BaseException) -> StoreError:
    """The project's error for an exception of SQLAlchemy or of a driver (DB-API names:
    ``OperationalError`` and ``InterfaceError`` are a database we cannot use now)."""
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


class _Translated:
    """Raises what SQLAlchemy or a driver raised in its block as the project's own error
    (:func:`store_error`), the original as its cause: every way out of the store passes one."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc is not None and isinstance(exc, SQLAlchemyError | sqlite3.Error | _driver_error()):
            raise store_error(exc) from exc


def _driver_error() -> type[BaseException]:
    module = sys.modules.get("psycopg")
    error: type[BaseException] = getattr(module, "Error", sqlite3.Error)
    return error


translated = _Translated()


#: The write whose synchronous commit is :meth:`Database.flush_barrier`: one row per server
#: backend (no two sessions contend for it), updated in place.
FLUSH_MARK = (
    "INSERT INTO flush_marks (backend_pid, n) VALUES (pg_backend_pid(), 1)"
    " ON CONFLICT (backend_pid) DO UPDATE SET n = flush_marks.n + 1"
)


class _Lookups:
    """One DB-API connection per thread, in autocommit, outside the pool, for single reads."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.local = threading.local()
        self.lock = threading.Lock()
        self.open: list[Any] = []
        self.compiled: dict[Select[Any], tuple[str, tuple[str, ...] | None]] = {}

    def connection(self) -> Any:
        conn: Any = getattr(self.local, "conn", None)
        if conn is None or self.local.pid != os.getpid():
            fairy = self.engine.raw_connection()  # connect-time settings applied
            conn = fairy.driver_connection
            fairy.detach()
            if self.engine.dialect.name == "postgresql":
                conn.autocommit = True  # no transaction left open: each read sees the latest
            self.local.conn, self.local.pid = conn, os.getpid()
            with self.lock:
                self.open.append(conn)
        return conn

    def drop(self) -> None:
        conn = getattr(self.local, "conn", None)
        self.local.conn = None
        if conn is not None:
            with self.lock:
                if conn in self.open:
                    self.open.remove(conn)
            with contextlib.suppress(Exception):
                conn.close()

    def sql(self, stmt: Select[Any]) -> tuple[str, tuple[str, ...] | None]:
        found = self.compiled.get(stmt)
        if found is None:
            compiled: Any = stmt.compile(dialect=self.engine.dialect)
            order = tuple(compiled.positiontup or ()) if self.engine.dialect.positional else None
            found = self.compiled[stmt] = (str(compiled), order)
        return found

    def close(self) -> None:
        with self.lock:
            pending, self.open = self.open, []
        for conn in pending:
            with contextlib.suppress(Exception):
                conn.close()


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.dialect = self.engine.dialect.name
        self._lookups = _Lookups(self.engine)
        # psycopg with pipeline mode (libpq 14 or later): see append().
        self._pipelined = (
            self.dialect == "postgresql"
            and self.engine.dialect.driver == "psycopg"
            and bool(getattr(sys.modules.get("psycopg"), "Pipeline", None))
            and sys.modules["psycopg"].Pipeline.is_supported()
        )

    def lookup(self, stmt: Select[Any], params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The first row of one read statement (as a mapping), or None.

        For the lookup every publish request makes (its producer token): on this thread's own
        autocommit connection, with the statement compiled once, there is no pool checkout, no
        transaction and no result object around it, about 5 us instead of 70 on SQLite and
        one round trip on PostgreSQL. Nothing is cached: every call reads the latest committed
        state. On any error the connection is dropped and the statement runs the ordinary way.
        """
        sql, order = self._lookups.sql(stmt)
        bound: Any = tuple(params[name] for name in order) if order is not None else params
        try:
            cursor = self._lookups.connection().cursor()
            try:
                cursor.execute(sql, bound)
                row = cursor.fetchone()
                names = [d[0] for d in cursor.description or ()]
            finally:
                cursor.close()
        except Exception:
            log.warning("direct lookup failed; using the pool", exc_info=True)
            self._lookups.drop()
            with self.read_one() as conn:
                result = conn.execute(stmt, dict(params)).first()
            return None if result is None else dict(result._mapping)
        return None if row is None else dict(zip(names, row, strict=True))

    @property
    def one_round_trip(self) -> bool:
        """Whether appends may go in one round trip
        (:func:`~simplefeed.store.entries.append_in_one_round_trip`: PostgreSQL, psycopg with
        pipeline mode), on :meth:`direct`'s connection."""
        return self._pipelined

    @contextmanager
    def direct(self) -> Iterator[Any]:
        """This thread's own DB-API connection (PostgreSQL: in autocommit), outside the pool,
        for the statements a publish sends straight to the driver: no checkout, no isolation
        level set and reset: about 0.1 ms of CPU less per publish than :meth:`append` (cProfile of
        the app in one process; 3,000 publishes).

        On a driver error the connection is closed (the next call opens a new one) and the
        error raised as SQLAlchemy raises it. Nothing is left open between calls: every use is
        whole implicit transactions.
        """
        try:
            with translated:
                conn = self._lookups.connection()
                yield conn
        except BaseException:
            self._lookups.drop()
            raise

    def flush_barrier(self) -> None:
        """Return once everything committed so far, by any session, is durable (PostgreSQL;
        nothing to do on SQLite, whose commits are synchronous).

        Appends in one round trip commit without waiting for their WAL flush, so that the
        feed's next appender need not wait for it (see
        :func:`~simplefeed.store.entries.append_in_one_round_trip`). Whatever exposes what
        such a commit wrote calls this first: the append itself before it is acknowledged, a
        replay answered from the stored entry, a newly rendered live document. It commits a
        write (this backend's row of ``flush_marks``) with the session's own
        ``synchronous_commit``; that commit waits for the WAL up to its own record, which is
        after every commit already visible (and, with synchronous replication, for the
        standby as well).
        """
        if self.dialect != "postgresql":
            return
        try:
            with self.direct() as conn:
                conn.execute(FLUSH_MARK, prepare=True)
        except StoreError:
            # Most likely the thread's connection died (a server restart, an idle timeout):
            # direct() dropped it, and the barrier is idempotent. A second failure is real.
            log.info("flush barrier failed; once more on a new connection", exc_info=True)
            with self.direct() as conn:
                conn.execute(FLUSH_MARK, prepare=True)

    def analyze_entries_once(self) -> bool:
        """PostgreSQL: ``ANALYZE entries`` if it never has been; True if it ran.

        Until then the planner knows nothing of the table, and on a table of a few rows a
        lookup by (feed, entry id) costs the same through the primary key (feed, seq) as
        through the unique index; a connection that caches such a plan reads every entry of
        the feed on every lookup, a little slower with each append, until autovacuum analyses
        the table (a minute or more). Called when a feed's first page freezes, so statistics
        exist from then on, and every cached plan is made again with them.
        """
        if self.dialect != "postgresql":
            return False
        with self.direct() as conn:
            (tuples,) = conn.execute(
                "SELECT reltuples FROM pg_class WHERE oid = 'entries'::regclass"
            ).fetchone()
            if tuples >= 0:
                return False
            conn.execute("ANALYZE entries")  # a warning, not an error, if we may not
        return True

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with translated, self.engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def read_one(self) -> Iterator[Connection]:
        """A connection for a single read statement (no transaction needed to be consistent).

        PostgreSQL: autocommit, so the statement is one round trip instead of three. SQLite:
        an ordinary read transaction (``BEGIN``/``COMMIT`` are in-process calls there).
        """
        if self.dialect != "postgresql":
            with self.read() as conn:
                yield conn
            return
        with translated, self.engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def write(self) -> Iterator[Connection]:
        with translated, self.engine.connect() as conn:
            conn = conn.execution_options(simplefeed_write=True)
            with conn.begin():
                yield conn

    @contextmanager
    def append(self) -> Iterator[Connection]:
        """The write transaction of an append: :meth:`write`, except on PostgreSQL (psycopg with
        pipeline mode), where the append's own statements open and close the transaction.

        psycopg opens a transaction with a ``BEGIN`` of its own, and in pipeline mode waits for
        it: one round trip; then the commit is another. An append is two pipelines (the lock
        with the replay lookup, then the writes), and every round trip after the lock is spent
        holding the feed's lock, which every appender of the feed, on every node, waits for.
        So the connection is in autocommit at the driver, and
        :func:`~simplefeed.store.entries.lock_feed_and_find` sends ``BEGIN ISOLATION LEVEL READ
        COMMITTED`` in its pipeline and :func:`~simplefeed.store.entries.append_entries` sends
        ``COMMIT`` in its: three round trips per append instead of six, one of them under the
        lock. (:func:`~simplefeed.store.entries.append_in_one_round_trip` needs no ``BEGIN``
        at all: its pipeline is one implicit transaction.) Leaving the block commits what is
        still open (an append of replays only) or, on an exception, rolls back; both are no-ops
        when the pipeline has committed.
        """
        if not self._pipelined:
            with self.write() as conn:
                yield conn
            return
        with translated, self.engine.connect() as conn:
            driver: Any = conn.connection.driver_connection
            conn = conn.execution_options(
                isolation_level="AUTOCOMMIT", simplefeed_write=True, simplefeed_own_tx=True
            )
            try:
                yield conn
            except BaseException:
                with contextlib.suppress(Exception):
                    driver.rollback()  # ROLLBACK if a transaction is open
                raise
            try:
                driver.commit()  # COMMIT if a transaction is still open, else nothing
            except conn.dialect.loaded_dbapi.Error as exc:
                raise DBAPIError.instance(
                    "COMMIT", None, exc, conn.dialect.loaded_dbapi.Error, dialect=conn.dialect
                ) from exc

    def ping(self) -> None:
        """Raise :class:`~simplefeed.errors.StoreUnavailable` unless the database answers."""
        with self.read_one() as conn:
            conn.exec_driver_sql("SELECT 1")

    def dispose(self) -> None:
        self._lookups.close()
        self.engine.dispose()

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
On PostgreSQL the append path locks the feed's row (``SELECT ... FOR UPDATE``) instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, create_engine, event
from sqlalchemy.engine import Engine, make_url

SQLITE_BUSY_TIMEOUT_S = 30.0


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
    return create_engine(sa_url, pool_pre_ping=True, pool_size=5, max_overflow=5)


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
        write = conn.get_execution_options().get("simplefeed_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.dialect = self.engine.dialect.name

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            conn = conn.execution_options(simplefeed_write=True)
            with conn.begin():
                yield conn

    def dispose(self) -> None:
        self.engine.dispose()

"""The SQLite backend: one file, one writer at a time, readers never waiting (WAL).

A write transaction starts with ``BEGIN IMMEDIATE``. It takes the write lock up front, waiting
up to the busy timeout. So it does not fail with SQLITE_BUSY when it upgrades a read lock
half-way through. ``synchronous=FULL`` makes every acknowledged commit durable against power
loss, not only against a process crash. A writer waiting for the write lock retries every few
hundred microseconds (:func:`_begin_immediate`). SQLite's busy handler would sleep up to 100 ms.

The database's write lock is also the feeds' append lock. An append is one ``BEGIN IMMEDIATE``
transaction. Its statements go straight to the driver, because every writer waits for whoever
holds that lock. That takes a few microseconds each instead of SQLAlchemy's tens.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, create_engine, event
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Engine, make_url

from simplefeed.errors import DatabaseNotReady, FeedNotFound, StoreUnavailable
from simplefeed.model import STATE_FILE_APPLICATION_ID, ArchivedPage, Entry, Feed, PendingEntry
from simplefeed.settings import mask_url
from simplefeed.store import sql
from simplefeed.store.interface import Appending, Pause

SQLITE_BUSY_TIMEOUT_S = 30.0

#: How often a process's watcher (:meth:`SQLiteStore.watch`) looks for a commit. It starts
#: with the process's first request that waits for one (``Prefer: wait``). A waiting consumer
#: learns of an entry this much later at most. It learns of a publish by this node's processes
#: at once, because they ring :class:`simplefeed.service.changes.Bell`. Where the bell is the
#: node's, the watcher's own looks come
#: :data:`simplefeed.service.changes.UNANNOUNCED_LOOK_S` apart instead. 500 looks a second
#: (2 ms) cost the server about a third more CPU per publish at 500 waiting consumers.
WATCH_EVERY_S = 0.01

#: A writer that finds the database locked tries again after this long. The pause doubles up
#: to ``_RETRY_MAX_S``, with jitter, until the busy timeout. SQLite's own busy handler sleeps
#: 1, 2, 5, 10, 15, 20, 25, ... 100 ms between tries. With several uWSGI workers, the write
#: lock then sits idle while its waiters sleep. A few requests wait for a second.
_RETRY_MIN_S = 0.0002
_RETRY_MAX_S = 0.002

_DIALECT = sqlite_dialect.dialect()

sql.translate_driver_errors(sqlite3.Error)

_FIX_FILE = "give SIMPLEFEED_DATABASE_URL a SQLite file of the service's own"


def _relative_path_fix(url: str) -> str | None:
    """What to do about a missing database file named by a relative path, or None."""
    if url.partition(":///")[2].startswith("/"):
        return None
    # A command may run from another directory than the service's, such as cron's or a home
    # directory. `db upgrade` there would make an empty database that passes every check.
    return (
        "its path is relative to the directory the command runs in: run it in the"
        " service's directory (or set SIMPLEFEED_DATABASE_URL to an absolute path), or"
        " `simplefeed db upgrade` to create the database here"
    )


def _compiled(stmt: Any) -> tuple[str, tuple[str, ...]]:
    compiled: Any = stmt.compile(dialect=_DIALECT)
    return str(compiled), tuple(compiled.positiontup or ())


# The append's statements, compiled once, with their parameters' order (``?`` placeholders).
_LOCK_FEED = _compiled(sql.FEED_BY_NAME)
_INSERT_ENTRY = _compiled(sql.INSERT_ENTRY)
_ADVANCE_HEAD = _compiled(sql.ADVANCE_HEAD)
_INSERT_PAGE = _compiled(sql.INSERT_PAGE)
assert _INSERT_ENTRY[1] == sql.ENTRY_COLUMNS, _INSERT_ENTRY
_FEED_BY_NAME = _LOCK_FEED[0]


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


def _run(conn: Connection, statement: tuple[str, tuple[str, ...]], params: Any) -> Any:
    """One of the append's statements on SQLite's own connection, in the caller's transaction."""
    text, order = statement
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    cursor.execute(text, tuple(params[name] for name in order))
    return cursor


class _SQLiteAppending(sql.SqlAppending):
    def write(
        self,
        new: Sequence[tuple[Entry, PendingEntry]],
        *,
        modified_us: int,
        pages: Sequence[ArchivedPage] = (),
        base_url: str | None,
    ) -> None:
        if not new:
            return
        feed = self.feed
        rows = [
            (feed.id, e.seq, e.id, e.updated_us, e.published_us, p.fingerprint, p.data)
            for e, p in new
        ]
        driver: Any = self.conn.connection.driver_connection
        driver.executemany(_INSERT_ENTRY[0], rows)
        _run(
            self.conn, _ADVANCE_HEAD, sql.head_row(feed, new[-1][0], modified_us, base_url)
        ).close()
        for page in pages:
            _run(self.conn, _INSERT_PAGE, sql.page_row(page, feed.page_size)).close()


class WalIndex:
    """Whether anything was committed to the database since a moment, without a system call.

    It reads the header of the WAL index from memory shared with SQLite. Every connection to
    a database in WAL mode maps its ``-shm`` file. Its first 96 bytes are two copies of the WAL
    index header (https://sqlite.org/walformat.html, "The WAL-Index Header"). Every commit, by
    any connection of any process, rewrites them, the second copy first. They hold a change
    counter, the last frame and checksums. SQLite's own readers compare the header with the
    one they last saw to know whether the database changed. That is what moves ``PRAGMA
    data_version``. :meth:`header` is the same comparison's input, read the way they read it.
    It reads the first copy, then the second. It trusts them only when they are equal and the
    header says it is initialised. Copying 96 bytes from a mapping keeps the interpreter. A
    statement releases it (:meth:`SQLiteStore.feed_head`).

    There is one per process and database file. The process's stores of it share it
    (:meth:`acquire`, :meth:`release`), and the last of them closes it. SQLite's connections
    coordinate through POSIX record locks on the ``-shm`` file. The kernel drops all of the
    process's locks at once when the process closes *any* descriptor of that file (fcntl(2)).
    Closing the mapping's descriptor while the process's connections use the database lets
    another process take the file for unused. It then rebuilds the file under them. A uWSGI
    worker reading the mapping of a file cut short dies of SIGBUS. So the mapping is closed
    only after every connection of the stores, its own last. That is ``anchor``, a connection
    on which it has read once. It holds the file open, because SQLite deletes or rebuilds the
    file only when no connection has it open.
    """

    SIZE = 96  # The two copies of the header.
    COPY = 48
    IS_INIT = 12  # The header's isInit byte, 1 once a connection has built it.

    def __init__(self, anchor: sqlite3.Connection, fd: int, mapped: mmap.mmap) -> None:
        self._anchor = anchor
        self._fd = fd
        self._map = mapped
        self._key: tuple[int, str] | None = None
        self._users = 0

    @classmethod
    def acquire(cls, database: Path, connect: Callable[[], sqlite3.Connection]) -> WalIndex:
        """This process's WAL index of ``database``, for a store to :meth:`release`.

        If no store of the process holds it, a new connection from ``connect`` opens it.
        Raises if there is none, because the database is not in WAL mode.
        """
        key = (os.getpid(), str(database))
        with _WAL_INDEXES_LOCK:
            found = _WAL_INDEXES.get(key)
            if found is None:
                found = _WAL_INDEXES[key] = cls.open(connect(), database)
                found._key = key
            found._users += 1
            return found

    def release(self) -> None:
        """Note that a store of the process is done with it, its connections closed.

        The last store closes it, its connection first.
        """
        with _WAL_INDEXES_LOCK:
            self._users -= 1
            if self._users > 0 or self._key is None:
                return
            _WAL_INDEXES.pop(self._key, None)
        self._anchor.close()
        self._map.close()
        os.close(self._fd)

    @classmethod
    def open(cls, anchor: sqlite3.Connection, database: Path) -> WalIndex:
        """The WAL index of ``database``, held open by ``anchor``.

        ``anchor`` is a new connection to it. It is closed here if there is no WAL index.
        """
        shm = Path(f"{database}-shm")
        try:
            anchor.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            ((mode,),) = anchor.execute("PRAGMA journal_mode").fetchall()
            if mode != "wal":
                raise ValueError(f"journal_mode is {mode}")
            if shm.stat().st_size < cls.SIZE:
                raise ValueError("the WAL index is shorter than its header")
            fd = os.open(shm, os.O_RDONLY | os.O_CLOEXEC)
        except Exception:
            anchor.close()
            raise
        # Not closed if mapping fails either: closing it would drop the process's locks.
        return cls(anchor, fd, mmap.mmap(fd, cls.SIZE, access=mmap.ACCESS_READ))

    def header(self) -> bytes | None:
        """The header now, or None when only the database can say.

        That is when its two copies differ, because a commit is rewriting them. Or it is not
        initialised.
        """
        both = self._map[: self.SIZE]
        first = both[: self.COPY]
        if first != both[self.COPY :] or first[self.IS_INIT] != 1:
            return None
        return first


#: The WAL indexes the process's stores hold, by (pid, database path).
_WAL_INDEXES: dict[tuple[int, str], WalIndex] = {}
_WAL_INDEXES_LOCK = threading.Lock()


def _forked() -> None:
    global _WAL_INDEXES_LOCK
    _WAL_INDEXES_LOCK = threading.Lock()  # Another thread of the parent may have held it.


os.register_at_fork(after_in_child=_forked)


class SQLiteStore(sql.SqlStore):
    """:class:`~simplefeed.store.interface.Store` on a SQLite file.

    The file this store opened is the file it writes to. A restore or a mistaken ``rm`` may
    delete or replace the file under a running service. The open connections would then take
    writes into the old, unlinked file, acknowledged and then gone. So every write transaction
    first checks that the path still names the file first seen there, by device and inode. If
    not, it refuses with :class:`~simplefeed.errors.StoreUnavailable`. The check is one
    ``stat``, 3-4 us. :meth:`problems` reports it. A restart opens the file that is there now.
    """

    backend = "sqlite"
    title = "SQLite"
    url_form = "sqlite:///path"
    watch_polls = True

    @staticmethod
    def takes(url: str) -> bool:
        return sql.url_scheme(url) == "sqlite"

    @staticmethod
    def url_problem(url: str) -> str | None:
        if SQLiteStore.local_file(url) is None:
            return (
                "names no file: an in-memory SQLite database lasts as long as one connection"
                " (give sqlite:///relative/path or sqlite:////absolute/path)"
            )
        return None

    @staticmethod
    def local_file(url: str) -> Path | None:
        scheme, sep, rest = url.partition(":///")
        if not sep or scheme.split("+")[0] != "sqlite":
            return None
        path = rest.partition("?")[0]
        if path in ("", ":memory:"):
            return None
        return Path(path).absolute()

    @staticmethod
    def check_file(url: str, *, must_exist: bool) -> None:
        """Refuse a file that is not the service's database, or a missing one if it must exist.

        A directory is refused, and so is a file another application marked as its own
        (``PRAGMA application_id``). A consumer's state file is one, and ``db upgrade`` must not
        fill it with the service's tables.
        """
        path = SQLiteStore.local_file(url)
        if path is None:
            return
        shown = f"{mask_url(url)} ({path})"
        if not path.exists():
            if not must_exist:
                return
            fix = _relative_path_fix(url)
            if fix is not None:
                raise DatabaseNotReady(shown, "does not exist", fix)
            raise DatabaseNotReady(shown, "does not exist")
        if path.is_dir():
            raise DatabaseNotReady(shown, "is a directory, not a SQLite file", _FIX_FILE)
        try:
            with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
                application_id = db.execute("PRAGMA application_id").fetchone()[0]
        except sqlite3.DatabaseError:
            return  # Not SQLite, or unreadable. What opens it next says so.
        if application_id == STATE_FILE_APPLICATION_ID:
            raise DatabaseNotReady(
                shown,
                "is a Simplefeed consumer's state file (`simplefeed consume --state`), not the"
                " service's database",
                _FIX_FILE,
            )
        if application_id != 0:
            raise DatabaseNotReady(
                shown,
                f"is another application's SQLite file (application_id {application_id})",
                _FIX_FILE,
            )

    @staticmethod
    def make_file(url: str) -> None:
        path = SQLiteStore.local_file(url)
        if path is not None and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            sqlite3.connect(path).close()

    def __init__(self, url: str) -> None:
        super().__init__(url)
        database = make_url(url).database
        self.path = Path(database) if database and database != ":memory:" else None
        self._identity: tuple[int, int] | None = None
        self._file_problem()  # The file's identity, if it exists.
        #: The process (pid) whose WAL index this is (:meth:`_wal_index`).
        self._wal: tuple[int, WalIndex | None] = (0, None)
        #: The WAL index header the feeds were read at, and the feeds by name.
        self._heads: tuple[bytes, dict[str, Feed]] = (b"", {})

    def _file_problem(self) -> str | None:
        """Why the path no longer names the database file first seen there, or None."""
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._identity is None:
                return None  # Not made yet. Only migrations make it.
            return f"the database file {self.path} was deleted"
        identity = (st.st_dev, st.st_ino)
        if self._identity is None:
            self._identity = identity
        elif identity != self._identity:
            return f"the database file {self.path} was replaced; restart to use the new one"
        return None

    @contextmanager
    def write(self) -> Iterator[Connection]:
        problem = self._file_problem()
        if problem is not None:
            raise StoreUnavailable(problem)
        with super().write() as conn:
            yield conn
        if self._identity is None:
            self._file_problem()  # A migration made it after this store opened.

    def close(self) -> None:
        super().close()
        pid, wal = self._wal
        self._wal, self._heads = (0, None), (b"", {})
        if wal is not None and pid == os.getpid():
            wal.release()  # After the store's own connections (WalIndex).

    def problems(self) -> list[str]:
        found = []
        problem = self._file_problem()
        if problem is None and self.path is not None and not self.path.exists():
            problem = f"the database file {self.path} does not exist (moved away?)"
        if problem is not None:
            found.append(problem)
        if self.path is not None and self.path.exists():
            if not os.access(self.path, os.W_OK):
                found.append(f"the database is read-only: {self.path} cannot be written")
            if not os.access(self.path.parent, os.W_OK):
                # Publishes go on meanwhile, while those files are there.
                found.append(
                    f"the database's directory {self.path.parent} cannot be written: SQLite"
                    " makes its -wal and -shm files there whenever they are not there (after a"
                    " clean stop), and cannot open the database without them"
                )
        return found

    @staticmethod
    def make_engine(url: str) -> Engine:
        # Never creates the file. Every connection opens it read-write only (an SQLite URI,
        # mode=rw). A connection to a missing file would make a new, empty one. The old file's
        # -wal may still be beside it, when the database moved away under a running service.
        # SQLite takes that WAL for the new file's and empties it, acknowledged events with it.
        # Only migrations make the file (make_file).
        sa_url = make_url(url)
        if sa_url.database:
            sa_url = sa_url.set(
                database=f"file:{quote(sa_url.database)}",
                query={**sa_url.query, "mode": "rw", "uri": "true"},
            )
        engine = create_engine(
            sa_url,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Let us issue BEGIN ourselves, with pysqlite's own transaction handling off. This
            # also makes every statement outside a BEGIN its own transaction (autocommit).
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            if conn.get_execution_options().get("simplefeed_write", False):
                _begin_immediate(conn.connection.driver_connection)
            else:
                conn.exec_driver_sql("BEGIN")

        return engine

    def feed_head(self, name: str) -> Feed:
        """The feed as last read by this process if no commit was made since, else one SELECT.

        The header of the WAL index (:class:`WalIndex`) tells whether a commit was made. The
        SELECT is indexed, on a direct connection. Nothing on the way back from the cache
        releases the interpreter. Under uWSGI's threads each statement does. It costs its thread
        a hand-over of the GIL to the others and back. ``PRAGMA data_version`` on every request
        takes 150 of a /recent 304's 330 us of CPU (docs/explanation/decisions/interpreter.md).
        """
        wal = self._wal_index()
        header = wal.header() if wal is not None else None
        if header is not None:
            seen, feeds = self._heads
            if header == seen:
                known = feeds.get(name)
                if known is not None:
                    return known
        row = self.lookup(sql.FEED_BY_NAME, {"name": name})
        if row is None:
            raise FeedNotFound(name)
        feed = sql.feed_from(row)
        if header is not None:
            # Read before the SELECT. A commit between the two changes the header, so the next
            # request reads again. Threads racing here only cost each other a lookup.
            seen, feeds = self._heads
            if seen != header:
                feeds = {}
                self._heads = (header, feeds)
            feeds[name] = feed
        return feed

    def _wal_index(self) -> WalIndex | None:
        """This process's :class:`WalIndex` of the database, or None where there is none.

        A database in memory has none, and so has one not in WAL mode. A warning says so, once
        per store.
        """
        pid = os.getpid()
        if self._wal[0] != pid:
            self._heads = (b"", {})
            self._wal = (pid, None)
            if self.path is not None:
                try:
                    self._wal = (pid, WalIndex.acquire(self.path, self.connections.open_one))
                except Exception:
                    sql.log.warning(
                        "the database's WAL index cannot be read: every feed head is read"
                        " from the database (slower, as correct)",
                        exc_info=True,
                    )
        return self._wal[1]

    def watch(self, changed: Callable[[], None], stop: Pause) -> None:
        """Read ``PRAGMA data_version`` on a connection of its own, when ``stop``'s wait ends.

        The wait ends after :data:`WATCH_EVERY_S`. It ends sooner when a commit is announced.
        It ends later where the node announces every commit
        (:class:`~simplefeed.store.interface.Pause`). The value changes when any other
        connection, of any process, commits to the database. A look woken by a timer costs
        about 160 us of CPU, for the woken thread and the read locks. Back to back it costs
        9 us (docs/explanation/decisions/long-poll.md). A connection that fails is closed. Another
        opens a second later.
        """
        while not stop.is_set():
            conn = None
            try:
                conn = self.connections.open_one()
                ((seen,),) = conn.execute("PRAGMA data_version").fetchall()
                changed()  # Whatever happened before we looked.
                while not stop.wait(WATCH_EVERY_S):
                    ((version,),) = conn.execute("PRAGMA data_version").fetchall()
                    if version != seen:
                        seen = version
                        changed()
            except Exception:
                sql.log.warning("watching the database for changes failed", exc_info=True)
                stop.wait(1.0)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()

    @contextmanager
    def append(self, feed: str, look_up: Iterable[str]) -> Iterator[Appending]:
        """Take ``BEGIN IMMEDIATE``, the feed's row, and the stored entries of ``look_up``.

        ``BEGIN IMMEDIATE`` takes the database's write lock. Appenders of every feed queue here.
        """
        ids = sorted(set(look_up))
        with self.write() as conn:
            cursor = _run(conn, _LOCK_FEED, {"name": feed})
            row = cursor.fetchone()
            names = [d[0] for d in cursor.description or ()]
            cursor.close()
            if row is None:
                raise FeedNotFound(feed)
            locked = sql.feed_from(dict(zip(names, row, strict=True)))
            found = sql.find_entries(conn, locked.id, ids) if ids else {}
            yield _SQLiteAppending(conn, locked, found)

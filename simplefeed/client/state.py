"""The consumer's durable state: its checkpoint and its HTTP cache, in one SQLite file.

Five tables, keyed by absolute URL:

``checkpoints``  One row per entry point. It holds the last processed entry's id, its sequence
                 number and the permanent URL of its page (``via`` / ``self``). A restart walks
                 back from the entry point to that page, and on from the entry there. Archived
                 pages after it come from the cache.
``documents``    The HTTP cache. It holds the body and validators of every document fetched.
                 The body is kept as it came over the wire. ``coding`` is its Content-Encoding,
                 or ``identity`` for none. Rows flagged ``immutable`` (archived pages) are used
                 without asking the network. The others are revalidated (conditional GET) once
                 their ``max-age`` is over. An archived page is kept while a run may need it
                 again. When an entry point's checkpoint moves to another page, the page it
                 leaves is deleted. The trigger ``passed_page_forgotten`` does this, in the
                 checkpoint's own transaction. Checkpoints only move forward, and resuming
                 starts at the checkpoint's page. So a page older than it is never read again.
                 The cache holds the pages from the checkpoint's to the newest walked. This
                 stays true however long a consumer follows its feed. Keeping every page of the
                 history would cost about 4 KB a page.
``parked``       Entries whose handler failed with ``on_error="park"``. A row holds the entry
                 (as JSON), the last error, when it was parked and how many times it was tried.
                 It is written durably, before the checkpoint moves past the entry.
``heads``        Per entry point, the newest sequence number seen at its head, and when.
                 ``simplefeed consumer status`` reports the lag from it.
``processed``    Per entry point, the ids of the last :data:`PROCESSED_KEPT` entries processed.
                 Each checkpoint's run of them is a row. The row holds its first and last
                 sequence number and the ids as a JSON array. It is written with the checkpoint,
                 in its transaction. It records what the consumer read. A feed may no longer
                 hold the consumer's last entry, for example after a server's database was
                 restored from a backup. The table then tells where the feed parts from what
                 was read, and which entries read here the feed lost. A row covers a page, not
                 an entry, because 100 rows a page would slow a catch-up by about 7 %.

The file runs in WAL mode. Checkpoint writes are committed with ``synchronous=FULL``. They are
fsynced before :meth:`StateFile.save_checkpoint` returns, so an acknowledged checkpoint
survives a crash or a power cut. Cache writes are committed with ``synchronous=NORMAL``. They
are atomic all the same, but not fsynced on their own. The next checkpoint's fsync takes them
along. A power cut may lose the last few, which costs a request each, never a wrong answer.
That halves the fsyncs of a catch-up that stores its checkpoint once a page. Writes are single
statements in autocommit mode, each its own transaction. The exception is a checkpoint and the
entries it covers (:meth:`StateFile.save_checkpoint`).

The consumer only needs the two small protocols :class:`CheckpointStore` and
:class:`PageCache`. :class:`StateFile` is the one implementation shipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import quote

from simplefeed.client.entry import json_text
from simplefeed.client.errors import StateError
from simplefeed.codings import IDENTITY
from simplefeed.model import STATE_FILE_APPLICATION_ID

__all__ = [
    "CachedDocument",
    "Checkpoint",
    "CheckpointStore",
    "Head",
    "PageCache",
    "Parked",
    "StateFile",
]

#: 3 added documents.coding. Version 2 kept bodies decoded, so its rows are ``identity``. The
#: trigger ``passed_page_forgotten`` needs no new version. Earlier versions read a file that has
#: it alike, and opening a file adds it. 4 added the table ``processed``. A version 3 consumer
#: would refuse a file with a table it does not know.
SCHEMA_VERSION = 4
#: How many of the last entries processed a state file remembers, per entry point. A restore
#: that lost more entries read here than that is told, but not where the feed parts.
PROCESSED_KEPT = 10_000

#: The tables of a state file. A file holding any other is not one.
_TABLES = frozenset({"checkpoints", "parked", "heads", "documents", "processed"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    feed_url    TEXT PRIMARY KEY,
    entry_id    TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    page_url    TEXT NOT NULL,
    saved_at    REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS parked (
    feed_url    TEXT NOT NULL,
    entry_id    TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    entry_json  TEXT NOT NULL,
    error       TEXT NOT NULL,
    parked_at   REAL NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (feed_url, entry_id)
);
CREATE TABLE IF NOT EXISTS heads (
    feed_url    TEXT PRIMARY KEY,
    head_seq    INTEGER NOT NULL,
    seen_at     REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    url           TEXT PRIMARY KEY,
    body          BLOB NOT NULL,
    etag          TEXT,
    last_modified TEXT,
    immutable     INTEGER NOT NULL DEFAULT 0,
    fetched_at    REAL NOT NULL,
    max_age       REAL,
    coding        TEXT NOT NULL DEFAULT 'identity'
);
CREATE TABLE IF NOT EXISTS processed (
    feed_url    TEXT NOT NULL,
    first_seq   INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL,
    entry_ids   TEXT NOT NULL,
    PRIMARY KEY (feed_url, first_seq)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS passed_page_forgotten
AFTER UPDATE OF page_url ON checkpoints
WHEN old.page_url <> new.page_url
BEGIN
    DELETE FROM documents WHERE url = old.page_url AND immutable;
END;
"""


@dataclass(frozen=True)
class Checkpoint:
    """The last processed entry: its id, sequence number and the permanent URL of its page."""

    entry_id: str
    seq: int
    page_url: str


@dataclass(frozen=True)
class CachedDocument:
    """A response body with what is needed to reuse it or revalidate it."""

    url: str
    #: The body as it came, in ``coding``.
    body: bytes
    etag: str | None
    last_modified: str | None
    #: Never changes (an archived page), so it is reused without a request while it is kept.
    immutable: bool
    #: When it was last fetched or revalidated, in seconds since the epoch (the injected clock).
    fetched_at: float
    #: Freshness lifetime from Cache-Control. None means revalidate every time.
    max_age: float | None
    #: The body's content coding(s), as Content-Encoding gave them. ``identity`` means none.
    coding: str = IDENTITY

    def fresh(self, now: float) -> bool:
        if self.immutable:
            return True
        return self.max_age is not None and now - self.fetched_at < self.max_age


@dataclass(frozen=True)
class Parked:
    """An entry whose handler failed, kept to be retried or dropped."""

    feed_url: str
    entry_id: str
    seq: int
    #: The entry as :meth:`~simplefeed.client.entry.FeedEntry.to_json` gives it.
    entry: dict[str, Any]
    error: str
    parked_at: float
    attempts: int


@dataclass(frozen=True)
class Head:
    """The newest sequence number seen at an entry point, and when."""

    feed_url: str
    seq: int
    seen_at: float


class CheckpointStore(Protocol):
    def load_checkpoint(self, feed_url: str) -> Checkpoint | None: ...

    def save_checkpoint(
        self,
        feed_url: str,
        checkpoint: Checkpoint,
        now: float,
        processed: Sequence[tuple[int, str]] = (),
    ) -> None: ...


class PageCache(Protocol):
    def get_document(self, url: str) -> CachedDocument | None: ...

    def put_document(self, document: CachedDocument) -> None: ...

    def holds_archived_page(self, url: str) -> bool: ...

    def delete_document(self, url: str) -> None: ...
    def delete_archived_pages(self) -> None: ...


@contextlib.contextmanager
def damaged_values(path: Path | str, what: str) -> Iterator[None]:
    """Make values read from a state file into ours.

    A damaged file, edited by hand or written by another program, raises a :class:`StateError`
    naming it (exit 6). It is not an internal error (70).
    """
    try:
        yield
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        raise StateError(str(path), f"a damaged {what} ({detail[:200]})") from exc


class StateFile:
    """A SQLite file holding checkpoints and the HTTP cache. Use as a context manager.

    A missing file is created, but never its directory. A mistyped directory
    (``--state /var/lib/consmer/c.sqlite3``) would make a new, empty state file there. The
    consumer would then read the whole history again. So :class:`StateError` names the missing
    directory.
    """

    def __init__(self, path: str | PathLike[str], *, read_only: bool = False) -> None:
        """Open the state file; ``read_only`` opens an existing file only to read it, as it is.

        This serves ``simplefeed consumer status`` and ``parked``. No table, column or schema
        version is added, so a consumer of an older release can still read a file it uses."""
        self.path = Path(path)
        self._lock = threading.Lock()
        self._closed = False
        try:
            if not self.path.parent.is_dir():
                raise StateError(
                    str(self.path),
                    f"no such directory: {self.path.parent} (a state file is created only in"
                    " a directory that exists)",
                )
            # One connection, used from the consumer's thread and its read-ahead thread. The
            # read-ahead thread reads the next page. The lock allows one statement at a time.
            self._db = sqlite3.connect(
                f"file:{quote(str(self.path.absolute()))}?mode=ro" if read_only else self.path,
                isolation_level=None,
                timeout=30.0,
                check_same_thread=False,
                uri=read_only,
            )
        except (OSError, sqlite3.Error) as exc:
            raise StateError(str(self.path), f"cannot open the state file: {exc}") from exc
        try:
            tables = self._check_own()
            if read_only:
                self._durable = False
                self._check_version()
                if not tables:
                    # An empty file is a state file no consumer has run on. Examples are
                    # ``touch consumer.sqlite3`` and an SQLite database without a table. SQLite
                    # takes it as an empty database, and so does the consumer. It is read as an
                    # empty state, in memory, and the file is left as it is.
                    self._db.close()
                    self._db = sqlite3.connect(
                        ":memory:", isolation_level=None, check_same_thread=False
                    )
                    self._db.executescript(_SCHEMA)
                return
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._durable = True
            self._check_version()
            self._db.executescript(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(documents)")}
            if "coding" not in columns:  # A version 2 file.
                self._db.execute(
                    "ALTER TABLE documents ADD COLUMN coding TEXT NOT NULL DEFAULT 'identity'"
                )
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._db.execute(f"PRAGMA application_id={STATE_FILE_APPLICATION_ID}")
        except sqlite3.Error as exc:
            self._db.close()
            raise StateError(str(self.path), f"not a usable state file: {exc}") from exc
        except BaseException:
            self._db.close()
            raise

    def _check_version(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StateError(
                str(self.path),
                f"state file schema {version} is newer than this version understands "
                f"({SCHEMA_VERSION})",
            )

    def _check_own(self) -> set[str]:
        """Raise :class:`StateError` unless the file is empty or a consumer's state file.

        The check runs before anything is written to the file. Otherwise ``--state`` given the
        service's own database, or another application's, would put the consumer's tables,
        journal mode and schema version in it. A file that is not an SQLite database at all is
        named as such. Return the tables the file holds.
        """
        try:
            application_id = self._db.execute("PRAGMA application_id").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            if exc.sqlite_errorname != "SQLITE_NOTADB":
                raise
            raise StateError(
                str(self.path),
                "not a simplefeed state file: not an SQLite database at all (give the consumer"
                " a file of its own, or a path where none is)",
            ) from exc
        tables = {
            row[0]
            for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        foreign = sorted(tables - _TABLES)
        if application_id not in (0, STATE_FILE_APPLICATION_ID) or foreign:
            held = f" (it holds {', '.join(foreign[:5])})" if foreign else ""
            raise StateError(
                str(self.path),
                f"not a simplefeed state file but another application's SQLite database{held}:"
                " give the consumer a file of its own",
            )
        return tables

    # -- checkpoints ---------------------------------------------------------------------

    def load_checkpoint(self, feed_url: str) -> Checkpoint | None:
        row = self._query(
            "SELECT entry_id, seq, page_url FROM checkpoints WHERE feed_url = ?", (feed_url,)
        )
        if row is None:
            return None
        with damaged_values(self.path, "checkpoint"):
            return Checkpoint(entry_id=row[0], seq=int(row[1]), page_url=row[2])

    def save_checkpoint(
        self,
        feed_url: str,
        checkpoint: Checkpoint,
        now: float,
        processed: Sequence[tuple[int, str]] = (),
    ) -> None:
        """Store the checkpoint durably, fsynced before returning.

        The same transaction stores ``processed``: the sequence numbers and ids of the entries
        processed since the checkpoint before, in order. None means the checkpoint was moved,
        back or forward past entries not processed. Then the entries remembered past it are
        forgotten. The entries older than the last :data:`PROCESSED_KEPT` are forgotten too, a
        run at a time.
        """
        seq = checkpoint.seq
        try:
            with self._lock:
                self._set_durable(True)
                db = self._db
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.execute(
                        "INSERT INTO checkpoints (feed_url, entry_id, seq, page_url, saved_at) "
                        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (feed_url) DO UPDATE SET "
                        "entry_id = excluded.entry_id, seq = excluded.seq, "
                        "page_url = excluded.page_url, saved_at = excluded.saved_at",
                        (feed_url, checkpoint.entry_id, seq, checkpoint.page_url, now),
                    )
                    if processed:
                        db.executemany(
                            "INSERT OR REPLACE INTO processed "
                            "(feed_url, first_seq, last_seq, entry_ids) VALUES (?, ?, ?, ?)",
                            [(feed_url, *run) for run in _runs(processed)],
                        )
                        # first_seq <= last_seq. The bound on first_seq (the key) keeps the
                        # delete to the runs it removes. On last_seq alone it would read every
                        # row. With 10,000 rows, a save would take 0.45 ms instead of 0.13.
                        oldest = seq - PROCESSED_KEPT
                        db.execute(
                            "DELETE FROM processed"
                            " WHERE feed_url = ? AND first_seq <= ? AND last_seq <= ?",
                            (feed_url, oldest, oldest),
                        )
                    else:
                        self._forget_processed_after(feed_url, seq)
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._failed("write", exc) from exc

    def _forget_processed_after(self, feed_url: str, seq: int) -> None:
        """Within a transaction: forget the entries remembered past ``seq``."""
        rows = self._db.execute(
            "SELECT first_seq, last_seq, entry_ids FROM processed"
            " WHERE feed_url = ? AND last_seq > ?",
            (feed_url, seq),
        ).fetchall()
        self._db.execute(
            "DELETE FROM processed WHERE feed_url = ? AND last_seq > ?", (feed_url, seq)
        )
        for first, last, entry_ids in rows:
            if first <= seq:  # The checkpoint is in this run. Its entries up to it stay.
                with damaged_values(self.path, "processed entries"):
                    kept = _run_ids(first, last, entry_ids)[: seq - first + 1]
                self._db.execute(
                    "INSERT INTO processed (feed_url, first_seq, last_seq, entry_ids) "
                    "VALUES (?, ?, ?, ?)",
                    (feed_url, first, first + len(kept) - 1, json.dumps(kept)),
                )

    def processed(self, feed_url: str) -> dict[int, str]:
        """The entries processed last, as id by sequence number.

        There are at least :data:`PROCESSED_KEPT` of them, when there were as many.
        """
        rows = self._all(
            "SELECT first_seq, last_seq, entry_ids FROM processed WHERE feed_url = ?"
            " ORDER BY first_seq",
            (feed_url,),
        )
        read: dict[int, str] = {}
        with damaged_values(self.path, "processed entries"):
            for first, last, entry_ids in rows:
                read.update(enumerate(_run_ids(first, last, entry_ids), start=first))
        return read

    def processed_id(self, feed_url: str, seq: int) -> str | None:
        """The id of the entry numbered ``seq`` processed here, if it is remembered."""
        # Find the run starting last at or before ``seq`` on the key, because runs do not
        # overlap. A bound on last_seq too would read every row before it.
        row = self._query(
            "SELECT first_seq, last_seq, entry_ids FROM processed"
            " WHERE feed_url = ? AND first_seq <= ? ORDER BY first_seq DESC LIMIT 1",
            (feed_url, seq),
        )
        if row is None:
            return None
        with damaged_values(self.path, "processed entries"):
            ids = _run_ids(*row)
        first = row[0]
        return ids[seq - first] if seq < first + len(ids) else None

    def clear_checkpoint(self, feed_url: str) -> None:
        self._write("DELETE FROM checkpoints WHERE feed_url = ?", (feed_url,))
        self._write("DELETE FROM processed WHERE feed_url = ?", (feed_url,))

    def checkpoints(self) -> dict[str, Checkpoint]:
        """Every entry point's checkpoint, by entry point."""
        rows = self._all("SELECT feed_url, entry_id, seq, page_url FROM checkpoints ORDER BY 1", ())
        with damaged_values(self.path, "checkpoint"):
            return {row[0]: Checkpoint(row[1], int(row[2]), row[3]) for row in rows}

    # -- parked entries ------------------------------------------------------------------

    def park(
        self, feed_url: str, entry_id: str, seq: int, entry: dict[str, Any], error: str, now: float
    ) -> None:
        """Keep an entry whose handler failed, durably.

        An entry parked again has its error updated and its attempts counted.
        """
        self._write(
            "INSERT INTO parked (feed_url, entry_id, seq, entry_json, error, parked_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (feed_url, entry_id) DO UPDATE SET "
            "error = excluded.error, attempts = parked.attempts + 1",
            (feed_url, entry_id, seq, json_text(entry), error, now),
        )

    def parked(self, feed_url: str | None = None) -> list[Parked]:
        """Parked entries, oldest first (by entry point, then sequence number)."""
        where, params = ("WHERE feed_url = ? ", (feed_url,)) if feed_url is not None else ("", ())
        rows = self._all(
            "SELECT feed_url, entry_id, seq, entry_json, error, parked_at, attempts FROM parked "
            f"{where}ORDER BY feed_url, seq",
            params,
        )
        with damaged_values(self.path, "parked entry"):
            return [
                Parked(row[0], row[1], int(row[2]), _object(row[3]), row[4], row[5], int(row[6]))
                for row in rows
            ]

    def parked_count(self, feed_url: str) -> int:
        row = self._query("SELECT count(*) FROM parked WHERE feed_url = ?", (feed_url,))
        return int(row[0]) if row is not None else 0

    def unpark(self, feed_url: str, entry_id: str) -> bool:
        """Forget a parked entry; return whether there was one."""
        return self._execute(
            "DELETE FROM parked WHERE feed_url = ? AND entry_id = ?",
            (feed_url, entry_id),
            durable=True,
        )

    # -- the head as last seen -----------------------------------------------------------

    def save_head(self, feed_url: str, seq: int, now: float) -> None:
        self._write_cache(
            "INSERT INTO heads (feed_url, head_seq, seen_at) VALUES (?, ?, ?) "
            "ON CONFLICT (feed_url) DO UPDATE SET head_seq = excluded.head_seq, "
            "seen_at = excluded.seen_at",
            (feed_url, seq, now),
        )

    def forget_head(self, feed_url: str) -> None:
        self._write_cache("DELETE FROM heads WHERE feed_url = ?", (feed_url,))

    def heads(self) -> dict[str, Head]:
        rows = self._all("SELECT feed_url, head_seq, seen_at FROM heads", ())
        with damaged_values(self.path, "head"):
            return {row[0]: Head(row[0], int(row[1]), float(row[2])) for row in rows}

    # -- HTTP cache ----------------------------------------------------------------------

    def get_document(self, url: str) -> CachedDocument | None:
        row = self._query(
            "SELECT body, etag, last_modified, immutable, fetched_at, max_age, coding "
            "FROM documents WHERE url = ?",
            (url,),
        )
        if row is None:
            return None
        with damaged_values(self.path, "cached document"):
            return CachedDocument(
                url=url,
                body=bytes(row[0]),
                etag=row[1],
                last_modified=row[2],
                immutable=bool(row[3]),
                fetched_at=float(row[4]),
                max_age=None if row[5] is None else float(row[5]),
                coding=row[6],
            )

    def put_document(self, document: CachedDocument) -> None:
        self._write_cache(
            "INSERT INTO documents (url, body, etag, last_modified, immutable, fetched_at, "
            "max_age, coding) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (url) DO UPDATE SET "
            "body = excluded.body, etag = excluded.etag, last_modified = excluded.last_modified, "
            "immutable = excluded.immutable, fetched_at = excluded.fetched_at, "
            "max_age = excluded.max_age, coding = excluded.coding",
            (
                document.url,
                document.body,
                document.etag,
                document.last_modified,
                int(document.immutable),
                document.fetched_at,
                document.max_age,
                document.coding,
            ),
        )

    def holds_archived_page(self, url: str) -> bool:
        """Whether an archived page is kept under ``url``, to reuse without a request."""
        return (
            self._query("SELECT 1 FROM documents WHERE url = ? AND immutable", (url,)) is not None
        )

    def delete_document(self, url: str) -> None:
        self._write_cache("DELETE FROM documents WHERE url = ?", (url,))

    def delete_archived_pages(self) -> None:
        """Forget every archived page the cache holds (pinned: ``immutable``)."""
        self._write_cache("DELETE FROM documents WHERE immutable", ())

    # -- plumbing ------------------------------------------------------------------------

    def _query(self, sql: str, params: tuple[object, ...]) -> tuple[Any, ...] | None:
        try:
            with self._lock:
                row: tuple[Any, ...] | None = self._db.execute(sql, params).fetchone()
        except sqlite3.Error as exc:
            raise self._failed("read", exc) from exc
        return row

    def _all(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return self._db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._failed("read", exc) from exc

    def _write(self, sql: str, params: tuple[object, ...]) -> None:
        """One durable transaction, fsynced before returning."""
        self._execute(sql, params, durable=True)

    def _write_cache(self, sql: str, params: tuple[object, ...]) -> None:
        """One atomic transaction, not fsynced on its own."""
        self._execute(sql, params, durable=False)

    def _execute(self, sql: str, params: tuple[object, ...], *, durable: bool) -> bool:
        """Run one write; return whether it changed a row."""
        try:
            with self._lock:
                self._set_durable(durable)
                return self._db.execute(sql, params).rowcount > 0  # Autocommit: a transaction.
        except sqlite3.Error as exc:
            raise self._failed("write", exc) from exc

    def _set_durable(self, durable: bool) -> None:
        """Make commits from here on fsynced (``durable``) or only atomic; under the lock."""
        if durable != self._durable:
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._durable = durable

    @contextlib.contextmanager
    def processing(self) -> Iterator[None]:
        """Hold the right to process entries from this state file.

        Raise :class:`StateError` at once if another consumer holds it. Otherwise two consumers
        on one file would each handle every new entry, at the same time. A cron job's run
        overlapping the next is one such case. The right is an exclusive ``flock`` on
        ``<state file>.lock``. It is released when the block ends or the process does, however
        it ends. Reading the file (``simplefeed consumer status``) needs no such right.

        The lock file is named after the state file's real path. So a consumer given a symbolic
        link to it takes the same lock. A state file with another hard link is refused. A
        consumer given the other name would take another lock, and two consumers would each
        handle every entry.
        """
        real = Path(os.path.realpath(self.path))
        try:
            links = os.stat(real).st_nlink
        except OSError as exc:
            raise StateError(str(self.path), f"cannot read it: {exc}") from exc
        if links > 1:
            raise StateError(
                str(self.path),
                f"it has {links} hard links: a consumer given another of its names would not"
                " see this one's lock (copy it, or link it symbolically)",
            )
        lock_path = real.with_name(real.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StateError(str(self.path), f"cannot open its lock file: {exc}") from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StateError(
                    str(self.path),
                    "another consumer (or a retry of its parked entries) is processing from"
                    " this state file; each consumer that runs at the same time needs a state"
                    " file of its own",
                ) from None
            yield
        finally:
            os.close(fd)  # Closing releases the lock.

    def _failed(self, what: str, exc: sqlite3.Error) -> StateError:
        if self._closed:  # SQLite would say "Cannot operate on a closed database".
            return StateError(str(self.path), f"{what} after the state file was closed")
        return StateError(str(self.path), f"{what} failed: {exc}")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._db.close()

    def __enter__(self) -> StateFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise TypeError(f"a JSON {type(value).__name__}, not an object")
    return value


def _run_ids(first: object, last: object, text: object) -> list[str]:
    """The ids of a run of entries processed, numbered ``first`` to ``last``, from its JSON array.

    Raise ValueError or TypeError when the row does not hold that.
    """
    if not isinstance(first, int) or not isinstance(last, int) or not isinstance(text, str):
        raise TypeError("a run of entries that is not two numbers and a text")
    value = json.loads(text)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TypeError("not a JSON array of strings")
    if len(value) != last - first + 1:
        raise ValueError(f"{len(value)} ids for the entries numbered {first} to {last}")
    return value


def _runs(processed: Sequence[tuple[int, str]]) -> Iterator[tuple[int, int, str]]:
    """``processed`` (sequence number, id) as runs of consecutive numbers.

    Each run gives its first and last number and the ids as a JSON array. A consumer makes one
    run a page.
    """
    first = last = processed[0][0]
    ids = [processed[0][1]]
    for seq, entry_id in processed[1:]:
        if seq != last + 1:
            yield first, last, json.dumps(ids)
            first, ids = seq, []
        last = seq
        ids.append(entry_id)
    yield first, last, json.dumps(ids)

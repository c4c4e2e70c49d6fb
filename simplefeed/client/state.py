"""The consumer's durable state: its checkpoint and its HTTP cache, in one SQLite file.

Five tables, keyed by absolute URL:

``checkpoints``  one row per entry point: the last processed entry's id, its sequence number and
                 the permanent URL of its page (``via`` / ``self``): a restart walks back from
                 the entry point to that page (archived pages after it come from the cache) and
                 on from the entry there.
``documents``    the HTTP cache: body and validators of every document fetched, the body as it
                 came over the wire (``coding``: its Content-Encoding, ``identity`` for none).
                 Rows flagged ``immutable`` (archived pages) are used without asking the
                 network; the others are revalidated (conditional GET) once their ``max-age``
                 is over. An archived page is kept while a run may need it again: when an
                 entry point's checkpoint moves to another page, the page it leaves is deleted
                 (the trigger ``passed_page_forgotten``, in the checkpoint's own transaction).
                 Checkpoints only move forward, and resuming starts at the checkpoint's page,
                 so a page older than it is never read again; the cache holds the pages from
                 the checkpoint's to the newest walked, however long a consumer follows its
                 feed (it kept every page of the history, about 4 KB each, before).
``parked``       entries whose handler failed with ``on_error="park"``: the entry (as JSON), the
                 last error, when it was parked and how many times it was tried. Written
                 durably, before the checkpoint moves past the entry.
``heads``        per entry point, the newest sequence number seen at its head and when: what
                 ``simplefeed consumer status`` reports the lag from.
``processed``    per entry point, the ids of the last :data:`PROCESSED_KEPT` entries processed,
                 a row for each checkpoint's run of them (its first and last sequence number,
                 the ids as a JSON array), written with the checkpoint in its transaction:
                 what the consumer read, to tell where a feed that no longer holds its last
                 entry (a server's database restored from a backup) parts from it, and which
                 entries it read that the feed lost. A row a page rather than one an entry:
                 100 rows written a page slowed a catch-up by about 7 %.

The file runs in WAL mode. Checkpoint writes are committed with ``synchronous=FULL``: fsynced
before :meth:`StateFile.save_checkpoint` returns, so a checkpoint that was acknowledged
survives a crash or a power cut. Cache writes are committed with ``synchronous=NORMAL``: atomic
all the same, but not fsynced on their own (the next checkpoint's fsync takes them along); a
power cut may lose the last few, which costs a request each, never a wrong answer. That halves
the fsyncs of a catch-up that stores its checkpoint once a page. Writes are single statements
in autocommit mode (each its own transaction), but for a checkpoint and the entries it
covers (:meth:`StateFile.save_checkpoint`).

The consumer only needs the two small protocols :class:`CheckpointStore` and :class:`PageCache`;
:class:`StateFile` is the one implementation shipped.
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

#: 3: documents.coding (version 2 kept bodies decoded: its rows are ``identity``). The trigger
#: ``passed_page_forgotten`` came later without a new version: a file that has it is read alike
#: by the versions before it, and opening a file adds it. 4: the table ``processed`` (a version
#: 3 consumer would refuse a file with a table it does not know).
SCHEMA_VERSION = 4
#: How many of the last entries processed a state file remembers, per entry point: a restore
#: that lost more than that many entries read here is told, but not where the feed parts.
PROCESSED_KEPT = 10_000

#: The tables of a state file: a file holding any other is not one.
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
    #: Never changes (an archived page): reused without a request while it is kept.
    immutable: bool
    #: When it was last fetched or revalidated, in seconds since the epoch (the injected clock).
    fetched_at: float
    #: Freshness lifetime from Cache-Control (None: revalidate every time).
    max_age: float | None
    #: The body's content coding(s), as Content-Encoding gave them (``identity``: none).
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
    """Values read from a state file made into ours: one damaged (edited by hand, written by
    another program) is a :class:`StateError` naming it (exit 6), not an internal error (70)."""
    try:
        yield
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        raise StateError(str(path), f"a damaged {what} ({detail[:200]})") from exc


class StateFile:
    """A SQLite file holding checkpoints and the HTTP cache. Use as a context manager.

    The file is created if missing, never its directory: a mistyped directory
    (``--state /var/lib/consmer/c.sqlite3``) made a new, empty state file there, and the
    consumer read the whole history again. :class:`StateError` names the missing directory."""

    def __init__(self, path: str | PathLike[str], *, read_only: bool = False) -> None:
        """``read_only``: open an existing file only to read it (``simplefeed consumer status``
        and ``parked``), as it is: no table, column or schema version added, so that a file a
        consumer of an older release still uses stays readable by it."""
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
            # One connection, used from the consumer's thread and its read-ahead thread (the
            # page being read next), one statement at a time (the lock).
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
                    # An empty file (``touch consumer.sqlite3``, or an SQLite database without
                    # a table): SQLite takes it as an empty database, and so does the consumer,
                    # a state file no consumer has run on; read as one, in memory, the file left
                    # as it is (it said "no such table: checkpoints", exit 6).
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
            if "coding" not in columns:  # a version 2 file
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
        """Raise :class:`StateError` unless the file is empty or a consumer's state file, before
        anything is written to it: ``--state`` given the service's own database (or another
        application's) put the consumer's tables, journal mode and schema version in it. A file
        that is not an SQLite database at all is said to be so (it said "not a usable state
        file: file is not a database"). Return the tables the file holds."""
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
        """Store durably (fsynced before returning), in one transaction with ``processed``,
        the sequence numbers and ids of the entries processed since the checkpoint before, in
        order. None: the checkpoint was moved (back, or forward past entries not processed),
        and the entries remembered past it are forgotten. The entries older than the last
        :data:`PROCESSED_KEPT` are forgotten too, a run at a time."""
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
                        # first_seq <= last_seq: the bound on it (the key) keeps the delete
                        # to the runs it removes; on last_seq alone it read every row, and a
                        # checkpoint an entry read 10,000 (0.13 ms a save became 0.45).
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
            if first <= seq:  # the run the checkpoint is in: its entries up to it stay
                with damaged_values(self.path, "processed entries"):
                    kept = _run_ids(first, last, entry_ids)[: seq - first + 1]
                self._db.execute(
                    "INSERT INTO processed (feed_url, first_seq, last_seq, entry_ids) "
                    "VALUES (?, ?, ?, ?)",
                    (feed_url, first, first + len(kept) - 1, json.dumps(kept)),
                )

    def processed(self, feed_url: str) -> dict[int, str]:
        """The entries processed last (at least :data:`PROCESSED_KEPT` of them, when there
        were as many): id by sequence number."""
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
        # The run starting last at or before ``seq`` (runs do not overlap), found on the key:
        # a bound on last_seq too read every row before it.
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
        """Keep an entry whose handler failed (durably); parked again, its error is updated
        and its attempts counted."""
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
        """Forget a parked entry; whether there was one."""
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
        """Whether an archived page is kept under ``url`` (reused without a request)."""
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
        """One durable transaction (fsynced before returning)."""
        self._execute(sql, params, durable=True)

    def _write_cache(self, sql: str, params: tuple[object, ...]) -> None:
        """One atomic transaction, not fsynced on its own."""
        self._execute(sql, params, durable=False)

    def _execute(self, sql: str, params: tuple[object, ...], *, durable: bool) -> bool:
        """Run one write; whether it changed a row."""
        try:
            with self._lock:
                self._set_durable(durable)
                return self._db.execute(sql, params).rowcount > 0  # autocommit: one transaction
        except sqlite3.Error as exc:
            raise self._failed("write", exc) from exc

    def _set_durable(self, durable: bool) -> None:
        """Commits from here on are fsynced (``durable``) or only atomic; under the lock."""
        if durable != self._durable:
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._durable = durable

    @contextlib.contextmanager
    def processing(self) -> Iterator[None]:
        """Hold the right to process entries from this state file, or raise
        :class:`StateError` at once if another consumer holds it: two consumers on one file
        (a cron job's run overlapping the next) each handled every new entry, at the same
        time. An exclusive ``flock`` on ``<state file>.lock``, released when the block ends
        or the process does, however it ends. Reading the file (``simplefeed consumer
        status``) needs no such right.

        The lock file is named after the state file's real path, so that a consumer given a
        symbolic link to it takes the same lock; a state file with another hard link is
        refused (a consumer given the other name would take another lock: a reviewer's
        trial had two consumers handle every entry, each, so)."""
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
            os.close(fd)  # releases the lock

    def _failed(self, what: str, exc: sqlite3.Error) -> StateError:
        if self._closed:  # (SQLite says "Cannot operate on a closed database")
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
    """The ids of a run of entries processed, numbered ``first`` to ``last``, from its JSON
    array (ValueError or TypeError when the row does not hold that)."""
    if not isinstance(first, int) or not isinstance(last, int) or not isinstance(text, str):
        raise TypeError("a run of entries that is not two numbers and a text")
    value = json.loads(text)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TypeError("not a JSON array of strings")
    if len(value) != last - first + 1:
        raise ValueError(f"{len(value)} ids for the entries numbered {first} to {last}")
    return value


def _runs(processed: Sequence[tuple[int, str]]) -> Iterator[tuple[int, int, str]]:
    """``processed`` (sequence number, id) as runs of consecutive numbers: first, last, the
    ids as a JSON array. One run a page as a consumer processes them."""
    first = last = processed[0][0]
    ids = [processed[0][1]]
    for seq, entry_id in processed[1:]:
        if seq != last + 1:
            yield first, last, json.dumps(ids)
            first, ids = seq, []
        last = seq
        ids.append(entry_id)
    yield first, last, json.dumps(ids)

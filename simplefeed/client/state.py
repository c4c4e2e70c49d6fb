"""The consumer's durable state: its checkpoint and its HTTP cache, in one SQLite file.

Two tables, keyed by absolute URL:

``checkpoints``  one row per entry point: the last processed entry's id, its sequence number and
                 the permanent URL of its page (``via`` / ``self``), so a restart resumes with one
                 request to that page instead of a walk.
``documents``    the HTTP cache: body and validators of every document fetched. Rows flagged
                 ``immutable`` (archived pages) are used for good without asking the network;
                 the others are revalidated (conditional GET) once their ``max-age`` is over.

The file runs in WAL mode. Checkpoint writes are committed with ``synchronous=FULL``: fsynced
before :meth:`StateFile.save_checkpoint` returns, so a checkpoint that was acknowledged
survives a crash or a power cut. Cache writes are committed with ``synchronous=NORMAL``: atomic
all the same, but not fsynced on their own (the next checkpoint's fsync takes them along); a
power cut may lose the last few, which costs a request each, never a wrong answer. That halves
the fsyncs of a catch-up that stores its checkpoint once a page. Writes are single statements
in autocommit mode (each its own transaction).

The consumer only needs the two small protocols :class:`CheckpointStore` and :class:`PageCache`;
:class:`StateFile` is the one implementation shipped.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from simplefeed.client.errors import StateError

__all__ = ["CachedDocument", "Checkpoint", "CheckpointStore", "PageCache", "StateFile"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    feed_url    TEXT PRIMARY KEY,
    entry_id    TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    page_url    TEXT NOT NULL,
    saved_at    REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    url           TEXT PRIMARY KEY,
    body          BLOB NOT NULL,
    etag          TEXT,
    last_modified TEXT,
    immutable     INTEGER NOT NULL DEFAULT 0,
    fetched_at    REAL NOT NULL,
    max_age       REAL
);
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
    body: bytes
    etag: str | None
    last_modified: str | None
    #: Never changes (an archived page): reused without a request, for good.
    immutable: bool
    #: When it was last fetched or revalidated, in seconds since the epoch (the injected clock).
    fetched_at: float
    #: Freshness lifetime from Cache-Control (None: revalidate every time).
    max_age: float | None

    def fresh(self, now: float) -> bool:
        if self.immutable:
            return True
        return self.max_age is not None and now - self.fetched_at < self.max_age


class CheckpointStore(Protocol):
    def load_checkpoint(self, feed_url: str) -> Checkpoint | None: ...

    def save_checkpoint(self, feed_url: str, checkpoint: Checkpoint, now: float) -> None: ...


class PageCache(Protocol):
    def get_document(self, url: str) -> CachedDocument | None: ...

    def put_document(self, document: CachedDocument) -> None: ...

    def delete_document(self, url: str) -> None: ...


class StateFile:
    """A SQLite file holding checkpoints and the HTTP cache. Use as a context manager."""

    def __init__(self, path: str | PathLike[str]) -> None:
        self.path = Path(path)
        try:
            if self.path.parent != Path(""):
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        except (OSError, sqlite3.Error) as exc:
            raise StateError(str(self.path), f"cannot open the state file: {exc}") from exc
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._durable = True
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StateError(
                    str(self.path),
                    f"state file schema {version} is newer than this version understands "
                    f"({SCHEMA_VERSION})",
                )
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            self._db.close()
            raise StateError(str(self.path), f"not a usable state file: {exc}") from exc
        except BaseException:
            self._db.close()
            raise

    # -- checkpoints ---------------------------------------------------------------------

    def load_checkpoint(self, feed_url: str) -> Checkpoint | None:
        row = self._query(
            "SELECT entry_id, seq, page_url FROM checkpoints WHERE feed_url = ?", (feed_url,)
        )
        if row is None:
            return None
        return Checkpoint(entry_id=row[0], seq=int(row[1]), page_url=row[2])

    def save_checkpoint(self, feed_url: str, checkpoint: Checkpoint, now: float) -> None:
        """Store durably (fsynced before returning)."""
        self._write(
            "INSERT INTO checkpoints (feed_url, entry_id, seq, page_url, saved_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (feed_url) DO UPDATE SET "
            "entry_id = excluded.entry_id, seq = excluded.seq, page_url = excluded.page_url, "
            "saved_at = excluded.saved_at",
            (feed_url, checkpoint.entry_id, checkpoint.seq, checkpoint.page_url, now),
        )

    def clear_checkpoint(self, feed_url: str) -> None:
        self._write("DELETE FROM checkpoints WHERE feed_url = ?", (feed_url,))

    # -- HTTP cache ----------------------------------------------------------------------

    def get_document(self, url: str) -> CachedDocument | None:
        row = self._query(
            "SELECT body, etag, last_modified, immutable, fetched_at, max_age "
            "FROM documents WHERE url = ?",
            (url,),
        )
        if row is None:
            return None
        return CachedDocument(
            url=url,
            body=bytes(row[0]),
            etag=row[1],
            last_modified=row[2],
            immutable=bool(row[3]),
            fetched_at=float(row[4]),
            max_age=None if row[5] is None else float(row[5]),
        )

    def put_document(self, document: CachedDocument) -> None:
        self._write_cache(
            "INSERT INTO documents (url, body, etag, last_modified, immutable, fetched_at, "
            "max_age) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (url) DO UPDATE SET "
            "body = excluded.body, etag = excluded.etag, last_modified = excluded.last_modified, "
            "immutable = excluded.immutable, fetched_at = excluded.fetched_at, "
            "max_age = excluded.max_age",
            (
                document.url,
                document.body,
                document.etag,
                document.last_modified,
                int(document.immutable),
                document.fetched_at,
                document.max_age,
            ),
        )

    def delete_document(self, url: str) -> None:
        self._write_cache("DELETE FROM documents WHERE url = ?", (url,))

    # -- plumbing ------------------------------------------------------------------------

    def _query(self, sql: str, params: tuple[object, ...]) -> tuple[Any, ...] | None:
        try:
            row: tuple[Any, ...] | None = self._db.execute(sql, params).fetchone()
        except sqlite3.Error as exc:
            raise StateError(str(self.path), f"read failed: {exc}") from exc
        return row

    def _write(self, sql: str, params: tuple[object, ...]) -> None:
        """One durable transaction (fsynced before returning)."""
        self._execute(sql, params, durable=True)

    def _write_cache(self, sql: str, params: tuple[object, ...]) -> None:
        """One atomic transaction, not fsynced on its own."""
        self._execute(sql, params, durable=False)

    def _execute(self, sql: str, params: tuple[object, ...], *, durable: bool) -> None:
        try:
            if durable != self._durable:
                self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
                self._durable = durable
            self._db.execute(sql, params)  # autocommit: one transaction
        except sqlite3.Error as exc:
            raise StateError(str(self.path), f"write failed: {exc}") from exc

    def close(self) -> None:
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

"""A transactional outbox: events written in the producer app's own transaction, shipped later.

:class:`Outbox` gives the table, for the app's metadata and its migrations. It also gives
:meth:`Outbox.add`, which writes an event with the app's own connection or ORM ``Session``.
The event is in the outbox if and only if the app's transaction commits. :class:`Relay` ships
the committed rows to the service, in commit order. It ships them through
:class:`~simplefeed.producer.Publisher`, and deletes them once the server has acknowledged
them.

Commit order. A relay ships rows in the order of their ids. So ids must be handed out in the
order their transactions commit. An autoincrement id alone does not ensure that. On
PostgreSQL, a transaction may take id 7, and commit after another took id 8 and committed.
So :meth:`Outbox.add` first takes a lock that the transaction holds until it ends. On
PostgreSQL that is ``pg_advisory_xact_lock``. SQLite has one writer at a time already, and
holds its write lock until it commits. With the lock, when a relay sees a row, every row of a
lower id has committed or rolled back. So adding an event serialises the app's transactions
from that point on. Add it last.

This module is the outbox's one door to the app's database, so it alone knows its dialects.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Integer,
    MetaData,
    Row,
    String,
    Table,
    Text,
    create_engine,
    func,
    select,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.orm import Session

from simplefeed import metrics
from simplefeed.errors import SimplefeedError
from simplefeed.lines import one_line
from simplefeed.producer import Prepared, Publisher, PublishRefused, PublishUnavailable, prepare
from simplefeed.settings import FEED_NAME_RE, Limits, mask_url

__all__ = [
    "Backlog",
    "Outbox",
    "OutboxUnavailable",
    "Relay",
    "RelayBusy",
    "RelayRefused",
    "backlog",
]

log = logging.getLogger(__name__)

#: The start of the outbox table's default name. The feed's name follows it.
TABLE_PREFIX = "simplefeed_outbox_"


def _lock_key(purpose: str, table: str) -> int:
    """Make a PostgreSQL advisory lock key of the outbox's own, a signed 64-bit integer."""
    digest = hashlib.sha256(f"simplefeed {purpose} {table}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _now_us() -> int:
    return time.time_ns() // 1000


class Outbox:
    """The outbox of one feed: its table, and :meth:`add`.

    ``metadata`` is the app's own, so its migrations (alembic's autogenerate) see the table.
    The table is ``simplefeed_outbox_<feed>`` unless ``table_name`` says otherwise. ``limits``
    are the server's, when its operator changed them. Then an event is checked as the server
    will check it.
    """

    def __init__(
        self,
        feed: str,
        *,
        metadata: MetaData | None = None,
        table_name: str | None = None,
        limits: Limits | None = None,
    ) -> None:
        if not FEED_NAME_RE.match(feed):
            raise ValueError(f"{feed!r} is not a feed name")
        self.feed = feed
        self.limits = limits or Limits()
        name = table_name or f"{TABLE_PREFIX}{feed}"
        self.table = Table(
            name,
            metadata if metadata is not None else MetaData(),
            # Integer on SQLite, because only an INTEGER PRIMARY KEY is its rowid. AUTOINCREMENT
            # never hands an id out twice.
            Column(
                "id",
                BigInteger().with_variant(Integer, "sqlite"),
                primary_key=True,
                autoincrement=True,
            ),
            Column("entry_id", String(1024), nullable=False),
            Column("event", Text, nullable=False),
            Column("created_us", BigInteger, nullable=False),
            sqlite_autoincrement=True,
        )
        #: One statement, so SQLAlchemy compiles it once.
        self._insert = self.table.insert()
        #: The PostgreSQL channel a commit notifies, and the advisory lock keys.
        self.channel = name
        self.add_lock = _lock_key("outbox add", name)
        self.relay_lock = _lock_key("outbox relay", name)

    def add(self, connection: Connection | Session, event: Mapping[str, Any]) -> str:
        """Write ``event`` in the transaction of ``connection``, and return its entry id.

        ``connection`` is a Core connection or an ORM ``Session``. The entry id is the event's
        own, or one made here. The event is checked first with the server's rules. It raises
        the door's :class:`~simplefeed.errors.RequestError` if the server would refuse it.
        """
        prepared = prepare(event, self.limits)
        bind = connection.get_bind() if isinstance(connection, Session) else connection
        if bind.dialect.name == "postgresql":
            # The lock is held until the transaction ends, so ids commit in order (see the
            # module's docstring). The notification is delivered when the transaction commits,
            # and never if it rolls back. One round trip does both.
            connection.execute(
                select(func.pg_advisory_xact_lock(self.add_lock), func.pg_notify(self.channel, ""))
            )
        connection.execute(
            self._insert,
            {"entry_id": prepared.id, "event": prepared.body, "created_us": _now_us()},
        )
        return prepared.id


class RelayBusy(SimplefeedError):
    """Another relay holds the outbox, and it ships the rows."""


class RelayRefused(PublishRefused):
    """The server refused a row, so the relay stopped. The outbox keeps its rows.

    ``row_id`` and ``entry_id`` name the row that the server's error points at. An error that
    points at no event, such as a 401 or a 404, names the first row of the refused batch. The
    relay deletes no row of that batch. So a row the server took ships again later, as a
    replay. The relay ships nothing past the refused row, because that would break commit order.
    """

    def __init__(self, refused: PublishRefused, row_id: int, entry_id: str) -> None:
        super().__init__(
            refused.status,
            refused.error,
            refused.message,
            index=refused.index,
            field=refused.field,
            body=refused.body,
        )
        self.row_id = row_id
        self.entry_id = entry_id
        if refused.index is None:
            said = f"the server refused the batch from outbox row {row_id} (entry {entry_id})"
            then = ""
        else:
            said = f"the server refused outbox row {row_id} (entry {entry_id})"
            then = f". Fix or delete row {row_id}, then start the relay again"
        self.args = (f"{said}: {refused}. The relay stopped, and the outbox keeps its rows{then}",)


@dataclass(frozen=True)
class Backlog:
    """What an outbox holds that the server has not acknowledged yet."""

    rows: int
    #: Seconds since the oldest row was added. It is 0 with no row.
    oldest_age_s: float


#: How long a relay's statement waits for a SQLite write lock that the app holds.
SQLITE_BUSY_TIMEOUT_S = 30.0


class OutboxUnavailable(SimplefeedError):
    """The outbox's database cannot be opened or read.

    The URL may be wrong, the table may be missing, or the database may not answer.
    """


def _engine(url: str) -> Engine:
    """Make an engine on the app's database, for a relay."""
    try:
        if make_url(url).get_backend_name() == "sqlite":
            return create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
        return create_engine(url)
    except (ArgumentError, NoSuchModuleError) as exc:
        raise OutboxUnavailable(f"{mask_url(url)!r} is not a database URL: {exc}") from None


@contextlib.contextmanager
def _reading(outbox: Outbox) -> Iterator[None]:
    """Raise the database's errors as :class:`OutboxUnavailable`, naming the outbox."""
    try:
        yield
    except DBAPIError as exc:
        said = one_line(str(exc.orig)) if exc.orig is not None else one_line(str(exc))
        raise OutboxUnavailable(f"the outbox {outbox.table.name!r}: {said}") from exc


def backlog(outbox: Outbox, database: str | Engine) -> Backlog:
    """Count the rows of ``outbox`` waiting in ``database``, and give the age of the oldest."""
    engine = _engine(database) if isinstance(database, str) else database
    t = outbox.table
    try:
        with _reading(outbox), engine.connect() as c:
            rows, oldest = c.execute(select(func.count(), func.min(t.c.created_us))).one()
    finally:
        if engine is not database:
            engine.dispose()
    age = 0.0 if oldest is None else max(0.0, (_now_us() - oldest) / 1e6)
    return Backlog(rows=rows, oldest_age_s=age)


#: How often a relay on SQLite looks for new rows in follow mode.
POLL_S = 0.01
#: The longest a relay on PostgreSQL waits for a notification before it looks anyway.
LISTEN_S = 1.0
#: How often an idle relay in follow mode measures its backlog for the metrics.
BACKLOG_EVERY_S = 1.0
#: How long a relay in follow mode pauses after the server did not take a batch in time.
UNAVAILABLE_PAUSE_S = 1.0


class Relay:
    """Ships an outbox's committed rows to the server in commit order.

    It deletes the rows once the server has acknowledged them. One relay ships at a time. The
    others wait (follow mode) or give way (:class:`RelayBusy`). The database or the kernel
    ends the lock with its holder. So a relay killed with SIGKILL hands the lock on at once.
    On PostgreSQL the lock is an advisory lock held by the relay's connection. On SQLite it is
    an exclusive ``flock`` on ``<database file>.relay-lock``. A relay may be killed after the
    server stored a batch and before the rows were deleted. Then that batch is shipped again.
    The events keep their ids, so the server takes them as replays. No event is published
    twice.
    """

    def __init__(
        self,
        outbox: Outbox,
        database: str | Engine,
        publisher: Publisher,
        *,
        batch_size: int = 1000,
    ) -> None:
        self.outbox = outbox
        self.table = outbox.table
        self.engine = _engine(database) if isinstance(database, str) else database
        self._own_engine = isinstance(database, str)
        self.publisher = publisher
        self.batch_size = batch_size
        self.postgres = self.engine.dialect.name == "postgresql"

    # -- what it ships ------------------------------------------------------------------

    def backlog(self) -> Backlog:
        """Count the rows waiting, give the age of the oldest, and set both as metrics."""
        found = backlog(self.outbox, self.engine)
        metrics.relay_backlog(self.outbox.feed, found.rows, found.oldest_age_s)
        return found

    def _ship_all(self) -> int:
        """Ship every row committed now, batch by batch, and return how many.

        The caller holds the relay lock. While a batch is on its way to the server, a thread
        reads the next one and deletes the one before. So the database's time hides behind
        the server's. A batch is deleted only once the server has acknowledged it. The rows
        after a batch are the next batch, because a lower id never commits after a higher one
        (see the module's docstring).
        """
        shipped = 0
        with ThreadPoolExecutor(max_workers=1) as database:
            rows = self._read_after(None)
            deleting: Future[None] | None = None
            while rows:
                ahead = database.submit(self._read_after, rows[-1].id)
                self._send(rows)
                if deleting is not None:
                    deleting.result()
                deleting = database.submit(self._delete, [r.id for r in rows])
                shipped += len(rows)
                metrics.relay_shipped(self.outbox.feed, len(rows))
                rows = ahead.result()
            if deleting is not None:
                deleting.result()
        return shipped

    def _send(self, rows: Sequence[Row[int, str, str]]) -> None:
        """Send a batch of rows. On a refusal, log and raise which row it was."""
        try:
            self.publisher.send([Prepared(id=r.entry_id, body=r.event) for r in rows])
        except PublishRefused as exc:
            at = exc.index if exc.index is not None and exc.index < len(rows) else 0
            refused = RelayRefused(exc, rows[at].id, rows[at].entry_id)
            log.error("relay: %s", one_line(str(refused)))
            raise refused from exc

    def _read_after(self, last: int | None) -> Sequence[Row[int, str, str]]:
        """Read the next batch: the first rows in id order, after ``last`` if given."""
        t = self.table
        query = select(t.c.id, t.c.entry_id, t.c.event).order_by(t.c.id).limit(self.batch_size)
        if last is not None:
            query = query.where(t.c.id > last)
        with self.engine.connect() as c:
            return c.execute(query).all()

    def _delete(self, ids: list[int]) -> None:
        with self.engine.begin() as c:
            c.execute(self.table.delete().where(self.table.c.id.in_(ids)))

    def ship(self) -> int:
        """Ship every row committed now, and return how many.

        Raises :class:`RelayBusy` when another relay holds the outbox. Also raises
        :class:`OutboxUnavailable`, and the publisher's errors.
        """
        with _reading(self.outbox), self._locked(None) as held:
            if not held:
                raise RelayBusy(f"another relay is shipping the outbox {self.table.name!r}")
            shipped = self._ship_all()
        self.backlog()
        return shipped

    def follow(self, stop: threading.Event) -> None:
        """Ship rows as they are committed, until ``stop`` is set.

        PostgreSQL's notifications wake it. On SQLite it polls. It waits while another relay
        holds the outbox. A server may not take a batch in time, or a database may fail or
        restart. Then it tries again after a pause, and takes the lock and the listener anew.
        A refusal (:class:`~simplefeed.producer.PublishRefused`) ends it, and the rows stay.
        """
        failures = (PublishUnavailable, DBAPIError, self.engine.dialect.loaded_dbapi.Error)
        while not stop.is_set():
            try:
                self._follow_held(stop)
                return
            except failures as exc:
                # The rows stay. The next try ships them, the same events again.
                log.warning("relay: %s; trying again", one_line(str(exc)))
                stop.wait(UNAVAILABLE_PAUSE_S)

    def _follow_held(self, stop: threading.Event) -> None:
        with self._locked(stop) as held:
            if not held:
                return
            with self._waiter() as wait:
                measured = 0.0
                while not stop.is_set():
                    # Measure the backlog after each shipment, and once a second while idle.
                    # Not at every look for new rows.
                    if self._ship_all() or time.monotonic() - measured > BACKLOG_EVERY_S:
                        self.backlog()
                        measured = time.monotonic()
                    wait(stop)

    # -- the dialects ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, stop: threading.Event | None) -> Iterator[bool]:
        """Hold the relay lock while the block runs.

        Yields False if another relay holds it and ``stop`` is None. Otherwise this waits for
        the lock, until ``stop`` is set.
        """
        lock = self._postgres_lock if self.postgres else self._file_lock
        with lock(stop) as held:
            yield held

    @contextlib.contextmanager
    def _postgres_lock(self, stop: threading.Event | None) -> Iterator[bool]:
        with self.engine.connect() as c:
            c = c.execution_options(isolation_level="AUTOCOMMIT")
            try_lock = select(func.pg_try_advisory_lock(self.outbox.relay_lock))
            while not c.execute(try_lock).scalar_one():
                if stop is None or stop.wait(POLL_S * 10):
                    yield False
                    return
            try:
                yield True
            finally:
                c.execute(select(func.pg_advisory_unlock(self.outbox.relay_lock)))

    @contextlib.contextmanager
    def _file_lock(self, stop: threading.Event | None) -> Iterator[bool]:
        database = make_url(str(self.engine.url)).database
        if not database:
            raise RelayBusy("a relay on SQLite needs a database file")
        fd = os.open(f"{Path(database).resolve()}.relay-lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if stop is None or stop.wait(POLL_S * 10):
                        yield False
                        return
            yield True
        finally:
            os.close(fd)  # The lock goes with the descriptor.

    @contextlib.contextmanager
    def _waiter(self) -> Iterator[Any]:
        """Yield a function that waits until new rows may be there, or ``stop`` is set."""
        if not self.postgres:
            yield lambda stop: stop.wait(POLL_S)
            return
        with self.engine.connect() as c:
            c = c.execution_options(isolation_level="AUTOCOMMIT")
            c.exec_driver_sql(
                f"LISTEN {self.engine.dialect.identifier_preparer.quote(self.outbox.channel)}"
            )
            listener = c.connection.driver_connection
            assert listener is not None

            def wait(stop: threading.Event) -> None:
                # A notification sent while the relay was shipping is already queued.
                for _ in listener.notifies(timeout=LISTEN_S, stop_after=1):
                    pass

            yield wait

    def close(self) -> None:
        if self._own_engine:
            self.engine.dispose()

"""A transactional outbox: events written in the producer app's own transaction, shipped later.

:class:`Outbox` gives the table (for the app's metadata and its migrations) and
:meth:`Outbox.add`, which writes an event with the app's own connection or ORM session. The
event is in the outbox if and only if the app's transaction commits. :class:`Relay` ships the
committed rows to the service, in commit order, through :class:`~simplefeed.producer.Publisher`,
and deletes them once the server has acknowledged them.

Commit order. A relay ships rows in the order of their ids, so ids must be handed out in the
order their transactions commit. An autoincrement id alone is not: on PostgreSQL, a transaction
may take id 7, and commit after another took id 8 and committed. So :meth:`Outbox.add` takes a
lock first that the transaction holds until it ends: ``pg_advisory_xact_lock`` on PostgreSQL.
SQLite has one writer at a time already, whose write lock is held until it commits. With the
lock, when a relay sees a row, every row of a lower id has committed or rolled back. Adding an
event thus serialises the app's transactions from that point on: add it last.

This module is the outbox's one door to the app's database, so it alone knows its dialects.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    select,
)
from sqlalchemy.orm import Session

from simplefeed.producer import prepare
from simplefeed.settings import FEED_NAME_RE, Limits

__all__ = ["Outbox"]

log = logging.getLogger(__name__)

#: What the outbox's table is called by default, the feed's name after it.
TABLE_PREFIX = "simplefeed_outbox_"


def _lock_key(purpose: str, table: str) -> int:
    """A PostgreSQL advisory lock key of the outbox's own: a signed 64-bit integer."""
    digest = hashlib.sha256(f"simplefeed {purpose} {table}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _now_us() -> int:
    return time.time_ns() // 1000


class Outbox:
    """The outbox of one feed: its table, and :meth:`add`.

    ``metadata``: the app's own, so its migrations (alembic's autogenerate) see the table. The
    table is ``simplefeed_outbox_<feed>`` unless ``table_name`` says otherwise. ``limits``: the
    server's, when its operator changed them, so that an event is checked as the server will.
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
            # Integer on SQLite: only an INTEGER PRIMARY KEY is its rowid, and AUTOINCREMENT
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
        #: The PostgreSQL channel a commit notifies, and the advisory lock keys.
        self.channel = name
        self.add_lock = _lock_key("outbox add", name)
        self.relay_lock = _lock_key("outbox relay", name)

    def add(self, connection: Connection | Session, event: Mapping[str, Any]) -> str:
        """Write ``event`` in the transaction of ``connection`` (a Core connection or an ORM
        session); its entry id, given or made here.

        The event is checked first with the server's rules, and raises the door's
        :class:`~simplefeed.errors.RequestError` if the server would refuse it."""
        prepared = prepare(event, self.limits)
        bind = connection.get_bind() if isinstance(connection, Session) else connection
        if bind.dialect.name == "postgresql":
            # Held until the transaction ends, so ids commit in order (the module's docstring).
            connection.execute(select(func.pg_advisory_xact_lock(self.add_lock)))
            # Delivered when the transaction commits, and never if it rolls back.
            connection.execute(select(func.pg_notify(self.channel, "")))
        connection.execute(
            self.table.insert().values(
                entry_id=prepared.id, event=prepared.body, created_us=_now_us()
            )
        )
        return prepared.id

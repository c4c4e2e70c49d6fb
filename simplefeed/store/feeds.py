"""Feeds: creation, lookup, and the lock that serialises appenders of one feed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Row, bindparam, func, literal_column, select, update
from sqlalchemy.exc import IntegrityError

from simplefeed.errors import FeedExists, FeedNotFound
from simplefeed.model import Feed
from simplefeed.store.tables import feeds

# Built once: SQLAlchemy then reuses the compiled form without rebuilding it per call.
_GET = select(feeds).where(feeds.c.name == bindparam("name"))
#: The first key of the transaction-level advisory lock that serialises the appenders of a feed
#: on PostgreSQL (the second key is the feed's id): ``pg_advisory_xact_lock(ADVISORY_LOCK_SPACE,
#: feeds.id)``. Taken before the feed's row is read or written. Appenders wait for it in a
#: queue and are woken one at a time; waiting on the row lock instead, every waiter woke at each
#: commit to fight for the row again, which halved throughput on a busy machine (and grew the
#: feeds table, one row, to 21 pages of dead versions in ten seconds). An application sharing
#: the database must not take advisory locks in this space ("SFd0").
ADVISORY_LOCK_SPACE = int.from_bytes(b"SFd0", "big")
#: The appenders' lock, by the feed's name (PostgreSQL).
ADVISORY_LOCK = select(
    func.pg_advisory_xact_lock(
        literal_column(str(ADVISORY_LOCK_SPACE)),
        select(feeds.c.id).where(feeds.c.name == bindparam("name")).scalar_subquery(),
    )
)
#: Also run, pipelined, by :func:`simplefeed.store.entries.lock_feed_and_find`.
LOCK = _GET.with_for_update()
ADVANCE = (
    update(feeds)
    .where(feeds.c.id == bindparam("feed_id"))
    .values(
        head_seq=bindparam("new_head_seq"),
        head_updated_us=bindparam("new_head_updated_us"),
        modified_us=bindparam("new_modified_us"),
    )
)


def _feed(row: Row[tuple[object, ...]]) -> Feed:
    return feed_from(row._mapping)


def feed_from(m: Mapping[Any, Any]) -> Feed:
    """A feed from its row's columns by name."""
    return Feed(
        id=m["id"],
        name=m["name"],
        uuid=m["uuid"],
        title=m["title"],
        page_size=m["page_size"],
        created_us=m["created_us"],
        head_seq=m["head_seq"],
        head_updated_us=m["head_updated_us"],
        modified_us=m["modified_us"],
    )


def get_feed(conn: Connection, name: str) -> Feed:
    row = conn.execute(_GET, {"name": name}).first()
    if row is None:
        raise FeedNotFound(name)
    return _feed(row)


def lock_feed(conn: Connection, name: str) -> Feed:
    """Read the feed's row and hold it until the transaction ends.

    On PostgreSQL appenders of one feed queue here, from any process on any node, for the
    feed's advisory lock (:data:`ADVISORY_LOCK_SPACE`), and commit in the order they got their
    sequence numbers; the row is then read ``FOR UPDATE`` too. On SQLite the write transaction
    (``BEGIN IMMEDIATE``) already holds the database's single write lock.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(ADVISORY_LOCK, {"name": name})
    row = conn.execute(LOCK, {"name": name}).first()
    if row is None:
        raise FeedNotFound(name)
    return _feed(row)


def list_feeds(conn: Connection) -> list[Feed]:
    return [_feed(r) for r in conn.execute(select(feeds).order_by(feeds.c.id))]


def create_feed(
    conn: Connection, *, name: str, title: str, page_size: int, uuid: str, now_us: int
) -> Feed:
    try:
        with conn.begin_nested():
            conn.execute(
                feeds.insert().values(
                    name=name,
                    uuid=uuid,
                    title=title,
                    page_size=page_size,
                    created_us=now_us,
                    head_seq=0,
                    head_updated_us=None,
                    modified_us=now_us,
                )
            )
    except IntegrityError:
        raise FeedExists(name) from None
    return get_feed(conn, name)


def advance_head(
    conn: Connection, feed: Feed, *, head_seq: int, head_updated_us: int, modified_us: int
) -> None:
    conn.execute(
        ADVANCE,
        {
            "feed_id": feed.id,
            "new_head_seq": head_seq,
            "new_head_updated_us": head_updated_us,
            "new_modified_us": modified_us,
        },
    )

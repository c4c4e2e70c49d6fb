"""Frozen pages: rendered bytes stored once, when the page fills."""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import Connection, Row, bindparam, select

from simplefeed.model import FrozenPage
from simplefeed.store.tables import pages

#: Also used by :func:`simplefeed.store.entries.append_entries`.
INSERT = pages.insert()
_CHUNK = (
    select(pages)
    .where(pages.c.feed_id == bindparam("feed_id"), pages.c.number > bindparam("after"))
    .order_by(pages.c.number)
    .limit(bindparam("n"))
)
_GET = select(pages).where(
    pages.c.feed_id == bindparam("feed_id"), pages.c.number == bindparam("n")
)


def _page(row: Row[tuple[object, ...]]) -> FrozenPage:
    m = row._mapping
    return FrozenPage(
        feed_id=m["feed_id"],
        number=m["number"],
        body=bytes(m["body"]),
        etag=m["etag"],
        frozen_us=m["frozen_us"],
    )


def insert_page(conn: Connection, page: FrozenPage, *, first_seq: int, last_seq: int) -> None:
    """Store a frozen page. The primary key (feed_id, number) makes a second freeze fail."""
    conn.execute(
        INSERT,
        {
            "feed_id": page.feed_id,
            "number": page.number,
            "first_seq": first_seq,
            "last_seq": last_seq,
            "frozen_us": page.frozen_us,
            "etag": page.etag,
            "body": page.body,
        },
    )


def get_page(conn: Connection, feed_id: int, number: int) -> FrozenPage | None:
    row = conn.execute(_GET, {"feed_id": feed_id, "n": number}).first()
    return None if row is None else _page(row)


def iter_pages(conn: Connection, feed_id: int, chunk: int = 64) -> Iterator[FrozenPage]:
    """Every frozen page of a feed in order, ``chunk`` at a time: a feed of millions of entries
    has tens of thousands of pages, too many bodies to hold at once."""
    after = 0
    while True:
        rows = conn.execute(_CHUNK, {"feed_id": feed_id, "after": after, "n": chunk}).all()
        for row in rows:
            yield _page(row)
        if len(rows) < chunk:
            return
        after = rows[-1]._mapping["number"]


def list_pages(conn: Connection, feed_id: int) -> list[FrozenPage]:
    rows = conn.execute(select(pages).where(pages.c.feed_id == feed_id).order_by(pages.c.number))
    return [_page(r) for r in rows]

"""Frozen pages: rendered bytes stored once, when the page fills."""

from __future__ import annotations

from sqlalchemy import Connection, Row, select

from simplefeed.model import FrozenPage
from simplefeed.store.tables import pages


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
        pages.insert().values(
            feed_id=page.feed_id,
            number=page.number,
            first_seq=first_seq,
            last_seq=last_seq,
            frozen_us=page.frozen_us,
            etag=page.etag,
            body=page.body,
        )
    )


def get_page(conn: Connection, feed_id: int, number: int) -> FrozenPage | None:
    row = conn.execute(
        select(pages).where(pages.c.feed_id == feed_id, pages.c.number == number)
    ).first()
    return None if row is None else _page(row)


def list_pages(conn: Connection, feed_id: int) -> list[FrozenPage]:
    rows = conn.execute(select(pages).where(pages.c.feed_id == feed_id).order_by(pages.c.number))
    return [_page(r) for r in rows]

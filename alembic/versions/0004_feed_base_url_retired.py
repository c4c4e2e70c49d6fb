"""feeds: the base URL their archived pages were rendered with, and whether they are retired

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22

Feeds frozen before this revision get their base URL from their first archived page's own
``rel="self"`` link (``<base>/pages/1`` for the default feed, ``<base>/feeds/<name>/pages/1``
for another): the bytes every cache and consumer holds are what decides it. Each feed so
recorded is printed. A feed whose page says nothing readable keeps none, and starting the
service then refuses until ``simplefeed archive rebase`` records one.
"""

from __future__ import annotations

import re
import sys
from xml.etree import ElementTree

import sqlalchemy as sa

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

ATOM = "{http://www.w3.org/2005/Atom}"


def base_url_of(name: str, body: bytes) -> str | None:
    """The base URL of an archived page's self link, or None if there is none to read."""
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        return None
    for link in root.findall(f"{ATOM}link"):
        if link.get("rel") == "self":
            match = re.fullmatch(
                rf"(https?://.+?)(?:/feeds/{re.escape(name)})?/pages/[1-9][0-9]*",
                link.get("href") or "",
            )
            return match.group(1) if match else None
    return None


def upgrade() -> None:
    with op.batch_alter_table("feeds") as batch:
        batch.add_column(sa.Column("base_url", sa.Text(), nullable=True))
        batch.add_column(sa.Column("retired_us", sa.BigInteger(), nullable=True))
    conn = op.get_bind()
    feeds = sa.table("feeds", sa.column("id"), sa.column("name"), sa.column("base_url"))
    pages = sa.table("pages", sa.column("feed_id"), sa.column("number"), sa.column("body"))
    first = (
        sa.select(feeds.c.id, feeds.c.name, pages.c.body)
        .join(pages, pages.c.feed_id == feeds.c.id)
        .where(pages.c.number == 1)
        .order_by(feeds.c.id)
    )
    for feed_id, name, body in conn.execute(first).all():
        base_url = base_url_of(name, bytes(body))
        if base_url is None:
            print(
                f"simplefeed: feed {name!r} has archived pages, but its page 1 names no base URL:"
                " none recorded (`simplefeed archive rebase URL` records one)",
                file=sys.stderr,
            )
            continue
        conn.execute(feeds.update().where(feeds.c.id == feed_id).values(base_url=base_url))
        print(
            f"simplefeed: feed {name!r}: its archived pages link to {base_url} (recorded)",
            file=sys.stderr,
        )


def downgrade() -> None:
    with op.batch_alter_table("feeds") as batch:
        batch.drop_column("retired_us")
        batch.drop_column("base_url")

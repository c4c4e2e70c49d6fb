"""pages: a digest instead of the bytes

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07

The database keeps no page's bytes any more: each page's file in the archive holds them, and its
entries render them again, byte for byte. ``pages.body`` and ``pages.etag`` give way to
``pages.sha256``, the digest of the bytes.

No page is lost. Before a byte leaves the database, every page whose file is missing from the
archive directory (SIMPLEFEED_ARCHIVE_DIR, ``archive`` in the directory the command runs in) is
written there from the database's bytes, with its compressed copies. A file that holds other
bytes stops the migration before it changes anything: the database's bytes may be the only copy
of that page, and the file may be one that readers hold.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

from alembic import op
from simplefeed import codings

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

#: Pages read at a time: their bytes are held in memory together.
BATCH = 64

_feeds = sa.table("feeds", sa.column("id"), sa.column("name"))
_pages = sa.table(
    "pages",
    sa.column("feed_id"),
    sa.column("number"),
    sa.column("frozen_us"),
    sa.column("body"),
    sa.column("sha256"),
)


def _archive_dir() -> Path:
    return Path(os.environ.get("SIMPLEFEED_ARCHIVE_DIR") or "archive").absolute()


def _path(archive_dir: Path, feed: str, number: int) -> Path:
    default = os.environ.get("SIMPLEFEED_DEFAULT_FEED") or "events"
    if feed == default:
        return archive_dir / "pages" / str(number)
    return archive_dir / "feeds" / feed / "pages" / str(number)


def _pages_with_bytes(conn: sa.Connection) -> Iterator[tuple[int, str, int, int, bytes]]:
    """Every page as (feed id, feed name, number, freeze time, bytes), a batch at a time."""
    after = (0, 0)
    while True:
        rows = conn.execute(
            sa.select(
                _pages.c.feed_id, _feeds.c.name, _pages.c.number, _pages.c.frozen_us, _pages.c.body
            )
            .join(_feeds, _feeds.c.id == _pages.c.feed_id)
            .where(sa.tuple_(_pages.c.feed_id, _pages.c.number) > sa.tuple_(*after))
            .order_by(_pages.c.feed_id, _pages.c.number)
            .limit(BATCH)
        ).all()
        for feed_id, name, number, frozen_us, body in rows:
            yield feed_id, name, number, frozen_us, bytes(body)
        if len(rows) < BATCH:
            return
        after = (rows[-1][0], rows[-1][2])


def _write(path: Path, body: bytes, frozen_us: int) -> None:
    """Write ``path`` atomically: a temporary file, fsync, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.utime(tmp, ns=(frozen_us * 1000, frozen_us * 1000))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_missing_files(conn: sa.Connection) -> None:
    """Write the file (and copies) of every page whose file is missing; refuse, changing
    nothing, if a file holds other bytes than its page's."""
    archive_dir = _archive_dir()
    written = 0
    differ = []
    for _, name, number, frozen_us, body in _pages_with_bytes(conn):
        path = _path(archive_dir, name, number)
        try:
            on_disk = path.read_bytes()
        except FileNotFoundError:
            _write(path, body, frozen_us)
            for coding in codings.CODINGS:
                copy = path.with_name(path.name + codings.SUFFIXES[coding])
                _write(copy, codings.encode(body, coding), frozen_us)
            written += 1
            continue
        if on_disk != body:
            differ.append(str(path))
    if differ:
        shown = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        raise RuntimeError(
            f"{len(differ)} page files hold other bytes than the database's pages ({shown}):"
            " nothing migrated, because the database keeps no page bytes from this schema on."
            " Run `simplefeed archive verify` with the release you upgrade from, then"
            " `simplefeed archive rebuild` (it writes the database's pages) or move the files"
            " aside, and upgrade again."
        )
    if written:
        print(
            f"simplefeed: wrote {written} page files missing from {archive_dir} from the"
            " database's bytes, before they leave it",
            file=sys.stderr,
        )


def upgrade() -> None:
    conn = op.get_bind()
    write_missing_files(conn)
    with op.batch_alter_table("pages") as batch:
        batch.add_column(sa.Column("sha256", sa.String(length=64), nullable=True))
    for feed_id, _, number, _, body in _pages_with_bytes(conn):
        conn.execute(
            _pages.update()
            .where(_pages.c.feed_id == feed_id, _pages.c.number == number)
            .values(sha256=hashlib.sha256(body).hexdigest())
        )
    with op.batch_alter_table("pages") as batch:
        batch.alter_column("sha256", existing_type=sa.String(length=64), nullable=False)
        batch.drop_column("body")
        batch.drop_column("etag")


def _files_to_restore(conn: sa.Connection) -> Iterator[tuple[int, str, int, str, Path]]:
    """Every page as (feed id, feed name, number, digest, file path)."""
    archive_dir = _archive_dir()
    rows = conn.execute(
        sa.select(_pages.c.feed_id, _feeds.c.name, _pages.c.number, _pages.c.sha256)
        .join(_feeds, _feeds.c.id == _pages.c.feed_id)
        .order_by(_pages.c.feed_id, _pages.c.number)
    ).all()
    for feed_id, name, number, sha256 in rows:
        yield feed_id, name, number, sha256, _path(archive_dir, name, number)


def _file_problem(path: Path, sha256: str) -> str | None:
    try:
        body = path.read_bytes()
    except FileNotFoundError:
        return f"{path} is missing"
    if hashlib.sha256(body).hexdigest() != sha256:
        return f"{path} holds other bytes than its page"
    return None


def downgrade() -> None:
    """Take the bytes back into the database from the archive directory's files.

    Every file is checked against its digest before the schema changes. A missing or damaged
    file stops the downgrade with nothing changed, because SQLite runs no DDL in a transaction
    here. ``simplefeed archive rebuild`` writes such files again.
    """
    conn = op.get_bind()
    problems = [
        problem
        for _, _, _, sha256, path in _files_to_restore(conn)
        if (problem := _file_problem(path, sha256)) is not None
    ]
    if problems:
        shown = "; ".join(problems[:5]) + (
            f" and {len(problems) - 5} more" if len(problems) > 5 else ""
        )
        raise RuntimeError(
            f"{len(problems)} page files cannot give their bytes back ({shown}): nothing"
            " changed. Run `simplefeed archive rebuild`, then downgrade again."
        )
    with op.batch_alter_table("pages") as batch:
        batch.add_column(sa.Column("etag", sa.String(length=80), nullable=True))
        batch.add_column(sa.Column("body", sa.LargeBinary(), nullable=True))
    etag = sa.table("pages", sa.column("feed_id"), sa.column("number"), sa.column("etag"))
    for feed_id, _, number, sha256, path in _files_to_restore(conn):
        body = path.read_bytes()
        conn.execute(
            _pages.update()
            .where(_pages.c.feed_id == feed_id, _pages.c.number == number)
            .values(body=body)
        )
        conn.execute(
            etag.update()
            .where(etag.c.feed_id == feed_id, etag.c.number == number)
            .values(etag=f'"{sha256}"')
        )
    with op.batch_alter_table("pages") as batch:
        batch.alter_column("body", existing_type=sa.LargeBinary(), nullable=False)
        batch.alter_column("etag", existing_type=sa.String(length=80), nullable=False)
        batch.drop_column("sha256")

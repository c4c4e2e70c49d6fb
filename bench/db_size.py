"""The database's size per 100,000 entries, with page bytes (schema 0004) and without (0005).

::

    .venv/bin/python bench/db_size.py [--entries 100000] [--page-size 100] [--postgres URL]

A feed of ``--entries`` events (those of bench/recover.py: a title, a JSON object of about 300
bytes, an author and a category) is published through the core, in batches of a page, into a
database at the newest schema. Then a second database is made at 0004, the schema that kept
every page's bytes, holding the same rows, each page with its bytes (its file's) and ETag.
Both are measured after a full vacuum: the SQLite file's size, and on PostgreSQL the three
tables with their indexes and TOAST. Figures are scaled to 100,000 entries.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from alembic import command
from bench.recover import BASE_URL, event
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from simplefeed.store import schema
from simplefeed.store.schema import alembic_config

FEED_COLUMNS = (
    "id, name, uuid, title, page_size, created_us, head_seq, head_updated_us, modified_us,"
    " base_url, retired_us"
)
ENTRY_COLUMNS = "feed_id, seq, entry_id, updated_us, published_us, fingerprint, data"
OLD_PAGE_COLUMNS = "feed_id, number, first_seq, last_seq, frozen_us, etag, body"


def publish(url: str, archive_dir: Path, entries: int, page_size: int) -> Simplefeed:
    schema.upgrade(url)
    settings = Settings(
        database_url=url, archive_dir=archive_dir, base_url=BASE_URL, page_size=page_size
    )
    core = Simplefeed(settings)
    core.create_feed(settings.default_feed)
    for start in range(0, entries, page_size):
        core.publish(
            settings.default_feed, [event(i) for i in range(start, min(entries, start + page_size))]
        )
    return core


def copy_at_0004(core: Simplefeed, old: str) -> None:
    """The core's rows in ``old`` (migrated to 0004), each page with its file's bytes."""
    new = create_engine(core.settings.database_url)
    engine = create_engine(old)
    try:
        with new.connect() as src, engine.begin() as dst:
            names = dict(src.execute(text("SELECT id, name FROM feeds")).all())
            for table, columns in (("feeds", FEED_COLUMNS), ("entries", ENTRY_COLUMNS)):
                rows = src.execute(text(f"SELECT {columns} FROM {table}")).all()
                insert(dst, table, columns, [tuple(r) for r in rows])
            pages = []
            for feed_id, number, first, last, frozen_us, sha256 in src.execute(
                text("SELECT feed_id, number, first_seq, last_seq, frozen_us, sha256 FROM pages")
            ):
                body = core.page_path(names[feed_id], number).read_bytes()
                assert hashlib.sha256(body).hexdigest() == sha256
                pages.append((feed_id, number, first, last, frozen_us, f'"{sha256}"', body))
            insert(dst, "pages", OLD_PAGE_COLUMNS, pages)
    finally:
        new.dispose()
        engine.dispose()


def insert(conn: object, table: str, columns: str, rows: list[tuple[object, ...]]) -> None:
    names = columns.split(", ")
    marks = ", ".join(f":{n}" for n in names)
    statement = text(f"INSERT INTO {table} ({columns}) VALUES ({marks})")
    for start in range(0, len(rows), 1000):
        chunk = [dict(zip(names, row, strict=True)) for row in rows[start : start + 1000]]
        if chunk:
            conn.execute(statement, chunk)  # type: ignore[attr-defined]


def size(url: str) -> int:
    """Bytes the database takes after a full vacuum."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            if url.startswith("sqlite"):
                conn.execute(text("VACUUM"))
                path = make_url(url).database
                assert path is not None
                return Path(path).stat().st_size
            conn.execute(text("VACUUM FULL"))
            total = conn.execute(
                text(
                    "SELECT sum(pg_total_relation_size(t)) FROM"
                    " unnest(ARRAY['feeds', 'entries', 'pages']::regclass[]) AS t"
                )
            ).scalar()
            return int(total)
    finally:
        engine.dispose()


def postgres_database(admin_url: str, name: str) -> str:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def drop_postgres_database(admin_url: str, name: str) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def measure(backend: str, tmp: Path, entries: int, page_size: int, admin: str | None) -> None:
    if backend == "sqlite":
        new, old = f"sqlite:///{tmp / 'new.sqlite3'}", f"sqlite:///{tmp / 'old.sqlite3'}"
    else:
        assert admin is not None
        new = postgres_database(admin, "sf_size_new")
        old = postgres_database(admin, "sf_size_old")
    try:
        core = publish(new, tmp / f"archive-{backend}", entries, page_size)
        command.upgrade(alembic_config(old), "0004")
        copy_at_0004(core, old)
        core.close()
        before, after = size(old), size(new)
    finally:
        if backend != "sqlite":
            assert admin is not None
            drop_postgres_database(admin, "sf_size_new")
            drop_postgres_database(admin, "sf_size_old")
    scale = 100_000 / entries

    def mb(n: int) -> str:
        return f"{n * scale / 1e6:.1f} MB"

    print(
        f"| {backend} | {entries} | {mb(before)} | {mb(after)} | {after / before:.2f} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--postgres", help="a PostgreSQL server's URL (scratch databases)")
    parser.add_argument("--quick", action="store_true", help="20,000 entries, scaled")
    args = parser.parse_args()
    entries = 20_000 if args.quick else args.entries
    print("| database | entries | with page bytes (0004), per 100,000 | without (0005) | ratio |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        measure("sqlite", Path(tmp), entries, args.page_size, None)
        if args.postgres:
            measure("postgresql", Path(tmp), entries, args.page_size, args.postgres)


if __name__ == "__main__":
    main()

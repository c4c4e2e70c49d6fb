"""Migration 0005: the database gives up its page bytes without losing a page.

A database at 0004 (pages with their bytes) is made on a real SQLite file and a real
PostgreSQL database, filled with the rows the service wrote, and its archive directory loses
some page files. ``simplefeed db upgrade`` must write those from the database's bytes before
the column goes, and refuse, changing nothing, while a file holds other bytes. The downgrade
takes the bytes back from the files, and refuses, changing nothing, while one is missing or
damaged.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from bench.servers import scratch_postgres_database
from simplefeed import codings
from simplefeed.model import Event
from simplefeed.service import Simplefeed
from simplefeed.store.schema import alembic_config
from tests.conftest import query
from tests.test_cli_errors import run

BASE = "http://feeds.example.test"


@contextlib.contextmanager
def database_at(revision: str, like: str, tmp_path: Path) -> Iterator[str]:
    """An empty database of the same backend as ``like``, migrated to ``revision``."""
    from alembic import command

    if like.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / f'at-{revision}.sqlite3'}"
        command.upgrade(alembic_config(url), revision)
        yield url
        return
    with scratch_postgres_database("sf_at") as url:
        command.upgrade(alembic_config(url), revision)
        yield url


def copy_at_0004(core: Simplefeed, old: str) -> dict[tuple[str, int], bytes]:
    """Copy the core's feeds, entries and pages into ``old`` (a database at 0004), each page
    with its bytes and ETag as 0004 kept them; the pages' bytes by (feed, number)."""
    url = core.settings.database_url
    feeds = query(
        url,
        "SELECT id, name, uuid, title, page_size, created_us, head_seq,"
        " head_updated_us, modified_us, base_url, retired_us FROM feeds",
    )
    entries = query(
        url,
        "SELECT feed_id, seq, entry_id, updated_us, published_us, fingerprint, data FROM entries",
    )
    names = {row[0]: row[1] for row in feeds}
    bodies: dict[tuple[str, int], bytes] = {}
    pages = []
    for feed_id, number, first, last, frozen_us, sha256 in query(
        url, "SELECT feed_id, number, first_seq, last_seq, frozen_us, sha256 FROM pages"
    ):
        body = core.page_path(names[feed_id], number).read_bytes()
        assert hashlib.sha256(body).hexdigest() == sha256
        bodies[(names[feed_id], number)] = body
        pages.append((feed_id, number, first, last, frozen_us, f'"{sha256}"', body))
    engine = create_engine(old)
    try:
        with engine.begin() as conn:
            insert(
                conn,
                "feeds",
                "id, name, uuid, title, page_size, created_us, head_seq,"
                " head_updated_us, modified_us, base_url, retired_us",
                feeds,
            )
            insert(
                conn,
                "entries",
                "feed_id, seq, entry_id, updated_us, published_us, fingerprint, data",
                entries,
            )
            insert(
                conn, "pages", "feed_id, number, first_seq, last_seq, frozen_us, etag, body", pages
            )
    finally:
        engine.dispose()
    return bodies


def insert(conn: object, table: str, columns: str, rows: list[tuple[object, ...]]) -> None:
    names = columns.split(", ")
    marks = ", ".join(f":{n}" for n in names)
    for row in rows:
        conn.execute(  # type: ignore[attr-defined]
            text(f"INSERT INTO {table} ({columns}) VALUES ({marks})"),
            dict(zip(names, row, strict=True)),
        )


def published(core: Simplefeed) -> None:
    core.create_feed("orders", page_size=3)
    core.publish("events", [Event(title=f"e{i}") for i in range(12)])  # pages 1, 2
    core.publish("orders", [Event(title=f"o{i}") for i in range(10)])  # pages 1, 2, 3


def test_the_migration_writes_every_missing_page_file_before_the_bytes_leave(
    core: Simplefeed, tmp_path: Path
) -> None:
    published(core)
    with database_at("0004", core.settings.database_url, tmp_path) as old:
        bodies = copy_at_0004(core, old)
        archive_dir = tmp_path / "archive-0004"
        shutil.copytree(core.settings.archive_dir, archive_dir)
        lost = [archive_dir / "pages" / "2", archive_dir / "feeds" / "orders" / "pages" / "1"]
        for path in lost:
            path.unlink()
        for path in archive_dir.rglob("*.br"):
            path.unlink()  # copies missing too: pages frozen before there were copies
        env = {
            "SIMPLEFEED_DATABASE_URL": old,
            "SIMPLEFEED_BASE_URL": BASE,
            "SIMPLEFEED_ARCHIVE_DIR": str(archive_dir),
        }
        upgraded = run(tmp_path, "db", "upgrade", **env)
        assert upgraded.returncode == 0, upgraded.stderr
        assert upgraded.stderr.splitlines() == [
            f"simplefeed: wrote 2 page files missing from {archive_dir} from the database's"
            " bytes, before they leave it"
        ]
        assert "database migrated from schema 0004 to 0005" in upgraded.stdout
        for (feed, number), body in bodies.items():
            pages = archive_dir / "pages" if feed == "events" else archive_dir / "feeds" / feed
            path = pages / str(number) if feed == "events" else pages / "pages" / str(number)
            assert path.read_bytes() == body, path
        for path in lost:
            for coding in codings.CODINGS:
                copy = path.with_name(path.name + codings.SUFFIXES[coding])
                assert codings.decode(copy.read_bytes(), coding) == path.read_bytes()
        engine = create_engine(old)
        try:
            with engine.connect() as conn:
                columns = {c["name"] for c in inspect(conn).get_columns("pages")}
        finally:
            engine.dispose()
        assert columns == {"feed_id", "number", "first_seq", "last_seq", "frozen_us", "sha256"}
        names = dict(query(old, "SELECT id, name FROM feeds"))
        digests = {
            (names[feed_id], number): sha256
            for feed_id, number, sha256 in query(old, "SELECT feed_id, number, sha256 FROM pages")
        }
        assert digests == {k: hashlib.sha256(b).hexdigest() for k, b in bodies.items()}
        # The copies the migration did not write (those of files that were there): `archive
        # rebuild` writes them from the files, whose digests the database now holds.
        rebuilt = run(tmp_path, "archive", "rebuild", **env)
        assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
        verified = run(tmp_path, "archive", "verify", **env)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert "checked 5 archived pages, 0 problems" in verified.stdout


def test_the_migration_changes_nothing_while_a_page_file_holds_other_bytes(
    core: Simplefeed, tmp_path: Path
) -> None:
    published(core)
    with database_at("0004", core.settings.database_url, tmp_path) as old:
        bodies = copy_at_0004(core, old)
        archive_dir = tmp_path / "archive-0004"
        shutil.copytree(core.settings.archive_dir, archive_dir)
        (archive_dir / "pages" / "2").unlink()
        damaged = archive_dir / "pages" / "1"
        damaged.write_bytes(damaged.read_bytes().replace(b"e0", b"eX"))
        env = {
            "SIMPLEFEED_DATABASE_URL": old,
            "SIMPLEFEED_BASE_URL": BASE,
            "SIMPLEFEED_ARCHIVE_DIR": str(archive_dir),
        }
        upgraded = run(tmp_path, "db", "upgrade", **env)
        assert upgraded.returncode != 0
        assert f"1 page files hold other bytes than the database's pages ({damaged})" in (
            upgraded.stderr
        )
        assert query(old, "SELECT version_num FROM alembic_version") == [("0004",)]
        kept = query(old, "SELECT number, body FROM pages WHERE feed_id = 1 ORDER BY number")
        assert kept == [(1, bodies[("events", 1)]), (2, bodies[("events", 2)])]


def columns_of_pages(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {c["name"] for c in inspect(conn).get_columns("pages")}
    finally:
        engine.dispose()


def test_the_downgrade_takes_each_page_back_from_its_file(
    core: Simplefeed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from alembic import command

    published(core)
    url = core.settings.database_url
    names = dict(query(url, "SELECT id, name FROM feeds"))
    bodies = {
        (names[feed_id], number): core.page_path(names[feed_id], number).read_bytes()
        for feed_id, number in query(url, "SELECT feed_id, number FROM pages")
    }
    core.close()
    monkeypatch.setenv("SIMPLEFEED_ARCHIVE_DIR", str(core.settings.archive_dir))
    command.downgrade(alembic_config(url), "0004")
    assert query(url, "SELECT version_num FROM alembic_version") == [("0004",)]
    assert "sha256" not in columns_of_pages(url) and {"body", "etag"} <= columns_of_pages(url)
    kept = {
        (names[feed_id], number): (bytes(body), etag)
        for feed_id, number, body, etag in query(
            url, "SELECT feed_id, number, body, etag FROM pages"
        )
    }
    assert kept == {k: (b, f'"{hashlib.sha256(b).hexdigest()}"') for k, b in bodies.items()}
    # And back up again: the files are there, so nothing is written.
    command.upgrade(alembic_config(url), "head")
    digests = {
        (names[feed_id], number): sha256
        for feed_id, number, sha256 in query(url, "SELECT feed_id, number, sha256 FROM pages")
    }
    assert digests == {k: hashlib.sha256(b).hexdigest() for k, b in bodies.items()}


def test_the_downgrade_changes_nothing_while_a_page_file_is_missing_or_damaged(
    core: Simplefeed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from alembic import command

    published(core)
    url = core.settings.database_url
    core.page_path("events", 2).unlink()
    damaged = core.page_path("orders", 1)
    damaged.write_bytes(damaged.read_bytes().replace(b"o0", b"oX"))
    core.close()
    before = query(url, "SELECT feed_id, number, sha256 FROM pages ORDER BY feed_id, number")
    monkeypatch.setenv("SIMPLEFEED_ARCHIVE_DIR", str(core.settings.archive_dir))
    with pytest.raises(RuntimeError) as refused:
        command.downgrade(alembic_config(url), "0004")
    assert str(refused.value).startswith("2 page files cannot give their bytes back (")
    assert f"{core.page_path('events', 2)} is missing" in str(refused.value)
    assert f"{damaged} holds other bytes than its page" in str(refused.value)
    assert query(url, "SELECT version_num FROM alembic_version") == [("0005",)]
    assert columns_of_pages(url) == {
        "feed_id",
        "number",
        "first_seq",
        "last_seq",
        "frozen_us",
        "sha256",
    }
    assert (
        query(url, "SELECT feed_id, number, sha256 FROM pages ORDER BY feed_id, number") == before
    )

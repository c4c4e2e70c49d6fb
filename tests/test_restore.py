"""The service never writes over page files that are newer than a restored database.

Take a database restored from a backup older than the archive. The page files archived after
the backup are what readers and caches hold. They are the only copy of their entries. The
restored database would archive the same page numbers again, with other entries. The service
would then write its files over the newer ones, and `archive verify` would find nothing wrong.

So the service refuses to start on such a database. ``serve``, uWSGI's load and ``db upgrade``
all refuse. A process that could not check says so in ``/healthz``. The service never writes
over a page file that holds another page, of other entries. ``archive rebuild`` is the
operator's way to do that.

The tests use SQLite only. The backup and the restore follow docs/how-to/backup.md: the
``sqlite3`` backup API, with the ``-wal`` and ``-shm`` files removed. The checks read the
store's feeds and the archive's files, which work alike on PostgreSQL.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import replace
from pathlib import Path

import falcon.testing
import pytest

from bench.servers import sqlite_backup
from simplefeed.app import create_app
from simplefeed.model import Event
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from tests.conftest import FakeClock
from tests.test_cli_errors import one_line_error, run, wsgi_refusal


@pytest.fixture
def database_url(tmp_path: Path, sqlite_template: Path) -> str:
    path = tmp_path / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


def publish(core: Simplefeed, first: int, n: int) -> None:
    core.publish("events", [Event(title=f"event {i}") for i in range(first, first + n)])


def restored(core: Simplefeed, backup: Path) -> Settings:
    """Stop the service and restore the backup (docs/how-to/backup.md) under a new name.

    A new name is needed, because this process's SQLite keeps what it knew of the old file's
    WAL while any connection to it is open.
    """
    core.close()
    database = backup.with_name("restored.sqlite3")
    shutil.copyfile(backup, database)
    return replace(core.settings, database_url=f"sqlite:///{database}")


def environ(settings: Settings) -> dict[str, str]:
    return {
        "SIMPLEFEED_DATABASE_URL": settings.database_url,
        "SIMPLEFEED_ARCHIVE_DIR": str(settings.archive_dir),
        "SIMPLEFEED_BASE_URL": settings.base_url,
        "SIMPLEFEED_PAGE_SIZE": str(settings.page_size),
    }


@pytest.fixture
def after_restore(core: Simplefeed, tmp_path: Path) -> tuple[Settings, dict[int, bytes]]:
    """Restore a backup taken with pages 1-2 archived, after pages 3-4 were archived too.

    The files of pages 3-4 are written before the restore. Return the settings, and the files
    of pages 1-4 as they were.
    """
    publish(core, 1, 12)  # Pages 1-2 archived, 2 entries on page 3.
    backup = tmp_path / "backup.sqlite3"
    database = core.settings.database_url.removeprefix("sqlite:///")
    sqlite_backup(Path(database), backup)
    publish(core, 13, 10)  # Pages 3-4 archived.
    files = {n: core.page_path("events", n).read_bytes() for n in range(1, 5)}
    return restored(core, backup), files


def test_serve_and_db_upgrade_refuse_a_database_older_than_the_archive(
    after_restore: tuple[Settings, dict[int, bytes]], tmp_path: Path
) -> None:
    settings, _ = after_restore
    page3 = (settings.archive_dir / "pages" / "3").resolve()
    said = (
        f"the archive has page 3 of feed 'events' ({page3}), but the database has 2 archived"
        " pages: it is older than the archive (restored from a backup?)"
    )
    # `serve` stops before uWSGI starts. Otherwise this host name would stop it.
    line = one_line_error(
        run(tmp_path, "serve", "--host", "no-such-host.invalid", **environ(settings))
    )
    assert said in line and "restore a database backup made after" in line
    assert said in one_line_error(run(tmp_path, "db", "upgrade", **environ(settings)))
    # uWSGI's worker imports runtime/wsgi.py. Outside uWSGI, a refusal is status 1 and one
    # CRITICAL line.
    assert said in wsgi_refusal(tmp_path, **environ(settings))


def test_a_process_that_could_not_check_writes_no_page_file_over_another_page(
    after_restore: tuple[Settings, dict[int, bytes]],
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    """A process that could not check writes no page file over another page.

    Such a process runs on the restored database. It started while the database did not
    answer, or the database was put back under it. ``/healthz`` says the archive is ahead.
    When a page is archived, the newer file is kept, and the log and ``/healthz`` say so. The
    app sends the database's page. Reading the page does not write over the file either.
    """
    settings, files = after_restore
    core = Simplefeed(settings, clock=clock)  # New entry ids are uuid7s.
    try:
        client = falcon.testing.TestClient(create_app(settings, core=core))
        health = client.simulate_get("/healthz")
        assert health.status_code == 200
        (ahead,) = health.json["warnings"]
        assert "the archive has page 3 of feed 'events'" in ahead
        with caplog.at_level(logging.ERROR, logger="simplefeed"):
            publish(core, 100, 3)  # Archives page 3 with other entries than the file's.
        page3 = core.page_path("events", 3)
        assert page3.read_bytes() == files[3]  # Kept.
        kept = f"{page3.resolve()} holds another page 3 of feed 'events' than the database's"
        assert any(kept in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
        served = client.simulate_get("/pages/3")
        assert served.status_code == 200
        assert b"event 100" in served.content and served.content != files[3]
        assert page3.read_bytes() == files[3]  # The read wrote nothing over it.
        warnings = client.simulate_get("/healthz").json["warnings"]
        assert any(kept in w for w in warnings), warnings
        # The operator decides (docs/how-to/backup.md). `archive rebuild` writes the
        # database's pages.
        done = run(tmp_path, "archive", "rebuild", **environ(settings))
        assert done.returncode == 0, done.stderr
        assert page3.read_bytes() == served.content
        assert not any(kept in w for w in client.simulate_get("/healthz").json["warnings"])
    finally:
        core.close()


def test_a_damaged_page_file_is_still_written_again(core: Simplefeed, clock: FakeClock) -> None:
    """A damaged page file is still written again.

    A file cut short is not another page, so the app writes it again from the database.
    tests/test_page_files.py does the same for an edited file.
    """
    publish(core, 1, 5)
    page1 = core.page_path("events", 1)
    whole = page1.read_bytes()
    page1.write_bytes(whole[: len(whole) // 2])
    client = falcon.testing.TestClient(create_app(core.settings, core=core))
    assert client.simulate_get("/pages/1").content == whole
    assert page1.read_bytes() == whole
    assert "warnings" not in client.simulate_get("/healthz").json

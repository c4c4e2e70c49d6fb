"""Reading goes on while the database does not answer, and a full disk is said.

This covers issue #11, "Faults". The faults are real. One is a PostgreSQL that refuses
connections. Either nothing listens, or the database stops taking them and its connections
are ended. Another is a small real file system (tmpfs), filled up.

Archived pages are files. A process that has never seen the database serves them from the
page file alone, in every coding. It takes the validators from the file's bytes and mtime.

For the recent document and the working page, a process serves the version it last served.
It marks it stale (``Simplefeed-Stale``, max-age 1 s). That version is durable, because it
was shown once. A cold process has no such version, so it answers 503.

A file system may be short of SIMPLEFEED_MIN_FREE_BYTES. Publishing then refuses with 503
and Retry-After, before writing anything. /healthz says which directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import falcon.testing
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from bench.servers import free_port
from simplefeed import codings
from simplefeed.app import create_app
from simplefeed.app.resources import STALE_CACHE_CONTROL
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from tests.conftest import PG_ENV, FakeClock, PostgresDatabases, SequentialIds


def _settings(tmp_path: Path, url: str) -> Settings:
    return Settings(
        database_url=url,
        archive_dir=tmp_path / "archive",
        base_url="http://feeds.example.test",
        page_size=5,
        recent_max_age=10,
        default_feed="events",
    )


def _unavailable(result: falcon.testing.Result) -> None:
    assert result.status_code == 503, result.text
    assert result.headers["retry-after"] == "1"
    assert result.json["error"] == "unavailable"


def _publish(core: Simplefeed, count: int) -> falcon.testing.TestClient:
    token = core.create_token()
    client = falcon.testing.TestClient(
        create_app(core.settings, core=core), headers={"Authorization": f"Bearer {token}"}
    )
    events = [{"title": f"event {i}"} for i in range(count)]
    assert client.simulate_post("/entries", json=events).status_code == 201
    return client


def test_a_cold_process_serves_archived_pages_without_a_database(
    tmp_path: Path, database_url: str
) -> None:
    """A cold process serves archived pages without a database.

    The database is there for publishing. Then a process starts with the same archive, but its
    database does not answer, because nothing listens on its port.
    """
    # Archived a day ago, because the cold process reads the real clock. A page archived after
    # its time would be sent without Last-Modified (RFC 9110 8.8.2.1).
    a_day_ago = FakeClock(int(time.time() - 86_400) * 1_000_000)
    core = Simplefeed(_settings(tmp_path, database_url), clock=a_day_ago, new_uuid=SequentialIds())
    try:
        core.create_feed("events")
        warm = _publish(core, 7)  # Page 1 archived, page 2 working.
        served = {
            c: warm.simulate_get("/pages/1", headers={"Accept-Encoding": c})
            for c in ("identity", *codings.CODINGS)
        }
    finally:
        core.store.close()
    down = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/test?connect_timeout=2"
    cold = falcon.testing.TestClient(create_app(_settings(tmp_path, down)))
    for coding, before in served.items():
        result = cold.simulate_get("/pages/1", headers={"Accept-Encoding": coding})
        assert result.status_code == 200, result.text
        for name in ("ETag", "Last-Modified", "Cache-Control", "Content-Encoding", "Vary"):
            assert result.headers.get(name) == before.headers.get(name), (coding, name)
        assert result.content == before.content
        etag = before.headers["ETag"]
        again = cold.simulate_get(
            "/pages/1", headers={"Accept-Encoding": coding, "If-None-Match": etag}
        )
        assert again.status_code == 304
    _unavailable(cold.simulate_get("/pages/2"))  # The working page has no file, and was unseen.
    _unavailable(cold.simulate_get("/pages/3"))
    _unavailable(cold.simulate_get("/recent"))  # A cold process has no version to offer.


@contextlib.contextmanager
def _refusing(postgres: PostgresDatabases, url: str) -> Iterator[None]:
    """Make the database stop taking connections and end its connections, then bring it back.

    That is what a failover or an operator's restart looks like from here.
    """
    name = make_url(url).database
    with postgres.admin.connect() as conn:
        conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
        conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
            {"n": name},
        )
    try:
        yield
    finally:
        with postgres.admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))


def test_a_warm_process_serves_what_it_last_saw_while_postgresql_is_gone(
    tmp_path: Path, postgres: PostgresDatabases | None
) -> None:
    if postgres is None:
        pytest.skip(f"needs PostgreSQL: set {PG_ENV} to run it")
    url = postgres.new_database()
    core = Simplefeed(_settings(tmp_path, url), clock=FakeClock(), new_uuid=SequentialIds())
    try:
        core.create_feed("events")
        client = _publish(core, 7)
        before = {p: client.simulate_get(p) for p in ("/recent", "/pages/2")}
        with _refusing(postgres, url):
            for path, seen in before.items():
                stale = client.simulate_get(path)
                assert stale.status_code == 200, stale.text
                assert stale.content == seen.content
                assert stale.headers["ETag"] == seen.headers["ETag"]
                assert stale.headers["Cache-Control"] == STALE_CACHE_CONTROL
                assert stale.headers["Simplefeed-Stale"].startswith("database unavailable")
                coded = client.simulate_get(path, headers={"Accept-Encoding": "gzip"})
                assert codings.decode(coded.content, "gzip") == seen.content
                etag = seen.headers["ETag"]
                assert client.simulate_get(path, headers={"If-None-Match": etag}).status_code == 304
            assert client.simulate_get("/pages/1").status_code == 200  # From its file.
            _unavailable(client.simulate_post("/entries", json={"title": "refused"}))
            _unavailable(client.simulate_get("/feeds/other/recent"))  # Never seen.
        fresh = client.simulate_get("/recent")
        assert fresh.status_code == 200
        assert "Simplefeed-Stale" not in fresh.headers
        assert fresh.headers["Cache-Control"] == "public, max-age=10"
    finally:
        core.store.close()
        postgres.release(url)


# -- a full disk ------------------------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """Yield a real 4 MiB file system (tmpfs), and unmount it afterwards.

    The test skips where it cannot be mounted, as when not root.
    """
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def _fill(directory: Path, leave: int) -> Path:
    """Write a file that leaves about ``leave`` bytes free on ``directory``'s file system."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    filler = directory / "filler"
    with filler.open("wb") as f:
        f.write(b"\0" * max(free - leave, 0))
    return filler


def test_a_full_disk_refuses_publishing_before_writing(
    small_fs: Path, sqlite_template: Path
) -> None:
    database = small_fs / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, database)
    settings = replace(_settings(small_fs, f"sqlite:///{database}"), min_free_bytes=1024 * 1024)
    core = Simplefeed(settings, clock=FakeClock(), new_uuid=SequentialIds())
    try:
        core.create_feed("events")
        client = _publish(core, 7)
        assert client.simulate_get("/healthz").status_code == 200
        recent = client.simulate_get("/recent").content
        filler = _fill(small_fs, 512 * 1024)
        refused = client.simulate_post("/entries", json=[{"title": "x"}] * 5)
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "30"
        assert refused.json == {
            "error": "unavailable",
            "message": "the server is short of disk space; retry later",
        }
        health = client.simulate_get("/healthz")
        assert health.status_code == 503
        database_dir, archive_dir = health.json["problems"]
        assert database_dir.startswith(f"{small_fs} has ")
        assert archive_dir.startswith(f"{small_fs / 'archive'} has ")
        assert "SIMPLEFEED_MIN_FREE_BYTES" in archive_dir
        assert client.simulate_get("/recent").content == recent  # Unchanged. Reads go on.
        assert core.feed("events").head_seq == 7
        filler.unlink()
        assert client.simulate_post("/entries", json={"title": "y"}).status_code == 201
        assert client.simulate_get("/healthz").status_code == 200
    finally:
        core.store.close()


def test_page_files_a_full_disk_kept_from_being_written_are_said_in_healthz(
    small_fs: Path, tmp_path: Path, sqlite_template: Path
) -> None:
    """Page files that a full disk kept from being written are said in /healthz.

    Here the operator turns the guard off with SIMPLEFEED_MIN_FREE_BYTES=0, and the archive's
    file system is full. Every page file then fails to be written. A probe that made an empty
    file would still say ok, because a full file system allows that. So the probe writes a
    block. A page file whose write failed is a problem until it is there.
    """
    database = tmp_path / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, database)
    settings = replace(
        _settings(tmp_path, f"sqlite:///{database}"), archive_dir=small_fs, min_free_bytes=0
    )
    core = Simplefeed(settings, clock=FakeClock(), new_uuid=SequentialIds())
    try:
        core.create_feed("events")
        client = _publish(core, 1)
        assert client.simulate_get("/healthz").status_code == 200
        filler = _fill(small_fs, 0)
        (problem,) = client.simulate_get("/healthz").json["problems"]
        assert (
            problem
            == f"the archive directory {small_fs} cannot be written: No space left on device"
        )
        filler.unlink()
        # Room for the probe, not for a page of 5 entries of 4 KiB each.
        filler = _fill(small_fs, 12 * 1024)
        big = [{"title": f"big {i}", "content": "x" * 4096} for i in range(4)]
        assert client.simulate_post("/entries", json=big).status_code == 201  # Archives page 1.
        page1 = core.page_path("events", 1)
        assert not page1.exists()
        health = client.simulate_get("/healthz")
        assert health.status_code == 503
        assert health.json["problems"] == [
            f"the file of feed 'events' page 1 could not be written ({page1}: No space left on"
            " device); the page is served from the database until it is (a read of it, or"
            " `simplefeed archive rebuild`, writes it)"
        ]
        served = client.simulate_get("/pages/1")  # From the database's bytes.
        assert served.status_code == 200 and b"big 3" in served.content
        filler.unlink()
        assert client.simulate_get("/pages/1").status_code == 200  # Now written.
        assert page1.read_bytes() == core.page(core.feed("events"), 1).body
        assert client.simulate_get("/healthz").status_code == 200
    finally:
        core.store.close()


def test_free_space_is_that_of_the_nearest_existing_directory(tmp_path: Path) -> None:
    """A directory not made yet answers with the file system it will be made on."""
    from simplefeed.service.health import free_bytes

    here = os.statvfs(tmp_path)
    assert free_bytes(tmp_path / "not" / "made" / "yet") is not None
    assert abs(free_bytes(tmp_path / "not" / "made") - here.f_bavail * here.f_frsize) < 2**30  # type: ignore[operator]
    assert free_bytes(Path("relative-and-missing")) is not None

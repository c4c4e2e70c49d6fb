"""The store raises the project's own errors, and the app maps them.

A database that cannot serve now is a 503 with Retry-After on every route that needs it. It is
never a 500. The faults are real, such as a SQLite write lock held by another connection, or a
PostgreSQL server that is not there.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import falcon.testing
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from bench.servers import free_port
from simplefeed.app import create_app
from simplefeed.errors import StoreUnavailable
from simplefeed.model import Event
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from tests.conftest import PG_ENV, FakeClock, PostgresDatabases, SequentialIds


def _assert_unavailable(result: falcon.testing.Result) -> None:
    assert result.status_code == 503, result.text
    assert result.headers["retry-after"] == "1"
    assert result.json["error"] == "unavailable"


def _settings(tmp_path: Path, url: str) -> Settings:
    return Settings(
        database_url=url,
        archive_dir=tmp_path / "archive",
        base_url="http://feeds.example.test",
        page_size=5,
        recent_max_age=10,
        default_feed="events",
    )


def test_a_held_sqlite_write_lock_past_the_busy_timeout_is_store_unavailable(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from simplefeed.store import sqlite as dbmodule

    path = tmp_path / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, path)
    core = Simplefeed(_settings(tmp_path, f"sqlite:///{path}"), clock=FakeClock())
    core.create_feed("events")
    token = core.create_token()
    monkeypatch.setattr(dbmodule, "SQLITE_BUSY_TIMEOUT_S", 0.2)
    core.publish("events", [Event("before")])
    holder = sqlite3.connect(path, isolation_level=None)
    client = falcon.testing.TestClient(
        create_app(core.settings, core=core), headers={"Authorization": f"Bearer {token}"}
    )
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable, match="locked"):
            core.publish("events", [Event("waits")])
        _assert_unavailable(client.simulate_post("/entries", json={"title": "waits too"}))
        # Readers do not wait for the writer under WAL, so reading goes on.
        assert client.simulate_get("/recent").status_code == 200
        assert client.simulate_get("/healthz").status_code == 200
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    try:
        assert core.feed("events").head_seq == 1
        assert client.simulate_post("/entries", json={"title": "after"}).status_code == 201
    finally:
        core.store.close()


def test_an_unreachable_postgresql_is_a_503_on_every_route_that_needs_it(tmp_path: Path) -> None:
    # Nothing listens on this port, so every connection attempt is refused.
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/test?connect_timeout=2"
    settings = _settings(tmp_path, url)
    core = Simplefeed(settings, clock=FakeClock(), new_uuid=SequentialIds())
    try:
        with pytest.raises(StoreUnavailable):
            core.feed("events")
        client = falcon.testing.TestClient(create_app(settings, core=core))
        token = {"Authorization": "Bearer sft_1_" + "A" * 43}
        for method, path, kwargs in (
            ("GET", "/healthz", {}),
            ("GET", "/recent", {}),
            ("GET", "/pages/1", {}),
            ("GET", "/feeds/other/recent", {}),
            ("POST", "/entries", {"json": {"title": "x"}, "headers": token}),
        ):
            _assert_unavailable(client.simulate_request(method, path, **kwargs))
    finally:
        core.store.close()


def _sqlite_core(tmp_path: Path, sqlite_template: Path) -> tuple[Simplefeed, Path, str]:
    path = tmp_path / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, path)
    core = Simplefeed(_settings(tmp_path, f"sqlite:///{path}"), clock=FakeClock())
    core.create_feed("events")
    return core, path, core.create_token()


@pytest.mark.parametrize("fault", ["deleted", "replaced"])
def test_a_sqlite_file_deleted_or_replaced_under_the_service_is_detected(
    tmp_path: Path, sqlite_template: Path, fault: str
) -> None:
    """A SQLite file deleted or replaced under the service is detected.

    The open connections would go on writing into the old, unlinked file. Publishes would be
    acknowledged, then gone after a restart. So every write checks the file first.
    """
    core, path, token = _sqlite_core(tmp_path, sqlite_template)
    client = falcon.testing.TestClient(
        create_app(core.settings, core=core), headers={"Authorization": f"Bearer {token}"}
    )
    try:
        assert client.simulate_post("/entries", json={"title": "kept"}).status_code == 201
        assert client.simulate_get("/healthz").status_code == 200
        if fault == "deleted":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        else:
            replacement = tmp_path / "restored.sqlite3"
            shutil.copyfile(sqlite_template, replacement)
            os.replace(replacement, path)
        _assert_unavailable(client.simulate_post("/entries", json={"title": "not kept"}))
        health = client.simulate_get("/healthz")
        assert health.status_code == 503 and health.headers["retry-after"] == "1"
        assert health.json["status"] == "unhealthy"
        assert any(fault in problem for problem in health.json["problems"]), health.json
    finally:
        core.store.close()


def test_a_sqlite_file_moved_aside_is_never_made_again_and_keeps_what_was_acknowledged(
    tmp_path: Path, sqlite_template: Path
) -> None:
    """A SQLite file moved aside is never made again, and keeps what was acknowledged.

    Here the database moves away under a running service. Its -wal stays behind, holding the
    last publishes. A worker's new connection could make a new, empty file at the path. SQLite
    would then take the old -wal for the new file's, and empty it. The acknowledged events
    would be gone from the moved file too. So a connection never makes the file. The service
    answers 503 until the file is back, and then has every event.
    """
    core, path, token = _sqlite_core(tmp_path, sqlite_template)
    client = falcon.testing.TestClient(
        create_app(core.settings, core=core), headers={"Authorization": f"Bearer {token}"}
    )
    other: Simplefeed | None = None
    try:
        for title in ("one", "two"):
            assert client.simulate_post("/entries", json={"title": title}).status_code == 201
        assert Path(f"{path}-wal").stat().st_size > 0  # The publishes are in the WAL.
        aside = tmp_path / "aside.sqlite3"
        os.rename(path, aside)
        # A worker that opens its connections now, such as a new process or a pool's new
        # connection.
        other = Simplefeed(core.settings, clock=FakeClock())
        other_client = falcon.testing.TestClient(create_app(other.settings, core=other))
        _assert_unavailable(other_client.simulate_get("/recent"))
        health = other_client.simulate_get("/healthz")
        assert health.status_code == 503, health.text
        assert health.json["problems"] == [f"the database file {path} does not exist (moved away?)"]
        assert not path.exists()  # Nothing made at the path.
        os.rename(aside, path)
        assert "<title>two</title>" in other_client.simulate_get("/recent").text
    finally:
        core.store.close()
        if other is not None:
            other.store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM entries").fetchone() == (2,)
    db.close()


def test_an_archive_directory_that_cannot_be_written_makes_healthz_unhealthy(
    tmp_path: Path, sqlite_template: Path
) -> None:
    core, _, _ = _sqlite_core(tmp_path, sqlite_template)
    client = falcon.testing.TestClient(create_app(core.settings, core=core))
    try:
        assert client.simulate_get("/healthz").json == {"status": "ok", "database": "sqlite"}
        archive_dir = core.settings.archive_dir
        shutil.rmtree(archive_dir)
        archive_dir.write_bytes(b"a file where the directory was")  # Permissions bind no root.
        health = client.simulate_get("/healthz")
        assert health.status_code == 503
        (problem,) = health.json["problems"]
        assert "archive directory" in problem
    finally:
        core.store.close()


def test_a_sqlite_directory_that_cannot_be_written_is_named_while_publishes_go_on(
    tmp_path: Path, sqlite_template: Path
) -> None:
    """A SQLite directory that cannot be written is named, while publishes go on.

    SQLite makes the database's -wal and -shm files in its directory. With the directory
    unwritable, publishes go on while those files exist. /healthz must not say "the database
    is read-only", because it is not. Once those files are gone, after a clean stop, the
    database cannot be opened at all. /healthz says that, naming the directory. The test makes
    the directory unwritable with the immutable attribute, because permissions bind no root.
    """
    directory = tmp_path / "db"
    directory.mkdir()
    path = directory / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, path)
    core = Simplefeed(_settings(tmp_path, f"sqlite:///{path}"), clock=FakeClock())
    core.create_feed("events")
    client = falcon.testing.TestClient(
        create_app(core.settings, core=core),
        headers={"Authorization": f"Bearer {core.create_token()}"},
    )
    try:
        assert client.simulate_post("/entries", json={"title": "before"}).status_code == 201
        assert client.simulate_get("/healthz").status_code == 200
        chattr = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, text=True)
        if chattr.returncode != 0:
            pytest.skip(f"the directory cannot be made immutable here: {chattr.stderr.strip()}")
        try:
            health = client.simulate_get("/healthz")
            assert health.status_code == 503
            assert health.json["problems"] == [
                f"the database's directory {directory} cannot be written: SQLite makes its -wal"
                " and -shm files there whenever they are not there (after a clean stop), and"
                " cannot open the database without them"
            ]
            assert client.simulate_post("/entries", json={"title": "after"}).status_code == 201
        finally:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
    finally:
        core.store.close()


@pytest.mark.parametrize("feed", ["events", "orders"])
def test_a_feed_s_page_directory_that_cannot_be_written_makes_healthz_unhealthy(
    tmp_path: Path, sqlite_template: Path, feed: str
) -> None:
    """A feed's page directory that cannot be written makes /healthz unhealthy.

    Trying only the archive's root is not enough. With a feed's pages/ directory unwritable,
    archiving each page logs "could not write archive file". /healthz must not say ok then.
    """
    core, _, _ = _sqlite_core(tmp_path, sqlite_template)
    core.create_feed("orders")
    client = falcon.testing.TestClient(create_app(core.settings, core=core))
    try:
        core.publish(feed, [Event(title=f"e{i}") for i in range(6)])  # Archives page 1.
        pages = core.page_path(feed, 1).parent
        assert client.simulate_get("/healthz").status_code == 200
        shutil.rmtree(pages)
        pages.write_bytes(b"a file where the directory was")  # Permissions bind no root.
        health = client.simulate_get("/healthz")
        assert health.status_code == 503, health.json
        assert health.json["problems"] == [
            f"the archive directory {pages} cannot be written: Not a directory"
        ]
    finally:
        core.store.close()


def test_a_read_only_postgresql_is_a_503_not_a_500(
    tmp_path: Path, postgres: PostgresDatabases | None
) -> None:
    """A read-only PostgreSQL is a 503, not a 500.

    A database may switch to read-only. A standby may be promoted the other way, or an operator
    may set default_transaction_read_only. Publishing then answers 503 with Retry-After. So do
    the live documents, because their new versions write the flush barrier first. /healthz
    says why.
    """
    if postgres is None:
        pytest.skip(f"needs PostgreSQL: set {PG_ENV} to run it")
    url = postgres.new_database()
    core = Simplefeed(_settings(tmp_path, url), clock=FakeClock(), new_uuid=SequentialIds())
    try:
        core.create_feed("events")
        token = core.create_token()
        client = falcon.testing.TestClient(
            create_app(core.settings, core=core), headers={"Authorization": f"Bearer {token}"}
        )
        assert client.simulate_post("/entries", json={"title": "before"}).status_code == 201
        name = make_url(url).database
        with postgres.admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
        core.store.close()  # New connections take the setting.
        _assert_unavailable(client.simulate_post("/entries", json={"title": "refused"}))
        _assert_unavailable(client.simulate_get("/recent"))  # A new version's barrier writes.
        health = client.simulate_get("/healthz")
        assert health.status_code == 503
        assert health.json["problems"] == [
            "the database is read-only (default_transaction_read_only)"
        ]
        assert core.feed("events").head_seq == 1
    finally:
        core.store.close()
        postgres.release(url)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://user@127.0.0.1/db", "is not a SQLite or PostgreSQL URL"),
        ("postgres://user@127.0.0.1/db", "write postgresql://"),
        ("sqlite://", "names no file"),
        ("sqlite:///:memory:", "names no file"),
    ],
)
def test_an_unsupported_database_is_a_configuration_error(url: str, said: str) -> None:
    """An unsupported database is a configuration error.

    The store refuses it for a library's caller. So does the loading of settings, with the
    same words. Every command, `simplefeed config` and the service's workers load settings.
    """
    from simplefeed.errors import ConfigError
    from simplefeed.runtime import load_settings
    from simplefeed.store import open_store

    with pytest.raises(ConfigError, match=re.escape(said)):
        open_store(url)
    with pytest.raises(ConfigError, match=rf"SIMPLEFEED_DATABASE_URL .*{re.escape(said)}"):
        load_settings({"SIMPLEFEED_DATABASE_URL": url})


def test_a_forked_child_never_uses_its_parents_connection(core: Simplefeed) -> None:
    """A forked child never uses its parent's connection.

    uWSGI forks its workers after loading the app, unless lazy-apps is set. The child must not
    share a connection that the parent opened. That would put two processes on one socket or
    SQLite handle. So the store's direct connections are opened anew in a forked child.
    """
    assert core.feed_head("events").name == "events"
    with core.store.connections.use() as mine:  # type: ignore[attr-defined]
        parent = mine
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            ok = core.feed_head("events").name == "events"
            with core.store.connections.use() as mine:  # type: ignore[attr-defined]
                ok = ok and mine is not parent
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1" and status == 0
    os.close(read)
    with core.store.connections.use() as mine:  # type: ignore[attr-defined]
        assert mine is parent


def test_a_direct_connection_opening_while_the_store_closes_is_closed_after_its_use(
    core: Simplefeed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request may be opening a direct connection when the store closes (a long-poll woken
    by the shutdown, say). The closed pool no longer has its place. So the request uses the
    connection, and it is closed at the end of the block, not left open for nobody."""
    connections = core.store.connections  # type: ignore[attr-defined]
    open_one = connections.open_one

    def opened_while_closing() -> object:
        conn = open_one()
        connections.close()
        return conn

    monkeypatch.setattr(connections, "open_one", opened_while_closing)
    with connections.use() as mine:
        mine.cursor().execute("SELECT 1").close()
    with pytest.raises(Exception, match="closed"):
        mine.cursor().execute("SELECT 1")

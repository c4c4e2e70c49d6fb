"""Shared fixtures: real databases, settings, a core with an injected clock, and the app.

Each test gets a SQLite file of its own, and a PostgreSQL database when one is configured. The
falcon app runs in-process.

Every test that takes ``database_url`` runs once on SQLite and once on PostgreSQL, unless it is
marked ``sqlite_only``. The PostgreSQL half needs ``SIMPLEFEED_TEST_POSTGRES_URL``, for example
``postgresql+psycopg://postgres@127.0.0.1:5432/test``. Without it, that half is skipped and the
reason shown. The alembic migrations build each schema once per test run, into a template. Each
test gets a copy of the SQLite template file, or a clone of the PostgreSQL template database.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from bench.servers import UwsgiServer
from simplefeed.app import caching, create_app
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from simplefeed.store.schema import alembic_config

PG_ENV = "SIMPLEFEED_TEST_POSTGRES_URL"
START_US = 1_800_000_000_000_000  # 2027-01-15T08:00:00Z.

#: IRIs of every scheme the door takes, each one the W3C feed validator accepts.
VALID_IRIS = (
    "urn:example:a:b",
    "URN:Example:x",
    "urn:uuid:6F1C2A4E-1D2B-4C3D-9E8F-0A1B2C3D4E5F",
    "tag:example.com,2027:x",
    "mailto:a@example.com",
    "ftp://example.com/f",
    "https://example.com/caf%C3%A9?q=1",
    "https://bücher.example/é",
)


def migrate(url: str) -> None:
    from alembic import command

    command.upgrade(alembic_config(url), "head")


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.sqlite3"
    migrate(f"sqlite:///{path}")
    return path


#: A digest of the connected database's schema, alembic version and own settings.
#: It takes one line per schema object: each column with its type, nullability and default,
#: and each constraint, index, function, trigger and schema. The settings are those of ALTER
#: DATABASE. Two databases with the same digest differ only in their rows.
SCHEMA_DIGEST = """
SELECT md5(string_agg(item, E'\\n' ORDER BY item)) FROM (
    SELECT format('%s %s %s %s %s %s', c.relname, c.relkind, a.attname,
                  format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  pg_get_expr(d.adbin, d.adrelid)) AS item
    FROM pg_class c
    LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
    WHERE c.relnamespace = 'public'::regnamespace
    UNION ALL SELECT format('constraint %s %s', conname, pg_get_constraintdef(oid))
        FROM pg_constraint WHERE connamespace = 'public'::regnamespace
    UNION ALL SELECT format('index %s', pg_get_indexdef(i.indexrelid))
        FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
        WHERE c.relnamespace = 'public'::regnamespace
    UNION ALL SELECT format('function %s', oid::regprocedure)
        FROM pg_proc WHERE pronamespace = 'public'::regnamespace
    UNION ALL SELECT format('trigger %s', tgname) FROM pg_trigger WHERE NOT tgisinternal
    UNION ALL SELECT format('schema %s', nspname) FROM pg_namespace
    UNION ALL SELECT format('version %s', version_num) FROM alembic_version
    UNION ALL SELECT format('database %s %s', datconnlimit, setconfig)
        FROM pg_database LEFT JOIN pg_db_role_setting ON setdatabase = pg_database.oid
        WHERE datname = current_database()
) items
"""


class PostgresDatabases:
    """Per-test databases on the configured server, each one like the migrated template.

    Each database is created from the template once and then reused. When a test is done with
    one, the reset ends its other connections and compares its schema with the template's. It
    then truncates every table but ``alembic_version``, restarts the sequences and clears the
    statistics. A database whose schema a test changed, or that cannot be reset, is dropped
    instead. Reuse pays because ``CREATE DATABASE`` costs the server 0.15-0.35 s, more than
    most tests take. It copies and syncs the catalogs. A reset costs about 0.03 s.

    PostgreSQL 15 makes each ``DROP DATABASE`` wait for a checkpoint of its own, 1-2 s on a busy
    machine. Drops that run at once share a checkpoint, so :meth:`close` drops every database
    together: 6 drops took 7-11 s one after another, and 0.7-1.7 s at once.
    """

    def __init__(self, admin_url: str) -> None:
        self.admin_url = make_url(admin_url)
        self.admin = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        self.template = f"sf_tmpl_{uuid.uuid4().hex[:10]}"
        self.free: list[str] = []  # Reset databases, ready for a test.
        self.made: set[str] = set()  # Every database created and not dropped.
        self.schema = ""  # The template's SCHEMA_DIGEST.
        self.tables: list[str] = []  # The tables a reset truncates.

    def url(self, name: str) -> str:
        return self.admin_url.set(database=name).render_as_string(hide_password=False)

    def _admin(self, sql: str, **params: str) -> None:
        with self.admin.connect() as c:
            c.execute(text(sql), params)

    def setup_template(self) -> None:
        self._admin(f'CREATE DATABASE "{self.template}"')
        migrate(self.url(self.template))
        engine = create_engine(self.url(self.template), poolclass=NullPool)
        try:
            with engine.connect() as c:
                self.schema = c.execute(text(SCHEMA_DIGEST)).scalar_one()
                self.tables = list(
                    c.execute(
                        text(
                            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                            " AND tablename <> 'alembic_version' ORDER BY 1"
                        )
                    ).scalars()
                )
                for table in self.tables:  # A reset empties them, so they start empty.
                    assert c.execute(text(f'SELECT count(*) FROM "{table}"')).scalar_one() == 0
        finally:
            engine.dispose()

    def new_database(self) -> str:
        """Return an empty, migrated database that the caller holds until ``release``."""
        if self.free:
            return self.url(self.free.pop())
        name = f"sf_t_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self.made.add(name)
        return self.url(name)

    def copy_of(self, url: str) -> str:
        """Return a new database that holds a copy of ``url``'s data.

        No connection may be open on ``url``. The copy serves as a backup. The caller gives it
        back with :meth:`release` like any other.
        """
        name = f"sf_t_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{make_url(url).database}"')
        self.made.add(name)
        return self.url(name)

    def release(self, url: str) -> None:
        """Reset ``url`` for the next test, or drop it, because the caller is done with it."""
        name = make_url(url).database
        assert name is not None and name in self.made
        if self._reset(name):
            self.free.append(name)
        else:
            self._drop(name)

    def _reset(self, name: str) -> bool:
        others = "FROM pg_stat_activity WHERE datname = :name AND pid <> pg_backend_pid()"
        self._admin(f"SELECT pg_terminate_backend(pid) {others}", name=name)
        deadline = time.monotonic() + 5
        with self.admin.connect() as c:  # Wait until they report statistics and go.
            while c.execute(text(f"SELECT count(*) {others}"), {"name": name}).scalar_one():
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.01)
        engine = create_engine(self.url(name), poolclass=NullPool)
        try:
            with engine.begin() as c:
                # Wait a while for the locks of an ended backend to go.
                c.execute(text("SET LOCAL lock_timeout = '5s'"))
                if c.execute(text(SCHEMA_DIGEST)).scalar_one() != self.schema:
                    return False
                tables = ", ".join(f'"{t}"' for t in self.tables)
                c.execute(text(f"TRUNCATE {tables} RESTART IDENTITY"))
                # Leave it as if never used. Planner statistics go and activity counters
                # return to zero. Both need a superuser.
                c.execute(
                    text(
                        "DELETE FROM pg_statistic WHERE starelid IN"
                        " (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)"
                    )
                )
                c.execute(text("SELECT pg_stat_reset()"))
            return True
        except DBAPIError:
            return False
        finally:
            engine.dispose()

    def _drop(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.made.discard(name)

    def close(self) -> None:
        """Drop every database made, and the template, all at once."""
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(self._drop, [*self.made, self.template]))
        self.admin.dispose()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresDatabases | None]:
    admin_url = os.environ.get(PG_ENV)
    if not admin_url:
        yield None
        return
    pg = PostgresDatabases(admin_url)
    pg.setup_template()
    yield pg
    pg.close()


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Give a test marked ``sqlite_only`` the SQLite half of ``database_url`` only.

    A parametrize mark on the test takes the place of the fixture's own two halves. This hook
    runs first, because pytest reads the marks when it parametrizes the fixture.
    """
    if "database_url" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "sqlite_only"
    ):
        metafunc.definition.add_marker(
            pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
        )


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    sqlite_template: Path,
    postgres: PostgresDatabases | None,
) -> Iterator[str]:
    """Yield a freshly migrated, empty database, as a SQLite file or on PostgreSQL."""
    if request.param == "sqlite":
        path = tmp_path / "simplefeed.sqlite3"
        shutil.copyfile(sqlite_template, path)
        yield f"sqlite:///{path}"
        return
    if postgres is None:
        pytest.skip(f"PostgreSQL half skipped: set {PG_ENV} to run it")
    url = postgres.new_database()
    yield url
    postgres.release(url)


class FakeClock:
    """An injected clock that starts at START_US and moves only when told.

    With ``step_us``, each call also moves it on by that much.
    """

    def __init__(self, start_us: int = START_US, step_us: int = 0) -> None:
        self.now = start_us
        self.step_us = step_us

    def __call__(self) -> int:
        value = self.now
        self.now += self.step_us
        return value

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1_000_000)


class SequentialIds:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return str(uuid.UUID(int=self.n))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        archive_dir=tmp_path / "archive",
        base_url="http://feeds.example.test",
        page_size=5,
        recent_max_age=10,
        default_feed="events",
    )


@pytest.fixture
def core(settings: Settings, clock: FakeClock) -> Iterator[Simplefeed]:
    c = Simplefeed(settings, clock=clock, new_uuid=SequentialIds())
    c.create_feed(settings.default_feed)
    yield c
    c.close()


@pytest.fixture
def token(core: Simplefeed) -> str:
    """A producer token valid for every feed."""
    return core.create_token(label="tests")


@pytest.fixture
def client(core: Simplefeed, token: str) -> falcon.testing.TestClient:
    """Return the app in-process, with the producer token on each request.

    A test may replace the token.
    """
    return falcon.testing.TestClient(
        create_app(core.settings, core=core), headers={"Authorization": f"Bearer {token}"}
    )


def query(database_url: str, sql: str) -> list[tuple[Any, ...]]:
    """Return the rows of one SQL query, run on a connection of the test's own.

    Binary columns come back as bytes.
    """
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return [
                tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                for row in conn.execute(text(sql))
            ]
    finally:
        engine.dispose()


def with_page_size(settings: Settings, size: int) -> Settings:
    return replace(settings, page_size=size)


@contextlib.contextmanager
def shipped_with_entries(workdir: Path, processes: int) -> Iterator[UwsgiServer]:
    """Run the shipped uWSGI on a SQLite database in ``workdir``, with 25 entries published.

    Pages hold 10 entries, so pages 1 and 2 are archived and page 3 is the working page.
    """
    with UwsgiServer.scratch(
        workdir,
        page_size=10,
        processes=processes,
    ) as s:
        s.publish([{"title": f"e{i}"} for i in range(25)])
        yield s


def page_files_reopened() -> None:
    """Wait until a server's processes reopen the archived page files they have sent.

    The processes keep a sent page's file open for ``OPEN_FOR_S``
    (:mod:`simplefeed.app.caching`). A test that changes a page on disk waits that long, so that
    the next request sees the change.
    """
    time.sleep(caching.OPEN_FOR_S + 0.2)


def open_fds(under: Path | None = None) -> int:
    """Count the file descriptors this process has open now.

    With `under`, count only those on files in that directory. Other threads of the process
    cannot change that count, such as a server that a test left closing.
    """
    if under is None:
        return len(os.listdir("/proc/self/fd"))
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # Closed since it was listed.
            continue
        held += target.startswith(f"{under}/")
    return held

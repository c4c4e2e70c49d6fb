"""Shared fixtures: real databases (a SQLite file per test; PostgreSQL when configured), settings,
a core with an injected clock, and the falcon app in-process.

Every test that takes ``database_url`` runs once on SQLite and once on PostgreSQL. The PostgreSQL
half needs ``SIMPLEFEED_TEST_POSTGRES_URL`` (e.g. ``postgresql+psycopg://postgres@127.0.0.1:5432/test``)
and is skipped, with that reason shown, without it. Schemas come from the alembic migrations, run
once per session into a template (a SQLite file copied per test; a PostgreSQL template database
cloned per test).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator
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
START_US = 1_800_000_000_000_000  # 2027-01-15T08:00:00Z

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


#: One line per schema object of the connected database's (columns with their types, nullability
#: and defaults; constraints, indexes, functions, triggers, schemas), its alembic version and
#: its own settings (ALTER DATABASE), digested: two databases with the same digest are alike
#: but for their rows.
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
    """Per-test databases on the configured server, each as the migrated template is.

    A database is created from the template once and then reused: when a test is done with it,
    its other sessions are ended, its schema compared with the template's, every table but
    ``alembic_version`` truncated (sequences restarted) and its statistics cleared; one whose
    schema a test changed, or that cannot be reset, is dropped instead. ``CREATE DATABASE``
    costs the server 0.15-0.35 s (it copies and syncs the catalogs), more than most tests
    take; a reset costs ~0.03 s.
    """

    def __init__(self, admin_url: str) -> None:
        self.admin_url = make_url(admin_url)
        self.admin = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        self.template = f"sf_tmpl_{uuid.uuid4().hex[:10]}"
        self.free: list[str] = []  # reset databases, ready for a test
        self.made: set[str] = set()  # every database created and not dropped
        self.schema = ""  # the template's SCHEMA_DIGEST
        self.tables: list[str] = []  # what a reset truncates

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
                for table in self.tables:  # a reset empties them: the template must have them empty
                    assert c.execute(text(f'SELECT count(*) FROM "{table}"')).scalar_one() == 0
        finally:
            engine.dispose()

    def new_database(self) -> str:
        """An empty, migrated database of the caller's own until it gives it back (``release``)."""
        if self.free:
            return self.url(self.free.pop())
        name = f"sf_t_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self.made.add(name)
        return self.url(name)

    def copy_of(self, url: str) -> str:
        """A new database holding what ``url``'s holds (no session may be open on it): a
        backup, given back with :meth:`release` like any other."""
        name = f"sf_t_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{make_url(url).database}"')
        self.made.add(name)
        return self.url(name)

    def release(self, url: str) -> None:
        """The caller is done with ``url``: reset it for the next test, or drop it."""
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
        with self.admin.connect() as c:  # gone, their statistics reported: then cleared below
            while c.execute(text(f"SELECT count(*) {others}"), {"name": name}).scalar_one():
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.01)
        engine = create_engine(self.url(name), poolclass=NullPool)
        try:
            with engine.begin() as c:
                c.execute(text("SET LOCAL lock_timeout = '5s'"))  # an ended session's locks
                if c.execute(text(SCHEMA_DIGEST)).scalar_one() != self.schema:
                    return False
                tables = ", ".join(f'"{t}"' for t in self.tables)
                c.execute(text(f"TRUNCATE {tables} RESTART IDENTITY"))
                # As never used: no planner statistics, activity counters at zero (superuser).
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
        for name in [*self.made, self.template]:
            self._drop(name)
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


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    sqlite_template: Path,
    postgres: PostgresDatabases | None,
) -> Iterator[str]:
    """A freshly migrated, empty database: a SQLite file, or a PostgreSQL database."""
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
    """An injected clock: starts at START_US and moves only when told (or by ``step`` a call)."""

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
    """The app in-process; requests carry the producer token unless a test replaces it."""
    return falcon.testing.TestClient(
        create_app(core.settings, core=core), headers={"Authorization": f"Bearer {token}"}
    )


def query(database_url: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows of one SQL query, on a connection of the test's own (binary columns as bytes)."""
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
    """The shipped uWSGI on a SQLite database in ``workdir``, pages of 10, with 25 entries
    published (pages 1-2 archived, page 3 working)."""
    with UwsgiServer.scratch(
        workdir,
        page_size=10,
        processes=processes,
    ) as s:
        s.publish([{"title": f"e{i}"} for i in range(25)])
        yield s


def page_files_reopened() -> None:
    """A server's processes keep an archived page's file open for ``OPEN_FOR_S`` once they have
    sent it (:mod:`simplefeed.app.caching`): wait that long after changing one on disk, so that
    the next request sees the change."""
    time.sleep(caching.OPEN_FOR_S + 0.2)


def open_fds(under: Path | None = None) -> int:
    """The file descriptors this process has open now; with `under`, only those on files in that
    directory, which other threads of the process (a server a test left closing) cannot change."""
    if under is None:
        return len(os.listdir("/proc/self/fd"))
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since it was listed
            continue
        held += target.startswith(f"{under}/")
    return held

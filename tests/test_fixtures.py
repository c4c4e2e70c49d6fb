"""The test databases themselves are reused only when they are as the template is.

A PostgreSQL database that a test gave back is reused only when it is again like the migrated
template. It has no rows, its sequences are restarted, and it has no statistics. It has the
same schema and settings.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.conftest import PG_ENV, PostgresDatabases


@pytest.fixture
def databases() -> Iterator[PostgresDatabases]:
    admin_url = os.environ.get(PG_ENV)
    if not admin_url:
        pytest.skip(f"PostgreSQL half skipped: set {PG_ENV} to run it")
    pg = PostgresDatabases(admin_url)
    pg.setup_template()
    yield pg
    pg.close()


def run(url: str, *statements: str) -> object:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            result: object = None
            for sql in statements:
                rows = conn.execute(text(sql))
                result = rows.scalar() if rows.returns_rows else None
            return result
    finally:
        engine.dispose()


def name(url: str) -> str | None:
    return make_url(url).database


def test_a_given_back_database_is_reused_empty_with_its_sequences_restarted(
    databases: PostgresDatabases,
) -> None:
    url = databases.new_database()
    insert = (
        "INSERT INTO tokens (secret_hash, created_us) VALUES (md5(random()::text), 1) RETURNING id"
    )
    run(url, insert, insert, "ANALYZE tokens")
    left_open = create_engine(url).connect()  # A connection a test forgot. The reset ends it.
    try:
        databases.release(url)
    finally:
        left_open.invalidate()
    again = databases.new_database()
    assert name(again) == name(url)
    assert run(again, "SELECT count(*) FROM tokens") == 0
    assert run(again, "SELECT reltuples FROM pg_class WHERE relname = 'tokens'") == -1
    assert run(again, "SELECT count(*) FROM pg_stats WHERE tablename = 'tokens'") == 0
    stats = "SELECT n_tup_ins + analyze_count FROM pg_stat_user_tables WHERE relname = 'tokens'"
    assert run(again, stats) == 0
    assert run(again, insert) == 1


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE feeds ADD COLUMN extra INTEGER",
        "CREATE INDEX ix_extra ON entries (feed_id)",
        "UPDATE alembic_version SET version_num = '0001'",
        "CREATE SCHEMA elsewhere",
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET work_mem = ''8MB''',"
        " current_database()); END $$",
    ],
)
def test_a_database_whose_schema_or_settings_a_test_changed_is_dropped(
    databases: PostgresDatabases, change: str
) -> None:
    url = databases.new_database()
    run(url, change)
    databases.release(url)
    assert name(url) not in databases.made
    assert name(databases.new_database()) != name(url)

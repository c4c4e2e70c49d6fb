"""The one door to the database. Everything above it (the core, and through the core the app
and the command line) holds a :class:`Store` from :func:`open_store` and receives
:mod:`simplefeed.model` types; nothing else in Simplefeed imports SQLAlchemy or a driver.

- :mod:`simplefeed.store.interface`: :class:`Store`, what may be asked;
- :mod:`simplefeed.store.sql`: what both backends share (SQLAlchemy Core, error mapping);
- :mod:`simplefeed.store.sqlite`, :mod:`simplefeed.store.postgres`: one module per backend;
- :mod:`simplefeed.store.tables`: the schema (alembic migrates it);
- :mod:`simplefeed.store.schema`: migrating (:func:`upgrade`) and checking that a database is
  ready before use (:func:`check_ready`).
"""

from __future__ import annotations

from sqlalchemy.engine import Engine, make_url

from simplefeed.errors import ConfigError
from simplefeed.settings import database_url_problem, mask_url
from simplefeed.store.interface import Appending, Rebasing, Store, TokenCheck
from simplefeed.store.schema import SCHEMA_REVISION, check_ready, upgrade
from simplefeed.store.sql import SqlStore

__all__ = [
    "SCHEMA_REVISION",
    "Appending",
    "Rebasing",
    "Store",
    "TokenCheck",
    "check_ready",
    "make_engine",
    "open_store",
    "upgrade",
]


def _backend(url: str) -> type[SqlStore]:
    """The backend of ``url``'s database, its module imported only then: psycopg and
    SQLAlchemy's PostgreSQL dialect took a quarter of a second of every command's start and
    every worker's on SQLite (docs/explanation/decisions/startup.md)."""
    problem = database_url_problem(url)
    if problem is not None:
        raise ConfigError(f"database URL {mask_url(url)!r} {problem}")
    if make_url(url).get_backend_name() == "sqlite":
        from simplefeed.store.sqlite import SQLiteStore

        return SQLiteStore
    from simplefeed.store.postgres import PostgresStore

    return PostgresStore


def open_store(url: str) -> Store:
    """The store for a database URL (``sqlite:///path``, ``postgresql+psycopg://...``)."""
    return _backend(url)(url)


def make_engine(url: str) -> Engine:
    """An engine with the backend's settings, for alembic's migrations."""
    return _backend(url).make_engine(url)

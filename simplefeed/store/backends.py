"""Which backend opens a database URL, in the store's one place that chooses one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import Engine

from simplefeed.errors import ConfigError
from simplefeed.settings import mask_url
from simplefeed.store.interface import Store
from simplefeed.store.sql import SqlStore

__all__ = [
    "backend_of",
    "database_file",
    "database_shown",
    "make_engine",
    "open_store",
    "url_problem",
]


def _backends() -> Iterator[type[SqlStore]]:
    """Yield each backend, its module imported only when it is asked for.

    PostgreSQL's driver and dialect take a quarter of a second to import, so a SQLite
    database never imports them (docs/explanation/decisions/startup.md).
    """
    from simplefeed.store.sqlite import SQLiteStore

    yield SQLiteStore
    from simplefeed.store.postgres import PostgresStore

    yield PostgresStore


def url_problem(url: str) -> str | None:
    """Say why no backend can open ``url``, or None."""
    for backend in _backends():
        if backend.takes(url):
            return backend.url_problem(url)
    every = list(_backends())
    titles = " or ".join(b.title for b in every)
    forms = ", ".join(b.url_form for b in every)
    return f"is not a {titles} URL ({forms})"


def backend_of(url: str) -> type[SqlStore]:
    """Return the backend that opens ``url``.

    Raises :class:`ConfigError` if none can.
    """
    problem = url_problem(url)
    if problem is not None:
        raise ConfigError(f"database URL {mask_url(url)!r} {problem}")
    return next(b for b in _backends() if b.takes(url))


def open_store(url: str) -> Store:
    """Open the store for a database URL (``sqlite:///path``, ``postgresql+psycopg://...``)."""
    return backend_of(url)(url)


def make_engine(url: str) -> Engine:
    """Make an engine with the backend's settings, for alembic's migrations."""
    return backend_of(url).make_engine(url)


def database_file(url: str) -> Path | None:
    """Return the database's file, absolute, if it is a file on this machine."""
    return backend_of(url).local_file(url)


def database_shown(url: str) -> str:
    """Name the database for a command, by its file if it is one, else by its masked URL."""
    path = database_file(url)
    return str(path) if path is not None else mask_url(url)

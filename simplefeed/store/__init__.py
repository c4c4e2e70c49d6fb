"""The one door to the database. Everything above it (the core, and through the core the app
and the command line) holds a :class:`Store` from :func:`open_store` and receives
:mod:`simplefeed.model` types; nothing else in Simplefeed imports SQLAlchemy or a driver.

- :mod:`simplefeed.store.interface`: :class:`Store`, what may be asked;
- :mod:`simplefeed.store.sql`: what both backends share (SQLAlchemy Core, error mapping);
- :mod:`simplefeed.store.sqlite`, :mod:`simplefeed.store.postgres`: one module per backend,
  the only modules that know a database dialect;
- :mod:`simplefeed.store.backends`: which backend opens a URL;
- :mod:`simplefeed.store.tables`: the schema (alembic migrates it);
- :mod:`simplefeed.store.schema`: migrating (:func:`upgrade`) and checking that a database is
  ready before use (:func:`check_ready`).
"""

from simplefeed.store.backends import (
    database_file,
    database_shown,
    make_engine,
    open_store,
    url_problem,
)
from simplefeed.store.interface import Appending, Rebasing, Store, TokenCheck
from simplefeed.store.schema import SCHEMA_REVISION, check_ready, make_database_file, upgrade

__all__ = [
    "SCHEMA_REVISION",
    "Appending",
    "Rebasing",
    "Store",
    "TokenCheck",
    "check_ready",
    "database_file",
    "database_shown",
    "make_database_file",
    "make_engine",
    "open_store",
    "upgrade",
    "url_problem",
]

"""The one door to the database.

Everything above it holds a :class:`Store` from :func:`open_store`, and receives
:mod:`simplefeed.model` types. That is the core, and through the core the app and the command
line. Nothing else in Simplefeed imports SQLAlchemy or a driver.

The module :mod:`simplefeed.store.interface` holds :class:`Store`, which says what may be
asked. The module :mod:`simplefeed.store.sql` holds what both backends share. That is
SQLAlchemy Core and the mapping of errors. Each backend has one module,
:mod:`simplefeed.store.sqlite` and :mod:`simplefeed.store.postgres`. They are the only modules
that know a database dialect. The module :mod:`simplefeed.store.backends` says which backend
opens a URL. The module :mod:`simplefeed.store.tables` holds the schema, which alembic
migrates. The module :mod:`simplefeed.store.schema` migrates (:func:`upgrade`). It also checks
that a database is ready before use (:func:`check_ready`).
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

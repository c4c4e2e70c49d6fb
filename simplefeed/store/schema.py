"""The schema's version: migrating with alembic, and checking a database is ready before use.

Only ``simplefeed db upgrade`` (:func:`upgrade`) creates a database; every other command checks
it first (:func:`check_ready`), which never creates one.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.exc import DBAPIError

from alembic import command
from simplefeed.errors import DatabaseNotReady
from simplefeed.settings import mask_url, sqlite_path

#: The checkout this package runs from: alembic.ini and alembic/ live there.
PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent


def alembic_config(database_url: str) -> Config:
    cfg = Config(str(PROJECT_ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    return cfg


def upgrade(database_url: str) -> None:
    """Create the database if need be (a SQLite file and its directory: alembic's environment
    calls :func:`create_sqlite_file`) and migrate it to the newest schema."""
    config = alembic_config(database_url)
    try:
        command.upgrade(config, "head")
    except CommandError as exc:  # a revision this release does not know: a newer one's
        current = _current_revision(database_url)
        if current is None or current in _known_revisions(database_url):
            raise
        head = ScriptDirectory.from_config(config).get_current_head() or "none"
        raise DatabaseNotReady(mask_url(database_url), _newer(current, head), _NEWER_FIX) from exc
    except DBAPIError as exc:
        raise DatabaseNotReady(
            mask_url(database_url), f"could not be migrated: {_first_line(exc)}", _FIX_URL
        ) from None


def create_sqlite_file(database_url: str) -> None:
    """Make the SQLite file a migration is about to fill, and its directory, if missing: the
    one place a database file is made (the stores' connections never create one)."""
    path = sqlite_path(database_url)
    if path is not None and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        sqlite3.connect(path).close()


_FIX_URL = "check SIMPLEFEED_DATABASE_URL and that the database server is up"


def _first_line(exc: DBAPIError) -> str:
    lines = str(exc.orig).strip().splitlines() or [type(exc.orig).__name__]
    return lines[0]


def check_ready(database_url: str) -> None:
    """Raise :class:`DatabaseNotReady` unless the database exists, answers and is at the
    newest schema. Creates nothing: a missing SQLite file is reported, not made."""
    shown = mask_url(database_url)
    path = sqlite_path(database_url)
    if path is not None and not path.is_file():
        raise DatabaseNotReady(f"{shown} ({path})", "does not exist")
    head = ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()
    try:
        current = _current_revision(database_url)
    except DBAPIError as exc:
        raise DatabaseNotReady(
            shown, f"does not answer ({_first_line(exc)})", _FIX_URL, answered=False
        ) from None
    if current is None:
        raise DatabaseNotReady(shown, "has no Simplefeed tables")
    if current != head:
        if current not in _known_revisions(database_url):
            raise DatabaseNotReady(shown, _newer(current, head or "none"), _NEWER_FIX)
        raise DatabaseNotReady(shown, f"is at schema {current}, not the newest ({head})")


#: What to do with a database a newer release migrated (README: Upgrading).
_NEWER_FIX = (
    "run the release that migrated it, or restore the backup made before its `db upgrade`"
    " (README: Upgrading)"
)


def _newer(current: str, head: str) -> str:
    return f"is at schema {current}, which this release does not know (its newest is {head})"


def _known_revisions(database_url: str) -> set[str]:
    script = ScriptDirectory.from_config(alembic_config(database_url))
    return {revision.revision for revision in script.walk_revisions()}


def _current_revision(database_url: str) -> str | None:
    """The schema revision the database records (None: no Simplefeed tables)."""
    from simplefeed.store import make_engine  # the package imports this module

    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()

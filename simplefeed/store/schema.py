"""The schema's version, migrated with alembic and checked before a database is used.

Only ``simplefeed db upgrade`` (:func:`upgrade`) creates a database. Every other command checks
it first (:func:`check_ready`), which never creates one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.exc import DBAPIError

from simplefeed.errors import DatabaseNotReady
from simplefeed.settings import mask_url
from simplefeed.store.backends import backend_of, make_engine

if TYPE_CHECKING:
    from alembic.config import Config

#: The checkout this package runs from, where alembic.ini and alembic/ live.
PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent

#: The schema this release runs on, the newest revision in alembic/versions. A test holds the
#: two together. Checking a database against it needs no alembic. Importing alembic would add
#: 0.15-0.35 s to every command's and every uWSGI worker's start. Only migrating reads the
#: migration scripts, and so does telling an older schema from a newer release's.
SCHEMA_REVISION = "0005"


def alembic_config(database_url: str) -> Config:
    from alembic.config import Config

    cfg = Config(str(PROJECT_ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    return cfg


def upgrade(database_url: str) -> str | None:
    """Create the database if need be and migrate it to the newest schema.

    Alembic's environment makes the database's file, if it is one (:func:`make_database_file`).
    Returns the schema it was at before, or None for no tables or no database. So ``db
    upgrade`` can say whether it changed anything.
    """
    from alembic.util import CommandError

    from alembic import command

    backend = backend_of(database_url)
    backend.check_file(database_url, must_exist=False)
    path = backend.local_file(database_url)
    try:
        before = None if path is not None and not path.exists() else _current_revision(database_url)
        command.upgrade(alembic_config(database_url), "head")
    except CommandError as exc:  # A revision this release does not know, so a newer one's.
        current = _current_revision(database_url)
        if current is None or current in _known_revisions(database_url):
            raise
        raise DatabaseNotReady(
            mask_url(database_url), _newer(current, SCHEMA_REVISION), _NEWER_FIX
        ) from exc
    except DBAPIError as exc:
        raise DatabaseNotReady(
            mask_url(database_url), f"could not be migrated: {_first_line(exc)}", _FIX_URL
        ) from None
    return before


def make_database_file(database_url: str) -> None:
    """Make the database's file a migration is about to fill, if the backend keeps one.

    This is the one place a database file is made. The stores' connections never make one.
    """
    backend_of(database_url).make_file(database_url)


_FIX_URL = "check SIMPLEFEED_DATABASE_URL and that the database server is up"


def _first_line(exc: DBAPIError) -> str:
    lines = str(exc.orig).strip().splitlines() or [type(exc.orig).__name__]
    return lines[0]


def check_ready(database_url: str) -> None:
    """Raise :class:`DatabaseNotReady` unless the database exists, answers and is up to date.

    Up to date means at the newest schema. It creates nothing, so a missing SQLite file is
    reported, not made.
    """
    shown = mask_url(database_url)
    backend_of(database_url).check_file(database_url, must_exist=True)
    try:
        current = _current_revision(database_url)
    except DBAPIError as exc:
        raise DatabaseNotReady(
            shown, f"does not answer ({_first_line(exc)})", _FIX_URL, answered=False
        ) from None
    if current is None:
        raise DatabaseNotReady(shown, "has no Simplefeed tables")
    if current != SCHEMA_REVISION:
        if current not in _known_revisions(database_url):
            raise DatabaseNotReady(shown, _newer(current, SCHEMA_REVISION), _NEWER_FIX)
        raise DatabaseNotReady(shown, f"is at schema {current}, not the newest ({SCHEMA_REVISION})")


#: What to do with a database a newer release migrated (docs/how-to/upgrade.md).
_NEWER_FIX = (
    "run the release that migrated it, or restore the backup made before its `db upgrade`"
    " (docs/how-to/upgrade.md)"
)


def _newer(current: str, head: str) -> str:
    return f"is at schema {current}, which this release does not know (its newest is {head})"


def _known_revisions(database_url: str) -> set[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config(database_url))
    return {revision.revision for revision in script.walk_revisions()}


def _current_revision(database_url: str) -> str | None:
    """Return the schema revision the database records in alembic's table.

    None means there are no Simplefeed tables. It is read without alembic (see
    :data:`SCHEMA_REVISION`). The history is linear, so the table holds at most one row.
    """
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return None
            revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            return None if revision is None else str(revision)
    finally:
        engine.dispose()

"""Alembic environment: migrates the database named by the config's ``sqlalchemy.url`` (set by
``simplefeed db upgrade``), by ``-x url=...``, or by SIMPLEFEED_DATABASE_URL."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from simplefeed.settings import Settings
from simplefeed.store import make_database_file, make_engine
from simplefeed.store.tables import metadata

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

url = (
    context.get_x_argument(as_dictionary=True).get("url")
    or config.get_main_option("sqlalchemy.url")
    or Settings.from_env().database_url
)


def run_migrations_offline() -> None:
    context.configure(url=url, target_metadata=metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    make_database_file(url)  # the one maker of database files; the stores never make one
    engine = make_engine(url)
    # Disposed even when a migration refuses, so that no connection is left open behind it.
    try:
        with engine.connect() as connection:
            context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

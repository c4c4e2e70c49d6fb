"""The schema, as SQLAlchemy Core tables. Alembic migrations are the only way it changes;
``alembic check`` compares these definitions with the migrated database."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

feeds = Table(
    "feeds",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False, unique=True),
    Column("uuid", String(36), nullable=False, unique=True),
    Column("title", Text, nullable=False),
    Column("page_size", Integer, nullable=False),
    Column("created_us", BigInteger, nullable=False),
    # The head: last sequence number handed out. Appending locks this row, so sequence numbers
    # are contiguous and commit in order.
    Column("head_seq", BigInteger, nullable=False, server_default="0"),
    Column("head_updated_us", BigInteger, nullable=True),
    Column("modified_us", BigInteger, nullable=False),
    # The base URL the feed's archived pages were rendered with (recorded when a page freezes;
    # NULL while none is). The service refuses to start with another (simplefeed.service.health).
    Column("base_url", Text, nullable=True),
    # When the feed was retired: publishing is refused (410), reading goes on. NULL: live.
    Column("retired_us", BigInteger, nullable=True),
)

entries = Table(
    "entries",
    metadata,
    Column("feed_id", Integer, ForeignKey("feeds.id"), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("entry_id", String(1024), nullable=False),
    Column("updated_us", BigInteger, nullable=False),
    Column("published_us", BigInteger, nullable=False),
    # sha256 of the producer's event: an equal fingerprint under the same id is a replay.
    Column("fingerprint", String(64), nullable=False),
    # The producer's event, normalised, as JSON text (see Event.to_json).
    Column("data", Text, nullable=False),
    UniqueConstraint("feed_id", "entry_id", name="uq_entries_feed_id_entry_id"),
)

pages = Table(
    "pages",
    metadata,
    Column("feed_id", Integer, ForeignKey("feeds.id"), primary_key=True),
    Column("number", BigInteger, primary_key=True),
    Column("first_seq", BigInteger, nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("frozen_us", BigInteger, nullable=False),
    # Lowercase hex SHA-256 of the page's bytes. The bytes live in the archive store, and
    # render again from the entries, byte for byte; the database keeps no copy.
    Column("sha256", String(64), nullable=False),
)

tokens = Table(
    "tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # SHA-256 of the token's secret part; the token itself is shown once and never stored.
    Column("secret_hash", String(64), nullable=False),
    # NULL: may publish to every feed.
    Column("feed_id", Integer, ForeignKey("feeds.id"), nullable=True),
    Column("label", Text, nullable=True),
    Column("created_us", BigInteger, nullable=False),
    Column("revoked_us", BigInteger, nullable=True),
)

# PostgreSQL's flush barrier (Database.flush_barrier): one row per server backend that runs it,
# rewritten in a commit of its own that waits for the WAL up to its record, so past every commit
# visible before it: an append committed without waiting for its flush (see
# simplefeed.store.entries.append_in_one_round_trip) is on disk before it is acknowledged or
# shown. Never read; unused on SQLite.
flush_marks = Table(
    "flush_marks",
    metadata,
    Column("backend_pid", Integer, primary_key=True, autoincrement=False),
    Column("n", BigInteger, nullable=False),
)

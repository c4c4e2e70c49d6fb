"""Persistence with SQLAlchemy Core. Functions take a connection inside a transaction the caller
owns and return :mod:`simplefeed.model` types. They never commit, with one exception: on a
connection from :meth:`Database.append` (PostgreSQL), the append's pipelines carry its
``BEGIN`` and ``COMMIT`` (see there)."""

from simplefeed.store.db import Database
from simplefeed.store.entries import (
    TokenCheck,
    append_entries,
    append_in_one_round_trip,
    entries_between,
    find_entries,
    lock_feed_and_find,
)
from simplefeed.store.feeds import create_feed, get_feed, list_feeds, lock_feed
from simplefeed.store.pages import get_page, insert_page, iter_pages, list_pages

__all__ = [
    "Database",
    "TokenCheck",
    "append_entries",
    "append_in_one_round_trip",
    "create_feed",
    "entries_between",
    "find_entries",
    "get_feed",
    "get_page",
    "insert_page",
    "iter_pages",
    "list_feeds",
    "list_pages",
    "lock_feed",
    "lock_feed_and_find",
]

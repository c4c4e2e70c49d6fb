"""Persistence with SQLAlchemy Core. Functions take a connection inside a transaction the caller
owns, never commit, and return :mod:`simplefeed.model` types."""

from simplefeed.store.db import Database
from simplefeed.store.entries import (
    append_entries,
    entries_between,
    find_entries,
    lock_feed_and_find,
)
from simplefeed.store.feeds import create_feed, get_feed, list_feeds, lock_feed
from simplefeed.store.pages import get_page, insert_page, iter_pages, list_pages

__all__ = [
    "Database",
    "append_entries",
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

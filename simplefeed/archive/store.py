"""Where archived pages live: one small interface over a directory and an object store.

A page is stored under a key that mirrors its URL path, so that a static server, a bucket or a
CDN can answer the URL from the key alone:

    default feed:  pages/<n>
    named feed:    feeds/<name>/pages/<n>

Beside each page, its compressed copies: ``<key>.gz`` and ``<key>.br`` (:mod:`simplefeed.codings`).
A page is written once. Writing the same bytes again is fine, and other bytes raise
:class:`PageConflict`, because readers and caches may already hold the first ones.

This module holds only the rules. :mod:`simplefeed.archive.directory` and
:mod:`simplefeed.archive.s3` are the two stores.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from simplefeed import codings

__all__ = [
    "ATOM_MEDIA_TYPE",
    "CACHE_CONTROL",
    "PageStore",
    "copy_key",
    "feed_pages",
    "other_bytes",
    "page_key",
    "page_number",
]

#: Every archived page is an Atom document in UTF-8.
ATOM_MEDIA_TYPE = "application/atom+xml; charset=utf-8"
#: An archived page never changes, so any cache may keep it for a year without asking again.
CACHE_CONTROL = "public, max-age=31536000, immutable"

_COPY_SUFFIXES = frozenset(codings.SUFFIXES.values())


def feed_pages(feed: str, default_feed: str) -> str:
    """The key prefix of a feed's pages, without the trailing slash."""
    return "pages" if feed == default_feed else f"feeds/{feed}/pages"


def page_key(feed: str, default_feed: str, number: int) -> str:
    """The key of a feed's page ``number``: its URL path without the leading slash."""
    return f"{feed_pages(feed, default_feed)}/{number}"


def copy_key(key: str, coding: str) -> str:
    """The key of a page's copy in ``coding``."""
    return key + codings.SUFFIXES[coding]


def page_number(name: str) -> int | None:
    """The page number a page's or copy's last key segment gives (``7``, ``7.gz``), or None.

    Only canonical decimal numbers count, as in page URLs: ``07`` and ``²`` are no pages.
    """
    stem, dot, rest = name.partition(".")
    if dot and dot + rest not in _COPY_SUFFIXES:
        return None
    return int(stem) if stem.isascii() and stem.isdigit() and stem[0] != "0" else None


def other_bytes(where: str, found: bytes, body: bytes) -> str:
    """How the bytes ``found`` at ``where`` differ from the page's ``body``, in one line."""
    return (
        f"{where}: holds {len(found)} bytes with SHA-256 {hashlib.sha256(found).hexdigest()},"
        f" not the page's {len(body)} with {hashlib.sha256(body).hexdigest()}"
    )


class PageStore(Protocol):
    """What the service asks of the place where archived pages live."""

    def where(self, key: str) -> str:
        """The page's place, for messages: a path or an ``s3://`` URL."""
        ...

    def put(self, key: str, body: bytes, frozen_us: int) -> None:
        """Store the page ``body`` and its compressed copies under ``key``, once.

        The same bytes there already are fine, and a missing copy is written. Other bytes
        raise :class:`~simplefeed.errors.PageConflict` and stay as they are. ``frozen_us`` is
        the freeze time, which a directory gives its files as their modification time.
        """
        ...

    def get(self, key: str) -> bytes | None:
        """The page's bytes, or None when it is not there."""
        ...

    def numbers(self, pages: str) -> list[int]:
        """The page numbers under the prefix ``pages`` (:func:`feed_pages`) with a page or a
        copy stored, in order."""
        ...

    def problems(self, key: str, body: bytes) -> list[str]:
        """How the stored page and its copies differ from ``body``: missing, other bytes, a
        copy that does not decode to ``body``, or wrong headers. One line each."""
        ...

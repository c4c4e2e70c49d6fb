"""The chain of a feed's pages: rendering them, and each feed's newest archived page."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Protocol

from simplefeed import atom
from simplefeed.errors import StoreError
from simplefeed.model import ArchivedPage, Document, DocumentKind, Entry, Feed, PageRecord
from simplefeed.rules import paging
from simplefeed.settings import Settings
from simplefeed.store import Store

__all__ = ["Chain", "Rows"]


class Rows(Protocol):
    """One feed's rows, read from the store or in a transaction under way (an append's)."""

    def page(self, number: int) -> PageRecord | None:
        """The record of archived page ``number``, or None if there is none."""
        ...

    def entries_between(self, first: int, last: int) -> list[Entry]:
        """Entries with ``first <= seq <= last``, newest first."""
        ...


class _StoreRows:
    """A feed's rows as the store reads them, each read in a transaction of its own."""

    def __init__(self, store: Store, feed_id: int) -> None:
        self.store = store
        self.feed_id = feed_id

    def page(self, number: int) -> PageRecord | None:
        return self.store.page(self.feed_id, number)

    def entries_between(self, first: int, last: int) -> list[Entry]:
        return self.store.entries_between(self.feed_id, first, last)


class Chain:
    """Renders a feed's documents, and remembers each feed's newest archived page.

    Every page links to the one before it with that page's SHA-256. Archived pages never
    change, so this process keeps the newest one's digest and self link per feed, and reads
    each of them once. The database keeps no page's bytes: an archived page renders again
    from its entries, byte for byte, and its recorded digest checks that it did.
    """

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        #: Per feed id: the number and SHA-256 of its newest archived page.
        self._digests: dict[int, tuple[int, str]] = {}
        #: Per feed id: the number and self link of its newest archived page.
        self._self_hrefs: dict[int, tuple[int, str | None]] = {}

    def urls(self, feed_name: str) -> paging.Urls:
        """The feed's URLs under the configured base URL."""
        return paging.Urls(self.settings.base_url, feed_name, self.settings.default_feed)

    def rows(self, feed: Feed) -> Rows:
        """The feed's rows, read from the store."""
        return _StoreRows(self.store, feed.id)

    def document(
        self,
        feed: Feed,
        kind: DocumentKind,
        number: int,
        entries: tuple[Entry, ...],
        prev_sha256: str | None = None,
        urls: paging.Urls | None = None,
    ) -> Document:
        """Page ``number`` of the feed as ``kind``, ready to render (``urls``: other than the
        configured ones)."""
        urls = self.urls(feed.name) if urls is None else urls
        return paging.document(urls, feed, kind, number, entries, prev_sha256)

    def render(
        self,
        feed: Feed,
        kind: DocumentKind,
        number: int,
        entries: tuple[Entry, ...],
        prev_sha256: str | None = None,
        parts: Mapping[str, atom.EntryParts] | None = None,
    ) -> bytes:
        """The bytes of page ``number`` as ``kind`` (``parts``: entries written beforehand)."""
        return atom.render(self.document(feed, kind, number, entries, prev_sha256), parts)

    def sha256(self, feed: Feed, number: int, rows: Rows | None = None) -> str | None:
        """The digest of archived page ``number``, or None for page 0 (``rows``: where to
        read it, by default the store)."""
        if number < 1:
            return None
        known = self._digests.get(feed.id)
        if known is not None and known[0] == number:
            return known[1]
        page = (self.rows(feed) if rows is None else rows).page(number)
        if page is None:
            raise StoreError(f"feed {feed.name!r} has no archived page {number}")
        if known is None or known[0] < number:
            self._digests[feed.id] = (number, page.sha256)
        return page.sha256

    def render_archived(
        self, feed: Feed, number: int, rows: Rows | None = None, urls: paging.Urls | None = None
    ) -> bytes:
        """Render archived page ``number`` again from its entries (``urls``: other than the
        configured ones)."""
        rows = self.rows(feed) if rows is None else rows
        first, last = paging.seq_range(number, feed.page_size)
        entries = tuple(rows.entries_between(first, last))
        prev = self.sha256(feed, number - 1, rows)
        return atom.render(self.document(feed, "archive", number, entries, prev, urls))

    def rendered(self, feed: Feed, record: PageRecord, rows: Rows | None = None) -> ArchivedPage:
        """The archived page ``record`` with its bytes, rendered again from its entries.

        Raises :class:`StoreError` if they are not the bytes its digest records: the page
        froze under another base URL or default feed, or its entries changed.
        """
        body = self.render_archived(feed, record.number, rows)
        page = ArchivedPage(feed.id, record.number, body, record.frozen_us)
        if page.sha256 != record.sha256:
            raise StoreError(
                f"feed {feed.name!r} page {record.number} renders to bytes with SHA-256"
                f" {page.sha256}, not its recorded {record.sha256}: were its pages rendered with"
                " another SIMPLEFEED_BASE_URL or SIMPLEFEED_DEFAULT_FEED?"
                " (`simplefeed archive verify` checks the archive)"
            )
        return page

    def newest_self_href(self, feed: Feed, rows: Rows | None = None) -> str | None:
        """The self link of the feed's newest archived page, or None if it has none.

        The database keeps only its digest, so the page is rendered again, first under this
        service's URLs and then under the other layout (the feed as the default feed, or as a
        named one); the one whose bytes have the digest says where the page is. None if
        neither has it.
        """
        number = feed.head_seq // feed.page_size
        if number < 1:
            return None
        known = self._self_hrefs.get(feed.id)
        if known is not None and known[0] == number:
            return known[1]
        rows = self.rows(feed) if rows is None else rows
        record = rows.page(number)
        href = None
        if record is not None:
            base = feed.base_url or self.settings.base_url
            here = self.settings.default_feed == feed.name
            other_default = "" if here else feed.name  # no feed is named "": none is default
            for default in (self.settings.default_feed, other_default):
                urls = paging.Urls(base, feed.name, default)
                body = self.render_archived(feed, number, rows, urls)
                if hashlib.sha256(body).hexdigest() == record.sha256:
                    href = urls.page(number)
                    break
        self._self_hrefs[feed.id] = (number, href)
        return href

    def forget(self, feed: Feed) -> None:
        """Forget what is known of the feed's newest archived page: its pages were rendered
        again (``archive rebase``)."""
        self._digests.pop(feed.id, None)
        self._self_hrefs.pop(feed.id, None)

    def archived(self, feed: Feed, page: ArchivedPage) -> None:
        """Remember ``page`` as the feed's newest archived page, once it is committed."""
        self._digests[feed.id] = (page.number, page.sha256)
        self._self_hrefs[feed.id] = (page.number, self.urls(feed.name).page(page.number))

"""The chain of a feed's pages: rendering them, and each feed's newest archived page."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from simplefeed import archive, atom
from simplefeed.errors import StoreError
from simplefeed.model import ArchivedPage, Document, DocumentKind, Entry, Feed
from simplefeed.rules import paging
from simplefeed.settings import Settings
from simplefeed.store import Store

__all__ = ["Chain", "ReadPage"]

#: Reads archived page N of a feed, or None if there is none.
ReadPage = Callable[[int], ArchivedPage | None]


class Chain:
    """Renders a feed's documents, and remembers each feed's newest archived page.

    Every page links to the one before it with that page's SHA-256. Archived pages never
    change, so this process keeps the newest one's digest and self link per feed, and reads
    each of them once.
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

    def document(
        self,
        feed: Feed,
        kind: DocumentKind,
        number: int,
        entries: tuple[Entry, ...],
        prev_sha256: str | None = None,
    ) -> Document:
        """Page ``number`` of the feed as ``kind``, ready to render."""
        return paging.document(self.urls(feed.name), feed, kind, number, entries, prev_sha256)

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

    def sha256(self, feed: Feed, number: int, read: ReadPage | None = None) -> str | None:
        """The digest of archived page ``number``, or None for page 0.

        ``read`` reads a page other than the newest one known, by default from the store.
        """
        if number < 1:
            return None
        known = self._digests.get(feed.id)
        if known is not None and known[0] == number:
            return known[1]
        page = read(number) if read is not None else self.store.page(feed.id, number)
        if page is None:
            raise StoreError(f"feed {feed.name!r} has no frozen page {number}")
        digest = archive.page_sha256(page)
        if known is None or known[0] < number:
            self._digests[feed.id] = (number, digest)
        return digest

    def newest_self_href(self, feed: Feed, read: ReadPage | None = None) -> str | None:
        """The self link of the feed's newest archived page, or None if it has none."""
        number = feed.head_seq // feed.page_size
        if number < 1:
            return None
        known = self._self_hrefs.get(feed.id)
        if known is not None and known[0] == number:
            return known[1]
        page = read(number) if read is not None else self.store.page(feed.id, number)
        href = atom.self_href(page.body) if page is not None else None
        self._self_hrefs[feed.id] = (number, href)
        return href

    def archived(self, feed: Feed, page: ArchivedPage) -> None:
        """Remember ``page`` as the feed's newest archived page, once it is committed."""
        self._digests[feed.id] = (page.number, archive.page_sha256(page))
        self._self_hrefs[feed.id] = (page.number, self.urls(feed.name).page(page.number))

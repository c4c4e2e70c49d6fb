"""Reading: the live documents, archived pages, and where an entry is."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

from simplefeed import atom
from simplefeed.errors import EntryNotFound, PageNotFound
from simplefeed.locks import Striped
from simplefeed.model import ArchivedPage, DocumentKind, Entry, Feed, Located
from simplefeed.rules import paging
from simplefeed.service.chain import Chain
from simplefeed.service.pages import Pages
from simplefeed.store import Store

__all__ = ["Live", "Reading"]


@dataclass(frozen=True)
class Live:
    """The working page seen as ``kind``, with its ETag."""

    feed: Feed
    kind: DocumentKind
    number: int
    etag: str


class Reading:
    """Serves documents. Each version of a live document is rendered once per process."""

    def __init__(self, store: Store, chain: Chain, pages: Pages) -> None:
        self.store = store
        self.chain = chain
        self.pages = pages
        #: Per feed id and kind: the ETag and bytes of the live document last rendered.
        self._bodies: dict[tuple[int, DocumentKind], tuple[str, bytes]] = {}
        self._bodies_lock = threading.Lock()
        #: One rendering of a version at a time. The requests that want it too (every
        #: long-poll woken by a publish) wait for it, then serve it from memory.
        self._rendering = Striped()

    def live(self, feed: Feed, kind: DocumentKind) -> Live:
        """The validators of the recent document or the working page: no rendering, no query.

        The ETag holds the head's sequence number and a digest of the rest of the document:
        its format, the feed's identity, its URLs and the time of its last append. The head
        alone is not enough. A database restored from a backup and published to since has the
        same head with other entries, and a 304 would keep the entries the restore lost.
        """
        number = paging.working_page(feed.head_seq, feed.page_size)
        tag = hashlib.sha256(
            f"{atom.DOCUMENT_FORMAT}|{feed.uuid}|{feed.title}|{feed.page_size}|"
            f"{self.chain.urls(feed.name).prefix}|{feed.modified_us}".encode()
        ).hexdigest()[:12]
        return Live(feed, kind, number, f'"{kind[0]}{feed.head_seq}-{tag}"')

    def body(self, live: Live) -> bytes:
        """The bytes of a live document, rendered once per version, then served from memory."""
        cached = self.cached_body(live)
        if cached is not None:
            return cached
        with self._rendering((live.feed.id, live.kind)):
            cached = self.cached_body(live)
            if cached is not None:
                return cached
            return self._render(live)

    def cached_body(self, live: Live) -> bytes | None:
        """The bytes of a live document if this process rendered this version; no query."""
        with self._bodies_lock:
            cached = self._bodies.get((live.feed.id, live.kind))
        return cached[1] if cached is not None and cached[0] == live.etag else None

    def _render(self, live: Live) -> bytes:
        feed = live.feed
        first, _ = paging.seq_range(live.number, feed.page_size)
        entries = self.store.entries_between(feed.id, first, feed.head_seq)
        # The head may be an append committed before its WAL flush (simplefeed.store.postgres).
        # No one is shown it before it is durable, so a crash cannot take back what was read.
        self.store.flush_barrier()
        prev = self.chain.sha256(feed, live.number - 1)
        body = self.chain.render(feed, live.kind, live.number, tuple(entries), prev)
        with self._bodies_lock:
            self._bodies[(live.feed.id, live.kind)] = (live.etag, body)
        return body

    def page(self, feed: Feed, number: int) -> ArchivedPage:
        """Archived page ``number`` of the feed with its bytes (:meth:`Pages.read`): its file
        is written if it does not hold them."""
        if not 1 <= number < paging.working_page(feed.head_seq, feed.page_size):
            raise PageNotFound(feed.name, number)
        record = self.store.page(feed.id, number)
        if record is None:  # pragma: no cover - a page is archived in the append's transaction
            raise PageNotFound(feed.name, number)
        return self.pages.read(feed, record)

    def page_entries(self, feed: Feed, number: int) -> list[Entry]:
        """The entries of page ``number`` as stored, newest first."""
        first, last = paging.seq_range(number, feed.page_size)
        return self.store.entries_between(feed.id, first, min(last, feed.head_seq))

    def locate(self, feed_name: str, entry_id: str) -> Located:
        """Where an entry is; :class:`EntryNotFound` if the feed has no entry with this id."""
        feed = self.store.feed(feed_name)
        found = self.store.find_entries(feed.id, [entry_id]).get(entry_id)
        if found is None:
            raise EntryNotFound(feed_name, entry_id)
        number = paging.page_of(found.seq, feed.page_size)
        archived = number < paging.working_page(feed.head_seq, feed.page_size)
        if not archived:
            # Perhaps an append committed before its WAL flush (see _render): its number is
            # shown only once it is durable. Archiving commits synchronously.
            self.store.flush_barrier()
        return Located(entry_id, found.seq, self.chain.urls(feed_name).page(number), archived)

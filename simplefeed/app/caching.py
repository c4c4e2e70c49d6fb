"""HTTP validators and conditional requests (RFC 9110 section 13, RFC 9111), and the cheap reads
behind them.

Live documents (the recent document and the working page) change; their Last-Modified is only
sent once the second it names is over (RFC 9110 8.8.2.2): a change later in that same second
would otherwise keep the same Last-Modified, and a client revalidating with If-Modified-Since
would be told "not modified" while it is. The ETag is always sent and always exact.

The hot path of a feed server is the poll of ``/recent``: mostly a 304, else the same bytes again.
:class:`FeedHeads` gives its validators for the price of the store's fastest lookup of the feed
(one indexed lookup with nothing around it, or on SQLite usually less); :class:`ArchivedPages`
remembers the validators of archived pages, which never change, so serving one from Python costs
no query at all after the first.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from email.utils import formatdate
from pathlib import Path
from typing import BinaryIO

from simplefeed.core import Live, Simplefeed
from simplefeed.model import DocumentKind, Feed, FrozenPage

log = logging.getLogger(__name__)

ARCHIVE_CACHE_CONTROL = "public, max-age=31536000, immutable"


def http_date(seconds: int) -> str:
    return formatdate(seconds, usegmt=True)


def settled_second(modified_us: int, now_us: int) -> int | None:
    """Last-Modified (whole seconds) for a live document, or None while its second is running."""
    second = modified_us // 1_000_000
    return second if second < now_us // 1_000_000 else None


# -- live documents ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LiveValidators:
    """What a request for a live document needs before any rendering."""

    live: Live
    etag: str
    #: Whole seconds, or None while the second of the last change is still running.
    last_modified_s: int | None
    #: ``last_modified_s`` as an HTTP date (formatted once per version).
    last_modified: str | None


class FeedHeads:
    """The validators of the live documents, from the feed as committed at this moment.

    Every request sees the feed as committed, by any process, node or the CLI: nothing is
    cached for a time. The lookup is the store's fastest (:meth:`Simplefeed.feed_head`: on
    SQLite usually less than a query); the validators (ETag, Last-Modified) are derived once
    per version of the feed.
    """

    def __init__(self, core: Simplefeed) -> None:
        self.core = core
        self._validators: dict[tuple[str, DocumentKind], tuple[Feed, LiveValidators]] = {}

    def feed(self, name: str) -> Feed:
        """The feed as committed now; FeedNotFound if none."""
        return self.core.feed_head(name)

    def validators(self, name: str, kind: DocumentKind, feed: Feed | None = None) -> LiveValidators:
        """Validators of ``name``'s recent document or working page, as of this moment (or as
        of ``feed``, just read with :meth:`feed`)."""
        if feed is None:
            feed = self.core.feed_head(name)
        key = (name, kind)
        known = self._validators.get(key)
        if known is not None and (known[0] is feed or known[0] == feed):
            if known[1].last_modified_s is not None:
                return known[1]
            live = known[1].live  # the same version; only Last-Modified may have settled
        else:
            live = self.core.live(feed, kind)
        second = settled_second(feed.modified_us, self.core.clock())
        validators = LiveValidators(
            live, live.etag, second, http_date(second) if second is not None else None
        )
        self._validators[key] = (feed, validators)
        return validators


# -- archived pages ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ArchivedPage:
    """An archived page's validators and where its static file is: fixed once frozen."""

    path: Path
    size: int
    etag: str
    last_modified_s: int
    last_modified: str

    @classmethod
    def of(cls, page: FrozenPage, path: Path) -> ArchivedPage:
        second = page.frozen_us // 1_000_000
        return cls(path, len(page.body), page.etag, second, http_date(second))

    def open(self) -> BinaryIO | None:
        """The static file, if it is there with the page's length; None otherwise.

        (Its bytes are the page's: written atomically from them, repaired by ``archive
        rebuild``; the length check catches a truncated copy without reading it.)
        """
        try:
            f = self.path.open("rb")
        except FileNotFoundError:
            return None
        if os.fstat(f.fileno()).st_size != self.size:
            f.close()
            log.warning("archive file %s does not have the page's length", self.path)
            return None
        return f


class ArchivedPages:
    """Validators of archived pages, remembered per process: a frozen page never changes.

    At most ``limit`` pages (a few hundred bytes each); past that the memory starts again.
    """

    def __init__(self, path_of: Callable[[str, int], Path], limit: int = 100_000) -> None:
        self._path_of = path_of
        self._limit = limit
        self._known: dict[tuple[str, int], ArchivedPage] = {}

    def get(self, feed: str, number: int) -> ArchivedPage | None:
        return self._known.get((feed, number))

    def remember(self, feed: str, page: FrozenPage) -> ArchivedPage:
        known = ArchivedPage.of(page, self._path_of(feed, page.number))
        if len(self._known) >= self._limit:
            self._known.clear()
        self._known[(feed, page.number)] = known
        return known

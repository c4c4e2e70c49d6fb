"""The consumer's pages: fetched, parsed, read ahead, and checked by feedparser.

:class:`HttpPages` is the walk's page source over HTTP
(:class:`~simplefeed.client.walk.PageSource`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Literal

from simplefeed.client.errors import FeedError, NotAtom
from simplefeed.client.fetch import Fetched, Fetcher
from simplefeed.client.parse import Outline, Page, Parser, outline_page, parse_page

if TYPE_CHECKING:
    from simplefeed.client.checker import Checker

log = logging.getLogger(__name__)

__all__ = ["HELPER_AFTER_PAGES", "XML_TYPES", "HttpPages"]


class HttpPages:
    """The consumer's page source: fetch, parse, then let the cache keep what parsed.

    Walking back reads outlines (:func:`~simplefeed.client.parse.outline_page`), which pins
    archived pages in the cache; the full parse on the way forward reads them from there. A
    pinned page whose full parse fails is dropped from the cache, so that a later run asks the
    network again.
    """

    def __init__(self, fetcher: Fetcher, parser: Parser, entry_point: str) -> None:
        self.fetcher = fetcher
        self.parser = parser
        self.entry_point = entry_point
        self.head_max_age: float | None = None
        #: The last head request was held by the server (a long poll it honoured) and took
        #: this long.
        self.head_waited = False
        self.head_seconds = 0.0
        #: The entry point's permanent redirect has been warned of (once per consumer).
        self.moved_warned = False
        # Read-ahead: the one page the walk will ask for next, fetched (or, for feedparser's
        # checks, read from the cache) and parsed on a thread of its own while the current
        # page's entries are handled (:meth:`prefetch`). One page at most: memory stays flat.
        self._ahead: ThreadPoolExecutor | None = None
        self._next: tuple[str, Future[Page]] | None = None
        # feedparser's checks in a helper process (:mod:`simplefeed.client.checker`), from the
        # pass's HELPER_AFTER_PAGES-th page walked back or read ahead to the pass's end.
        self._checker: Checker | None = None
        self._pages_read: Counter[str] = Counter()

    def prefetch(self, url: str) -> None:
        """Start reading the page at ``url``, which :meth:`page` will be asked for next, on a
        thread of its own when the read waits on something besides this interpreter: the
        network, or the helper process making feedparser's checks. An archived page the cache
        keeps, parsed with lxml, is read when it is asked for: on a thread it would only share
        the interpreter with the one handling entries, and a catch-up going forward through
        the pages it walked back took 8 % longer so (docs/benchmarks.md,
        "Consuming")."""
        if self._next is not None:
            return
        if self.parser == "lxml" and self.fetcher.holds(url):
            return
        if self._ahead is None:
            self._ahead = ThreadPoolExecutor(1, thread_name_prefix="simplefeed-read-ahead")
        self._counted("ahead")
        self._next = (url, self._ahead.submit(self._read, url))

    def _counted(self, way: Literal["back", "ahead"]) -> None:
        """One more page read by the pass, walking back or ahead: from the
        HELPER_AFTER_PAGES-th either way on, feedparser's checks are made in a helper process
        when feedparser checks pages and a CPU is to spare (it starts now, while the walk goes
        on, until the pass ends)."""
        self._pages_read[way] += 1
        if self._pages_read[way] != HELPER_AFTER_PAGES:
            return
        # Imported here, not with the package: the helper runs this module as its main.
        from simplefeed.client.checker import Checker, helps

        if self._checker is None and self.parser == "feedparser" and helps():
            self._checker = Checker()
            self._checker.start()

    def end_pass(self) -> None:
        """A pass is over: a page read ahead is let finish, the helper process stops."""
        pending = self._take()
        if pending is not None:
            _settle(pending[1])
        self._pages_read.clear()
        checker, self._checker = self._checker, None
        if checker is not None:
            checker.close()

    def page(self, url: str) -> Page:
        pending = self._take()
        if pending is not None:
            if pending[0] == url:
                return pending[1].result()  # its page, or the error reading it raised
            _settle(pending[1])
        return self._read(url)

    def _take(self) -> tuple[str, Future[Page]] | None:
        pending, self._next = self._next, None
        return pending

    def close(self) -> None:
        """Let a page being read ahead finish (its result is not needed), stop the thread and
        the helper process."""
        self.end_pass()
        if self._ahead is not None:
            self._ahead.shutdown(wait=True)
            self._ahead = None

    def _read(self, url: str) -> Page:
        fetched = self.fetcher.get(url, entry_point=self.entry_point)
        checker = self._checker
        try:
            with _typed(fetched):
                if checker is not None:
                    page = checker.parse(url, fetched.body)
                else:
                    page = parse_page(url, fetched.body, parser=self.parser)
        except FeedError:
            if fetched.document.immutable:
                self.fetcher.forget(url)
            raise
        self._keep(url, fetched, page)
        return page

    def _keep(self, url: str, fetched: Fetched, page: Page | Outline) -> None:
        """Keep an archived page read from ``url`` in the cache, pinned, if ``url`` is its
        permanent URL: the checkpoint names pages by that URL, and the cache lets a page go
        when the checkpoint leaves it (state.py), so a page pinned under another URL (a link
        with a query that changes at every pass) would stay for good, one more each pass: a
        hostile server's trial grew a state file to 77 MB in 30 s so. Such a page is read
        again when needed. A page that is not archived is never pinned."""
        if page.is_archive and page.permanent_url == url:
            self.fetcher.remember(fetched, immutable=True)
        elif fetched.document.immutable:
            self.fetcher.forget(url)  # pinned before, wrongly
        elif not page.is_archive:
            self.fetcher.remember(fetched, immutable=False)

    def outline(self, url: str) -> Outline:
        pending = self._take()
        if pending is not None:
            _settle(pending[1])
        self._counted("back")
        fetched = self.fetcher.get(url, entry_point=self.entry_point)
        with _typed(fetched):
            outline = outline_page(url, fetched.body)
        self._keep(url, fetched, outline)
        return outline

    def head(self, url: str, wait: float | None = None) -> Page:
        """The entry point: never pinned, whatever it claims; its max-age is kept. ``wait``:
        a long poll (:meth:`Fetcher.get`).

        An entry point that redirects permanently is warned of, once: checkpoints are kept
        under the URL given, so another spelling of the same feed (``/feeds/events/recent``
        and the ``/recent`` it redirects to) would have a checkpoint of its own in the same
        state file, and read the whole history again. Checkpoints stay keyed as given (a
        redirect a server makes today must not move them); the warning names the URL to give
        instead."""
        pending = self._take()
        if pending is not None:
            _settle(pending[1])
        started = time.monotonic()
        fetched = self.fetcher.get(url, entry_point=self.entry_point, wait=wait)
        self.head_seconds = time.monotonic() - started
        if fetched.source == "cache":
            # Nothing is asked of the server, and a run that finds nothing new prints nothing:
            # ``--debug`` says why (a newcomer took a silent run for one that did nothing).
            document = fetched.document
            age = self.fetcher.clock() - document.fetched_at
            log.debug(
                "%s: not fetched: the copy in the state file is fresh for %.0f s more"
                " (max-age %.0f s)",
                url,
                max(0.0, (document.max_age or 0.0) - age),
                document.max_age or 0.0,
            )
        self.head_waited = fetched.waited
        if fetched.moved_to is not None and not self.moved_warned:
            self.moved_warned = True
            log.warning(
                "%s redirects permanently to %s; checkpoints are kept under the URL given, so"
                " another spelling of this feed starts over: give %s to share them",
                url,
                fetched.moved_to,
                fetched.moved_to,
            )
        with _typed(fetched):
            page = parse_page(url, fetched.body, parser=self.parser)
        self.fetcher.remember(fetched, immutable=False)
        self.head_max_age = fetched.max_age
        return page


#: A helper process for feedparser's checks starts in about 0.17 s, the time feedparser takes
#: over 9 pages of 100 entries (docs/explanation/decisions/consumer-reading.md): a pass that
#: walks back or reads ahead fewer pages than this has its pages checked in this process.
HELPER_AFTER_PAGES = 8

#: The media types a feed may come as besides ``*/*+xml`` (``application/atom+xml``).
XML_TYPES = frozenset({"application/xml", "text/xml"})


@contextlib.contextmanager
def _typed(fetched: Fetched) -> Iterator[None]:
    """A body that is not Atom and came with a Content-Type naming no XML type (a web page, a
    JSON reply) raises :class:`NotAtom` saying that type."""
    try:
        yield
    except NotAtom as exc:
        media = (fetched.content_type or "").partition(";")[0].strip().lower()
        if not media or media in XML_TYPES or media.endswith("+xml"):
            raise
        raise NotAtom(exc.url, exc.reason, fetched.content_type) from exc


def _settle(future: Future[Page]) -> None:
    """Wait for a read-ahead nobody needs any more; what it raised does not matter."""
    try:
        future.result()
    except Exception as exc:
        log.debug("a page read ahead and not needed failed: %s", exc)

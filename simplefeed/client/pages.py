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

__all__ = ["CHECKER_AFTER_PAGES", "XML_TYPES", "HttpPages"]


class HttpPages:
    """The consumer's page source: fetch, parse, then let the cache keep what parsed.

    Walking back reads outlines (:func:`~simplefeed.client.parse.outline_page`), which pins
    archived pages in the cache. The full parse on the way forward reads them from there. A
    pinned page whose full parse fails is dropped from the cache, so a later run asks the
    network again.
    """

    def __init__(self, fetcher: Fetcher, parser: Parser, entry_point: str) -> None:
        self.fetcher = fetcher
        self.parser = parser
        self.entry_point = entry_point
        self.head_max_age: float | None = None
        #: The server held the last head request (a long poll it honoured), and it took this
        #: long.
        self.head_waited = False
        self.head_seconds = 0.0
        #: The entry point's permanent redirect has been warned of (once per consumer).
        self.moved_warned = False
        # Read-ahead: the one page the walk will ask for next. A thread of its own fetches and
        # parses it while the current page's entries are handled (:meth:`prefetch`). For
        # feedparser's checks, it reads the page from the cache. One page at most keeps memory
        # flat.
        self._ahead: ThreadPoolExecutor | None = None
        self._next: tuple[str, Future[Page]] | None = None
        # feedparser's checks run in a child process (:mod:`simplefeed.client.checker`). They
        # start at the pass's CHECKER_AFTER_PAGES-th page walked back or read ahead, and run to
        # the pass's end.
        self._checker: Checker | None = None
        self._pages_read: Counter[str] = Counter()

    def prefetch(self, url: str) -> None:
        """Start reading the page at ``url``, which :meth:`page` will be asked for next.

        The read runs on a thread of its own when it waits on something besides this
        interpreter. That is the network, or the child process making feedparser's checks. An
        archived page the cache keeps, parsed with lxml, is read when it is asked for. On a
        thread it would only share the interpreter with the thread handling entries. A catch-up
        going forward through the pages it walked back would take 8 % longer
        (docs/benchmarks.md, "Consuming").
        """
        if self._next is not None:
            return
        if self.parser == "lxml" and self.fetcher.holds(url):
            return
        if self._ahead is None:
            self._ahead = ThreadPoolExecutor(1, thread_name_prefix="simplefeed-read-ahead")
        self._counted("ahead")
        self._next = (url, self._ahead.submit(self._read, url))

    def _counted(self, way: Literal["back", "ahead"]) -> None:
        """Count one more page read by the pass, walking back or ahead.

        From the CHECKER_AFTER_PAGES-th page on, either way, feedparser's checks move to a child
        process. That happens when feedparser checks pages and a CPU is to spare. The child
        starts now, while the walk goes on, and runs until the pass ends.
        """
        self._pages_read[way] += 1
        if self._pages_read[way] != CHECKER_AFTER_PAGES:
            return
        # Imported here, not with the package, because the child runs this module as its main.
        from simplefeed.client.checker import Checker, helps

        if self._checker is None and self.parser == "feedparser" and helps():
            self._checker = Checker()
            self._checker.start()

    def end_pass(self) -> None:
        """A pass is over: a page read ahead may finish, and the child process stops."""
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
                return pending[1].result()  # Its page, or the error reading it raised.
            _settle(pending[1])
        return self._read(url)

    def _take(self) -> tuple[str, Future[Page]] | None:
        pending, self._next = self._next, None
        return pending

    def close(self) -> None:
        """Let a page being read ahead finish, then stop the thread and the child process.

        The page's result is not needed.
        """
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
        """Keep an archived page from ``url`` in the cache, pinned, if ``url`` is its permanent URL.

        The checkpoint names pages by that URL. The cache lets a page go when the checkpoint
        leaves it (state.py). A page pinned under another URL would stay for good, one more each
        pass. A link with a query that changes at every pass does that. A hostile server could
        grow a state file to 77 MB in 30 s so. Such a page is read again when needed. A page
        that is not archived is never pinned.
        """
        if page.is_archive and page.permanent_url == url:
            self.fetcher.remember(fetched, immutable=True)
        elif fetched.document.immutable:
            self.fetcher.forget(url)  # It was pinned before, wrongly.
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
        """The entry point, never pinned whatever it claims, with its max-age kept.

        ``wait`` makes a long poll (:meth:`Fetcher.get`).

        An entry point that redirects permanently is warned of, once. Checkpoints are kept
        under the URL given. So another spelling of the same feed would have a checkpoint of
        its own in the same state file, and read the whole history again. An example is
        ``/feeds/events/recent`` and the ``/recent`` it redirects to. Checkpoints stay keyed as
        given, because a redirect a server makes today must not move them. The warning names
        the URL to give instead.
        """
        pending = self._take()
        if pending is not None:
            _settle(pending[1])
        started = time.monotonic()
        fetched = self.fetcher.get(url, entry_point=self.entry_point, wait=wait)
        self.head_seconds = time.monotonic() - started
        if fetched.source == "cache":
            # Nothing is asked of the server, and a run that finds nothing new prints nothing.
            # ``--debug`` says why, because a silent run looks like one that did nothing.
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


#: A child process for feedparser's checks starts in about 0.17 s. That is the time feedparser
#: takes over 9 pages of 100 entries (docs/explanation/decisions/consumer-reading.md). A pass that
#: walks back or reads ahead fewer pages than this checks its pages in this process.
CHECKER_AFTER_PAGES = 8

#: The media types a feed may come as besides ``*/*+xml`` (``application/atom+xml``).
XML_TYPES = frozenset({"application/xml", "text/xml"})


@contextlib.contextmanager
def _typed(fetched: Fetched) -> Iterator[None]:
    """Raise :class:`NotAtom` for a body that is not Atom and came with a non-XML type.

    Examples are a web page and a JSON reply. The error says the Content-Type.
    """
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

"""Which entries are new, and in which order: the walking logic, over any :class:`PageSource`.

No HTTP here. A page source turns a URL into a parsed :class:`~simplefeed.client.parse.Page`.
The consumer's source is the fetcher plus the parser, and tests may use pages held in a dict.
A source may also give an :class:`~simplefeed.client.parse.Outline` for less. An outline holds
the links, the archive flag, and the oldest and newest sequence numbers. Links are only ever
followed, never built.

One pass (:func:`new_entries`) starts from the entry point's document (*head*) and the
checkpoint:

1. The checkpoint's entry is in *head*. The entries after it are new. This is the usual poll.
2. Otherwise walk back from *head* through ``prev-archive`` to the checkpoint's page, reading
   only outlines. That page is the one its permanent URL names, or the one whose sequence
   numbers hold the entry. Archived pages come from the cache without a request. So this costs
   the requests a resume always made: one per page not read before. Then walk forward from
   there through ``next-archive``. The walk yields the entries after the checkpoint. Then it
   yields each newer page up to the working page. *head* stands in for the page its ``via``
   names, so that page is not fetched again. If the walk back reaches the first page without
   finding the entry, it raises :class:`LastEntryVanished`.
3. There is no checkpoint (a first run). Walk back to the first page, reading only outlines.
   Then walk forward from it as in 2, yielding everything, oldest first.
   :func:`starting_point` gives the checkpoint for "start from now" instead.

Memory stays flat in the number of pages walked. The one exception is a digest per page walked
back (a 64-character string). Walking back, one page (and *head*) is held at a time. Going
forward, the walk holds the page whose entries are handed over and the next one. It reads the
next one first, to check its digest. A page source that reads ahead holds one more. The walk
also keeps a bounded trail of URLs and the ids of two pages.

Going forward re-reads the pages walked back through. The consumer's page source serves
archived pages from its cache, without a request. A page source that can read ahead
(:class:`ReadAhead`) learns the page after the next as soon as its link is known. It reads
that page (one page at most) while the entries of the current page are handled.

Every entry yielded has the sequence number of the one before plus one. The first entry of a
feed has 1. Anything else raises :class:`SequenceGap` before the entry is yielded. Walking
back, each page must hold older entries than the one before, or else :class:`MalformedPage`.
So a walk cannot go round in circles through pages with entries, because coming back to a page
breaks the order. Some links raise :class:`LinkLoop` at once. A link to one of the last pages
visited (:data:`TRAIL` of them) does. So does a link to any page visited since the walk last
passed an entry. Errors are raised before any entry past the problem is yielded. The caller's
checkpoint is never touched here.

Integrity. A document's ``prev-archive`` link may give the SHA-256 of the page it links to
(``sf:sha256``). The chain is anchored at *head*. Walking back, each page read is checked
against the digest of the link that led to it. For the newest archived page, that is *head*'s
link. The walk keeps each page's digest. Going forward, every page must have the digest kept
for it at the same place in the chain. This holds for the first page too. It is checked before
any of the page's entries is yielded, whether the page came from the network or from a cache.
Otherwise the walk raises :class:`DigestMismatch`. The ``next-archive`` links must lead back
along the same pages to *head*. A page other than *head* without one is a
:class:`MalformedPage`. So is a chain longer or shorter than the one walked back. So nothing
is yielded from a page the entry point does not vouch for through the chain. Pages written
before servers gave digests vouch for nothing, and are read without the check.

Position is found by id *and* sequence number. The checkpoint's id at another number raises
:class:`RepeatedEntry`. So does the checkpoint's id passed again going forward. Going forward,
an id listed at another number on the page before also raises it. So does one listed earlier
on the same page. Only the ids of two pages are kept, so an id repeated from further back is
not looked for.

Bounded. Every page reached through ``prev-archive`` must be archived (``fh:archive``). It
must hold at least one entry, because a server freezes a page only once it is full. Each page
holds older entries than the one before. So the pages walked back are at most the sequence
numbers passed (the newest minus the checkpoint's). They are also never more than
``max_pages`` (:data:`MAX_PAGES`). That bound ends a chain that counts down from 2**62 one page
at a time. Walking back is the only way a pass reaches a page, because going forward retraces
it. So a pass makes at most ``max_pages`` + 2 page requests. It pins at most as many pages in
the consumer's cache. So the state file cannot grow without bound during one pass. Past the
bound, or at a page that breaks these rules, the walk raises :class:`MalformedPage`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from simplefeed.client.entry import FeedEntry
from simplefeed.client.errors import (
    DigestMismatch,
    LastEntryVanished,
    LinkLoop,
    MalformedPage,
    NoSuchEntry,
    Parting,
    RepeatedEntry,
    SequenceGap,
    TooManyPages,
)
from simplefeed.client.parse import Outline, Page
from simplefeed.client.state import Checkpoint

__all__ = [
    "MAX_PAGES",
    "OutlineSource",
    "PageSource",
    "Progress",
    "ReadAhead",
    "entry_numbered",
    "new_entries",
    "parting",
    "starting_point",
    "verify",
]

#: Statuses of the checkpoint's page that send us to the walk back instead of failing.
GONE = (404, 410)
#: How many of the last pages visited a walk remembers, for :class:`LinkLoop`.
TRAIL = 16
#: The most pages one pass walks back by default. A pass also reads and pins that many pages
#: in a consumer's cache. The default covers ten million entries in pages of 100, Simplefeed's
#: default page size. A longer history needs a larger ``max_pages``.
MAX_PAGES = 100_000


class PageSource(Protocol):
    def page(self, url: str) -> Page: ...


@runtime_checkable
class ReadAhead(Protocol):
    """A page source that can start reading the page it will be asked for next."""

    def prefetch(self, url: str) -> None: ...


@runtime_checkable
class OutlineSource(Protocol):
    """A page source that can also give a page's outline, for less than the page."""

    def page(self, url: str) -> Page: ...

    def outline(self, url: str) -> Outline: ...


@dataclass(frozen=True)
class Progress:
    """Where a long catch-up stands.

    ``locate`` means walking back: ``done`` entries passed of ``total`` to pass. ``process``
    means going forward: entries yielded so far of ``total`` new ones.
    """

    phase: Literal["locate", "process"]
    done: int
    total: int | None


ProgressFn = Callable[[Progress], None]


def starting_point(source: PageSource, head: Page) -> Checkpoint:
    """The checkpoint that means "everything published so far is processed".

    It is the newest entry of the feed. If the entry point is empty, the walk goes back to the
    newest archived page, which holds entries. For an empty feed, the checkpoint sits before the
    first entry (sequence 0), so entries published later are all new.
    """
    page = head
    visited = [head.url]
    while True:
        if page.entries:
            newest = page.entries[-1]
            return Checkpoint(newest.id, newest.seq, newest.page_url)
        prev = page.prev_archive
        if prev is None:
            return Checkpoint("", 0, page.permanent_url)
        if prev in visited:
            raise LinkLoop(prev, visited)
        visited.append(prev)
        older = source.page(prev)
        verify(page, older)
        _archived(prev, older)
        page = older


def entry_numbered(
    source: PageSource, head: Page, seq: int, *, max_pages: int = MAX_PAGES
) -> Checkpoint:
    """The checkpoint that means "every entry up to ``seq`` is processed".

    It is the entry numbered ``seq``. The walk goes back from ``head`` through outlines and
    checks each page as a pass checks it. For 0, the checkpoint is the point before the first
    entry. :class:`NoSuchEntry` when the feed holds no entry of that number.
    """
    if seq == 0:
        return Checkpoint("", 0, head.permanent_url)
    back = _Back(head, seq, None, max_pages)
    page: Page | Outline = head
    back.passed(head)
    while back.oldest is None or back.oldest > seq:  # Every entry passed is newer, or none.
        older = back.older(source, page)
        if older is None:
            break
        assert older.newest_seq is not None
        if older.newest_seq < seq:
            break  # Older entries only, so the number is on ``page`` if anywhere.
        page = older
    whole = page if isinstance(page, Page) else source.page(page.url)
    for entry in whole.entries:
        if entry.seq == seq:
            return Checkpoint(entry.id, seq, entry.page_url)
    raise NoSuchEntry(head.url, seq, back.newest)


def parting(
    source: PageSource, head: Page, read: Mapping[int, str], *, max_pages: int = MAX_PAGES
) -> Parting:
    """Compare the entries ``read`` with the feed.

    ``read`` maps sequence numbers to ids and is not empty. The walk goes back from ``head`` to
    the page of the oldest of them, and checks each page as a pass checks it. This serves a
    consumer whose last entry is no longer in the feed. That happens when a server's database
    is restored from a backup that lost entries the consumer had read.
    """
    lowest = min(read)
    differs: int | None = None  # The lowest number at which the feed holds another entry.
    back = _Back(head, lowest - 1, None, max_pages)
    page: Page | Outline = head
    back.passed(head)
    newest = head.newest_seq
    while True:
        whole = page if isinstance(page, Page) else source.page(page.url)
        if newest is None:
            newest = whole.newest_seq
        for entry in whole.entries:
            if read.get(entry.seq, entry.id) != entry.id and (
                differs is None or entry.seq < differs
            ):
                differs = entry.seq
        oldest = whole.oldest_seq
        if oldest is not None and oldest <= lowest:
            break
        older = back.older(source, page)
        if older is None:
            break
        page = older
    held = [seq for seq in read if seq <= (newest or 0) and (differs is None or seq < differs)]
    agreed = max(held) if held else None
    return Parting(
        agreed, tuple((seq, read[seq]) for seq in sorted(read) if agreed is None or seq > agreed)
    )


def new_entries(
    source: PageSource,
    head: Page,
    checkpoint: Checkpoint | None,
    *,
    progress: ProgressFn | None = None,
    page_done: Callable[[], None] = lambda: None,
    behind: Callable[[Page, Checkpoint], None] = lambda page, checkpoint: None,
    max_pages: int = MAX_PAGES,
) -> Iterator[FeedEntry]:
    """The entries after ``checkpoint``, oldest first (everything when it is None).

    ``page_done`` is called when the walk is past a page's last entry, before it reads on. A
    resume then starts after it. ``behind`` gets the page and the checkpoint when the feed's
    newest entry is older than the checkpoint's, from an older copy of the entry point. Then
    nothing is yielded. ``progress`` hears of each page passed walking back and each entry
    yielded. ``max_pages`` bounds the walk back, and past it the walk raises MalformedPage.
    """
    # Each pass forward is made before it runs, so the page it starts from is not also held
    # here. The pass lets go of it as soon as it moves on to the next one.
    if checkpoint is None or checkpoint.seq == 0:
        first, newest, chain = _walk_back_to_start(source, head, progress, max_pages)
        forward = _forward(
            source,
            head,
            first,
            -1,
            None,
            progress,
            page_done,
            chain,
            newest=newest,
            report=first is not head,
        )
        del first
        yield from forward
        return

    position = head.position(checkpoint.entry_id, checkpoint.seq)
    if position is not None:
        yield from _checked(
            head.url, head.entries[position + 1 :], checkpoint.seq, checkpoint, _Ids(head)
        )
        return
    top = head if head.newest_seq is not None else _below_empty(source, head)
    if top is not None and top.newest_seq is not None and top.newest_seq < checkpoint.seq:
        # This is an older copy of the entry point than one read before. A CDN's edge serves
        # one, and so does a server answering from what it last served while its database is
        # down. Nothing is new yet. Once the copy shows the checkpoint's number again, the entry
        # there must be the checkpoint's. The consumer says so in its log.
        behind(top, checkpoint)
        return
    del top

    page, position, chain = _walk_back_to_entry(source, head, checkpoint, progress, max_pages)
    forward = _forward(
        source, head, page, position, checkpoint, progress, page_done, chain, report=len(chain) > 1
    )
    del page
    yield from forward


def _below_empty(source: PageSource, head: Page) -> Page | None:
    """The page before ``head``, read whole and checked: it holds the feed's newest entry.

    ``head`` is an entry point without entries, because a page had just frozen when it was
    served. None at a feed without entries.
    """
    if head.prev_archive is None:
        return None
    below = source.page(head.prev_archive)
    verify(head, below)
    _archived(head.prev_archive, below)
    return below


class _Trail:
    """The URLs a walk remembers, in memory that does not grow with the walk.

    These are the last :data:`TRAIL` pages, each by its URL and its permanent URL. They form
    the chain a :class:`LinkLoop` reports. Every page but *head* holds entries. Walking back,
    :func:`_archived` checks this. Going forward, the walk visits only the pages walked back.
    Each page back holds older ones, so the sequence numbers catch a loop longer than the trail.
    """

    def __init__(self, page: Page) -> None:
        self.chain: deque[str] = deque([page.url], maxlen=TRAIL)
        self.near: deque[str] = deque([page.url, page.permanent_url], maxlen=2 * TRAIL)

    def follow(self, url: str) -> None:
        """About to follow a link to ``url``."""
        if url in self.near:
            raise LinkLoop(url, list(self.chain))

    def arrived(self, url: str, page: Page | Outline) -> None:
        self.chain.append(url)
        self.near.extend((url, page.permanent_url))


def _archived(url: str, page: Page | Outline) -> None:
    """Check that ``page`` is an archived page with entries, or raise :class:`MalformedPage`.

    The walk reached ``page`` through a ``prev-archive`` link to ``url``. A server freezes a
    page only once it is full. A chain of empty or unarchived pages could go on for ever with
    nothing to tell it by.
    """
    if not page.is_archive:
        raise MalformedPage(url, "prev-archive led to a page that is not archived (no fh:archive)")
    if page.newest_seq is None:
        raise MalformedPage(url, "an archived page without entries")


class _Back:
    """The bookkeeping of a walk back.

    It holds the trail and the oldest sequence number passed, because each page back must hold
    older entries. It holds the digests of the pages passed, newest first, which is the chain
    the walk forward retraces. It also holds the bound on pages and the progress.
    """

    def __init__(
        self, head: Page, after_seq: int, progress: ProgressFn | None, max_pages: int
    ) -> None:
        self.trail = _Trail(head)
        self.steps = 0
        self.oldest: int | None = None
        self.newest: int | None = None
        self.after_seq = after_seq
        self.progress = progress
        self.max_pages = max_pages
        self.chain: list[str] = []

    def passed(self, page: Page | Outline) -> bool:
        """Check that ``page``'s entries are older than those passed; return whether it had any."""
        oldest, newest = page.oldest_seq, page.newest_seq
        if newest is None:
            return False
        if self.oldest is not None and newest >= self.oldest:
            raise MalformedPage(
                page.url,
                f"prev-archive led to newer entries (sequence {newest} after {self.oldest})",
            )
        self.oldest = oldest if oldest is not None else newest  # An outline may not know it.
        if self.newest is None:
            self.newest = newest
        return True

    def step(self, prev: str) -> None:
        """About to follow ``prev``."""
        self.trail.follow(prev)
        if self.steps >= self.max_pages:
            raise TooManyPages(prev, self.max_pages)
        if self.progress is None:
            return
        if (self.steps or self.oldest is not None) and self.newest is not None:
            assert self.oldest is not None
            total = self.newest - self.after_seq
            self.progress(Progress("locate", self.newest - self.oldest + 1, total))

    def arrived(self, url: str, page: Page | Outline) -> None:
        """Record arriving at ``page``, reached through ``url``.

        The page was checked against the link's digest. It must be archived, with entries older
        than those passed (:meth:`passed`). Its digest is kept.
        """
        self.steps += 1
        _archived(url, page)
        self.passed(page)
        self.trail.arrived(url, page)
        self.chain.append(page.sha256)

    def older(self, source: PageSource, page: Page | Outline) -> Page | Outline | None:
        """Read and check the page that ``page``'s ``prev-archive`` link leads to.

        It reads the outline when the source gives one. It checks the page against the link's
        digest, and as :meth:`arrived` says. None at the first page.
        """
        prev = page.prev_archive
        if prev is None:
            return None
        self.step(prev)
        older = _read_back(source, prev)
        verify(page, older)
        self.arrived(prev, older)
        return older


def _read_back(source: PageSource, url: str) -> Page | Outline:
    """The page at ``url`` as walking back reads it: its outline when the source gives one."""
    return source.outline(url) if isinstance(source, OutlineSource) else source.page(url)


def _walk_back_to_start(
    source: PageSource, head: Page, progress: ProgressFn | None, max_pages: int
) -> tuple[Page, int | None, list[str]]:
    """The first page of the feed, found by walking back from ``head`` through outlines.

    Also return the newest sequence number passed on the way (None if no entry was seen). Also
    return the digests of the pages passed, newest first, so the first page's digest is last.
    """
    back = _Back(head, 0, progress, max_pages)
    page: Page | Outline = head
    back.passed(head)
    while (older := back.older(source, page)) is not None:
        page = older
    if isinstance(page, Outline):
        page = source.page(page.url)
        if page.prev_archive is not None:  # The outline missed a link the page has.
            raise MalformedPage(page.url, "a prev-archive link after the entries")
    return page, back.newest, back.chain


def _walk_back_to_entry(
    source: PageSource,
    head: Page,
    checkpoint: Checkpoint,
    progress: ProgressFn | None,
    max_pages: int,
) -> tuple[Page, int, list[str]]:
    """The page holding the checkpoint's entry, found by walking back from ``head``.

    The walk reads outlines. It returns the page, the entry's position, and the digests of the
    pages passed. The digests run newest first, so that page's digest is last.

    A page is read whole where the entry may be. That is the page its permanent URL names, or
    the page whose sequence numbers hold the checkpoint's. An outline may know only the newest
    number. Then it is the page after the first one whose entries are all older.
    """
    back = _Back(head, checkpoint.seq, progress, max_pages)
    page: Page | Outline = head
    back.passed(head)
    looked = True  # Head holds no such entry.
    while (older := back.older(source, page)) is not None:  # None at the first page.
        assert older.newest_seq is not None
        if older.newest_seq < checkpoint.seq:
            back.chain.pop()  # Past it, so the entry is on the newer page, the last kept.
            break
        page = older
        oldest = page.oldest_seq
        looked = checkpoint.page_url in (page.url, page.permanent_url) or (
            oldest is not None and oldest <= checkpoint.seq
        )
        if looked:
            found = _holding(source, page, checkpoint)
            if found is not None:
                return *found, back.chain
    if not looked:
        found = _holding(source, page, checkpoint)
        if found is not None:
            return *found, back.chain
    raise LastEntryVanished(page.url, checkpoint.entry_id)


def _holding(
    source: PageSource, page: Page | Outline, checkpoint: Checkpoint
) -> tuple[Page, int] | None:
    """``page`` read whole, and the checkpoint's position on it, if it holds the entry."""
    whole = page if isinstance(page, Page) else source.page(page.url)
    position = whole.position(checkpoint.entry_id, checkpoint.seq)
    return None if position is None else (whole, position)


def _forward(
    source: PageSource,
    head: Page,
    page: Page,
    position: int,
    checkpoint: Checkpoint | None,
    progress: ProgressFn | None,
    page_done: Callable[[], None],
    chain: list[str],
    *,
    newest: int | None = None,
    report: bool = False,
) -> Iterator[FeedEntry]:
    """From ``page`` (after ``position``) through ``next-archive`` links, up to ``head``.

    ``chain`` holds the digests of the pages walked back, newest first, with ``page``'s last.
    It is empty when ``page`` is ``head``. Every page must have the digest at its place in the
    chain, cached copy or not. The check comes before the page's entries are yielded. The next
    page is read before the entries of the current one are yielded, so a page source can read
    ahead. The links must lead to ``head`` along exactly as many pages.

    Progress is reported from the second page on, or from the first entry with ``report``. Its
    total is ``newest`` minus the checkpoint's number. ``newest`` defaults to head's newest
    entry.
    """
    after_seq = checkpoint.seq if checkpoint is not None else 0
    if newest is None or (head.newest_seq is not None and head.newest_seq > newest):
        newest = head.newest_seq
    total = None if newest is None else newest - after_seq
    if page is not head:
        _vouched(page, chain)
    trail = _Trail(page)
    ahead = source if isinstance(source, ReadAhead) else None
    moved = False
    prev_seq = after_seq
    done = 0
    ids = _Ids(page)
    entries = page.entries[position + 1 :]
    while True:
        nxt: Page | None = None
        nxt_url: str | None = None
        if page is not head:
            nxt_url = page.next_archive
            if nxt_url is None:
                raise MalformedPage(
                    page.url, f"the next-archive chain ended at {page.url}, not at the entry point"
                )
            trail.follow(nxt_url)
            if nxt_url == head.permanent_url:
                if chain:
                    raise MalformedPage(
                        page.url,
                        f"next-archive led to the entry point's page with {len(chain)} pages"
                        " walked back through still ahead",
                    )
                nxt = head
            elif not chain:
                raise MalformedPage(
                    page.url,
                    f"next-archive led to {nxt_url}, past the pages walked back through,"
                    " not to the entry point",
                )
            else:
                nxt = source.page(nxt_url)
                _vouched(nxt, chain)
                after = nxt.next_archive
                if after is not None and after != head.permanent_url and ahead is not None:
                    ahead.prefetch(after)  # Read it while this page's entries are handled.
            verify(nxt, page)
        for entry in _checked(page.url, entries, prev_seq, checkpoint, ids):
            yield entry
            prev_seq = entry.seq
            done += 1
            if progress is not None and (report or moved):
                progress(Progress("process", done, total))
        if nxt is None or nxt_url is None:
            return
        page_done()
        page = nxt
        del nxt
        moved = True
        ids.turn()
        entries = page.entries
        trail.arrived(nxt_url, page)


def _vouched(page: Page, chain: list[str]) -> None:
    """``page`` is the next page of the chain walked back (the last digest, taken)."""
    expected = chain.pop()
    if expected != page.sha256:
        raise DigestMismatch(page.url, expected, page.sha256)


def verify(newer: Page | Outline, older: Page | Outline) -> None:
    """Check ``older`` against the digest in ``newer``'s ``prev-archive`` link, when it has one.

    Pages written before servers gave digests have none, and there is nothing to check.
    """
    expected = newer.prev_sha256
    if expected is not None and expected != older.sha256:
        raise DigestMismatch(older.url, expected, older.sha256)


class _Ids:
    """The ids of the entries of the page going forward and of the page before it.

    Each id is kept with its sequence number. An id listed again at another number within them
    is a :class:`RepeatedEntry`. The set holds two pages' worth, never more.
    """

    def __init__(self, page: Page) -> None:
        self.before: dict[str, int] = {}
        self.current = {entry.id: entry.seq for entry in page.entries}

    def turn(self) -> None:
        """Going forward to the next page: its entries' ids are checked as they are yielded."""
        self.before, self.current = self.current, {}

    def check(self, url: str, entry: FeedEntry) -> None:
        seq = self.before.get(entry.id)
        if seq is None:
            seq = self.current.get(entry.id)
        if seq is not None and seq != entry.seq:
            raise RepeatedEntry(url, entry.id, seq, entry.seq)
        self.current[entry.id] = entry.seq


def _checked(
    url: str,
    entries: tuple[FeedEntry, ...],
    prev_seq: int,
    checkpoint: Checkpoint | None,
    ids: _Ids,
) -> Iterator[FeedEntry]:
    for entry in entries:
        if entry.seq != prev_seq + 1:
            raise SequenceGap(url, entry.id, prev_seq + 1, entry.seq)
        if checkpoint is not None and entry.id == checkpoint.entry_id:
            raise RepeatedEntry(url, entry.id, checkpoint.seq, entry.seq)
        ids.check(url, entry)
        yield entry
        prev_seq = entry.seq

"""Which entries are new, in which order: the walking logic, over any :class:`PageSource`.

No HTTP here: a page source turns a URL into a parsed :class:`~simplefeed.client.parse.Page`
(the consumer's is the fetcher plus the parser; tests may use pages held in a dict), and may
also give an :class:`~simplefeed.client.parse.Outline` (links, archive flag, oldest and newest
sequence numbers) for less. Links are only ever followed, never built.

One pass (:func:`new_entries`), given the entry point's document (*head*) and the checkpoint:

1. The checkpoint's entry is in *head*: the entries after it are new. (The usual poll.)
2. Otherwise resume at the checkpoint's page, its permanent URL (one request, or none when that
   page is archived and cached): the entries after the checkpoint there, then each newer page
   through ``next-archive`` up to the working page (*head* itself stands in for the page its
   ``via`` names, so that one is not fetched again).
3. If the entry is not on that page (or the page is gone), walk back from *head* through
   ``prev-archive`` until the entry is found, then forward from there as in 2. Not found back
   to the first page: :class:`LastEntryVanished`.
4. No checkpoint (a first run): walk back to the first page, reading only outlines, then
   forward from it as in 2, everything, oldest first. :func:`starting_point` gives the
   checkpoint for "start from now" instead.

Memory stays flat in the number of pages walked: walking back, one page (and *head*) is held at
a time; going forward, the page whose entries are handed over and the next one (read first, to
check the digest), with a page source that reads ahead one more; and a bounded trail of URLs.
Going forward re-reads the pages walked back through; the consumer's page source serves
archived pages from its cache, without a request. A page source that can
read ahead (:class:`ReadAhead`) is told the page after the next as soon as its link is known,
and reads it (one page at most) while the entries of the current page are handled.

Every entry yielded has the sequence number of the one before plus one (the first of a feed has
1): anything else raises :class:`SequenceGap` before the entry is yielded; walking back, each
page must hold older entries than the one before (else :class:`MalformedPage`). So a walk that
goes round in circles through pages with entries cannot go on: coming back to a page breaks
the order. Following a link to one of the last pages visited (:data:`TRAIL` of them), or to any
page visited since the walk last passed an entry, raises :class:`LinkLoop` at once. Errors are
raised before any entry past the problem is yielded; the caller's checkpoint is never touched
here.

Integrity: a document's ``prev-archive`` link may give the SHA-256 of the page it links to
(``sf:sha256``). Walking back, each page read is checked against the digest of the link that led
to it; going forward, the next page is read before the entries of the current one are yielded,
and its link checks the current page (so a copy taken from the cache is checked too). A page
that does not match raises :class:`DigestMismatch`, before any of its entries is yielded.
Position is found by id *and* sequence number: the checkpoint's id at another number, or passed
again going forward, raises :class:`RepeatedEntry`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from simplefeed.client.entry import FeedEntry
from simplefeed.client.errors import (
    DigestMismatch,
    LastEntryVanished,
    LinkLoop,
    MalformedPage,
    RepeatedEntry,
    SequenceGap,
    UnexpectedStatus,
)
from simplefeed.client.parse import Outline, Page
from simplefeed.client.state import Checkpoint

__all__ = [
    "OutlineSource",
    "PageSource",
    "Progress",
    "ReadAhead",
    "new_entries",
    "starting_point",
    "verify",
]

#: Statuses of the checkpoint's page that send us to the walk back instead of failing.
GONE = (404, 410)
#: How many of the last pages visited a walk remembers, for :class:`LinkLoop`.
TRAIL = 16


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
    """Where a long catch-up stands. ``locate``: walking back (``done`` entries passed of
    ``total`` to pass); ``process``: entries yielded so far of ``total`` new ones."""

    phase: Literal["locate", "process"]
    done: int
    total: int | None


ProgressFn = Callable[[Progress], None]


def starting_point(source: PageSource, head: Page) -> Checkpoint:
    """The checkpoint that means "everything published so far is processed".

    The newest entry of the feed (walking back over empty documents to find it); for an empty
    feed, a checkpoint before the first entry (sequence 0), so entries published later are
    all new.
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
        page = older


def new_entries(
    source: PageSource,
    head: Page,
    checkpoint: Checkpoint | None,
    *,
    progress: ProgressFn | None = None,
    page_done: Callable[[], None] = lambda: None,
) -> Iterator[FeedEntry]:
    """The entries after ``checkpoint``, oldest first (everything when it is None).
    ``page_done`` is called when the walk is past a page's last entry (resumed after it) and
    about to read on to the next page. ``progress``, when given, is told of each page passed
    walking back and each entry yielded (no report is made for nobody)."""
    # Each pass forward is made before it runs, so that the page it starts from is not also
    # held here: it is let go of as soon as the pass moves on to the next one.
    if checkpoint is None or checkpoint.seq == 0:
        first, newest = _walk_back_to_start(source, head, progress)
        forward = _forward(
            source,
            head,
            first,
            -1,
            None,
            progress,
            page_done,
            newest=newest,
            report=first is not head,
        )
        del first
        yield from forward
        return

    position = head.position(checkpoint.entry_id, checkpoint.seq)
    if position is not None:
        yield from _checked(head.url, head.entries[position + 1 :], checkpoint.seq, checkpoint)
        return

    page: Page | None
    try:
        # Fetched even when head's `via` names it: head may be an older copy of that page.
        page = source.page(checkpoint.page_url)
    except UnexpectedStatus as exc:
        if exc.status not in GONE:
            raise
        page = None
    position = page.position(checkpoint.entry_id, checkpoint.seq) if page is not None else None
    if page is not None and position is not None:
        forward = _forward(source, head, page, position, checkpoint, progress, page_done)
    else:
        page = None  # not needed while walking back
        page, position = _walk_back_to_entry(source, head, checkpoint, progress)
        forward = _forward(
            source, head, page, position, checkpoint, progress, page_done, report=True
        )
    del page
    yield from forward


class _Trail:
    """The URLs a walk remembers, in memory that does not grow with the walk: the last
    :data:`TRAIL` pages (each by its URL and its permanent URL; the chain a :class:`LinkLoop`
    reports), and every page since the walk last passed an entry (pages without entries, which
    the order of sequence numbers cannot tell apart)."""

    def __init__(self, page: Page) -> None:
        self.chain: deque[str] = deque([page.url], maxlen=TRAIL)
        self.near: deque[str] = deque([page.url, page.permanent_url], maxlen=2 * TRAIL)
        self.stalled: set[str] = set()

    def follow(self, url: str) -> None:
        """About to follow a link to ``url``."""
        if url in self.stalled or url in self.near:
            raise LinkLoop(url, list(self.chain))

    def arrived(self, url: str, page: Page | Outline, *, passed_entries: bool) -> None:
        self.chain.append(url)
        self.near.extend((url, page.permanent_url))
        if passed_entries:
            self.stalled.clear()
        else:
            self.stalled.update((url, page.permanent_url))


class _Back:
    """The bookkeeping of a walk back: the trail, the oldest sequence number passed (each page
    back must hold older entries), progress."""

    def __init__(self, head: Page, after_seq: int, progress: ProgressFn | None) -> None:
        self.trail = _Trail(head)
        self.steps = 0
        self.oldest: int | None = None
        self.newest: int | None = None
        self.after_seq = after_seq
        self.progress = progress

    def passed(self, page: Page | Outline) -> bool:
        """``page`` read: check that its entries are older than those passed before; whether
        it had any."""
        oldest, newest = page.oldest_seq, page.newest_seq
        if newest is None:
            return False
        if self.oldest is not None and newest >= self.oldest:
            raise MalformedPage(
                page.url,
                f"prev-archive led to newer entries (sequence {newest} after {self.oldest})",
            )
        self.oldest = oldest if oldest is not None else newest  # an outline may not know it
        if self.newest is None:
            self.newest = newest
        return True

    def step(self, prev: str) -> None:
        """About to follow ``prev``."""
        self.trail.follow(prev)
        if self.progress is None:
            return
        if (self.steps or self.oldest is not None) and self.newest is not None:
            assert self.oldest is not None
            total = self.newest - self.after_seq
            self.progress(Progress("locate", self.newest - self.oldest + 1, total))

    def arrived(self, url: str, page: Page | Outline) -> bool:
        """At ``page`` (reached through ``url``): checked as :meth:`passed`."""
        self.steps += 1
        passed = self.passed(page)
        self.trail.arrived(url, page, passed_entries=passed)
        return passed


def _walk_back_to_start(
    source: PageSource, head: Page, progress: ProgressFn | None
) -> tuple[Page, int | None]:
    """The first page of the feed (walking back from ``head`` through outlines), and the
    newest sequence number passed on the way (None if no entry was seen)."""
    back = _Back(head, 0, progress)
    outlines = source if isinstance(source, OutlineSource) else None
    page: Page | Outline = head
    back.passed(head)
    while True:
        prev = page.prev_archive
        if prev is None:
            break
        back.step(prev)
        older = outlines.outline(prev) if outlines is not None else source.page(prev)
        verify(page, older)
        page = older
        back.arrived(prev, page)
    if isinstance(page, Outline):
        page = source.page(page.url)
        if page.prev_archive is not None:  # the outline missed a link the page has
            raise MalformedPage(page.url, "a prev-archive link after the entries")
    return page, back.newest


def _walk_back_to_entry(
    source: PageSource, head: Page, checkpoint: Checkpoint, progress: ProgressFn | None
) -> tuple[Page, int]:
    """The page holding the checkpoint's entry (walking back from ``head``) and the entry's
    position."""
    back = _Back(head, checkpoint.seq, progress)
    page = head
    back.passed(head)
    while True:
        prev = page.prev_archive
        if prev is None:
            raise LastEntryVanished(page.url, checkpoint.entry_id)
        back.step(prev)
        older = source.page(prev)
        verify(page, older)
        page = older
        position = page.position(checkpoint.entry_id, checkpoint.seq)
        if position is not None:
            return page, position
        back.arrived(prev, page)


def _forward(
    source: PageSource,
    head: Page,
    page: Page,
    position: int,
    checkpoint: Checkpoint | None,
    progress: ProgressFn | None,
    page_done: Callable[[], None],
    *,
    newest: int | None = None,
    report: bool = False,
) -> Iterator[FeedEntry]:
    """From ``page`` (after ``position``) through ``next-archive`` links, up to ``head``.

    The next page is read before the entries of the current one are yielded: its
    ``prev-archive`` digest vouches for the current page (:func:`verify`), cached copy or not.
    Progress is reported from the second page on, or from the first entry with ``report``;
    its total is ``newest`` (default: head's newest entry) minus the checkpoint's number.
    """
    after_seq = checkpoint.seq if checkpoint is not None else 0
    if newest is None or (head.newest_seq is not None and head.newest_seq > newest):
        newest = head.newest_seq
    total = None if newest is None else newest - after_seq
    trail = _Trail(page)
    ahead = source if isinstance(source, ReadAhead) else None
    moved = False
    prev_seq = after_seq
    done = 0
    entries = page.entries[position + 1 :]
    while True:
        nxt_url = page.next_archive
        nxt: Page | None = None
        if nxt_url is not None:
            trail.follow(nxt_url)
            nxt = head if nxt_url == head.permanent_url else source.page(nxt_url)
            verify(nxt, page)
            after = nxt.next_archive
            if after is not None and after != head.permanent_url and ahead is not None:
                ahead.prefetch(after)  # read while this page's entries are handled
        elif page.is_archive:
            raise MalformedPage(page.url, "an archived page without a next-archive link")
        for entry in _checked(page.url, entries, prev_seq, checkpoint):
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
        entries = page.entries
        trail.arrived(nxt_url, page, passed_entries=bool(entries))


def verify(newer: Page | Outline, older: Page | Outline) -> None:
    """``older`` is the page ``newer``'s ``prev-archive`` link vouches for, when it gives a
    digest (pages written before servers gave one do not: nothing to check)."""
    expected = newer.prev_sha256
    if expected is not None and expected != older.sha256:
        raise DigestMismatch(older.url, expected, older.sha256)


def _checked(
    url: str, entries: tuple[FeedEntry, ...], prev_seq: int, checkpoint: Checkpoint | None
) -> Iterator[FeedEntry]:
    for entry in entries:
        if entry.seq != prev_seq + 1:
            raise SequenceGap(url, entry.id, prev_seq + 1, entry.seq)
        if checkpoint is not None and entry.id == checkpoint.entry_id:
            raise RepeatedEntry(url, entry.id, checkpoint.seq, entry.seq)
        yield entry
        prev_seq = entry.seq

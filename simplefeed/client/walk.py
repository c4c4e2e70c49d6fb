"""Which entries are new, in which order: the walking logic, over any :class:`PageSource`.

No HTTP here: a page source turns a URL into a parsed :class:`~simplefeed.client.parse.Page`
(the consumer's is the fetcher plus the parser; tests may use pages held in a dict). Links are
only ever followed, never built.

One pass (:func:`new_entries`), given the entry point's document (*head*) and the checkpoint:

1. The checkpoint's entry is in *head*: the entries after it are new. (The usual poll.)
2. Otherwise resume at the checkpoint's page, its permanent URL (one request, or none when that
   page is archived and cached): the entries after the checkpoint there, then each newer page
   through ``next-archive`` up to the working page (*head* itself stands in for the page its
   ``via`` names, so that one is not fetched again).
3. If the entry is not on that page (or the page is gone), walk back from *head* through
   ``prev-archive``, remembering the chain, until the entry is found; then forward along the
   chain. Not found back to the first page: :class:`LastEntryVanished`.
4. No checkpoint (a first run): walk back to the first page and yield everything, oldest first.
   :func:`starting_point` gives the checkpoint for "start from now" instead.

Every entry yielded has the sequence number of the one before plus one (the first of a feed has
1): anything else raises :class:`SequenceGap` before the entry is yielded. Revisiting a page
raises :class:`LinkLoop`. Errors are raised before any entry past the problem is yielded; the
caller's checkpoint is never touched here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

from simplefeed.client.errors import (
    LastEntryVanished,
    LinkLoop,
    MalformedPage,
    SequenceGap,
    UnexpectedStatus,
)
from simplefeed.client.parse import FeedEntry, Page
from simplefeed.client.state import Checkpoint

__all__ = ["PageSource", "Progress", "new_entries", "starting_point"]

#: Statuses of the checkpoint's page that send us to the walk back instead of failing.
GONE = (404, 410)


class PageSource(Protocol):
    def page(self, url: str) -> Page: ...


@dataclass(frozen=True)
class Progress:
    """Where a long catch-up stands. ``locate``: walking back (``done`` entries passed of
    ``total`` to pass); ``process``: entries yielded so far of ``total`` new ones."""

    phase: Literal["locate", "process"]
    done: int
    total: int | None


ProgressFn = Callable[[Progress], None]


def _no_progress(_: Progress) -> None:
    pass


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
        page = source.page(prev)


def new_entries(
    source: PageSource,
    head: Page,
    checkpoint: Checkpoint | None,
    *,
    progress: ProgressFn = _no_progress,
) -> Iterator[FeedEntry]:
    """The entries after ``checkpoint``, oldest first (everything when it is None)."""
    if checkpoint is None or checkpoint.seq == 0:
        chain, _ = _walk_back(source, head, None, 0, progress)
        yield from _forward_chain(head.url, chain, -1, 0, progress)
        return

    position = head.position(checkpoint.entry_id)
    if position is not None:
        yield from _checked(head.url, head.entries[position + 1 :], checkpoint.seq)
        return

    page: Page | None
    try:
        # Fetched even when head's `via` names it: head may be an older copy of that page.
        page = source.page(checkpoint.page_url)
    except UnexpectedStatus as exc:
        if exc.status not in GONE:
            raise
        page = None
    position = page.position(checkpoint.entry_id) if page is not None else None
    if page is not None and position is not None:
        yield from _forward_links(source, head, page, position, checkpoint.seq, progress)
        return

    chain, position = _walk_back(source, head, checkpoint.entry_id, checkpoint.seq, progress)
    yield from _forward_chain(head.url, chain, position, checkpoint.seq, progress)


def _newest_seq(pages: list[Page]) -> int | None:
    for page in pages:
        if page.entries:
            return page.entries[-1].seq
    return None


def _walk_back(
    source: PageSource,
    head: Page,
    entry_id: str | None,
    after_seq: int,
    progress: ProgressFn,
) -> tuple[list[Page], int]:
    """Pages from ``head`` back to the one holding ``entry_id`` (or to the first page), newest
    first, and the entry's position on the last of them (-1 when walking to the start)."""
    chain = [head]
    visited = {head.url, head.permanent_url}
    page = head
    oldest_seen: int | None = None
    while True:
        if entry_id is not None:
            position = page.position(entry_id)
            if position is not None:
                return chain, position
        if page.entries:
            if oldest_seen is not None and page.entries[-1].seq >= oldest_seen:
                raise MalformedPage(
                    page.url,
                    f"prev-archive led to newer entries (sequence {page.entries[-1].seq} "
                    f"after {oldest_seen})",
                )
            oldest_seen = page.entries[0].seq
        prev = page.prev_archive
        if prev is None:
            if entry_id is not None:
                raise LastEntryVanished(page.url, entry_id)
            return chain, -1
        if prev in visited:
            raise LinkLoop(prev, [p.url for p in chain])
        if len(chain) > 1 or oldest_seen is not None:
            newest = _newest_seq(chain)
            if newest is not None and oldest_seen is not None:
                progress(Progress("locate", newest - oldest_seen + 1, newest - after_seq))
        page = source.page(prev)
        visited.add(prev)
        visited.add(page.permanent_url)
        chain.append(page)


def _forward_chain(
    url: str, chain: list[Page], position: int, after_seq: int, progress: ProgressFn
) -> Iterator[FeedEntry]:
    """Walk ``chain`` (newest first, as walked back) oldest first, after ``position``."""
    newest = _newest_seq(chain)
    total = None if newest is None else newest - after_seq
    report = len(chain) > 1
    prev_seq = after_seq
    done = 0
    for i, page in enumerate(reversed(chain)):
        entries = page.entries[position + 1 :] if i == 0 else page.entries
        for entry in _checked(page.url, entries, prev_seq):
            yield entry
            prev_seq = entry.seq
            done += 1
            if report:
                progress(Progress("process", done, total))


def _forward_links(
    source: PageSource,
    head: Page,
    page: Page,
    position: int,
    after_seq: int,
    progress: ProgressFn,
) -> Iterator[FeedEntry]:
    """From ``page`` (the checkpoint at ``position``) through ``next-archive`` links."""
    newest = head.entries[-1].seq if head.entries else None
    total = None if newest is None else newest - after_seq
    visited = [page.url]
    seen = {page.url, page.permanent_url}
    prev_seq = after_seq
    done = 0
    entries = page.entries[position + 1 :]
    while True:
        for entry in _checked(page.url, entries, prev_seq):
            yield entry
            prev_seq = entry.seq
            done += 1
            if len(visited) > 1:
                progress(Progress("process", done, total))
        nxt = page.next_archive
        if nxt is None:
            if page.is_archive:
                raise MalformedPage(page.url, "an archived page without a next-archive link")
            return
        if nxt in seen:
            raise LinkLoop(nxt, visited)
        page = head if nxt == head.permanent_url else source.page(nxt)
        visited.append(nxt)
        seen.add(nxt)
        seen.add(page.permanent_url)
        entries = page.entries


def _checked(url: str, entries: tuple[FeedEntry, ...], prev_seq: int) -> Iterator[FeedEntry]:
    for entry in entries:
        if entry.seq != prev_seq + 1:
            raise SequenceGap(url, entry.id, prev_seq + 1, entry.seq)
        yield entry
        prev_seq = entry.seq

"""Pure paging rules, such as which page holds a sequence number and which links a page carries.

Pages hold a fixed number of entries. Page ``n`` holds sequence numbers
``(n - 1) * size + 1 .. n * size``. The *working page* is the lowest page that is not full. A
page is archived the moment it holds ``size`` entries. So the working page may be empty.
"""

from __future__ import annotations

from simplefeed.model import Document, DocumentKind, Entry, Feed, locator_segment


def page_of(seq: int, size: int) -> int:
    return (seq - 1) // size + 1


def working_page(head_seq: int, size: int) -> int:
    return head_seq // size + 1


def seq_range(number: int, size: int) -> tuple[int, int]:
    """Return the first and last sequence number of page ``number``, inclusive."""
    return (number - 1) * size + 1, number * size


def newly_full_pages(before: int, after: int, size: int) -> range:
    """Return the pages that became full when the head moved from ``before`` to ``after``."""
    return range(before // size + 1, after // size + 1)


class Urls:
    """Absolute URLs of a feed's documents, from the configured base URL only."""

    def __init__(self, base_url: str, feed: str, default_feed: str) -> None:
        base = base_url.rstrip("/")
        self.prefix = base if feed == default_feed else f"{base}/feeds/{feed}"

    @property
    def recent(self) -> str:
        return f"{self.prefix}/recent"

    def page(self, number: int) -> str:
        return f"{self.prefix}/pages/{number}"

    @property
    def locator_base(self) -> str:
        """Return the base of entry locators, which add the entry's percent-encoded id."""
        return f"{self.prefix}/entries/"

    def entry(self, entry_id: str) -> str:
        """Return the entry locator, which redirects to the page that holds the entry."""
        return self.locator_base + locator_segment(entry_id)


def links(urls: Urls, kind: DocumentKind, number: int) -> tuple[tuple[str, str], ...]:
    """Return the (rel, href) pairs of a document, as DESIGN.md lays them out.

    recent:   self=/recent, via=/pages/K, prev-archive (unless K is 1)
    working:  self=/pages/K, current=/recent, prev-archive (unless K is 1)
    archive:  self=/pages/k, current=/recent, prev-archive (unless k is 1), next-archive (always)
    """
    out: list[tuple[str, str]] = []
    if kind == "recent":
        out += [("self", urls.recent), ("via", urls.page(number))]
    else:
        out += [("self", urls.page(number)), ("current", urls.recent)]
    if number > 1:
        out.append(("prev-archive", urls.page(number - 1)))
    if kind == "archive":
        out.append(("next-archive", urls.page(number + 1)))
    return tuple(out)


def document(
    urls: Urls,
    feed: Feed,
    kind: DocumentKind,
    number: int,
    entries: tuple[Entry, ...],
    prev_sha256: str | None = None,
) -> Document:
    """Return page ``number`` of the feed as ``kind``, ready to render.

    A document is as new as its newest entry. An empty one is as new as the feed's newest
    entry, or the feed itself when it has none.
    """
    if entries:
        updated = entries[0].updated_us
    else:
        updated = feed.head_updated_us if feed.head_updated_us is not None else feed.created_us
    return Document(
        feed=feed,
        kind=kind,
        number=number,
        updated_us=updated,
        links=links(urls, kind, number),
        locator_base=urls.locator_base,
        entries=entries,
        prev_sha256=prev_sha256,
    )

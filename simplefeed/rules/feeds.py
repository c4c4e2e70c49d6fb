"""Pure decisions about feeds, such as whether the settings fit a feed's archived pages.

Each function takes values and returns a sentence or None. None of them reads the database or
the archive, so they are tested without either.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from simplefeed.model import Feed, text_problem
from simplefeed.rules import paging
from simplefeed.settings import FEED_NAME_RE, MAX_FEED_TITLE, MAX_PAGE_SIZE

__all__ = [
    "CLOCK_BEHIND_LIMIT_US",
    "base_url_problem",
    "clock_warning",
    "default_feed_problem",
    "new_feed_problem",
    "page_size_warning",
    "purge_urls",
]

#: How far the clock may be behind a feed's last change before /healthz says so. Entries are
#: dated after the feed's last change. So a clock set back dates them all from the fast time.
#: A few seconds leave room for nodes whose clocks differ a little.
CLOCK_BEHIND_LIMIT_US = 5_000_000

#: Where an archived page's own URL says it is. That is /pages/N for the default feed, and
#: /feeds/NAME/pages/N for others.
_PAGE_PATH = re.compile(r"(?:/feeds/(?P<feed>[^/]+))?/pages/(?P<number>[0-9]+)\Z")


def new_feed_problem(name: str, title: str, page_size: int | None) -> str | None:
    """Say why a feed cannot be created with this name, title and page size, or None.

    The name is in every URL of the feed, and the title in every document. So both are checked
    as a producer's text is. The feed title has its own limit, so that every document's head
    fits in ``atom.MAX_DOCUMENT_BYTES``.
    """
    if not FEED_NAME_RE.match(name):
        return f"feed name {name!r:.80}: use 1-64 of a-z 0-9 - _, starting with a letter or digit"
    problem = text_problem(title, MAX_FEED_TITLE)
    if problem is not None:
        return f"feed title {title!r:.80} {problem}"
    if page_size is not None and not 1 <= page_size <= MAX_PAGE_SIZE:
        return f"page size {page_size}: use 1-{MAX_PAGE_SIZE} entries"
    return None


def clock_warning(feed: Feed, now_us: int) -> str | None:
    """Say so if the clock (``now_us``) is far behind the feed's last change, else None."""
    behind = feed.modified_us - now_us
    if not feed.head_seq or behind <= CLOCK_BEHIND_LIMIT_US:
        return None
    return (
        f"this server's clock ({_iso_us(now_us)}) is {behind / 1e6:.0f} s behind feed"
        f" '{feed.name}''s last change ({_iso_us(feed.modified_us)}): its entries are dated"
        " from that time on until the clock catches up (was a clock fast?)"
    )


def _iso_us(us: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(us // 1_000_000))


def base_url_problem(feed: Feed, base_url: str) -> str | None:
    """Say why the feed cannot be served with documents linking to ``base_url``, or None.

    Archived pages never change, so every new page must link to the base URL they link to.
    Before any page is archived, only a base URL recorded by ``archive rebase`` binds the feed.
    """
    archived = feed.head_seq >= feed.page_size
    if feed.base_url == base_url or (feed.base_url is None and not archived):
        return None
    rebase = f"`simplefeed archive rebase {base_url} --feed {feed.name}`"
    if not archived:
        return (
            f"feed {feed.name!r} has its base URL recorded as {feed.base_url} (archive rebase),"
            f" but the base URL is now {base_url}: set SIMPLEFEED_BASE_URL={feed.base_url}, or"
            f" record the new one with {rebase}"
        )
    if feed.base_url is None:
        return (
            f"feed {feed.name!r} has archived pages but no recorded base URL: check that their "
            f"links are right, then record {base_url} with {rebase}"
        )
    return (
        f"feed {feed.name!r} has archived pages linking to {feed.base_url}, but the base URL is "
        f"now {base_url}: set SIMPLEFEED_BASE_URL={feed.base_url} again, or move the feed to "
        f"the new one with {rebase} (docs/how-to/rebase.md)"
    )


def default_feed_problem(feed: Feed, self_href: str | None, default_feed: str) -> str | None:
    """Say why the feed cannot be served while SIMPLEFEED_DEFAULT_FEED names ``default_feed``.

    ``self_href`` is the self link of the feed's newest archived page. The default feed's pages
    live at /pages/N, and every other feed's at /feeds/NAME/pages/N. Later pages link to the
    earlier ones there. So the default feed cannot change once either feed has archived pages.
    A self link that names no page of this feed is left to ``archive verify``.
    """
    number = feed.head_seq // feed.page_size
    if self_href is None or number < 1:
        return None
    path = urlsplit(self_href).path
    base = urlsplit(feed.base_url).path.rstrip("/") if feed.base_url is not None else None
    if base and path.startswith(base + "/"):  # A base URL with a path of its own.
        path = path[len(base) :]
    found = _PAGE_PATH.search(path)
    if found is None or int(found["number"]) != number:
        return None
    rendered_as_default = found["feed"] is None
    if found["feed"] not in (None, feed.name):
        return None
    if rendered_as_default == (feed.name == default_feed):
        return None
    never = "a feed's archived pages never move; caches keep them for a year"
    if rendered_as_default:
        return (
            f"feed {feed.name!r} has archived pages at /pages/N (rendered as the default feed's),"
            f" but SIMPLEFEED_DEFAULT_FEED is {default_feed!r}: set"
            f" SIMPLEFEED_DEFAULT_FEED={feed.name} again ({never})"
        )
    return (
        f"feed {feed.name!r} has archived pages at /feeds/{feed.name}/pages/N, but"
        f" SIMPLEFEED_DEFAULT_FEED is {default_feed!r}, which would serve them at /pages/N: set"
        f" SIMPLEFEED_DEFAULT_FEED back to the feed it named when they froze ({never})"
    )


def page_size_warning(feed: Feed, page_size: int) -> str | None:
    """Say why SIMPLEFEED_PAGE_SIZE does nothing for this feed, or None.

    A feed's page size is fixed when the feed is created, because its pages' numbers follow it.
    """
    if feed.page_size == page_size:
        return None
    return (
        f"SIMPLEFEED_PAGE_SIZE={page_size} does not change feed {feed.name!r}, whose pages hold"
        f" {feed.page_size} entries (fixed when a feed is created): it sizes only feeds created"
        f" from now on; unset it or set it to {feed.page_size}"
    )


def purge_urls(
    feed: Feed, bases: Sequence[str | None], default_feed: str, archived: int
) -> list[str]:
    """List every archived page's URL, then the working page's and /recent, per base URL."""
    urls: list[str] = []
    for base in dict.fromkeys(b for b in bases if b is not None):
        u = paging.Urls(base, feed.name, default_feed)
        urls += [u.page(n) for n in range(1, archived + 2)] + [u.recent]
    return urls

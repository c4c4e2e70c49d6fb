"""Feeds: creating them, retiring them, and what an operator asks of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simplefeed.errors import ArchiveAhead, InvalidFeed
from simplefeed.model import Feed, rfc3339
from simplefeed.rules import feeds as rules
from simplefeed.rules import paging
from simplefeed.service.chain import Chain
from simplefeed.service.clock import Clock
from simplefeed.service.health import Health
from simplefeed.settings import Settings
from simplefeed.store import Store

__all__ = ["FeedStats", "Feeds"]


@dataclass(frozen=True)
class FeedStats:
    """What an operator asks of a feed: its head, its pages, its last publish, its URLs."""

    feed: Feed
    #: Pages in all: the archived ones and the working page, which may be empty.
    pages: int
    archived_pages: int
    #: The server's clock at the last append (None while the feed is empty).
    last_publish_us: int | None
    #: The base URL documents are rendered with now. The archived pages' own is the feed's.
    base_url: str
    #: Absolute URLs: ``recent``, ``working``, ``first`` (page 1) and ``html`` (for people).
    entry_points: dict[str, str]

    def describe(self) -> dict[str, object]:
        """The stats as JSON-ready values, times in RFC 3339."""
        f = self.feed
        return {
            "name": f.name,
            "title": f.title,
            "id": f.atom_id,
            "head_seq": f.head_seq,
            "page_size": f.page_size,
            "pages": self.pages,
            "archived_pages": self.archived_pages,
            "created": rfc3339(f.created_us),
            "last_publish": None if self.last_publish_us is None else rfc3339(self.last_publish_us),
            "state": "live" if f.retired_us is None else "retired",
            "retired": None if f.retired_us is None else rfc3339(f.retired_us),
            "base_url": self.base_url,
            "archived_pages_base_url": f.base_url,
            "entry_points": self.entry_points,
        }


class Feeds:
    """Creates and retires feeds."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        chain: Chain,
        health: Health,
        clock: Clock,
        new_uuid: Callable[[], str],
    ) -> None:
        self.settings = settings
        self.store = store
        self.chain = chain
        self.health = health
        self.clock = clock
        self.new_uuid = new_uuid

    def create(self, name: str, *, title: str | None = None, page_size: int | None = None) -> Feed:
        """A new feed, titled with its name unless given a title.

        Refused while the archive holds pages of a feed of that name, because the new feed
        would archive other entries under their URLs.
        """
        title = title or name
        problem = rules.new_feed_problem(name, title, page_size)
        if problem is not None:
            raise InvalidFeed(problem)
        lost = self.health.lost_feed(name)
        if lost is not None:
            raise ArchiveAhead([lost])
        return self.store.create_feed(
            name=name,
            title=title,
            page_size=page_size or self.settings.page_size,
            uuid=self.new_uuid(),
            now_us=self.clock(),
        )

    def retire(self, name: str) -> Feed:
        """Refuse publishing to the feed from now on (410); its documents are served as before."""
        feed = self.store.feed(name)
        if feed.retired_us is not None:
            return feed
        return self.store.set_retired(name, self.clock())

    def unretire(self, name: str) -> Feed:
        """Take a retired feed back into service."""
        return self.store.set_retired(name, None)

    def stats(self, feed: Feed) -> FeedStats:
        """The feed's stats, from the feed alone (no query)."""
        urls = self.chain.urls(feed.name)
        working = paging.working_page(feed.head_seq, feed.page_size)
        return FeedStats(
            feed=feed,
            pages=working,
            archived_pages=working - 1,
            last_publish_us=feed.modified_us if feed.head_seq else None,
            base_url=self.settings.base_url,
            entry_points={
                "recent": urls.recent,
                "working": urls.page(working),
                "first": urls.page(1),
                "html": f"{self.settings.base_url}/feeds/{feed.name}",
            },
        )

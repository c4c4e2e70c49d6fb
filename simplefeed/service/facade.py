"""The facade: one object for the HTTP app and the command line, wiring the service's jobs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from simplefeed import archive
from simplefeed.model import (
    Appended,
    ArchivedPage,
    DocumentKind,
    Entry,
    Event,
    Feed,
    Located,
    TokenRecord,
)
from simplefeed.rules import auth, paging
from simplefeed.service.chain import Chain
from simplefeed.service.changes import Bell, Changes
from simplefeed.service.clock import Clock, random_uuid, system_clock
from simplefeed.service.feeds import Feeds, FeedStats
from simplefeed.service.health import Health, HealthReport
from simplefeed.service.maintenance import Maintenance, Rebased, Recovered
from simplefeed.service.pages import Pages
from simplefeed.service.publishing import Publishing
from simplefeed.service.reading import Live, Reading
from simplefeed.service.tokens import Tokens
from simplefeed.settings import Settings
from simplefeed.store import Store, open_store

__all__ = ["Simplefeed"]


class Simplefeed:
    """Simplefeed's service: feeds, tokens, publishing, reading and the archive.

    It holds one store and hands each call to the job that does it. The clock and the id
    generator are injected, so tests control time and ids.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        clock: Clock = system_clock,
        new_uuid: Callable[[], str] = random_uuid,
        bell: Bell | None = None,
    ) -> None:
        """Open the store of ``settings`` unless one is given.

        ``bell`` carries this process's publishes to the node's other processes
        (:class:`~simplefeed.service.changes.NodeBell` under uWSGI). It is closed and not used
        where the store's watcher hears of every commit itself.
        """
        self.settings = settings
        self.store = store if store is not None else open_store(settings.database_url)
        self.clock = clock
        self.new_uuid = new_uuid
        if bell is not None and not self.store.watch_polls:
            bell.close()
            bell = None
        #: Requests waiting for a feed to change (``Prefer: wait``) wait here.
        self.changes = Changes(self.store.watch, self.feed_head, bell)
        self._chain = Chain(settings, self.store)
        self._pages = Pages(settings, self.store, self._chain)
        self._health = Health(settings, self.store, self._chain, self._pages, clock)
        self._feeds = Feeds(settings, self.store, self._chain, self._health, clock, new_uuid)
        self._tokens = Tokens(self.store, clock)
        self._reading = Reading(self.store, self._chain, self._pages)
        self._publishing = Publishing(
            settings,
            self.store,
            chain=self._chain,
            pages=self._pages,
            health=self._health,
            tokens=self._tokens,
            changes=self.changes,
            clock=clock,
            new_uuid=new_uuid,
        )
        self._maintenance = Maintenance(
            settings,
            self.store,
            chain=self._chain,
            pages=self._pages,
            health=self._health,
            changes=self.changes,
            clock=clock,
        )

    def close(self) -> None:
        """Stop watching for changes and close every database connection."""
        self._pages.uploads.stop()
        self.changes.stop()
        self.store.close()

    # -- health and start-up checks ------------------------------------------------------

    def health(self) -> HealthReport:
        """What /healthz answers."""
        return self._health.report()

    def check_base_url(self) -> None:
        """Refuse to start if a feed's archived pages link to another base URL."""
        self._health.check_base_url()

    def check_archive(self, *, every_file: bool = False) -> None:
        """Refuse to go on if the archive has a page file past a feed's archived pages."""
        self._health.check_archive(every_file=every_file)

    def check_default_feed(self) -> None:
        """Refuse to start if SIMPLEFEED_DEFAULT_FEED names no feed."""
        self._health.check_default_feed()

    def check_default_feed_pages(self) -> None:
        """Refuse to go on if a feed's archived pages are at other URLs than the settings say."""
        self._health.check_default_feed_pages()

    def default_feed_problems(self, feeds: Sequence[Feed] | None = None) -> list[str]:
        """One sentence per feed whose archived pages are at another feed's URLs."""
        return self._health.default_feed_problems(feeds)

    def default_feed_page_size_warning(self) -> str | None:
        """Why SIMPLEFEED_PAGE_SIZE does nothing for the default feed, or None."""
        return self._health.default_feed_page_size_warning()

    # -- feeds ---------------------------------------------------------------------------

    def urls(self, feed_name: str) -> paging.Urls:
        """The feed's URLs under the configured base URL."""
        return self._chain.urls(feed_name)

    def create_feed(
        self, name: str, *, title: str | None = None, page_size: int | None = None
    ) -> Feed:
        """Create a feed."""
        return self._feeds.create(name, title=title, page_size=page_size)

    def feed(self, name: str) -> Feed:
        """The feed, with its head. One indexed lookup."""
        return self.store.feed(name)

    def feed_head(self, name: str) -> Feed:
        """The feed on the hot path (a 304's validators): the store's fastest lookup."""
        return self.store.feed_head(name)

    def feeds(self) -> list[Feed]:
        """Every feed."""
        return self.store.feeds()

    def uploads_waiting(self) -> tuple[int, float | None] | None:
        """How many archived pages wait for the bucket and since when (seconds since the
        epoch) the oldest does; None without SIMPLEFEED_ARCHIVE_URL."""
        uploads = self._pages.uploads
        if not uploads.enabled:
            return None
        waiting = uploads.waiting()
        return waiting.pages, waiting.since_s

    def put_waiting_pages(self) -> tuple[int, list[str]]:
        """Put the archived pages waiting for the bucket there now (tests, ``archive
        rebuild``); :class:`ArchiveUnavailable` if it does not answer."""
        return self._pages.uploads.put_waiting()

    def retire_feed(self, name: str) -> Feed:
        """Refuse publishing to the feed from now on; its documents are served as before."""
        return self._feeds.retire(name)

    def unretire_feed(self, name: str) -> Feed:
        """Take a retired feed back into service."""
        return self._feeds.unretire(name)

    def stats(self, feed: Feed) -> FeedStats:
        """What an operator asks of a feed."""
        return self._feeds.stats(feed)

    # -- producer tokens -----------------------------------------------------------------

    def create_token(self, *, feed: str | None = None, label: str | None = None) -> str:
        """Mint a token, perhaps for one feed only, and return it."""
        return self._tokens.create(feed=feed, label=label)

    def tokens(self) -> list[TokenRecord]:
        """Every token, live or revoked."""
        return self.store.tokens()

    def revoke_token(self, token_id: int) -> bool:
        """Revoke a token; whether there was a live one with that id."""
        return self._tokens.revoke(token_id)

    def rotate_token(self, token_id: int) -> str | None:
        """A new secret for a live token, or None if there is none with that id."""
        return self._tokens.rotate(token_id)

    def screen_credentials(self, credentials: auth.Credentials, feed: str) -> None:
        """Refuse a publish's credentials before its body is read."""
        self._tokens.screen(credentials, feed)

    # -- publishing and reading ----------------------------------------------------------

    def publish(
        self,
        feed_name: str,
        events: Sequence[Event],
        *,
        credentials: auth.Credentials | None = None,
    ) -> list[Appended]:
        """Append events to a feed, all or nothing, archiving every page they fill."""
        return self._publishing.publish(feed_name, events, credentials=credentials)

    def live(self, feed: Feed, kind: DocumentKind) -> Live:
        """The validators of the recent document or the working page."""
        return self._reading.live(feed, kind)

    def live_body(self, live: Live) -> bytes:
        """The bytes of a live document, rendered once per version."""
        return self._reading.body(live)

    def cached_live_body(self, live: Live) -> bytes | None:
        """The bytes of a live document if this process rendered this version."""
        return self._reading.cached_body(live)

    def page(self, feed: Feed, number: int) -> ArchivedPage:
        """Archived page ``number`` of the feed."""
        return self._reading.page(feed, number)

    def page_entries(self, feed: Feed, number: int) -> list[Entry]:
        """The entries of page ``number`` as stored, newest first."""
        return self._reading.page_entries(feed, number)

    def locate(self, feed_name: str, entry_id: str) -> Located:
        """Where an entry is."""
        return self._reading.locate(feed_name, entry_id)

    # -- the archive ---------------------------------------------------------------------

    def page_path(self, feed_name: str, number: int) -> Path:
        """Where page ``number`` of the feed lives in the archive."""
        return self._pages.path(feed_name, number)

    def restore_page_file(self, feed_name: str, page: ArchivedPage) -> None:
        """Write a page's file again from the database, because it was found damaged."""
        self._pages.restore(feed_name, page)

    def rebuild_archive(self, feed_name: str | None = None) -> archive.RebuildReport:
        """Write every page file that is missing or differs from the database's bytes."""
        return self._maintenance.rebuild(feed_name)

    def verify_archive(self, feed_name: str | None = None) -> archive.VerifyReport:
        """Check every page file against the database."""
        return self._maintenance.verify(feed_name)

    def rebase_archive(self, feed_name: str | None = None) -> list[Rebased]:
        """Render every archived page again with the configured base URL."""
        return self._maintenance.rebase(feed_name)

    def recover_archive(self, feed_name: str | None = None) -> list[Recovered]:
        """Take back into the database the pages whose files are past its archived pages."""
        return self._maintenance.recover(feed_name)

    def rerender(self, feed: Feed, number: int) -> bytes:
        """Render archived page ``number`` again from its entries."""
        return self._maintenance.rerender(feed, number)

"""Start-up checks and /healthz, which say what keeps the service from working or needs care."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from simplefeed import archive
from simplefeed.errors import (
    ArchiveAhead,
    BaseUrlMismatch,
    DefaultFeedMismatch,
    DefaultFeedMissing,
    FeedNotFound,
    StoreUnavailable,
)
from simplefeed.model import Feed
from simplefeed.rules import feeds as rules
from simplefeed.service.chain import Chain
from simplefeed.service.clock import Clock
from simplefeed.service.pages import Pages
from simplefeed.service.uploads import Waiting
from simplefeed.settings import FEED_NAME_RE, Settings
from simplefeed.store import Store

__all__ = ["WARNING_INTERVAL_US", "Health", "HealthReport", "free_bytes"]

log = logging.getLogger(__name__)

#: The least time between two log lines about one subject of /healthz's warnings, per process.
#: Health checks come every few seconds, and one line a minute is enough.
WARNING_INTERVAL_US = 60_000_000


@dataclass(frozen=True)
class HealthReport:
    """What /healthz answers."""

    #: The database's kind, ``sqlite`` or ``postgresql``.
    database: str
    #: What keeps the service from publishing (503).
    problems: list[str]
    #: What needs an operator without keeping the service from working (200).
    warnings: list[str]
    #: The archived pages waiting for the bucket (None: no SIMPLEFEED_ARCHIVE_URL).
    uploads: Waiting | None = None


def free_bytes(directory: Path) -> int | None:
    """Free space for an unprivileged writer where ``directory`` is, or None if unknown.

    The directory may not exist yet, so its nearest existing parent answers for it.
    """
    path = directory.absolute()
    while True:
        try:
            st = os.statvfs(path)
        except FileNotFoundError:
            if path.parent == path:
                return None
            path = path.parent
            continue
        except OSError:
            return None
        return st.f_bavail * st.f_frsize


class Health:
    """Checks that the database, the archive and the settings agree."""

    def __init__(
        self, settings: Settings, store: Store, chain: Chain, pages: Pages, clock: Clock
    ) -> None:
        self.settings = settings
        self.store = store
        self.chain = chain
        self.pages = pages
        self.clock = clock
        #: Per subject of a warning: when this process last logged it.
        self._warned: dict[str, int] = {}

    def report(self) -> HealthReport:
        """Report the database's kind, what keeps the service from publishing, and what needs care.

        A database that does not answer raises :class:`StoreUnavailable`. But the store may
        say why, as when its SQLite file is gone. Then that is a problem in the report.
        """
        unavailable: StoreUnavailable | None = None
        try:
            self.store.ping()
        except StoreUnavailable as exc:
            unavailable = exc
        problems = self.store.problems()
        if unavailable is not None and not problems:
            raise unavailable
        problems += archive.writable_problems(self.settings.archive_dir)
        problems += self.space_problems()
        warnings: list[str] = []
        if unavailable is None:  # The feeds' base URLs and pages are in the database.
            feeds = self.store.feeds()
            problems += self.base_url_problems(feeds)
            problems += self.default_feed_problems(feeds)
            problems += self.pages.unwritten_problems()
            warnings = self._warnings(feeds)
        uploads = self.pages.uploads
        waiting = uploads.waiting() if uploads.enabled else None
        if waiting is not None and waiting.pages:
            # A bucket outage stops no publish, so it is a warning, not a problem.
            uploads.kick()
            warnings.append(self._said("uploads", uploads_warning(self.settings, waiting)))
        return HealthReport(self.store.backend, problems, warnings, waiting)

    def space_problems(self) -> list[str]:
        """List the directories a publish writes in with less free space than the settings ask."""
        directories = [self.settings.archive_dir]
        database = self.store.database_file
        if database is not None:
            directories.insert(0, database.parent)
        found = []
        for directory in directories:
            free = free_bytes(directory)
            if free is not None and free < self.settings.min_free_bytes:
                found.append(
                    f"{directory} has {free} bytes free, under the {self.settings.min_free_bytes}"
                    " that SIMPLEFEED_MIN_FREE_BYTES asks for"
                )
        return found

    # -- the base URL and the default feed -----------------------------------------------

    def check_base_url(self) -> None:
        """Refuse to start if a feed's archived pages link to another base URL.

        Documents rendered from now on must link where the archived pages do.
        """
        found = self.base_url_problems()
        if found:
            raise BaseUrlMismatch(found)

    def base_url_problems(self, feeds: Sequence[Feed] | None = None) -> list[str]:
        """Say one sentence per feed whose archived pages link to another base URL."""
        feeds = self.store.feeds() if feeds is None else feeds
        problems = [rules.base_url_problem(f, self.settings.base_url) for f in feeds]
        return [p for p in problems if p is not None]

    def check_default_feed(self) -> None:
        """Refuse to start if SIMPLEFEED_DEFAULT_FEED names no feed.

        Else /recent and POST /entries would answer 404 while /healthz said all was well. The
        pages are checked first, because a mistyped name is not a feed to create.
        """
        self.check_default_feed_pages()
        name = self.settings.default_feed
        try:
            self.store.feed(name)
        except FeedNotFound:
            if self.pages.path(name, 1).exists():  # And the database just said it has none.
                raise ArchiveAhead([self.lost_feed_sentence(name)]) from None
            others = ", ".join(f.name for f in self.store.feeds()) or "none"
            raise DefaultFeedMissing(
                f"SIMPLEFEED_DEFAULT_FEED names feed {name!r}, which does not exist, so /recent"
                f" and POST /entries would answer 404: create it (`simplefeed feed create"
                f" {name}`) or name one of the feeds there are ({others})"
            ) from None

    def check_default_feed_pages(self) -> None:
        """Refuse to go on if a feed's archived pages are at other URLs than the settings say."""
        found = self.default_feed_problems()
        if found:
            raise DefaultFeedMismatch(found)

    def default_feed_problems(self, feeds: Sequence[Feed] | None = None) -> list[str]:
        """Say one sentence per feed whose archived pages are at another feed's URLs."""
        name = self.settings.default_feed
        feeds = self.store.feeds() if feeds is None else feeds
        hrefs = [(f, self.chain.newest_self_href(f)) for f in feeds]
        problems = [rules.default_feed_problem(f, href, name) for f, href in hrefs]
        return [p for p in problems if p is not None]

    def default_feed_page_size_warning(self) -> str | None:
        """Say why SIMPLEFEED_PAGE_SIZE does nothing for the default feed, or None."""
        if not self.settings.page_size_given:
            return None
        try:
            feed = self.store.feed(self.settings.default_feed)
        except FeedNotFound:
            return None
        return rules.page_size_warning(feed, self.settings.page_size)

    # -- an archive ahead of the database ------------------------------------------------

    def check_archive(self, *, every_file: bool = False) -> None:
        """Refuse to go on if the archive has a page file past a feed's archived pages.

        Pages archived from now on would go over those files. ``every_file`` also looks past
        a gap, which lists each feed's directory. ``serve`` and ``db upgrade`` do that once.
        """
        found = [self.archive_ahead(feed, every_file=every_file) for feed in self.store.feeds()]
        if any(found):
            raise ArchiveAhead([p for p in found if p is not None])

    def archive_ahead(self, feed: Feed, *, every_file: bool = False) -> str | None:
        """Say so if the file of the page after the feed's archived pages is there.

        Files are written after their page's commit, so only a database older than the archive
        leaves one. A file found is checked against the feed read again. Another process may
        have archived that page since ``feed`` was read.
        """
        archived = feed.head_seq // feed.page_size
        while True:
            found = self._ahead_of(feed.name, archived, every_file)
            if found is None:
                return None
            now = self.store.feed(feed.name).head_seq // feed.page_size
            if now <= archived:
                return found
            archived = now

    def _ahead_of(self, feed_name: str, archived: int, every_file: bool) -> str | None:
        path = self.pages.path(feed_name, archived + 1)
        if not path.exists():
            return self.past_gap(feed_name, archived) if every_file else None
        return (
            f"the archive has page {archived + 1} of feed {feed_name!r} ({path.resolve()}), but"
            f" the database has {archived} archived pages: it is older than the archive (restored"
            " from a backup?), and its next pages would freeze with other entries under URLs"
            " readers and caches hold, over files holding entries it lacks: take their pages"
            " back with `simplefeed archive recover`, or restore a database backup made after"
            " the archive's newest page (docs/how-to/backup.md)"
        )

    def past_gap(self, feed_name: str, archived: int) -> str | None:
        """Say so if the archive has a page file of the feed past a missing one, or None."""
        strays = archive.stray_files(self.pages.path(feed_name, 1).parent, archived)
        missing, past = archive.past_gap(strays, archived)
        if not past:
            return None
        number, path = past[0]
        return (
            f"the archive has page {number} of feed {feed_name!r} ({path.resolve()}), but not"
            f" page {missing}, and the database has {archived} archived pages: part of the archive"
            f" is lost, so `simplefeed archive recover` cannot take page {number} back, and it"
            " would freeze again over a file holding other entries: restore the archive's"
            f" missing page files from a backup of it, or move the files past page {archived}"
            " aside (docs/how-to/backup.md)"
        )

    def lost_feed(self, name: str) -> str | None:
        """Say so if the archive has pages of feed ``name`` and the database has no such feed.

        A feed created now would archive other entries under those pages' URLs. This takes one
        ``stat``.
        """
        if not self.pages.path(name, 1).exists():
            return None
        try:
            self.store.feed(name)
        except FeedNotFound:
            return self.lost_feed_sentence(name)
        return None

    def lost_feed_sentence(self, name: str) -> str:
        """Say what to tell of a feed whose pages the archive has and the database does not."""
        return (
            f"the archive has page 1 of feed {name!r} ({self.pages.path(name, 1).resolve()}),"
            " which the database does not have (lost, or restored from a backup made before the"
            " feed was created): take its pages back with `simplefeed archive recover`, which"
            " creates the feed as they say"
        )

    def feeds_only_in_archive(self, known: Mapping[str, Feed]) -> list[str]:
        """List the feeds whose page files are in the archive and not in the database."""
        root = self.settings.archive_dir
        found = [p.name for p in sorted((root / "feeds").glob("*")) if p.name not in known]
        if self.settings.default_feed not in known:
            found.insert(0, self.settings.default_feed)
        return [n for n in found if FEED_NAME_RE.match(n) and self.pages.path(n, 1).exists()]

    # -- warnings ------------------------------------------------------------------------

    def _warnings(self, feeds: Sequence[Feed]) -> list[str]:
        """List what /healthz says without failing, each also logged once a minute at most."""
        now = self.clock()
        found = [(f"clock {f.name}", rules.clock_warning(f, now)) for f in feeds]
        found += [(f"archive {f.name}", self.archive_ahead(f)) for f in feeds]
        # An archive that cannot be read is a problem of its own (writable_problems).
        try:
            lost = self.feeds_only_in_archive({f.name: f for f in feeds})
        except OSError:
            lost = []
        found += [(f"lost {name}", self.lost_feed_sentence(name)) for name in lost]
        found += self.pages.conflicts()
        return [self._said(subject, warning) for subject, warning in found if warning is not None]

    def _said(self, subject: str, warning: str) -> str:
        """``warning``, logged once a minute at most per subject."""
        now = self.clock()
        if now - self._warned.get(subject, -(2**62)) >= WARNING_INTERVAL_US:
            self._warned[subject] = now
            log.warning("%s", warning)
        return warning


def uploads_warning(settings: Settings, waiting: Waiting) -> str:
    """What /healthz says of the archived pages waiting for the bucket."""
    since = "?" if waiting.since_s is None else iso_time(waiting.since_s)
    return (
        f"{waiting.pages} archived pages wait for the bucket {settings.archive_url} (the oldest"
        f" since {since}): it does not answer or refuses them. They are served from the archive"
        " directory meanwhile and put in the bucket when it answers; the log says why"
    )


def iso_time(seconds: float) -> str:
    """A time (seconds since the epoch) as RFC 3339 UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))

"""The facade: publishing, reading documents, freezing and rebuilding, over one database.

The HTTP app and the command line both go through :class:`Simplefeed`; neither touches the store
or the renderer directly. The clock and the id generator are injected, so tests control time.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from cachetools import TTLCache

from simplefeed import archive, atom, metrics
from simplefeed.errors import (
    ArchiveAhead,
    ArchiveUnreadable,
    BaseUrlMismatch,
    DefaultFeedMismatch,
    DefaultFeedMissing,
    EntryNotFound,
    FeedNotFound,
    FeedRetired,
    InvalidEvent,
    InvalidFeed,
    InvalidLabel,
    PageNotFound,
    StorageLow,
    StoreError,
    StoreUnavailable,
)
from simplefeed.locks import Striped
from simplefeed.model import (
    Appended,
    Document,
    DocumentKind,
    Entry,
    Event,
    Feed,
    FrozenPage,
    Located,
    PendingEntry,
    TokenRecord,
    rfc3339,
    text_problem,
)
from simplefeed.rules import appending, auth, paging
from simplefeed.service import recovery
from simplefeed.service.changes import Bell, Changes
from simplefeed.settings import (
    FEED_NAME_RE,
    MAX_FEED_TITLE,
    MAX_PAGE_SIZE,
    Settings,
    sqlite_path,
)
from simplefeed.store import Appending, Store, TokenCheck, open_store

log = logging.getLogger(__name__)

Clock = Callable[[], int]
"""Returns the current time in microseconds since the epoch."""


def system_clock() -> int:
    return time.time_ns() // 1000


def random_uuid() -> str:
    """A version 7 UUID (RFC 9562): 48 bits of Unix time in milliseconds, then 74 random bits.

    As unique as a version 4 UUID for our purposes (74 random bits per millisecond), but ids made
    one after the other sort one after the other, so the unique index on (feed, entry id) grows
    at its right edge: an append touches one or two index pages instead of one random page per
    entry, which is what keeps appending cheap when the feed holds millions of entries.
    """
    value = (time.time_ns() // 1_000_000 & _MS_MASK) << 80 | int.from_bytes(os.urandom(10))
    value = value & _VERSION_VARIANT_CLEAR | _VERSION_VARIANT_SET
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def free_bytes(directory: Path) -> int | None:
    """Free space for an unprivileged writer on the file system holding ``directory`` (or its
    nearest existing parent: the archive directory may not be made yet); None if unknown."""
    for path in (directory, *directory.absolute().parents):
        try:
            st = os.statvfs(path)
        except FileNotFoundError:
            continue
        except OSError:
            return None
        return st.f_bavail * st.f_frsize
    return None


_MS_MASK = (1 << 48) - 1
#: How long a process skips the screen's lookup for credentials it found valid.
SCREEN_S = 5.0
#: How many credentials it remembers so (each entry: a token id, a hash, a feed name).
SCREEN_SIZE = 1024
_VERSION_VARIANT_CLEAR = ~(0xF << 76 | 0x3 << 62)
_VERSION_VARIANT_SET = 0x7 << 76 | 0x2 << 62  # version 7, RFC 9562 variant

#: The most page files whose write failed a process remembers to say in ``/healthz`` (each
#: is reread there); past it, the log alone says the others.
UNWRITTEN_KEPT = 100

#: How far this server's clock may be behind a feed's last publish before it is said: entries
#: are dated strictly after the feed's last change (appending.decide), so a clock that ran
#: fast and was set back dates every entry from the fast time on, in pages frozen for good,
#: until the clock catches up. A few seconds leave room for nodes' clocks that differ a little.
CLOCK_BEHIND_LIMIT_US = 5_000_000
#: The least time between two log lines (from ``/healthz``) about one subject of its
#: warnings (a feed's clock, its archive, a page file), per process.
WARNING_INTERVAL_US = 60_000_000


def clock_warning(feed: Feed, now_us: int) -> str | None:
    """A sentence if ``feed`` last changed more than :data:`CLOCK_BEHIND_LIMIT_US` after
    ``now_us`` (this server's clock), else None."""
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


@dataclass(frozen=True)
class Live:
    """The working page, seen as ``kind``: validators, and the bytes when asked for."""

    feed: Feed
    kind: DocumentKind
    number: int
    etag: str


def base_url_problem(feed: Feed, base_url: str) -> str | None:
    """Why ``feed`` cannot be served with documents rendered with ``base_url`` (its frozen
    pages link to another, or to one never recorded; or, before any page froze, another was
    recorded by ``archive rebase``), saying what to do; None if it can."""
    frozen = feed.head_seq >= feed.page_size
    if feed.base_url == base_url or (feed.base_url is None and not frozen):
        return None
    rebase = f"`simplefeed archive rebase {base_url} --feed {feed.name}`"
    if not frozen:
        return (
            f"feed {feed.name!r} has its base URL recorded as {feed.base_url} (archive rebase),"
            f" but the base URL is now {base_url}: set SIMPLEFEED_BASE_URL={feed.base_url}, or"
            f" record the new one with {rebase}"
        )
    if feed.base_url is None:
        return (
            f"feed {feed.name!r} has frozen pages but no recorded base URL: check that their "
            f"links are right, then record {base_url} with {rebase}"
        )
    return (
        f"feed {feed.name!r} has frozen pages linking to {feed.base_url}, but the base URL is "
        f"now {base_url}: set SIMPLEFEED_BASE_URL={feed.base_url} again, or move the feed to "
        f"the new one with {rebase} (README: Operating it)"
    )


#: Where a frozen page's own URL says it is: the default feed's ``/pages/N``, or a named
#: feed's ``/feeds/NAME/pages/N`` (at the end of the URL's path).
_PAGE_PATH = re.compile(r"(?:/feeds/(?P<feed>[^/]+))?/pages/(?P<number>[0-9]+)\Z")


def default_feed_problem(feed: Feed, self_href: str | None, default_feed: str) -> str | None:
    """Why ``feed``, whose newest frozen page's ``self`` link is ``self_href``, cannot be
    served with SIMPLEFEED_DEFAULT_FEED naming ``default_feed``, saying what to do; None if it
    can. A page rendered as the default feed's is at ``/pages/N``, any other feed's at
    ``/feeds/NAME/pages/N``, and the pages after it link to it there: the default feed cannot
    change once either has frozen pages. A self link that names no page of this feed (none,
    or a damaged page: ``archive verify``'s to find) is not judged here."""
    number = feed.head_seq // feed.page_size
    if self_href is None or number < 1:
        return None
    path = urlsplit(self_href).path
    base = urlsplit(feed.base_url).path.rstrip("/") if feed.base_url is not None else None
    if base and path.startswith(base + "/"):  # a base URL with a path of its own
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
            f"feed {feed.name!r} has frozen pages at /pages/N (rendered as the default feed's),"
            f" but SIMPLEFEED_DEFAULT_FEED is {default_feed!r}: set"
            f" SIMPLEFEED_DEFAULT_FEED={feed.name} again ({never})"
        )
    return (
        f"feed {feed.name!r} has frozen pages at /feeds/{feed.name}/pages/N, but"
        f" SIMPLEFEED_DEFAULT_FEED is {default_feed!r}, which would serve them at /pages/N: set"
        f" SIMPLEFEED_DEFAULT_FEED back to the feed it named when they froze ({never})"
    )


def page_size_warning(feed: Feed, page_size: int) -> str | None:
    """Why SIMPLEFEED_PAGE_SIZE (``page_size``, set) does nothing for ``feed``, or None: a
    feed's page size is fixed when it is created (its pages' numbers and entries follow it)."""
    if feed.page_size == page_size:
        return None
    return (
        f"SIMPLEFEED_PAGE_SIZE={page_size} does not change feed {feed.name!r}, whose pages hold"
        f" {feed.page_size} entries (fixed when a feed is created): it sizes only feeds created"
        f" from now on; unset it or set it to {feed.page_size}"
    )


@dataclass(frozen=True)
class HealthReport:
    """What ``/healthz`` answers (:meth:`Simplefeed.health`)."""

    #: The database's kind: ``sqlite``, ``postgresql``.
    database: str
    #: What keeps the service from publishing (503).
    problems: list[str]
    #: What needs an operator without keeping the service from working (200).
    warnings: list[str]


@dataclass(frozen=True)
class FeedStats:
    """What an operator asks of a feed (``simplefeed feed list|show``, ``GET /``): its head,
    its pages, when it was last published to, and the URLs to start reading it from."""

    feed: Feed
    #: Pages in all: the frozen ones and the working page (which may be empty).
    pages: int
    frozen_pages: int
    #: The server's clock at the last append (None while the feed is empty).
    last_publish_us: int | None
    #: The base URL documents are rendered with now (SIMPLEFEED_BASE_URL); the frozen pages'
    #: own is the feed's ``base_url``.
    base_url: str
    #: Absolute URLs: ``recent`` (the entry point), ``working`` (the working page), ``first``
    #: (page 1, where a walk from the beginning starts) and ``html`` (the page for people).
    entry_points: dict[str, str]

    def describe(self) -> dict[str, object]:
        """The stats as JSON-ready values (times in RFC 3339)."""
        f = self.feed
        return {
            "name": f.name,
            "title": f.title,
            "id": f.atom_id,
            "head_seq": f.head_seq,
            "page_size": f.page_size,
            "pages": self.pages,
            "frozen_pages": self.frozen_pages,
            "created": rfc3339(f.created_us),
            "last_publish": None if self.last_publish_us is None else rfc3339(self.last_publish_us),
            "state": "live" if f.retired_us is None else "retired",
            "retired": None if f.retired_us is None else rfc3339(f.retired_us),
            "base_url": self.base_url,
            "frozen_pages_base_url": f.base_url,
            "entry_points": self.entry_points,
        }


@dataclass(frozen=True)
class Rebased:
    """What ``simplefeed archive rebase`` did to one feed."""

    feed: str
    #: The base URL the pages were rendered with before (None if none was recorded).
    old_base_url: str | None
    base_url: str
    #: Frozen pages rendered again, and how many of them came out with other bytes.
    pages: int
    changed: int
    #: The URLs whose copies in caches (a CDN, consumers' HTTP caches) are now stale: every
    #: frozen page and the live documents, under the old base URL and the new one.
    purge: list[str]
    #: Page files that could not be written (the database has the pages: ``archive rebuild``).
    unwritten: list[str]


#: Page files ``archive recover`` reads and stores in one transaction: its memory is about this
#: many pages' bytes and entries.
RECOVERY_BATCH = 64


@dataclass(frozen=True)
class Recovered:
    """What ``simplefeed archive recover`` did to one feed."""

    feed: str
    #: The pages taken back from their files into the database (none: an empty range).
    pages: range
    #: Entries stored (those of the pages that the database did not hold).
    entries: int
    #: Why the page file after them could not be taken back (None: there is none).
    problem: str | None
    #: Page files (or copies) that could not be written (``archive rebuild``).
    unwritten: list[str]
    #: Page files and copies written again from the bytes taken back (damaged, or missing).
    written: list[Path] = field(default_factory=list)
    #: Whether the feed was created again, as its first page says (the database lacked it).
    created: bool = False


def purge_urls(
    feed: Feed, bases: Sequence[str | None], default_feed: str, frozen: int
) -> list[str]:
    """Every frozen page's URL, then ``/recent`` and the working page's, under each base."""
    urls: list[str] = []
    for base in dict.fromkeys(b for b in bases if b is not None):
        u = paging.Urls(base, feed.name, default_feed)
        urls += [u.page(n) for n in range(1, frozen + 2)] + [u.recent]
    return urls


class _QuickOutcome(enum.Enum):
    """Why the one-round-trip append returned no entries."""

    GAVE_WAY = "gave way"  # nothing appended: it does not apply
    OUTCOME_UNKNOWN = "outcome unknown"  # it failed, perhaps after its commit


class Simplefeed:
    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        clock: Clock = system_clock,
        new_uuid: Callable[[], str] = random_uuid,
        bell: Bell | None = None,
    ) -> None:
        """``bell``: how this process's publishes reach the watchers of the node's other
        processes (:class:`~simplefeed.service.changes.NodeBell` under uWSGI); default: this
        process's own. Closed and not used where the store's watcher is told of every commit
        (PostgreSQL's ``NOTIFY``): nothing to hasten there."""
        self.settings = settings
        self.store = store if store is not None else open_store(settings.database_url)
        self.clock = clock
        self.new_uuid = new_uuid
        self._live_cache: dict[tuple[int, DocumentKind], tuple[str, bytes]] = {}
        #: Per feed id: the number and SHA-256 of its newest frozen page seen by this process.
        self._digests: dict[int, tuple[int, str]] = {}
        #: Per feed id: the number and ``self`` link of its newest frozen page seen by this
        #: process (frozen pages never change: each is read once, for the default feed's check).
        self._self_hrefs: dict[int, tuple[int, str | None]] = {}
        #: Feeds by name as this process last locked them, for their identity (id, name, page
        #: size: these never change) on the one-round-trip append path, never for their head.
        self._feeds: dict[str, Feed] = {}
        #: Per subject of a warning of ``/healthz``: when this process last logged it.
        self._warned: dict[str, int] = {}
        #: Page files found holding another page than the database's, kept (:meth:`_write_file`):
        #: (feed name, feed id, page number), until the file and the database agree again.
        self._kept_files: set[tuple[str, int, int]] = set()
        #: Page files this process could not write, with the error: (feed name, feed id,
        #: page number) -> the error's text, until the file is there (:meth:`health`).
        self._unwritten: dict[tuple[str, int, int], str] = {}
        self._cache_lock = threading.Lock()
        self._screened: TTLCache[tuple[int, str, str], bool] = TTLCache(
            SCREEN_SIZE, SCREEN_S, timer=time.monotonic
        )
        self._screened_lock = threading.Lock()  # cachetools' caches are not thread-safe
        #: One rendering of a live document's version at a time: the requests that want it
        #: too (every long-poll woken by a publish) wait for it, then serve it from memory.
        self._rendering = Striped()
        #: Requests waiting for a feed to change (``Prefer: wait``) wait here.
        if bell is not None and not self.store.watch_polls:
            bell.close()
            bell = None
        self.changes = Changes(self.store.watch, self.feed_head, bell)

    def close(self) -> None:
        """Stop watching for changes and close every database connection."""
        self.changes.stop()
        self.store.close()

    def health(self) -> HealthReport:
        """The database's kind (``sqlite``, ``postgresql``) once it has answered a query
        (:class:`~simplefeed.errors.StoreUnavailable` if it does not), what keeps the service
        from publishing although it answers (a read-only database, a SQLite file replaced or
        deleted, an archive directory that cannot be written), and what needs an operator
        without keeping it from working (:meth:`_warnings`). A database that does not answer
        but whose store can say why (its SQLite file gone) is reported so, not raised."""
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
        if unavailable is None:  # the feeds' base URLs and frozen pages are in the database
            feeds = self.store.feeds()
            problems += self.base_url_problems(feeds)
            problems += self.default_feed_problems(feeds)
            problems += self._unwritten_problems()
            warnings = self._warnings(feeds)
        return HealthReport(self.store.backend, problems, warnings)

    def space_problems(self) -> list[str]:
        """The directories written on a publish (the SQLite database's, the archive) with less
        free space than ``min_free_bytes``, each as a sentence."""
        directories = [self.settings.archive_dir]
        database = sqlite_path(self.settings.database_url)
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

    # -- feeds ---------------------------------------------------------------------------

    def urls(self, feed_name: str) -> paging.Urls:
        return paging.Urls(self.settings.base_url, feed_name, self.settings.default_feed)

    def create_feed(
        self, name: str, *, title: str | None = None, page_size: int | None = None
    ) -> Feed:
        """A new feed. Its name is in every URL of its documents and its title in each of them,
        frozen pages included: both are checked as a producer's text is."""
        if not FEED_NAME_RE.match(name):
            raise InvalidFeed(
                f"feed name {name!r:.80}: use 1-64 of a-z 0-9 - _, starting with a letter or digit"
            )
        title = title or name
        # Within the head every document leaves room for (atom.MAX_DOCUMENT_BYTES). The
        # operator's, not a producer's: SIMPLEFEED_MAX_TITLE_CHARS is for entries' titles
        # (lowered, it stopped `db upgrade` creating the default feed, without naming itself).
        problem = text_problem(title, MAX_FEED_TITLE)
        if problem is not None:
            raise InvalidFeed(f"feed title {title!r:.80} {problem}")
        if page_size is not None and not 1 <= page_size <= MAX_PAGE_SIZE:
            raise InvalidFeed(f"page size {page_size}: use 1-{MAX_PAGE_SIZE} entries")
        lost = self._lost_feed(name)
        if lost is not None:
            raise ArchiveAhead([lost])
        return self.store.create_feed(
            name=name,
            title=title,
            page_size=page_size or self.settings.page_size,
            uuid=self.new_uuid(),
            now_us=self.clock(),
        )

    def _lost_feed(self, name: str) -> str | None:
        """A sentence if the archive has pages of feed ``name`` and the database has no such
        feed (it was lost, or restored from a backup made before the feed was created): a feed
        created now would freeze other entries under their URLs. One ``stat``."""
        if not self.page_path(name, 1).exists():
            return None
        try:
            self.store.feed(name)
        except FeedNotFound:
            return self._lost_feed_sentence(name)
        return None  # (it exists: the store says so)

    def _lost_feed_sentence(self, name: str) -> str:
        return (
            f"the archive has page 1 of feed {name!r} ({self.page_path(name, 1).resolve()}),"
            " which the database does not have (lost, or restored from a backup made before the"
            " feed was created): take its pages back with `simplefeed archive recover`, which"
            " creates the feed as they say"
        )

    def feed(self, name: str) -> Feed:
        """The feed: its head and validators. One indexed lookup."""
        return self.store.feed(name)

    def feed_head(self, name: str) -> Feed:
        """:meth:`feed` on the hot path (a 304's validators): the store's fastest lookup."""
        return self.store.feed_head(name)

    def feeds(self) -> list[Feed]:
        return self.store.feeds()

    def check_base_url(self) -> None:
        """Raise :class:`BaseUrlMismatch` if a feed's frozen pages link to another base URL
        than the configured one (or to none recorded): checked when the service starts, so
        that documents rendered from now on never link elsewhere than the frozen pages."""
        found = self.base_url_problems()
        if found:
            raise BaseUrlMismatch(found)

    def check_archive(self, *, every_file: bool = False) -> None:
        """Raise :class:`ArchiveAhead` if the archive has a page file past a feed's frozen
        pages (see :meth:`_archive_ahead`): checked when the service starts and by ``db
        upgrade``, before anything freezes over those files. ``every_file``: past a gap too
        (the feed's directory listed: ``serve`` and ``db upgrade``, once; each worker looks
        for the next page's file only)."""
        found = [self._archive_ahead(feed, every_file=every_file) for feed in self.store.feeds()]
        if any(found):
            raise ArchiveAhead([p for p in found if p is not None])

    def _archive_ahead(self, feed: Feed, *, every_file: bool = False) -> str | None:
        """A sentence if the file of ``feed``'s page after its frozen ones is there: only a
        database older than the archive leaves one (files are written after their page's
        commit). One ``stat`` per feed; ``every_file``: if it is not there, the feed's
        directory listed for a page file past the gap (part of the archive lost too).

        A file found is looked at against the feed read again: another process may have
        frozen its page since ``feed`` was read (a worker starting while the service
        publishes: its refusal ended the whole uWSGI instance), and a file is written only
        after its page's commit, so the feed read after the file was seen holds that page."""
        frozen = feed.head_seq // feed.page_size
        while True:
            found = self._ahead_of(feed.name, frozen, every_file)
            if found is None:
                return None
            now = self.store.feed(feed.name).head_seq // feed.page_size
            if now <= frozen:
                return found
            frozen = now

    def _ahead_of(self, feed_name: str, frozen: int, every_file: bool) -> str | None:
        """:meth:`_archive_ahead` for a feed of ``frozen`` pages, as the archive is now."""
        path = self.page_path(feed_name, frozen + 1)
        if not path.exists():
            return self._past_gap(feed_name, frozen) if every_file else None
        return (
            f"the archive has page {frozen + 1} of feed {feed_name!r} ({path.resolve()}), but the"
            f" database has {frozen} frozen pages: it is older than the archive (restored from"
            " a backup?), and its next pages would freeze with other entries under URLs readers"
            " and caches hold, over files holding entries it lacks: take their pages back"
            " with `simplefeed archive recover`, or restore a database backup made after the"
            " archive's newest page (README: A database older than the archive)"
        )

    def _past_gap(self, feed_name: str, frozen: int) -> str | None:
        """A sentence if the archive has a page file of the feed past the first page after its
        ``frozen`` ones that no file holds, or None. Lists the feed's directory."""
        strays = archive.stray_files(self.page_path(feed_name, 1).parent, frozen)
        missing, past = archive.past_gap(strays, frozen)
        if not past:
            return None
        number, path = past[0]
        return (
            f"the archive has page {number} of feed {feed_name!r} ({path.resolve()}), but not"
            f" page {missing}, and the database has {frozen} frozen pages: part of the archive"
            f" is lost, so `simplefeed archive recover` cannot take page {number} back, and it"
            " would freeze again over a file holding other entries: restore the archive's"
            f" missing page files from a backup of it, or move the files past page {frozen}"
            " aside (README: A database older than the archive)"
        )

    def check_default_feed(self) -> None:
        """Raise :class:`DefaultFeedMissing` if SIMPLEFEED_DEFAULT_FEED names no feed: checked
        when the service starts, for /recent and ``POST /entries`` would answer 404 while
        ``/healthz`` said all was well (the variable changed, the feed not created). Before
        that, :meth:`check_default_feed_pages`: a mistyped name is not a feed to create."""
        self.check_default_feed_pages()
        name = self.settings.default_feed
        try:
            self.store.feed(name)
        except FeedNotFound:
            if self.page_path(name, 1).exists():  # (and not in the database, just asked)
                raise ArchiveAhead([self._lost_feed_sentence(name)]) from None
            others = ", ".join(f.name for f in self.store.feeds()) or "none"
            raise DefaultFeedMissing(
                f"SIMPLEFEED_DEFAULT_FEED names feed {name!r}, which does not exist, so /recent"
                f" and POST /entries would answer 404: create it (`simplefeed feed create"
                f" {name}`) or name one of the feeds there are ({others})"
            ) from None

    def default_feed_page_size_warning(self) -> str | None:
        """:func:`page_size_warning` for the default feed when SIMPLEFEED_PAGE_SIZE is set and
        the feed exists (said by ``serve``, ``db upgrade`` and uWSGI's load), or None."""
        if not self.settings.page_size_given:
            return None
        try:
            feed = self.store.feed(self.settings.default_feed)
        except FeedNotFound:
            return None
        return page_size_warning(feed, self.settings.page_size)

    def check_default_feed_pages(self) -> None:
        """Raise :class:`DefaultFeedMismatch` if a feed's frozen pages are at other URLs than
        SIMPLEFEED_DEFAULT_FEED gives them (see :func:`default_feed_problem`): checked when the
        service starts and by ``db upgrade`` before it creates the default feed."""
        found = self.default_feed_problems()
        if found:
            raise DefaultFeedMismatch(found)

    def default_feed_problems(self, feeds: Sequence[Feed] | None = None) -> list[str]:
        """One sentence per feed (of ``feeds``, by default all) whose newest frozen page says it
        is at the default feed's URLs when SIMPLEFEED_DEFAULT_FEED names another, or at its own
        when it names this one."""
        name = self.settings.default_feed
        feeds = self.store.feeds() if feeds is None else feeds
        problems = [default_feed_problem(f, self._newest_self_href(f), name) for f in feeds]
        return [p for p in problems if p is not None]

    def _newest_self_href(
        self, feed: Feed, read: Callable[[int], FrozenPage | None] | None = None
    ) -> str | None:
        """The ``self`` link of ``feed``'s newest frozen page (None if none froze), read once
        per page and process (``read``: by default from the store)."""
        number = feed.head_seq // feed.page_size
        if number < 1:
            return None
        known = self._self_hrefs.get(feed.id)
        if known is not None and known[0] == number:
            return known[1]
        page = read(number) if read is not None else self.store.page(feed.id, number)
        href = atom.self_href(page.body) if page is not None else None
        self._self_hrefs[feed.id] = (number, href)
        return href

    def base_url_problems(self, feeds: Sequence[Feed] | None = None) -> list[str]:
        """One sentence per feed (of ``feeds``, by default all) whose frozen pages link to
        another base URL than the configured one (see :func:`base_url_problem`)."""
        feeds = self.store.feeds() if feeds is None else feeds
        problems = [base_url_problem(f, self.settings.base_url) for f in feeds]
        return [p for p in problems if p is not None]

    def retire_feed(self, name: str) -> Feed:
        """Retire a feed: publishing is refused (:class:`FeedRetired`, 410) from now on, its
        documents are served as before. Retiring a retired feed changes nothing."""
        feed = self.store.feed(name)
        if feed.retired_us is not None:
            return feed
        return self.store.set_retired(name, self.clock())

    def unretire_feed(self, name: str) -> Feed:
        """Take a feed back into service: publishing works again."""
        return self.store.set_retired(name, None)

    def stats(self, feed: Feed) -> FeedStats:
        """The feed's stats, from the feed alone (no query)."""
        urls = self.urls(feed.name)
        working = paging.working_page(feed.head_seq, feed.page_size)
        return FeedStats(
            feed=feed,
            pages=working,
            frozen_pages=working - 1,
            last_publish_us=feed.modified_us if feed.head_seq else None,
            base_url=self.settings.base_url,
            entry_points={
                "recent": urls.recent,
                "working": urls.page(working),
                "first": urls.page(1),
                "html": f"{self.settings.base_url}/feeds/{feed.name}",
            },
        )

    # -- producer tokens -----------------------------------------------------------------

    def create_token(self, *, feed: str | None = None, label: str | None = None) -> str:
        """Mint a token (optionally limited to one feed); returns it. Only its hash is kept.
        Its label is shown in a line of ``token list``: text of at most
        :data:`auth.MAX_LABEL_CHARS <simplefeed.rules.auth.MAX_LABEL_CHARS>` characters, on one
        line."""
        if label is not None:
            problem = auth.label_problem(label)
            if problem is not None:
                raise InvalidLabel(f"token label {label!r:.80} {problem}")
        secret = auth.new_secret()
        token_id = self.store.create_token(
            secret_hash=auth.hash_secret(secret), feed=feed, label=label, now_us=self.clock()
        )
        return auth.format_token(token_id, secret)

    def tokens(self) -> list[TokenRecord]:
        return self.store.tokens()

    def revoke_token(self, token_id: int) -> bool:
        return self.store.revoke_token(token_id, self.clock())

    def rotate_token(self, token_id: int) -> str | None:
        """A new secret for a live token (same id, feed and label); returns the new token, or
        None if there is no live token with that id. The old secret stops working at once."""
        secret = auth.new_secret()
        if not self.store.rotate_token(token_id, auth.hash_secret(secret)):
            return None
        return auth.format_token(token_id, secret)

    def authorize(self, authorization: str | None, feed: str) -> None:
        """Check an ``Authorization`` header for publishing to ``feed``."""
        self.check_credentials(auth.parse_authorization(authorization), feed)

    def check_credentials(self, credentials: auth.Credentials, feed: str) -> None:
        """Raise :class:`~simplefeed.errors.AuthError` unless ``credentials`` may publish to
        ``feed``."""
        record = self.store.token(credentials.token_id)
        auth.check(credentials, record, feed)

    def screen_credentials(self, credentials: auth.Credentials, feed: str) -> None:
        """Refuse a publish's credentials before its body is read, so that a client without a
        valid token costs a lookup and never the parsing of what it sent.

        A screen, not the check: credentials this process found valid for ``feed`` in the last
        :data:`SCREEN_S` seconds are not looked up again, and :meth:`publish` checks them
        against the database all the same (in the append's own statements on the quick path),
        so a revoked token is still refused at once (and spends the door's time for at most
        those seconds); what they spare is a second round trip on the quick path, which takes
        one.
        """
        key = (credentials.token_id, auth.hash_secret(credentials.secret), feed)
        with self._screened_lock:
            if key in self._screened:
                return
        self.check_credentials(credentials, feed)
        with self._screened_lock:
            self._screened[key] = True

    # -- publishing ----------------------------------------------------------------------

    def publish(
        self,
        feed_name: str,
        events: Sequence[Event],
        *,
        credentials: auth.Credentials | None = None,
    ) -> list[Appended]:
        """Append events to a feed, all or nothing, freezing every page they fill.

        With ``credentials`` (a producer's token), nothing is appended unless the token may
        publish to the feed (:class:`~simplefeed.errors.AuthError` otherwise); on the
        one-round-trip path that check is part of the append's own statements. Replays and
        conflicts: see :mod:`simplefeed.rules.appending`, which decides the append under the lock.
        """
        # A full disk is met here, not halfway through a write.
        space = self.space_problems()
        if space:
            raise StorageLow("; ".join(space))
        # Everything that does not depend on the feed's head is done before taking its lock:
        # the lock serialises appenders (every process, every node), so what is done under it
        # bounds the feed's append rate.
        now = self.clock()
        pending = appending.pending_entries(events, now, self._new_entry_id)
        locator_base = self.urls(feed_name).locator_base
        self._refuse_too_large(feed_name, pending, locator_base, credentials)
        # The ids to look up under the lock: the producer's, to answer replays and conflicts.
        look_up = [p.id for p in pending if p.event.id is not None]
        if pending and appending.ids_are_distinct(pending):
            quick = self._publish_in_one_round_trip(feed_name, pending, now, credentials)
            if isinstance(quick, list):
                self.changes.committed()
                return quick
            if quick is _QuickOutcome.OUTCOME_UNKNOWN:
                # The quick path failed (a dropped connection, say) and may have appended the
                # events before it did: look up every one of them, generated ids too.
                look_up = [p.id for p in pending]
        if credentials is not None:
            self.check_credentials(credentials, feed_name)
        # A batch may fill a page: its entries are written out now, all but their `updated` and
        # number, so that under the lock the page is only put together (atom.render's parts).
        parts = (
            {p.id: atom.entry_parts(p, locator_base) for p in pending} if len(pending) > 1 else {}
        )
        with self.store.append(feed_name, look_up) as append:
            self._feeds[feed_name] = append.feed
            if append.feed.retired_us is not None:
                raise FeedRetired(feed_name)
            decision = appending.decide(append.feed, pending, append.found, now)
            if decision.full_pages:
                # Never freeze a page with other links than the pages before it (another node
                # or process started with another base URL since this feed's last freeze).
                problem = base_url_problem(append.feed, self.settings.base_url)
                if problem is not None:
                    raise BaseUrlMismatch([problem])
                # Nor at another feed's URLs than the pages before it (SIMPLEFEED_DEFAULT_FEED
                # changed since this feed's last freeze; this process's start-up check could
                # not see the database).
                href = self._newest_self_href(append.feed, append.page)
                problem = default_feed_problem(append.feed, href, self.settings.default_feed)
                if problem is not None:
                    raise DefaultFeedMismatch([problem])
            # Each page records the digest of the one before (sf:sha256 on prev-archive): the
            # first from the store, then each from the page frozen just before it, in memory.
            frozen: list[FrozenPage] = []
            for number in decision.full_pages:
                prev = (
                    archive.page_sha256(frozen[-1])
                    if frozen
                    else self._page_sha256(append.feed, number - 1, append.page)
                )
                frozen.append(self._freeze(append, number, now, decision, parts, prev))
            # The base URL the frozen pages are rendered with, recorded as each page freezes.
            base_url = self.settings.base_url if frozen else append.feed.base_url
            append.write(
                decision.new, modified_us=decision.modified_us, pages=frozen, base_url=base_url
            )
        if frozen:  # committed: the newest page's digest, for the next freeze and live documents
            self._digests[append.feed.id] = (frozen[-1].number, archive.page_sha256(frozen[-1]))
            newest = frozen[-1].number
            self._self_hrefs[append.feed.id] = (newest, self.urls(feed_name).page(newest))
        if decision.replayed and not decision.new:
            # Nothing was written, so nothing was flushed: the stored entry may be an append
            # committed a moment ago whose WAL is not on disk yet (one-round-trip appends commit
            # without waiting for it). Answer only once it is. (A commit that wrote waits for
            # the WAL up to its own record, so past every earlier one.)
            self.store.flush_barrier()
        for page in frozen:
            self._write_file(feed_name, page)
        if decision.new:  # waiting consumers learn of it once its pages' files are written
            self.changes.committed()
        metrics.pages_frozen(feed_name, len(frozen))
        if frozen and frozen[0].number == 1:
            try:
                self.store.analyze_entries_once()
            except StoreError:
                log.warning("could not analyse the entries table", exc_info=True)
        return list(decision.results)

    def _warnings(self, feeds: Sequence[Feed]) -> list[str]:
        """What ``/healthz`` says without failing: the service works, but something needs an
        operator (a clock behind the feeds' last changes, an archive ahead of the database, a
        feed whose pages the archive has and the database does not, a page file kept that
        holds another page than the database's). Each is logged too, once
        a minute at most per subject and process (health checks come every few seconds)."""
        now = self.clock()
        found = [(f"clock {f.name}", clock_warning(f, now)) for f in feeds]
        found += [(f"archive {f.name}", self._archive_ahead(f)) for f in feeds]
        # (An archive that cannot be read is a problem of its own: writable_problems.)
        try:
            lost = self._feeds_only_in_archive({f.name: f for f in feeds})
        except OSError:
            lost = []
        found += [(f"lost {name}", self._lost_feed_sentence(name)) for name in lost]
        found += self._page_file_conflicts()
        said = []
        for subject, warning in found:
            if warning is None:
                continue
            said.append(warning)
            if now - self._warned.get(subject, -(2**62)) >= WARNING_INTERVAL_US:
                self._warned[subject] = now
                log.warning("%s", warning)
        return said

    def _refuse_too_large(
        self,
        feed_name: str,
        pending: Sequence[PendingEntry],
        locator_base: str,
        credentials: auth.Credentials | None,
    ) -> None:
        """Refuse the batch if one of its entries would take more than a page of its feed
        leaves each (:func:`atom.max_entry_bytes`): no page is ever larger than a consumer
        reads. Only an entry the cheap bound leaves in doubt is written out to be measured. A
        feed's page size is fixed when it is created: the feed as last appended to in this
        process tells it, or else (its first publish here) a look-up, after the token's check,
        so that a token's holder learns nothing of a feed it may not publish to."""
        known = self._feeds.get(feed_name)
        page_size = known.page_size if known is not None else None
        limit = atom.max_entry_bytes(page_size) if page_size is not None else None
        for index, p in enumerate(pending):
            bound = atom.entry_bytes_bound(p.data, locator_base)
            if limit is not None and bound <= limit:
                continue
            if page_size is None:
                if credentials is not None:
                    self.check_credentials(credentials, feed_name)
                page_size = self.feed(feed_name).page_size
                limit = atom.max_entry_bytes(page_size)
                if bound <= limit:
                    continue
            assert limit is not None
            size = atom.entry_bytes(p, locator_base)
            if size > limit:
                batch = len(pending) > 1  # indexed as the door indexes a batch's events
                where = f"[{index}]: " if batch else ""
                raise InvalidEvent(
                    f"{where}this entry would take {size:,} bytes in the feed's documents, over"
                    f" the {limit:,} a page of feed {feed_name!r} leaves each of its {page_size}"
                    f" entries (a page is at most {atom.MAX_DOCUMENT_BYTES // 2**20} MiB, what"
                    " every consumer reads); characters written escaped take up to six bytes"
                    " each (such as < > & in JSON or text content): send less",
                    index=index if batch else None,
                )

    def _new_entry_id(self) -> str:
        return f"urn:uuid:{self.new_uuid()}"

    def _publish_in_one_round_trip(
        self,
        feed_name: str,
        pending: Sequence[PendingEntry],
        now: int,
        credentials: auth.Credentials | None,
    ) -> list[Appended] | _QuickOutcome:
        """The common append, where the store can: new events that stay within the working
        page, numbered by the database under the feed's lock, in one round trip (see
        :meth:`simplefeed.store.Store.append_in_one_round_trip`). Otherwise nothing was
        appended (``GAVE_WAY``: it does not apply) or it is not known whether the events were
        (``OUTCOME_UNKNOWN``: it failed); :meth:`publish` then goes the ordinary way, which
        also answers replays and conflicts and freezes the pages an append fills.
        """
        known = self._feeds.get(feed_name)
        if not self.store.one_round_trip or known is None or len(pending) >= known.page_size:
            # Not possible here, the feed not seen yet in this process, or certain to fill a page.
            return _QuickOutcome.GAVE_WAY
        token = (
            TokenCheck(credentials.token_id, auth.hash_secret(credentials.secret))
            if credentials is not None
            else None
        )
        try:
            head = self.store.append_in_one_round_trip(known, pending, now_us=now, token=token)
        except StoreError:
            # A dropped connection (a server restart, an idle timeout), or anything else: the
            # ordinary way, on a pooled connection, either appends the events or finds them
            # appended (their ids are fixed before either path), and raises what is really
            # wrong.
            log.warning("one-round-trip append failed; appending the ordinary way", exc_info=True)
            return _QuickOutcome.OUTCOME_UNKNOWN
        if head is None:
            return _QuickOutcome.GAVE_WAY
        return appending.appended_after(pending, head, known.page_size)

    def _freeze(
        self,
        append: Appending,
        number: int,
        now_us: int,
        decision: appending.Decision,
        parts: Mapping[str, atom.EntryParts],
        prev_sha256: str | None,
    ) -> FrozenPage:
        """Render page ``number``, which the append under way fills; the append stores it.

        The entries appended now are rendered from memory (from ``parts`` where prepared: only
        for these, since a replayed id's stored entry may differ in its ``published``); only
        older ones of the page are read back, in the append's transaction.
        """
        feed = append.feed
        first, last = paging.seq_range(number, feed.page_size)
        fresh = {entry.seq: entry for entry, _ in decision.new}
        entries = [fresh[seq] for seq in range(last, max(first, feed.head_seq + 1) - 1, -1)]
        ready = {e.id: parts[e.id] for e in entries if e.id in parts}
        if first <= feed.head_seq:
            entries += append.entries_between(first, feed.head_seq)
        doc = self._document(feed, "archive", number, tuple(entries), prev_sha256)
        body = atom.render(doc, ready)
        return FrozenPage(feed.id, number, body, archive.strong_etag(body), now_us)

    def _document(
        self,
        feed: Feed,
        kind: DocumentKind,
        number: int,
        entries: tuple[Entry, ...],
        prev_sha256: str | None = None,
    ) -> Document:
        if entries:
            updated = entries[0].updated_us
        else:
            updated = feed.head_updated_us if feed.head_updated_us is not None else feed.created_us
        urls = self.urls(feed.name)
        return Document(
            feed=feed,
            kind=kind,
            number=number,
            updated_us=updated,
            links=paging.links(urls, kind, number),
            locator_base=urls.locator_base,
            entries=entries,
            prev_sha256=prev_sha256,
        )

    def _page_sha256(
        self,
        feed: Feed,
        number: int,
        read: Callable[[int], FrozenPage | None] | None = None,
    ) -> str | None:
        """The digest of frozen page ``number`` (None for page 0: there is none). Frozen pages
        never change, so the newest one's digest is kept per feed; another is read (``read``,
        by default from the store) for its ETag (which holds it) or its bytes (for pages
        frozen before it did)."""
        if number < 1:
            return None
        known = self._digests.get(feed.id)
        if known is not None and known[0] == number:
            return known[1]
        page = read(number) if read is not None else self.store.page(feed.id, number)
        if page is None:
            raise StoreError(f"feed {feed.name!r} has no frozen page {number}")
        digest = archive.page_sha256(page)
        if known is None or known[0] < number:
            self._digests[feed.id] = (number, digest)
        return digest

    # -- reading -------------------------------------------------------------------------

    def live(self, feed: Feed, kind: DocumentKind) -> Live:
        """Validators of the recent document or the working page: no rendering, no query.

        The ETag holds the head's sequence number and a digest of what else makes the document:
        its format, the feed's identity, its URLs, and the time of its last append. The head
        alone named other entries alike: a database restored from a backup, and published to
        since, had the same head with other entries, and every cache, CDN and consumer that
        asked with the old ETag was told 304 and kept the entries the restore lost."""
        number = paging.working_page(feed.head_seq, feed.page_size)
        tag = hashlib.sha256(
            f"{atom.DOCUMENT_FORMAT}|{feed.uuid}|{feed.title}|{feed.page_size}|"
            f"{self.urls(feed.name).prefix}|{feed.modified_us}".encode()
        ).hexdigest()[:12]
        return Live(feed, kind, number, f'"{kind[0]}{feed.head_seq}-{tag}"')

    def live_body(self, live: Live) -> bytes:
        """The bytes of a live document, rendered once per version and then served from memory."""
        cached = self.cached_live_body(live)
        if cached is not None:
            return cached
        with self._rendering((live.feed.id, live.kind)):
            cached = self.cached_live_body(live)
            if cached is not None:
                return cached
            return self._render_live(live)

    def _render_live(self, live: Live) -> bytes:
        """Render a live document's version and keep its bytes (under its rendering lock)."""
        feed = live.feed
        first, _ = paging.seq_range(live.number, feed.page_size)
        entries = self.store.entries_between(feed.id, first, feed.head_seq)
        # The head this version shows may be an append committed without waiting for its WAL
        # flush (see simplefeed.store.postgres): no one is shown it before it is
        # durable, so a server crash cannot take back what a consumer has read.
        self.store.flush_barrier()
        prev = self._page_sha256(feed, live.number - 1)
        body = atom.render(self._document(feed, live.kind, live.number, tuple(entries), prev))
        with self._cache_lock:
            self._live_cache[(live.feed.id, live.kind)] = (live.etag, body)
        return body

    def cached_live_body(self, live: Live) -> bytes | None:
        """The bytes of a live document if this process rendered this version; no query."""
        with self._cache_lock:
            cached = self._live_cache.get((live.feed.id, live.kind))
        return cached[1] if cached is not None and cached[0] == live.etag else None

    def locate(self, feed_name: str, entry_id: str) -> Located:
        """Where an entry is (``GET /entries/{id}``); :class:`EntryNotFound` if the feed has no
        entry with this id."""
        feed = self.store.feed(feed_name)
        found = self.store.find_entries(feed.id, [entry_id]).get(entry_id)
        if found is None:
            raise EntryNotFound(feed_name, entry_id)
        number = paging.page_of(found.seq, feed.page_size)
        frozen = number < paging.working_page(feed.head_seq, feed.page_size)
        if not frozen:
            # Perhaps an append committed without waiting for its WAL flush (see live_body):
            # its number is shown only once it is durable. Frozen pages are synchronous.
            self.store.flush_barrier()
        return Located(entry_id, found.seq, self.urls(feed_name).page(number), frozen)

    def page(self, feed: Feed, number: int) -> FrozenPage:
        """Frozen page ``number`` of a feed (the working page is :meth:`live`)."""
        if not 1 <= number < paging.working_page(feed.head_seq, feed.page_size):
            raise PageNotFound(feed.name, number)
        page = self.store.page(feed.id, number)
        if page is None:  # pragma: no cover - freezing is in the append transaction
            raise PageNotFound(feed.name, number)
        self._write_file_if_missing(feed.name, page)
        return page

    # -- archive files -------------------------------------------------------------------

    def page_path(self, feed_name: str, number: int) -> Path:
        return archive.page_path(
            self.settings.archive_dir, feed_name, self.settings.default_feed, number
        )

    def _write_file(self, feed_name: str, page: FrozenPage) -> bool:
        """Write the page's file and copies, unless the file holds another page, of other
        entries: it is what readers and caches may already hold, and perhaps the only copy of
        them (a database restored from a backup older than the archive), so it is kept and said
        (an ERROR now, a warning in ``/healthz`` until the file and the database agree);
        ``archive rebuild`` is the operator's way to replace it. A damaged file is replaced.

        The page is committed: a failure here loses nothing. The app serves the page from the
        database and writes the file on the next request; ``archive rebuild`` restores it too."""
        path = self.page_path(feed_name, page.number)
        try:
            if archive.holds_another_page(path, page.body):
                self._kept_files.add((feed_name, page.feed_id, page.number))
                log.error("%s", self._kept_file_warning(feed_name, page.number, path))
                return False
            archive.write_page(path, page.body, page.frozen_us)
        except OSError as exc:
            log.exception("could not write archive file for %s page %d", feed_name, page.number)
            if len(self._unwritten) < UNWRITTEN_KEPT:
                self._unwritten[(feed_name, page.feed_id, page.number)] = exc.strerror or str(exc)
            return False
        self._unwritten.pop((feed_name, page.feed_id, page.number), None)
        return True

    def _unwritten_problems(self) -> list[str]:
        """The page files this process could not write (:meth:`_write_file`) and that are
        still not there as the database has them: a disk that fills up between two health
        checks' probes, or a page larger than the space left, is said, not only logged."""
        found = []
        for key, error in sorted(self._unwritten.items()):
            feed_name, feed_id, number = key
            path = self.page_path(feed_name, number)
            if not self._file_differs(feed_id, number, path):
                self._unwritten.pop(key, None)
                continue
            found.append(
                f"the file of feed {feed_name!r} page {number} could not be written ({path}:"
                f" {error}); the page is served from the database until it is (a read of it, or"
                " `simplefeed archive rebuild`, writes it)"
            )
        return found

    @staticmethod
    def _kept_file_warning(feed_name: str, number: int, path: Path) -> str:
        return (
            f"{path.resolve()} holds another page {number} of feed {feed_name!r} than the"
            " database's, kept (readers and caches may hold it, and its entries may be nowhere"
            " else: the database restored from an older backup?); the service sends the"
            " database's; `simplefeed archive verify` says what differs"
        )

    def _file_differs(self, feed_id: int, number: int, path: Path) -> bool:
        """Whether the file at ``path`` is not (yet) frozen page ``number`` as the database has
        it: what :meth:`_unwritten_problems` and :meth:`_page_file_conflicts` ask again at each
        health check of the pages they remember."""
        page = self.store.page(feed_id, number)
        return page is not None and not archive.file_matches(path, page)

    def _page_file_conflicts(self) -> list[tuple[str, str | None]]:
        """The kept page files (:meth:`_write_file`) that still disagree with the database."""
        found: list[tuple[str, str | None]] = []
        for feed_name, feed_id, number in sorted(self._kept_files):
            path = self.page_path(feed_name, number)
            if not self._file_differs(feed_id, number, path):
                self._kept_files.discard((feed_name, feed_id, number))
                continue
            warning = self._kept_file_warning(feed_name, number, path)
            found.append((f"file {feed_name} {number}", warning))
        return found

    def restore_page_file(self, feed_name: str, page: FrozenPage) -> None:
        """Write the page's file (and copies) again from the database's bytes: the file was
        found holding others (unless they are another page: :meth:`_write_file`)."""
        if self._write_file(feed_name, page):
            log.warning(
                "wrote the file of %s page %d again from the database", feed_name, page.number
            )

    def _write_file_if_missing(self, feed_name: str, page: FrozenPage) -> None:
        if not self.page_path(feed_name, page.number).exists():
            self._write_file(feed_name, page)

    def rebuild_archive(self, feed_name: str | None = None) -> archive.RebuildReport:
        """Rewrite every static page that is missing or differs from the database's bytes, and
        remove temporary files that writes interrupted by a crash left behind. A page whose
        files cannot be written is named in the report's ``unwritten`` and the others go on.
        Refused (:class:`DefaultFeedMismatch`) while a feed's pages would be written where
        another's are."""
        self.check_default_feed_pages()
        checked = 0
        restored: list[Path] = []
        removed: list[Path] = []
        unwritten: list[str] = []
        feeds = [self.store.feed(feed_name)] if feed_name else self.store.feeds()
        for feed in feeds:
            removed += archive.remove_stale_temp_files(self.page_path(feed.name, 1).parent)
            count, written, failed = self._files_written(feed.name, self.store.iter_pages(feed.id))
            checked += count
            restored += written
            unwritten += failed
        return archive.RebuildReport(checked, restored, removed, unwritten)

    def verify_archive(self, feed_name: str | None = None) -> archive.VerifyReport:
        """Check every static page file against the database: the same bytes, the ETag those
        bytes give, and each page's prev-archive digest (``sf:sha256``) the bytes of the page
        before; and no file for a page that is not frozen, nor for a feed the database does not
        have (a restore of an older database leaves them). Writes nothing.

        What stops the check is raised, never reported as a difference: the archive directory
        not one, holding no page file while the database has frozen pages (one line, not one
        "missing" per page: the wrong directory, most likely), or a file in it that cannot be
        read (:class:`ArchiveUnreadable`); a database that fails (:class:`StoreError`)."""
        feeds = [self.store.feed(feed_name)] if feed_name else self.store.feeds()
        root = self.settings.archive_dir
        try:
            if root.exists() and not root.is_dir():
                raise ArchiveUnreadable(root, "not a directory (SIMPLEFEED_ARCHIVE_DIR)")
            pages = sum(paging.working_page(f.head_seq, f.page_size) - 1 for f in feeds)
            empty = archive.empty_archive_problem(root, archive.holds_files(root), pages)
            if empty is not None:
                raise ArchiveUnreadable(root, empty)
            return self._verify_files(feeds, feed_name is None)
        except OSError as exc:  # (a file that is not there is a difference, said as one)
            path = Path(exc.filename) if exc.filename else root
            raise ArchiveUnreadable(path, f"cannot be read ({exc.strerror or exc})") from exc

    def _verify_files(self, feeds: Sequence[Feed], every_feed: bool) -> archive.VerifyReport:
        checked = 0
        problems: list[str] = []
        if every_feed:
            known = {f.name for f in feeds}
            for directory in sorted((self.settings.archive_dir / "feeds").glob("*")):
                if directory.name not in known:
                    problems.append(
                        f"{directory}: files of a feed the database does not have"
                        " (`simplefeed archive recover` takes its pages back; or remove them)"
                    )
            default = self.settings.default_feed
            if default not in known and self.page_path(default, 1).exists():
                # The default feed's pages are not under feeds/: a database without the feed
                # (a new one beside an old archive) left them unchecked, and verify passed.
                problems.append(self._lost_feed_sentence(default))
        for feed in feeds:
            before: FrozenPage | None = None
            for page in self.store.iter_pages(feed.id):
                checked += 1
                problems += archive.page_problems(self.page_path(feed.name, page.number), page)
                given = atom.prev_archive_sha256(page.body)
                if before is not None:
                    problem = archive.chain_problem(before, page, given)
                    if problem is not None:
                        problems.append(f"feed {feed.name!r}: {problem}")
                before = page
            frozen = before.number if before is not None else 0
            strays = archive.stray_files(self.page_path(feed.name, 1).parent, frozen)
            missing, _ = archive.past_gap(strays, frozen)
            for number, path in strays:
                problems.append(
                    f"{path}: feed {feed.name!r} has no frozen page {number}"
                    + (
                        f" (nor the archive page {missing}, so `simplefeed archive recover`"
                        " cannot take it back: restore the archive's missing page files from"
                        " a backup of it, or move it aside)"
                        if number > missing
                        else " (`simplefeed archive recover` takes it back)"
                    )
                )
        return archive.VerifyReport(checked, problems)

    def rebase_archive(self, feed_name: str | None = None) -> list[Rebased]:
        """Render every frozen page of the feed (or of every feed) again with this core's base
        URL, record it as the feed's, and replace the page files (atomically, each).

        Each feed is one transaction that holds its appends off: its pages in order, each with
        the ``sf:sha256`` of the one before it as now rendered, so the digest chain holds; new
        bytes mean new ETags, and the freeze time (Last-Modified) becomes now, so that no
        If-Modified-Since confirms an old copy. A failure rolls the feed back whole. Refused
        (:class:`DefaultFeedMismatch`) while a feed's pages would move to another feed's URLs.
        """
        self.check_default_feed_pages()
        done: list[Rebased] = []
        feeds = [self.store.feed(feed_name)] if feed_name else self.store.feeds()
        for listed in feeds:
            with self.store.rebase(listed.name, self.settings.base_url) as rebasing:
                feed = rebasing.feed
                frozen = paging.working_page(feed.head_seq, feed.page_size) - 1
                now = self.clock()
                prev: str | None = None
                changed = 0
                for number in range(1, frozen + 1):
                    first, last = paging.seq_range(number, feed.page_size)
                    entries = tuple(rebasing.entries_between(first, last))
                    body = atom.render(self._document(feed, "archive", number, entries, prev))
                    page = FrozenPage(feed.id, number, body, archive.strong_etag(body), now)
                    old = rebasing.page(number)
                    if old is None or old.body != body:
                        changed += 1
                        rebasing.replace_page(page)
                    prev = archive.page_sha256(page)
            _, _, unwritten = self._files_written(feed.name, self.store.iter_pages(feed.id))
            bases = [feed.base_url, self.settings.base_url] if changed else []
            done.append(
                Rebased(
                    feed=feed.name,
                    old_base_url=feed.base_url,
                    base_url=self.settings.base_url,
                    pages=frozen,
                    changed=changed,
                    purge=purge_urls(feed, bases, self.settings.default_feed, frozen),
                    unwritten=unwritten,
                )
            )
        return done

    def recover_archive(self, feed_name: str | None = None) -> list[Recovered]:
        """Take back into the database the pages whose files are past its frozen pages (a
        database restored from a backup older than the archive, or lost and started anew):
        their entries and their bytes,
        in order, each page only if the entries read from its file, with those the database
        holds, render to the file's bytes exactly and the next page file vouches for them
        (:func:`simplefeed.service.recovery.recoverable`), stopping at the first that cannot be. A
        feed the database does not have (created after the backup) whose first page file is
        in the archive is created again as that page says: its uuid, title and page size.

        Pages are read and stored :data:`RECOVERY_BATCH` at a time, each batch one transaction
        holding the feed's appends off, so memory stays bounded however many there are."""
        done: list[Recovered] = []
        known = {f.name: f for f in self.store.feeds()}
        names = [feed_name] if feed_name else [*known, *self._feeds_only_in_archive(known)]
        for name in names:
            feed = known.get(name)
            if feed is None:
                made = self._feed_from_archive(name)
                if isinstance(made, str):
                    done.append(Recovered(name, range(0), 0, made, []))
                    continue
                feed = made
            recovered = self._recover(feed)
            if recovered.pages or recovered.problem is not None:
                done.append(replace(recovered, created=name not in known))
        return done

    def _feeds_only_in_archive(self, known: Mapping[str, Feed]) -> list[str]:
        """The feeds whose page files are in the archive and not in the database (created
        after the backup it was restored from), by name."""
        root = self.settings.archive_dir
        found = [p.name for p in sorted((root / "feeds").glob("*")) if p.name not in known]
        if self.settings.default_feed not in known:
            found.insert(0, self.settings.default_feed)
        return [n for n in found if FEED_NAME_RE.match(n) and self.page_path(n, 1).exists()]

    def _feed_from_archive(self, name: str) -> Feed | str:
        """Create feed ``name`` again as its first page file says it was (its uuid, title and
        page size), once that page is known to be taken back; else why it cannot be.
        :class:`FeedNotFound` if there is no such file."""
        path = self.page_path(name, 1)
        if not FEED_NAME_RE.match(name) or not path.is_file():
            raise FeedNotFound(name)
        not_there = f"the database does not have the feed, and {path}"
        files = self._page_files(name, 1, 2)
        try:
            head = recovery.feed_head(files[0].bodies[0])
        except recovery.PageUnreadable as exc:
            return f"{not_there} {exc}"
        feed = Feed(0, name, head.uuid, head.title, head.page_size, head.created_us, 0, None, 0)
        elsewhere = self._written_elsewhere(name, files[0])
        if elsewhere is not None:
            return f"{not_there}: {elsewhere}"
        found = recovery.recoverable(
            self._archived_page_renderer(feed),
            files[:1],
            stored={},
            stored_seqs={},
            page_size=head.page_size,
            locator_base=self.urls(name).locator_base,
            prev_sha256=None,
            following=files[1] if len(files) > 1 else None,
        )
        if found.problem is not None:
            return f"{not_there}: {found.problem}"
        return self.store.create_feed(
            name=name,
            title=head.title,
            page_size=head.page_size,
            uuid=head.uuid,
            now_us=head.created_us,
        )

    def _written_elsewhere(self, feed_name: str, file: recovery.PageFile) -> str | None:
        """Why a page file says it is at another URL than this service would give it (another
        base URL or default feed than the pages were written with), or None: the one mistake
        that makes every page fail to render alike, said as what to set."""
        href = atom.self_href(file.bodies[0])
        here = self.urls(feed_name).page(file.number)
        if href is None or href == here:
            return None
        return (
            f"page {file.number} says it is at {href}, and this service would put it at {here}:"
            " run it with the SIMPLEFEED_BASE_URL (and SIMPLEFEED_DEFAULT_FEED) the pages were"
            " written with"
        )

    def _archived_page_renderer(self, feed: Feed) -> recovery.Render:
        def render(number: int, entries: tuple[Entry, ...], prev: str | None) -> bytes:
            return atom.render(self._document(feed, "archive", number, entries, prev))

        return render

    def _page_files(self, feed_name: str, first: int, most: int) -> list[recovery.PageFile]:
        """Up to ``most`` consecutive page files of the feed from page ``first`` (a page whose
        file is gone but a copy is there counts)."""
        found = []
        for number in range(first, first + most):
            path = self.page_path(feed_name, number)
            try:
                held = archive.read_with_copies(path)
            except OSError as exc:
                where = Path(exc.filename) if exc.filename else path
                raise ArchiveUnreadable(where, f"cannot be read ({exc.strerror or exc})") from exc
            if held is None:
                break
            found.append(recovery.PageFile(number, *held))
        return found

    def _recover(self, feed: Feed) -> Recovered:
        """:meth:`recover_archive` for one feed, batch after batch."""
        numbers: list[int] = []
        entries = 0
        written: list[Path] = []
        unwritten: list[str] = []
        problem: str | None = None
        frozen = feed.head_seq // feed.page_size
        files = self._page_files(feed.name, frozen + 1, RECOVERY_BATCH + 1)
        while problem is None and files:
            problem = self._written_elsewhere(feed.name, files[0])
            if problem is not None:
                break
            pages, stored, problem = self._recover_batch(feed.name, files)
            numbers += (p.number for p in pages)
            entries += stored
            _, done, failed = self._files_written(feed.name, pages)
            written += done
            unwritten += failed
            if len(files) <= RECOVERY_BATCH:
                break
            # The file after the batch, read to vouch for its last page, starts the next one.
            after = files[RECOVERY_BATCH]
            files = [after, *self._page_files(feed.name, after.number + 1, RECOVERY_BATCH)]
        if problem is None:
            # Pages past a gap stay: said, since the service does not start while they are.
            problem = self._past_gap(feed.name, numbers[-1] if numbers else frozen)
        pages_range = range(numbers[0], numbers[-1] + 1) if numbers else range(0)
        return Recovered(feed.name, pages_range, entries, problem, unwritten, written)

    def _recover_batch(
        self, feed_name: str, files: list[recovery.PageFile]
    ) -> tuple[list[FrozenPage], int, str | None]:
        """Take back the first :data:`RECOVERY_BATCH` of ``files`` that can be, in one
        transaction (the one after them, if given, vouches for the last): the pages stored,
        the entries stored, and why the next page could not be taken back (None: no reason)."""
        batch, after = files[:RECOVERY_BATCH], files[RECOVERY_BATCH:]
        ids: dict[str, None] = {}  # of the files and their copies: any may be taken back
        for body in (body for file in batch for body in file.bodies):
            ids.update(dict.fromkeys(archive.entry_ids(body)))
        with self.store.append(feed_name, ids) as append:
            feed = append.feed
            frozen = feed.head_seq // feed.page_size
            if batch[0].number != frozen + 1:
                raise StoreError(f"feed {feed_name!r} changed while it was read: run it again")
            stored = append.entries_between(frozen * feed.page_size + 1, feed.head_seq)
            found = recovery.recoverable(
                self._archived_page_renderer(feed),
                batch,
                stored={e.seq: e for e in stored},
                stored_seqs={s.id: s.seq for s in append.found.values()},
                page_size=feed.page_size,
                locator_base=self.urls(feed_name).locator_base,
                prev_sha256=self._page_sha256(feed, frozen, append.page),
                following=after[0] if after else None,
            )
            pages = [
                FrozenPage(feed.id, file.number, body, archive.strong_etag(body), file.mtime_us)
                for file, body in found.pages
            ]
            new = [(e, self._pending(e)) for e in found.entries if e.seq > feed.head_seq]
            if new:
                append.write(
                    new,
                    modified_us=max(self.clock(), feed.modified_us + 1),
                    pages=pages,
                    base_url=self.settings.base_url,
                )
        if pages:
            newest = pages[-1]
            self._digests[feed.id] = (newest.number, archive.page_sha256(newest))
            self._self_hrefs[feed.id] = (newest.number, self.urls(feed_name).page(newest.number))
            self.changes.committed()
        return pages, len(new), found.problem

    def _files_written(
        self, feed_name: str, pages: Iterable[FrozenPage]
    ) -> tuple[int, list[Path], list[str]]:
        """Write the page files and copies of ``pages`` that are missing or hold other bytes:
        how many pages there were, the files written, and those that could not be, each as
        "PATH: why" (the others go on)."""
        count = 0
        written: list[Path] = []
        unwritten: list[str] = []
        for page in pages:
            count += 1
            path = self.page_path(feed_name, page.number)
            try:
                written += archive.ensure_files(path, page)
            except OSError as exc:
                unwritten.append(f"{path}: {exc.strerror or exc}")
        return count, written, unwritten

    @staticmethod
    def _pending(entry: Entry) -> PendingEntry:
        fingerprint, data = entry.event.canonical()
        return PendingEntry(entry.id, entry.event, entry.published_us, fingerprint, data)

    def page_entries(self, feed: Feed, number: int) -> list[Entry]:
        """The entries of page ``number`` as stored, newest first (the pages for people)."""
        first, last = paging.seq_range(number, feed.page_size)
        return self.store.entries_between(feed.id, first, min(last, feed.head_seq))

    def rerender(self, feed: Feed, number: int) -> bytes:
        """Render archived page ``number`` again from its entries (to check determinism)."""
        first, last = paging.seq_range(number, feed.page_size)
        entries = self.store.entries_between(feed.id, first, last)
        prev = self._page_sha256(feed, number - 1)
        return atom.render(self._document(feed, "archive", number, tuple(entries), prev))

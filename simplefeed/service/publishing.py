"""Publishing: appending events to a feed and archiving every page they fill."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence

from simplefeed import atom, metrics
from simplefeed.errors import (
    AuthError,
    BaseUrlMismatch,
    DefaultFeedMismatch,
    FeedRetired,
    InvalidEvent,
    StorageLow,
    StoreError,
)
from simplefeed.model import Appended, ArchivedPage, Event, Feed, PendingEntry
from simplefeed.rules import appending, auth, paging
from simplefeed.rules import feeds as rules
from simplefeed.service.chain import Chain
from simplefeed.service.changes import Changes
from simplefeed.service.clock import Clock
from simplefeed.service.groups import Groups
from simplefeed.service.health import Health
from simplefeed.service.pages import Pages
from simplefeed.service.tokens import Tokens
from simplefeed.settings import Settings
from simplefeed.store import Appending, Store, TokenCheck

__all__ = ["Publishing"]

log = logging.getLogger(__name__)


class _QuickOutcome(enum.Enum):
    """Why the one-round-trip append returned no entries."""

    GAVE_WAY = "gave way"  # nothing appended: it does not apply
    OUTCOME_UNKNOWN = "outcome unknown"  # it failed, perhaps after its commit


class _Publish:
    """A single-event publish on its way to its feed's group (:class:`Groups`)."""

    __slots__ = ("credentials", "now", "pending")

    def __init__(
        self, pending: Sequence[PendingEntry], now: int, credentials: auth.Credentials | None
    ) -> None:
        self.pending = pending
        self.now = now
        self.credentials = credentials


class Publishing:
    """Appends events under the feed's lock, all or nothing."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        chain: Chain,
        pages: Pages,
        health: Health,
        tokens: Tokens,
        changes: Changes,
        clock: Clock,
        new_uuid: Callable[[], str],
    ) -> None:
        self.settings = settings
        self.store = store
        self.chain = chain
        self.pages = pages
        self.health = health
        self.tokens = tokens
        self.changes = changes
        self.clock = clock
        self.new_uuid = new_uuid
        #: Feeds by name as this process last locked them. Only their identity is used (id,
        #: name, page size never change), never their head.
        self._feeds: dict[str, Feed] = {}
        self._groups: Groups[_Publish, list[Appended]] = Groups()

    def publish(
        self,
        feed_name: str,
        events: Sequence[Event],
        *,
        credentials: auth.Credentials | None = None,
    ) -> list[Appended]:
        """Append events to a feed, all or nothing, archiving every page they fill.

        With ``credentials``, nothing is appended unless the token may publish to the feed.
        :mod:`simplefeed.rules.appending` decides replays and conflicts under the lock.
        """
        space = self.health.space_problems()  # a full disk is met here, not halfway through
        if space:
            raise StorageLow("; ".join(space))
        # The lock serialises every appender of the feed, on every node. Work that does not
        # need the feed's head happens before it, because work under it bounds the append rate.
        now = self.clock()
        pending = appending.pending_entries(events, now, self._new_entry_id)
        locator_base = self.chain.urls(feed_name).locator_base
        self.refuse_too_large(feed_name, pending, locator_base, credentials)
        if len(pending) != 1:
            return self._append(feed_name, pending, now, credentials)
        # A single event joins the publishes to the feed under way, if any (group commit).
        publish = _Publish(pending, now, credentials)
        return self._groups.run(
            feed_name,
            publish,
            lambda p: self._append(feed_name, p.pending, p.now, p.credentials),
            lambda group: self._append_together(feed_name, group),
        )

    def _append(
        self,
        feed_name: str,
        pending: Sequence[PendingEntry],
        now: int,
        credentials: auth.Credentials | None,
    ) -> list[Appended]:
        """Append one publish's events in a transaction of their own."""
        # The ids to look up under the lock: the producer's, to answer replays and conflicts.
        look_up = [p.id for p in pending if p.event.id is not None]
        if pending and appending.ids_are_distinct(pending):
            quick = self._in_one_round_trip(feed_name, pending, now, credentials)
            if isinstance(quick, list):
                self.changes.committed()
                metrics.appends_committed(feed_name, 1)
                return quick
            if quick is _QuickOutcome.OUTCOME_UNKNOWN:
                # It may have appended the events before it failed: look them all up.
                look_up = [p.id for p in pending]
        if credentials is not None:
            self.tokens.check(credentials, feed_name)
        # Entries that may fill a page are written now, so that under the lock the page is
        # only put together. Their `updated` and number are filled in there.
        parts: dict[str, atom.EntryParts] = {}
        if len(pending) > 1:
            locator_base = self.chain.urls(feed_name).locator_base
            parts = {p.id: atom.entry_parts(p, locator_base) for p in pending}
        with self.store.append(feed_name, look_up) as append:
            self._feeds[feed_name] = append.feed
            if append.feed.retired_us is not None:
                raise FeedRetired(feed_name)
            decision = appending.decide(append.feed, pending, append.found, now)
            pages = self._archive(append, decision, now, parts)
            base_url = self.settings.base_url if pages else append.feed.base_url
            append.write(
                decision.new, modified_us=decision.modified_us, pages=pages, base_url=base_url
            )
        self._committed(append.feed, decision, pages)
        metrics.appends_committed(feed_name, 1)
        return list(decision.results)

    def _append_together(
        self, feed_name: str, group: Sequence[_Publish]
    ) -> list[list[Appended] | BaseException]:
        """Append a group of publishes in one transaction, each answered as if alone.

        :func:`appending.decide_group` decides each in turn, so a replay or a conflict inside
        the group keeps its meaning, and a refused publish writes nothing and leaves the others
        be. Where every publish carries the same token (one producer's threads, say), the
        one-round-trip append checks it; else each distinct token is checked once here.
        """
        everything = [p for publish in group for p in publish.pending]
        now = max(publish.now for publish in group)
        tokens = {publish.credentials for publish in group}
        look_up: list[PendingEntry] = []
        if len(tokens) == 1 and appending.ids_are_distinct(everything):
            (credentials,) = tokens
            quick = self._in_one_round_trip(feed_name, everything, now, credentials)
            if isinstance(quick, list):
                self.changes.committed()
                metrics.appends_committed(feed_name, len(group))
                answers = iter(quick)
                return [[next(answers) for _ in publish.pending] for publish in group]
            if quick is _QuickOutcome.OUTCOME_UNKNOWN:
                look_up = everything  # it may have appended them all before it failed
        refused: dict[auth.Credentials, AuthError] = {}
        for credentials in tokens:
            if credentials is not None:
                try:
                    self.tokens.check(credentials, feed_name)
                except AuthError as exc:
                    refused[credentials] = exc
        allowed = [publish for publish in group if publish.credentials not in refused]
        outcomes = iter(self._append_checked(feed_name, allowed, now, look_up) if allowed else [])
        return [
            refused[publish.credentials] if publish.credentials in refused else next(outcomes)
            for publish in group
        ]

    def _append_checked(
        self,
        feed_name: str,
        group: Sequence[_Publish],
        now: int,
        look_up: list[PendingEntry],
    ) -> list[list[Appended] | BaseException]:
        """Append a group whose tokens were checked, the ordinary way, looking up the
        producers' ids and those of ``look_up``."""
        everything = [p for publish in group for p in publish.pending]
        ids = {p.id for p in everything if p.event.id is not None} | {p.id for p in look_up}
        with self.store.append(feed_name, ids) as append:
            self._feeds[feed_name] = append.feed
            if append.feed.retired_us is not None:
                raise FeedRetired(feed_name)
            decided = appending.decide_group(
                append.feed, [publish.pending for publish in group], append.found, now
            )
            decision = decided.combined
            pages = self._archive(append, decision, now, {})
            base_url = self.settings.base_url if pages else append.feed.base_url
            append.write(
                decision.new, modified_us=decision.modified_us, pages=pages, base_url=base_url
            )
        self._committed(append.feed, decision, pages)
        metrics.appends_committed(feed_name, len(group))
        return [o if isinstance(o, BaseException) else list(o) for o in decided.outcomes]

    def _archive(
        self,
        append: Appending,
        decision: appending.Decision,
        now: int,
        parts: Mapping[str, atom.EntryParts],
    ) -> list[ArchivedPage]:
        """Render every page the append fills, for the append to store (under the lock)."""
        if not decision.full_pages:
            return []
        self._check_links(append)
        # Each page records the digest of the one before it: the first from the store, then
        # each from the page archived just before it, in memory.
        pages: list[ArchivedPage] = []
        for number in decision.full_pages:
            prev = pages[-1].sha256 if pages else self.chain.sha256(append.feed, number - 1, append)
            pages.append(self._render_page(append, number, now, decision, parts, prev))
        return pages

    def _check_links(self, append: Appending) -> None:
        """Refuse to archive a page that links elsewhere than the pages before it.

        Another process may have started with another base URL or default feed since the
        feed's last page was archived, and its start-up check could not see that page.
        """
        problem = rules.base_url_problem(append.feed, self.settings.base_url)
        if problem is not None:
            raise BaseUrlMismatch([problem])
        href = self.chain.newest_self_href(append.feed, append)
        problem = rules.default_feed_problem(append.feed, href, self.settings.default_feed)
        if problem is not None:
            raise DefaultFeedMismatch([problem])

    def _render_page(
        self,
        append: Appending,
        number: int,
        now_us: int,
        decision: appending.Decision,
        parts: Mapping[str, atom.EntryParts],
        prev_sha256: str | None,
    ) -> ArchivedPage:
        """Render page ``number``, which the append fills.

        The entries appended now are rendered from memory, from ``parts`` where prepared. Only
        a replayed id's stored entry may differ in its ``published``, so parts serve new
        entries only. Older entries of the page are read back in the append's transaction.
        """
        feed = append.feed
        first, last = paging.seq_range(number, feed.page_size)
        fresh = {entry.seq: entry for entry, _ in decision.new}
        entries = [fresh[seq] for seq in range(last, max(first, feed.head_seq + 1) - 1, -1)]
        ready = {e.id: parts[e.id] for e in entries if e.id in parts}
        if first <= feed.head_seq:
            entries += append.entries_between(first, feed.head_seq)
        body = self.chain.render(feed, "archive", number, tuple(entries), prev_sha256, ready)
        return ArchivedPage(feed.id, number, body, now_us)

    def _committed(
        self, feed: Feed, decision: appending.Decision, pages: Sequence[ArchivedPage]
    ) -> None:
        """What follows an append's commit: the pages' files, then the waiting consumers."""
        if pages:
            self.chain.archived(feed, pages[-1])
        if decision.replayed and not decision.new:
            # Nothing was written, so nothing was flushed. The stored entry may be an append
            # committed a moment ago whose WAL is not on disk yet: answer once it is.
            self.store.flush_barrier()
        for page in pages:
            self.pages.write(feed.name, page)
        if decision.new:  # consumers learn of it once its pages' files are written
            self.changes.committed()
        metrics.pages_frozen(feed.name, len(pages))
        if pages and pages[0].number == 1:
            try:
                self.store.analyze_entries_once()
            except StoreError:
                log.warning("could not analyse the entries table", exc_info=True)

    def refuse_too_large(
        self,
        feed_name: str,
        pending: Sequence[PendingEntry],
        locator_base: str,
        credentials: auth.Credentials | None,
    ) -> None:
        """Refuse the batch if an entry would take more than its share of a page.

        No page is ever larger than a consumer reads. Only an entry the cheap bound leaves in
        doubt is written out to be measured. The feed's page size comes from the feed as this
        process last appended to it, else from a lookup after the token's check, so that a
        token's holder learns nothing of a feed it may not publish to.
        """
        known = self._feeds.get(feed_name)
        page_size = known.page_size if known is not None else None
        limit = atom.max_entry_bytes(page_size) if page_size is not None else None
        for index, p in enumerate(pending):
            bound = atom.entry_bytes_bound(p.data, locator_base)
            if limit is not None and bound <= limit:
                continue
            if page_size is None:
                if credentials is not None:
                    self.tokens.check(credentials, feed_name)
                page_size = self.store.feed(feed_name).page_size
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

    def _in_one_round_trip(
        self,
        feed_name: str,
        pending: Sequence[PendingEntry],
        now: int,
        credentials: auth.Credentials | None,
    ) -> list[Appended] | _QuickOutcome:
        """The common append in one round trip, where the store can do it.

        New events that stay within the working page are numbered by the database under the
        feed's lock (:meth:`Store.append_in_one_round_trip`). Otherwise nothing was appended
        (``GAVE_WAY``), or it failed and may have appended (``OUTCOME_UNKNOWN``). The ordinary
        way then answers replays and conflicts, and archives the pages an append fills.
        """
        known = self._feeds.get(feed_name)
        if not self.store.one_round_trip or known is None or len(pending) >= known.page_size:
            # Not possible here, the feed not seen yet in this process, or sure to fill a page.
            return _QuickOutcome.GAVE_WAY
        token = (
            TokenCheck(credentials.token_id, auth.hash_secret(credentials.secret))
            if credentials is not None
            else None
        )
        try:
            head = self.store.append_in_one_round_trip(known, pending, now_us=now, token=token)
        except StoreError:
            # A dropped connection, say. The ordinary way either appends the events or finds
            # them appended, because their ids are fixed before either path.
            log.warning("one-round-trip append failed; appending the ordinary way", exc_info=True)
            return _QuickOutcome.OUTCOME_UNKNOWN
        if head is None:
            return _QuickOutcome.GAVE_WAY
        return appending.appended_after(pending, head, known.page_size)

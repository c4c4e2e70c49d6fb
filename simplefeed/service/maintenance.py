"""The operator's commands on the archive: rebuild, verify, rebase and recover."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from simplefeed import archive, atom
from simplefeed.errors import ArchiveUnreadable, FeedNotFound, PageConflict, StoreError
from simplefeed.model import ArchivedPage, Entry, Feed, PageRecord, PendingEntry
from simplefeed.rules import feeds as rules
from simplefeed.rules import paging
from simplefeed.service import recovery
from simplefeed.service.chain import Chain
from simplefeed.service.changes import Changes
from simplefeed.service.clock import Clock
from simplefeed.service.health import Health
from simplefeed.service.pages import Pages
from simplefeed.settings import FEED_NAME_RE, Settings
from simplefeed.store import Store

__all__ = ["RECOVERY_BATCH", "Maintenance", "Rebased", "Recovered"]

#: Page files ``archive recover`` reads and stores in one transaction. Its memory holds about
#: this many pages' bytes and entries.
RECOVERY_BATCH = 64


@dataclass(frozen=True)
class Rebased:
    """What ``simplefeed archive rebase`` did to one feed."""

    feed: str
    #: The base URL the pages were rendered with before (None if none was recorded).
    old_base_url: str | None
    base_url: str
    #: Archived pages rendered again, and how many of them came out with other bytes.
    pages: int
    changed: int
    #: The URLs whose copies in caches are now stale: every archived page and the live
    #: documents, under the old base URL and the new one.
    purge: list[str]
    #: Page files that could not be written. Their entries render them, so ``archive
    #: rebuild`` writes them.
    unwritten: list[str]


@dataclass(frozen=True)
class Recovered:
    """What ``simplefeed archive recover`` did to one feed."""

    feed: str
    #: The pages taken back from their files into the database. If none, the range is empty.
    pages: range
    #: Entries stored, those of the pages that the database did not hold.
    entries: int
    #: Why the page file after them could not be taken back. None if there is no such file.
    problem: str | None
    #: Page files or copies that could not be written. ``archive rebuild`` writes them.
    unwritten: list[str]
    #: Page files and copies written again from the bytes taken back, as damaged or missing.
    written: list[Path] = field(default_factory=list)
    #: Whether the feed was created again as its first page says, because the database lacked it.
    created: bool = False


class Maintenance:
    """Rebuild, verify, rebase and recover the archive of archived pages."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        chain: Chain,
        pages: Pages,
        health: Health,
        changes: Changes,
        clock: Clock,
    ) -> None:
        self.settings = settings
        self.store = store
        self.chain = chain
        self.pages = pages
        self.health = health
        self.changes = changes
        self.clock = clock

    def _feeds(self, feed_name: str | None) -> list[Feed]:
        return [self.store.feed(feed_name)] if feed_name else self.store.feeds()

    # -- rebuild, verify, rerender -------------------------------------------------------

    def rebuild(self, feed_name: str | None = None) -> archive.RebuildReport:
        """Write every page file that is missing or lacks the database's digest, rendered again
        from its entries.

        It also removes the temporary files that a crash left behind. A page whose files
        cannot be written is named in the report, and the others go on. It is refused while a
        feed's pages would be written where another feed's are. With a bucket
        (SIMPLEFEED_ARCHIVE_URL), every page it lacks, or holds without a copy, is put there.
        """
        self.health.check_default_feed_pages()
        checked = 0
        restored: list[Path] = []
        removed: list[Path] = []
        unwritten: list[str] = []
        for feed in self._feeds(feed_name):
            removed += archive.remove_stale_temp_files(self.pages.path(feed.name, 1).parent)
            count, written, failed = self.pages.ensure_recorded(
                feed, self.store.iter_pages(feed.id)
            )
            checked += count
            restored += written
            unwritten += failed
        uploaded: list[str] = []
        if self.pages.uploads.enabled:
            for feed in self._feeds(feed_name):
                put, failed = self._rebuild_bucket(feed)
                uploaded += put
                unwritten += failed
        return archive.RebuildReport(checked, restored, removed, unwritten, uploaded)

    def _rebuild_bucket(self, feed: Feed) -> tuple[list[str], list[str]]:
        """Put in the bucket each of the feed's pages it lacks or holds without a copy: the
        places put, and the pages that could not be, one line each."""
        uploaded: list[str] = []
        failed: list[str] = []
        for record in self.store.iter_pages(feed.id):
            key = self.pages.key(feed.name, record.number)
            try:
                where = self.pages.uploads.ensure(key, self.pages.recorded_bytes(feed, record))
            except (StoreError, PageConflict) as exc:
                failed.append(str(exc))
                continue
            if where is not None:
                uploaded.append(where)
        return uploaded, failed

    def verify(self, feed_name: str | None = None) -> archive.VerifyReport:
        """Check every page file against the database, and write nothing.

        Each file must hold bytes with the database's digest, and each page's prev-archive
        digest must be the digest of the page before. No file may hold a page that is not
        archived, or a page of a feed the database does not have. What stops the check is
        raised, never reported as a difference. One such stop is a directory that holds no page
        file while the database has archived pages. It is most likely the wrong directory.
        Another is a file that cannot be read.
        """
        feeds = self._feeds(feed_name)
        root = self.settings.archive_dir
        try:
            if root.exists() and not root.is_dir():
                raise ArchiveUnreadable(root, "not a directory (SIMPLEFEED_ARCHIVE_DIR)")
            pages = sum(paging.working_page(f.head_seq, f.page_size) - 1 for f in feeds)
            empty = archive.empty_archive_problem(root, archive.holds_files(root), pages)
            if empty is not None:
                raise ArchiveUnreadable(root, empty)
            problems = self._unknown_feeds(feeds) if feed_name is None else []
            checked = 0
            for feed in feeds:
                count, found = self._verify_feed(feed)
                checked += count
                problems += found
            return archive.VerifyReport(checked, problems)
        except OSError as exc:  # A file that is not there is a difference, said as one.
            path = Path(exc.filename) if exc.filename else root
            raise ArchiveUnreadable(path, f"cannot be read ({exc.strerror or exc})") from exc

    def _unknown_feeds(self, feeds: Sequence[Feed]) -> list[str]:
        """List the archive's files of feeds the database does not have, each as a problem."""
        problems = []
        known = {f.name for f in feeds}
        for directory in sorted((self.settings.archive_dir / "feeds").glob("*")):
            if directory.name not in known:
                problems.append(
                    f"{directory}: files of a feed the database does not have"
                    " (`simplefeed archive recover` takes its pages back; or remove them)"
                )
        default = self.settings.default_feed
        if default not in known and self.pages.path(default, 1).exists():
            # The default feed's pages are not under feeds/, so they need a check of their own.
            problems.append(self.health.lost_feed_sentence(default))
        return problems

    def _verify_feed(self, feed: Feed) -> tuple[int, list[str]]:
        """Return how many of the feed's pages were checked, and what differs."""
        checked = 0
        problems: list[str] = []
        before: PageRecord | None = None
        for page in self.store.iter_pages(feed.id):
            checked += 1
            path = self.pages.path(feed.name, page.number)
            try:
                on_disk: bytes | None = path.read_bytes()
            except FileNotFoundError:
                on_disk = None
            found = archive.record_problems(path, page, on_disk)
            problems += found
            if self.pages.uploads.enabled:
                problems += self._bucket_problems(feed, page, None if found else on_disk)
            if on_disk is not None and not found and before is not None:
                # The file is the page the database records: its link to the page before
                # must give that page's recorded digest.
                given = atom.prev_archive_sha256(on_disk)
                problem = archive.chain_problem(before, page, given)
                if problem is not None:
                    problems.append(f"feed {feed.name!r}: {problem}")
            before = page
        archived = before.number if before is not None else 0
        strays = archive.stray_files(self.pages.path(feed.name, 1).parent, archived)
        missing, _ = archive.past_gap(strays, archived)
        for number, path in strays:
            problems.append(
                f"{path}: feed {feed.name!r} has no archived page {number}"
                + (
                    f" (nor the archive page {missing}, so `simplefeed archive recover`"
                    " cannot take it back: restore the archive's missing page files from"
                    " a backup of it, or move it aside)"
                    if number > missing
                    else " (`simplefeed archive recover` takes it back)"
                )
            )
        return checked, problems

    def _bucket_problems(self, feed: Feed, record: PageRecord, body: bytes | None) -> list[str]:
        """How the bucket's copy of a page differs from it (``body``: its bytes if known)."""
        try:
            body = self.pages.recorded_bytes(feed, record) if body is None else body
        except StoreError as exc:
            return [str(exc)]
        return self.pages.uploads.problems(self.pages.key(feed.name, record.number), body)

    def rerender(self, feed: Feed, number: int) -> bytes:
        """Render archived page ``number`` again from its entries, to check determinism."""
        return self.chain.render_archived(feed, number)

    # -- rebase --------------------------------------------------------------------------

    def rebase(self, feed_name: str | None = None) -> list[Rebased]:
        """Render every archived page again with the configured base URL, and record it.

        Each feed is one transaction that holds its appends off. Its pages are rendered in
        order, each with the digest of the one before as now rendered, so the chain holds. New
        bytes mean new ETags. The Last-Modified becomes now, so that no If-Modified-Since
        confirms an old copy. A failure rolls the feed back whole. It is refused while a feed's
        pages would move to another feed's URLs.
        """
        self.health.check_default_feed_pages()
        done: list[Rebased] = []
        for listed in self._feeds(feed_name):
            with self.store.rebase(listed.name, self.settings.base_url) as rebasing:
                feed = rebasing.feed
                archived = paging.working_page(feed.head_seq, feed.page_size) - 1
                now = self.clock()
                prev: str | None = None
                changed = 0
                for number in range(1, archived + 1):
                    first, last = paging.seq_range(number, feed.page_size)
                    entries = tuple(rebasing.entries_between(first, last))
                    body = self.chain.render(feed, "archive", number, entries, prev)
                    page = ArchivedPage(feed.id, number, body, now)
                    old = rebasing.page(number)
                    if old is None or old.sha256 != page.sha256:
                        changed += 1
                        rebasing.replace_page(page)
                    prev = page.sha256
            self.chain.forget(feed)
            _, _, unwritten = self.pages.ensure_recorded(feed, self.store.iter_pages(feed.id))
            bases = [feed.base_url, self.settings.base_url] if changed else []
            done.append(
                Rebased(
                    feed=feed.name,
                    old_base_url=feed.base_url,
                    base_url=self.settings.base_url,
                    pages=archived,
                    changed=changed,
                    purge=rules.purge_urls(feed, bases, self.settings.default_feed, archived),
                    unwritten=unwritten,
                )
            )
        return done

    # -- recover -------------------------------------------------------------------------

    def recover(self, feed_name: str | None = None) -> list[Recovered]:
        """Take back into the database the pages whose files are past its archived pages.

        A database restored from a backup older than the archive lacks them. Each page is taken
        back in order. The entries read from its file must render to the file's bytes. And the
        next page file must vouch for them (:func:`recovery.recoverable`). The first page that
        cannot be taken back stops the feed. A feed the database lacks is created again as its
        first page says. Pages go :data:`RECOVERY_BATCH` to a transaction, so memory stays
        bounded.
        """
        done: list[Recovered] = []
        known = {f.name: f for f in self.store.feeds()}
        names = [feed_name] if feed_name else [*known, *self.health.feeds_only_in_archive(known)]
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

    def _feed_from_archive(self, name: str) -> Feed | str:
        """Create feed ``name`` again as its first page file says, or say why it cannot be.

        The page must be one that can be taken back. Raises :class:`FeedNotFound` if there is
        no such file.
        """
        path = self.pages.path(name, 1)
        if not FEED_NAME_RE.match(name) or not path.is_file():
            raise FeedNotFound(name)
        not_there = f"the database does not have the feed, and {path}"
        files = self._page_files(name, 1, 2)
        try:
            head = atom.feed_head(files[0].bodies[0])
        except atom.PageUnreadable as exc:
            return f"{not_there} {exc}"
        feed = Feed(0, name, head.uuid, head.title, head.page_size, head.created_us, 0, None, 0)
        elsewhere = self._written_elsewhere(name, files[0])
        if elsewhere is not None:
            return f"{not_there}: {elsewhere}"
        found = recovery.recoverable(
            self._renderer(feed),
            files[:1],
            stored={},
            stored_seqs={},
            page_size=head.page_size,
            locator_base=self.chain.urls(name).locator_base,
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
        """Say why a page file says it is at another URL than this service gives it, or None.

        That mistake makes every page fail to render alike, so it is said as what to set.
        """
        href = atom.self_href(file.bodies[0])
        here = self.chain.urls(feed_name).page(file.number)
        if href is None or href == here:
            return None
        return (
            f"page {file.number} says it is at {href}, and this service would put it at {here}:"
            " run it with the SIMPLEFEED_BASE_URL (and SIMPLEFEED_DEFAULT_FEED) the pages were"
            " written with"
        )

    def _renderer(self, feed: Feed) -> recovery.Render:
        def render(number: int, entries: tuple[Entry, ...], prev: str | None) -> bytes:
            return self.chain.render(feed, "archive", number, entries, prev)

        return render

    def _page_files(self, feed_name: str, first: int, most: int) -> list[recovery.PageFile]:
        """Return up to ``most`` consecutive page files of the feed from page ``first``.

        A page whose file is gone but whose compressed copy is there counts.
        """
        found = []
        for number in range(first, first + most):
            path = self.pages.path(feed_name, number)
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
        """Recover one feed, batch after batch."""
        numbers: list[int] = []
        entries = 0
        written: list[Path] = []
        unwritten: list[str] = []
        problem: str | None = None
        archived = feed.head_seq // feed.page_size
        files = self._page_files(feed.name, archived + 1, RECOVERY_BATCH + 1)
        while problem is None and files:
            problem = self._written_elsewhere(feed.name, files[0])
            if problem is not None:
                break
            pages, stored, problem = self._recover_batch(feed.name, files)
            numbers += (p.number for p in pages)
            entries += stored
            _, done, failed = self.pages.ensure(feed.name, pages)
            written += done
            unwritten += failed
            if len(files) <= RECOVERY_BATCH:
                break
            # The file after the batch, read to vouch for its last page, starts the next one.
            after = files[RECOVERY_BATCH]
            files = [after, *self._page_files(feed.name, after.number + 1, RECOVERY_BATCH)]
        if problem is None:
            # Pages past a gap stay. They are said, because the service does not start while
            # they are there.
            problem = self.health.past_gap(feed.name, numbers[-1] if numbers else archived)
        pages_range = range(numbers[0], numbers[-1] + 1) if numbers else range(0)
        return Recovered(feed.name, pages_range, entries, problem, unwritten, written)

    def _recover_batch(
        self, feed_name: str, files: list[recovery.PageFile]
    ) -> tuple[list[ArchivedPage], int, str | None]:
        """Take back what can be of the first :data:`RECOVERY_BATCH` files, in one transaction.

        The file after them, if given, vouches for the last. Returns the pages stored, how many
        entries were stored, and why the next page could not be taken back.
        """
        batch, after = files[:RECOVERY_BATCH], files[RECOVERY_BATCH:]
        ids: dict[str, None] = {}  # Of the files and their copies, since any may be taken back.
        for body in (body for file in batch for body in file.bodies):
            ids.update(dict.fromkeys(archive.entry_ids(body)))
        with self.store.append(feed_name, ids) as append:
            feed = append.feed
            archived = feed.head_seq // feed.page_size
            if batch[0].number != archived + 1:
                raise StoreError(f"feed {feed_name!r} changed while it was read: run it again")
            stored = append.entries_between(archived * feed.page_size + 1, feed.head_seq)
            found = recovery.recoverable(
                self._renderer(feed),
                batch,
                stored={e.seq: e for e in stored},
                stored_seqs={s.id: s.seq for s in append.found.values()},
                page_size=feed.page_size,
                locator_base=self.chain.urls(feed_name).locator_base,
                prev_sha256=self.chain.sha256(feed, archived, append),
                following=after[0] if after else None,
            )
            pages = [
                ArchivedPage(feed.id, file.number, body, file.mtime_us)
                for file, body in found.pages
            ]
            new = [(e, _pending(e)) for e in found.entries if e.seq > feed.head_seq]
            if new:
                append.write(
                    new,
                    modified_us=max(self.clock(), feed.modified_us + 1),
                    pages=pages,
                    base_url=self.settings.base_url,
                )
        if pages:
            self.chain.archived(feed, pages[-1])
            self.changes.committed()
        return pages, len(new), found.problem


def _pending(entry: Entry) -> PendingEntry:
    fingerprint, data = entry.event.canonical()
    return PendingEntry(entry.id, entry.event, entry.published_us, fingerprint, data)

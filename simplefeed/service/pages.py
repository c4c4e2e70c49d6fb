"""Page files: writing archived pages to the archive, and the files kept or left unwritten."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from simplefeed import archive
from simplefeed.archive.store import page_key
from simplefeed.errors import StoreError
from simplefeed.model import ArchivedPage, Feed, PageRecord
from simplefeed.service.chain import Chain
from simplefeed.service.uploads import Uploads
from simplefeed.settings import Settings
from simplefeed.store import Store

__all__ = ["UNWRITTEN_KEPT", "Pages"]

log = logging.getLogger(__name__)

#: The most unwritten page files a process remembers for /healthz. The log says the others.
UNWRITTEN_KEPT = 100


class Pages:
    """Writes archived pages to their files, and remembers the files it could not write.

    A page is committed before its file is written, so a failed write loses nothing. The
    database records its digest, and its entries render it again, byte for byte. The app
    serves it so meanwhile, and writes its file on the next request.
    """

    def __init__(self, settings: Settings, store: Store, chain: Chain) -> None:
        self.settings = settings
        self.store = store
        self.chain = chain
        #: The bucket's side (SIMPLEFEED_ARCHIVE_URL): each page written waits for it.
        self.uploads = Uploads(settings)
        #: Files found holding another page than the database's, kept: (feed, feed id, number).
        self._kept: set[tuple[str, int, int]] = set()
        #: Files this process could not write, with the error, until they are there.
        self._unwritten: dict[tuple[str, int, int], str] = {}

    def key(self, feed_name: str, number: int) -> str:
        """The page's key in a bucket: its URL path, as its path in the directory."""
        return page_key(feed_name, self.settings.default_feed, number)

    def path(self, feed_name: str, number: int) -> Path:
        """Where page ``number`` of the feed lives in the archive."""
        return archive.page_path(
            self.settings.archive_dir, feed_name, self.settings.default_feed, number
        )

    def write(self, feed_name: str, page: ArchivedPage) -> bool:
        """Write the page's file and copies; whether they are written.

        A file holding another page, of other entries, is kept and said. Readers and caches may
        hold that page already, and its entries may be nowhere else (a database restored from
        an older backup). ``archive rebuild`` is the operator's way to replace it. A damaged
        file is replaced.
        """
        path = self.path(feed_name, page.number)
        key = (feed_name, page.feed_id, page.number)
        try:
            if archive.holds_another_page(path, page.body):
                self._kept.add(key)
                log.error("%s", _kept_warning(feed_name, page.number, path))
                return False
            archive.write_page(path, page.body, page.frozen_us)
            self.uploads.wait(self.key(feed_name, page.number), page.sha256)
        except OSError as exc:
            log.exception("could not write archive file for %s page %d", feed_name, page.number)
            if len(self._unwritten) < UNWRITTEN_KEPT:
                self._unwritten[key] = exc.strerror or str(exc)
            return False
        self._unwritten.pop(key, None)
        return True

    def read(self, feed: Feed, record: PageRecord) -> ArchivedPage:
        """The archived page ``record`` with its bytes: its file's, if they have its digest,
        else rendered again from its entries (:meth:`Chain.rendered`). A missing file is
        written; a damaged one is the reader's to report and restore (:meth:`restore`)."""
        path = self.path(feed.name, record.number)
        try:
            body = path.read_bytes()
        except FileNotFoundError:
            page = self.chain.rendered(feed, record)
            self.write(feed.name, page)
            return page
        if archive.sha256(body) == record.sha256:
            return ArchivedPage(feed.id, record.number, body, record.frozen_us)
        return self.chain.rendered(feed, record)

    def restore(self, feed_name: str, page: ArchivedPage) -> None:
        """Write the page's file again, because it was found damaged."""
        if self.write(feed_name, page):
            log.warning(
                "wrote the file of %s page %d again from its entries", feed_name, page.number
            )

    def ensure(
        self, feed_name: str, pages: Iterable[ArchivedPage]
    ) -> tuple[int, list[Path], list[str]]:
        """Write each page file and copy that is missing or holds other bytes.

        Returns how many pages there were, the files written, and the files that could not be
        written, each as "PATH: why". A failure does not stop the others.
        """
        count = 0
        written: list[Path] = []
        unwritten: list[str] = []
        for page in pages:
            count += 1
            path = self.path(feed_name, page.number)
            try:
                done = archive.ensure_files(path, page)
                if path in done:
                    self.uploads.wait(self.key(feed_name, page.number), page.sha256)
                written += done
            except OSError as exc:
                unwritten.append(f"{path}: {exc.strerror or exc}")
        return count, written, unwritten

    def ensure_recorded(
        self, feed: Feed, records: Iterable[PageRecord]
    ) -> tuple[int, list[Path], list[str]]:
        """:meth:`ensure` for the pages the database records: a file without the recorded
        digest is written from the page rendered again from its entries. A page that renders
        to other bytes is left as it is and said as unwritten."""
        count = 0
        written: list[Path] = []
        unwritten: list[str] = []
        for record in records:
            path = self.path(feed.name, record.number)
            try:
                body = archive.read_if_recorded(path, record)
            except OSError:  # (then writing it fails too, and says why)
                body = None
            try:
                page = (
                    self.chain.rendered(feed, record)
                    if body is None
                    else ArchivedPage(feed.id, record.number, body, record.frozen_us)
                )
            except StoreError as exc:
                count += 1
                unwritten.append(f"{path}: {exc}")
                continue
            done = self.ensure(feed.name, [page])
            count += done[0]
            written += done[1]
            unwritten += done[2]
        return count, written, unwritten

    def recorded_bytes(self, feed: Feed, record: PageRecord) -> bytes:
        """The page's bytes: its file's if they have its digest, else rendered again
        (:class:`StoreError` if the render has another digest)."""
        try:
            body = archive.read_if_recorded(self.path(feed.name, record.number), record)
        except OSError:
            body = None
        return self.chain.rendered(feed, record).body if body is None else body

    def unwritten_problems(self) -> list[str]:
        """The page files this process could not write and that are still not right.

        A disk that fills up between two health checks is said here, not only in the log.
        """
        found = []
        for key, error in sorted(self._unwritten.items()):
            feed_name, feed_id, number = key
            path = self.path(feed_name, number)
            if not self._differs(feed_id, number, path):
                self._unwritten.pop(key, None)
                continue
            found.append(
                f"the file of feed {feed_name!r} page {number} could not be written ({path}:"
                f" {error}); the page is served from the database until it is (a read of it, or"
                " `simplefeed archive rebuild`, writes it)"
            )
        return found

    def conflicts(self) -> list[tuple[str, str | None]]:
        """The kept page files that still differ from the database: (subject, warning)."""
        found: list[tuple[str, str | None]] = []
        for feed_name, feed_id, number in sorted(self._kept):
            path = self.path(feed_name, number)
            if not self._differs(feed_id, number, path):
                self._kept.discard((feed_name, feed_id, number))
                continue
            found.append((f"file {feed_name} {number}", _kept_warning(feed_name, number, path)))
        return found

    def _differs(self, feed_id: int, number: int, path: Path) -> bool:
        """Whether the file at ``path`` is not archived page ``number`` as recorded."""
        record = self.store.page(feed_id, number)
        return record is not None and archive.read_if_recorded(path, record) is None


def _kept_warning(feed_name: str, number: int, path: Path) -> str:
    return (
        f"{path.resolve()} holds another page {number} of feed {feed_name!r} than the"
        " database's, kept (readers and caches may hold it, and its entries may be nowhere"
        " else: the database restored from an older backup?); the service sends the"
        " database's; `simplefeed archive verify` says what differs"
    )

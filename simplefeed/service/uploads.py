"""Archived pages put in the bucket (SIMPLEFEED_ARCHIVE_URL), and the pages that wait for it.

Every archived page is written to the archive directory first, as without a bucket. With
SIMPLEFEED_ARCHIVE_URL set, the page then waits there for the bucket. A marker file
``<archive_dir>/.uploads/<key>`` holds the page's SHA-256, with the key's slashes escaped. Its
modification time says since when it waits. A background thread of each process puts the
waiting pages in the bucket. It goes through the page store's door, a conditional put of
:class:`S3Store`. It removes each marker once the bucket holds the page.

The pages wait in the directory, not in a table. The directory already holds their bytes,
fsynced. The static routes serve them from there meanwhile. A marker is all that waiting adds.
The same process writes it beside the page, with no second commit to the database. So a bucket
outage stops no publish. The freeze is committed and its file written before the bucket is
asked anything. Nothing is lost either, because a marker outlives a crash or a restart. The
next process to freeze a page, answer ``/healthz`` or run ``archive rebuild`` puts the waiting
pages in the bucket.

While the bucket does not answer, the thread tries again (tenacity). Its backoff doubles up to
a minute. A page the bucket holds with other bytes stays waiting and is logged. It needs an
operator, because the bucket's copy is never written over.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path
from urllib.parse import quote, unquote

from tenacity import RetryError, Retrying, retry_if_exception_type, wait_exponential

from simplefeed import archive
from simplefeed.archive.store import PageStore
from simplefeed.errors import ArchiveUnavailable, PageConflict
from simplefeed.settings import Settings

__all__ = ["UPLOADS_DIR", "Uploads", "Waiting"]

log = logging.getLogger(__name__)

#: Where the markers of the pages waiting for the bucket are, in the archive directory. No
#: page URL maps to it, so no static route serves it.
UPLOADS_DIR = ".uploads"
#: The longest pause between two tries while the bucket does not answer, in seconds.
MAX_PAUSE_S = 60.0


class Waiting:
    """How many pages wait for the bucket, and since when the oldest waits.

    The time is in seconds since the epoch. It is None when no page waits.
    """

    def __init__(self, pages: int, since_s: float | None) -> None:
        self.pages = pages
        self.since_s = since_s


class Uploads:
    """Puts archived pages in the bucket, from the markers of those that wait."""

    def __init__(self, settings: Settings, bucket: PageStore | None = None) -> None:
        self.settings = settings
        self.directory = settings.archive_dir / UPLOADS_DIR
        self._bucket = bucket
        self._lock = threading.Lock()
        self._kicked = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        """Whether SIMPLEFEED_ARCHIVE_URL names a bucket."""
        return self.settings.archive_url is not None

    @property
    def bucket(self) -> PageStore:
        """The bucket's page store, made on first use, when boto3 is imported."""
        if self._bucket is None:
            from simplefeed.archive.s3 import S3Store

            assert self.settings.archive_url is not None
            self._bucket = S3Store.from_url(self.settings.archive_url)
        return self._bucket

    def wait(self, key: str, sha256: str) -> None:
        """Mark the page at ``key`` as waiting for the bucket, and wake the putting thread.

        ``sha256`` is the digest of the page's bytes.
        """
        if not self.enabled:
            return
        marker = self.marker(key)
        if not marker.exists():
            archive.write_atomically(marker, sha256.encode() + b"\n", time.time_ns() // 1000)
        self.kick()

    def kick(self) -> None:
        """Wake the thread to put the waiting pages, starting it if it is not running."""
        if not self.enabled:
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stopped.clear()
                self._thread = threading.Thread(
                    target=self._run, name="simplefeed-uploads", daemon=True
                )
                self._thread.start()
        self._kicked.set()

    def stop(self) -> None:
        """Stop the thread. Pages waiting go on waiting, on disk."""
        self._stopped.set()
        self._kicked.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def waiting(self) -> Waiting:
        """How many pages wait, and since when the oldest does."""
        try:
            with os.scandir(self.directory) as entries:
                times = [e.stat().st_mtime for e in entries if not e.name.startswith(".")]
        except FileNotFoundError:
            return Waiting(0, None)
        return Waiting(len(times), min(times) if times else None)

    def put_waiting(self) -> tuple[int, list[str]]:
        """Put every waiting page in the bucket, oldest first.

        Returns how many went, and the pages that cannot go until an operator acts. Each of
        those is one line. Raises :class:`ArchiveUnavailable` when the bucket does not answer.
        The pages not put yet wait on.
        """
        put = 0
        stuck: list[str] = []
        for marker in self._markers():
            key = unquote(marker.name)
            problem = self._put(key, marker)
            if problem is None:
                put += 1
            else:
                stuck.append(problem)
        return put, stuck

    def marker(self, key: str) -> Path:
        """The marker of the page at ``key`` while it waits for the bucket."""
        return self.directory / quote(key, safe="")

    def problems(self, key: str, body: bytes) -> list[str]:
        """How the bucket's page at ``key`` and its copies differ from ``body``.

        A page that waits is reported as waiting.
        """
        marker = self.marker(key)
        if marker.exists():
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(marker.stat().st_mtime))
            return [f"{self.bucket.where(key)}: waits for the bucket since {since}"]
        return self.bucket.problems(key, body)

    def ensure(self, key: str, body: bytes) -> str | None:
        """Put the page ``body`` at ``key`` in the bucket unless it holds it whole.

        Returns where it was put, or None if the bucket held it. Raises :class:`PageConflict`
        if it holds other bytes.
        """
        if not self.bucket.problems(key, body):
            return None
        self.bucket.put(key, body, 0)
        with contextlib.suppress(FileNotFoundError):
            self.marker(key).unlink()
        return self.bucket.where(key)

    def _markers(self) -> list[Path]:
        try:
            with os.scandir(self.directory) as entries:
                found = [
                    (e.stat().st_mtime, Path(e.path)) for e in entries if not e.name.startswith(".")
                ]
        except FileNotFoundError:
            return []
        return [path for _, path in sorted(found)]

    def _put(self, key: str, marker: Path) -> str | None:
        """Put the page at ``key`` in the bucket and remove its marker.

        Returns why it cannot be put, or None when it went. None also when its marker was gone,
        because another process put it.
        """
        try:
            sha256 = marker.read_text().strip()
        except FileNotFoundError:
            return None
        path = self.settings.archive_dir / key
        try:
            body = path.read_bytes()
        except FileNotFoundError:
            body = b""
        if archive.sha256(body) != sha256:
            return (
                f"{path}: does not hold the page waiting for the bucket (SHA-256 {sha256});"
                " `simplefeed archive rebuild` writes it and puts it there"
            )
        try:
            self.bucket.put(key, body, 0)
        except PageConflict as exc:
            log.error("%s; the page waits (the bucket's copy is never written over)", exc)
            return str(exc)
        with contextlib.suppress(FileNotFoundError):
            marker.unlink()
        return None

    def _pause(self, seconds: float) -> None:
        self._kicked.wait(seconds)

    def _attempt(self) -> tuple[int, list[str]]:
        self._kicked.clear()
        return self.put_waiting()

    def _run(self) -> None:
        """Put the waiting pages whenever woken.

        While the bucket does not answer, it tries again with a backoff.
        """
        while not self._stopped.is_set():
            self._kicked.wait()
            self._kicked.clear()
            if self._stopped.is_set():
                return
            # A pause ends early when woken, so a later freeze tries again at once.
            retrying = Retrying(
                retry=retry_if_exception_type(ArchiveUnavailable),
                wait=wait_exponential(multiplier=0.5, max=MAX_PAUSE_S),
                stop=lambda _: self._stopped.is_set(),
                sleep=self._pause,
                before_sleep=_said,
            )
            try:
                retrying(self._attempt)
            except RetryError:  # Stopped while the bucket did not answer.
                return
            except Exception:  # A bug is logged. The thread goes on for the next freeze.
                log.exception("putting the waiting pages in the bucket failed")


def _said(state: object) -> None:
    outcome = getattr(state, "outcome", None)
    exc = outcome.exception() if outcome is not None else None
    log.warning("the bucket does not answer, archived pages wait in the directory: %s", exc)

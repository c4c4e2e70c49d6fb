"""HTTP validators and conditional requests (RFC 9110 section 13, RFC 9111), and cheap reads.

Live documents (the recent document and the working page) change. Their Last-Modified is only
sent once the second it names is over (RFC 9110 8.8.2.2). Otherwise a change later in that same
second would keep the same Last-Modified. A client revalidating with If-Modified-Since would
then be told "not modified" while it is. The ETag is always sent and always exact.

The hot path of a feed server is the poll of ``/recent``. It is mostly a 304, else the same
bytes again. :class:`FeedHeads` gives its validators for the price of the store's fastest lookup
of the feed. That is one indexed lookup with nothing around it, or on SQLite usually less.
:class:`ServedPages` remembers the validators of archived pages, which never change. So serving
one from Python costs no query at all after the first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping
from email.utils import formatdate
from pathlib import Path
from typing import NamedTuple

from simplefeed import archive, codings
from simplefeed.codings import CODINGS, IDENTITY, tagged
from simplefeed.locks import Striped
from simplefeed.model import DocumentKind, Feed
from simplefeed.service import Live, Simplefeed

log = logging.getLogger(__name__)

ARCHIVE_CACHE_CONTROL = "public, max-age=31536000, immutable"


def http_date(seconds: int) -> str:
    return formatdate(seconds, usegmt=True)


def settled_second(modified_us: int, now_us: int) -> int | None:
    """Last-Modified (whole seconds) for a live document, or None while its second is running."""
    second = modified_us // 1_000_000
    return second if second < now_us // 1_000_000 else None


# -- live documents ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LiveValidators:
    """What a request for a live document needs before any rendering."""

    live: Live
    #: The identity representation's ETag.
    etag: str
    #: The ETag of each coding's representation, identity's included (codings.tagged).
    etags: Mapping[str, str]
    #: Whole seconds, or None while the second of the last change is still running.
    last_modified_s: int | None
    #: ``last_modified_s`` as an HTTP date, formatted once per version.
    last_modified: str | None


class FeedHeads:
    """The validators of the live documents, from the feed as committed at this moment.

    Every request sees the feed as committed by any process, node or the CLI. Nothing is cached
    for a time. The lookup is the store's fastest (:meth:`Simplefeed.feed_head`). On SQLite it
    usually costs less than a query. The validators (ETag, Last-Modified) are derived once per
    version of the feed.
    """

    def __init__(self, core: Simplefeed) -> None:
        self.core = core
        self._validators: dict[tuple[str, DocumentKind], tuple[Feed, LiveValidators]] = {}

    def feed(self, name: str) -> Feed:
        """The feed as committed now; FeedNotFound if none."""
        return self.core.feed_head(name)

    def last_known(self, name: str, kind: DocumentKind) -> LiveValidators | None:
        """The validators this process last derived for the document, if any.

        They serve while the database does not answer.
        """
        known = self._validators.get((name, kind))
        return known[1] if known is not None else None

    def validators(self, name: str, kind: DocumentKind, feed: Feed | None = None) -> LiveValidators:
        """Validators of ``name``'s recent document or working page, as of this moment.

        With ``feed``, just read with :meth:`feed`, they are as of that feed.
        """
        if feed is None:
            feed = self.core.feed_head(name)
        key = (name, kind)
        known = self._validators.get(key)
        if known is not None and (known[0] is feed or known[0] == feed):
            if known[1].last_modified_s is not None:
                return known[1]
            live = known[1].live  # The same version. Only Last-Modified may have settled.
        else:
            live = self.core.live(feed, kind)
        second = settled_second(feed.modified_us, self.core.clock())
        validators = LiveValidators(
            live,
            live.etag,
            {c: tagged(live.etag, c) for c in (IDENTITY, *CODINGS)},
            second,
            http_date(second) if second is not None else None,
        )
        self._validators[key] = (feed, validators)
        return validators


class LiveBodies:
    """The live documents' bytes in each coding, served from memory.

    They are rendered (:meth:`Simplefeed.live_body`) and encoded once per version and process.
    """

    def __init__(self, core: Simplefeed) -> None:
        self.core = core
        self._encoded: dict[tuple[int, DocumentKind, str], tuple[str, bytes]] = {}
        self._encoding = Striped()

    def has(self, live: Live) -> bool:
        """Whether this version's bytes are here, so serving it needs no query."""
        return self.core.cached_live_body(live) is not None

    def body(self, live: Live, coding: str) -> bytes:
        if coding == IDENTITY:
            return self.core.live_body(live)
        key = (live.feed.id, live.kind, coding)
        cached = self._encoded.get(key)
        if cached is not None and cached[0] == live.etag:
            return cached[1]
        with self._encoding(key):  # Once per version. The others wait, then find it here.
            cached = self._encoded.get(key)
            if cached is not None and cached[0] == live.etag:
                return cached[1]
            encoded = codings.encode(self.core.live_body(live), coding)
            self._encoded[key] = (live.etag, encoded)
            return encoded


# -- archived pages ---------------------------------------------------------------------------


class Stamp(NamedTuple):
    """A page file as it was when its bytes were checked.

    A file replaced (a new inode) is not that file. Nor is one written in place, which gets a
    new mtime and a new ctime. Page files keep their freeze time as mtime. No one can set the
    ctime back, as ``touch -r`` sets the mtime back. A file cut short is not that file either.
    """

    size: int
    inode: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Stamp:
        return cls(st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


@dataclasses.dataclass(frozen=True)
class ServedPage:
    """An archived page's validators and where its static files are: fixed once frozen.

    Everything here comes from the page file alone (its bytes and mtime). So a process can serve
    an archived page while the database does not answer. The ETag is the SHA-256 of the file's
    bytes. Last-Modified is its mtime, the freeze time set when it was written.
    """

    path: Path
    etag: str
    last_modified_s: int
    last_modified: str
    #: Each coding's file as it was when checked, for the codings offered. "identity" is the
    #: page file.
    files: Mapping[str, Stamp]

    def open_file(self, coding: str) -> OpenFile | None:
        """The file of the page in ``coding``, if it is there as it was when the page was read.

        None otherwise (:class:`Stamp`). Its bytes are the page's, because it was written
        atomically from them and ``archive rebuild`` repairs it. The stamp catches a file
        changed since, without reading it.
        """
        path = self.path if coding == IDENTITY else archive.encoded_path(self.path, coding)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        if Stamp.of(os.fstat(fd)) != self.files[coding]:
            os.close(fd)
            log.warning("archive file %s is not the file it was (replaced, written, cut)", path)
            return None
        return OpenFile(fd, self.files[coding].size, time.monotonic())


#: How long a process keeps a page file open for its requests before opening it again. So a file
#: rebuilt (``archive rebuild``), removed (written back from the database) or cut short on disk
#: is seen within this long. A page asked for all the time costs one open, fstat and close a
#: second per process instead of one per request.
OPEN_FOR_S = 1.0
#: Page files a process keeps open at most. The oldest opened is let go first.
OPEN_FILES = 64


class OpenFile:
    """A page's file in one coding, open for every request of the process that sends it.

    Each request reads it through a :class:`PageStream` of its own. So a request costs no
    ``open``, ``fstat`` or ``close``. Each of those is a system call, which lets another thread
    take the interpreter. Under uWSGI's threads, such hand-overs would make an archived page
    cost 318 us of CPU against /recent's 170 (docs/explanation/decisions/interpreter.md). The
    file is closed when no request and no cache holds it any more.
    """

    __slots__ = ("fd", "opened", "size")

    def __init__(self, fd: int, size: int, opened: float) -> None:
        self.fd = fd
        self.size = size
        self.opened = opened

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class PageStream:
    """One response's reading of a :class:`OpenFile`, what ``wsgi.file_wrapper`` is given.

    Nobody moves the shared descriptor's offset. uWSGI sends the file with ``sendfile`` at
    offsets of its own, from 0 (``uwsgi_proto_base_sendfile``). :meth:`read` reads at this
    stream's own offset (``pread``). A server that asks the descriptor where to start
    (``lseek``, as gunicorn does) is told 0. Closing the stream leaves the file open.
    """

    __slots__ = ("_file", "_offset")

    def __init__(self, file: OpenFile) -> None:
        self._file = file
        self._offset = 0

    def fileno(self) -> int:
        return self._file.fd

    def read(self, size: int | None = -1, /) -> bytes:
        left = self._file.size - self._offset
        wanted = left if size is None or size < 0 else min(size, left)
        data = os.pread(self._file.fd, wanted, self._offset)
        self._offset += len(data)
        return data

    def close(self) -> None:
        """The file stays open for the next request."""


class ServedPages:
    """Validators of archived pages, remembered per process, because an archived page never changes.

    It holds at most ``limit`` pages, a few hundred bytes each. Past that, the memory starts
    again.
    """

    def __init__(self, path_of: Callable[[str, int], Path], limit: int = 100_000) -> None:
        self._path_of = path_of
        self._limit = limit
        self._known: dict[tuple[str, int], ServedPage] = {}
        self._files: dict[tuple[Path, str], OpenFile] = {}

    def get(self, feed: str, number: int) -> ServedPage | None:
        return self._known.get((feed, number))

    def file(self, page: ServedPage, coding: str) -> OpenFile | None:
        """The page's file in ``coding``, open (:class:`OpenFile`).

        It is the file an earlier request of the process opened less than :data:`OPEN_FOR_S`
        ago, else it is opened now. None if the file is not there as it was
        (:meth:`ServedPage.open_file`).
        """
        key = (page.path, coding)
        kept = self._files.get(key)
        if kept is not None and time.monotonic() - kept.opened < OPEN_FOR_S:
            return kept
        opened = page.open_file(coding)
        if opened is None:
            self._files.pop(key, None)
            return None
        if key not in self._files and len(self._files) >= OPEN_FILES:
            with contextlib.suppress(StopIteration, RuntimeError):
                self._files.pop(next(iter(self._files)), None)  # Another thread may race.
        self._files[key] = opened
        return opened

    def load(self, feed: str, number: int, expected: bytes | None = None) -> ServedPage | None:
        """The page from its file, remembered.

        None if there is no file, or if it does not hold ``expected``. That is the page's bytes
        in the database, when it answers. A damaged file is neither served nor made into
        compressed copies. Its precompressed copies are checked, and written where missing or
        wrong. Pages frozen before copies existed get them here.
        """
        path = self._path_of(feed, number)
        try:
            with path.open("rb") as f:
                body = f.read()
                stamp = Stamp.of(os.fstat(f.fileno()))
        except FileNotFoundError:
            return None
        if expected is not None and body != expected:
            log.error("archive file %s does not hold its page's bytes (the database's)", path)
            return None
        mtime_us = stamp.mtime_ns // 1000
        files = {IDENTITY: stamp}
        for coding in CODINGS:
            copy = archive.encoded_copy(path, body, coding, mtime_us)
            if copy is not None:
                files[coding] = Stamp.of(copy)
        second = mtime_us // 1_000_000
        known = ServedPage(path, archive.strong_etag(body), second, http_date(second), files)
        if len(self._known) >= self._limit:
            self._known.clear()
        self._known[(feed, number)] = known
        return known

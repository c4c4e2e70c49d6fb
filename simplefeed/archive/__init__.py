"""Archived pages on disk: atomic writes, and rebuilding missing or damaged files.

An archived page's bytes live in a static file. uWSGI, nginx or a CDN origin serves it without
Python. Its path mirrors the page's URL path:

    default feed:  <archive_dir>/pages/<n>
    named feed:    <archive_dir>/feeds/<name>/pages/<n>

The database keeps each page's digest (``pages.sha256``), not its bytes. A page whose file is
missing renders again from its entries, byte for byte. The digest checks it.

Files are written with a temporary file, fsync and ``os.replace``. So a reader, or a crash, sees
either no file or the whole file, never part of one. The file's mtime is the page's freeze time.
So the static server's Last-Modified equals the app's.

Beside each page file lie its precompressed copies (:mod:`simplefeed.codings`). They are named as
nginx's ``gzip_static`` and uWSGI's ``static-gzip`` expect, ``<n>.gz`` and ``<n>.br``. They are
written when the page freezes, after the page file. ``archive rebuild`` writes missing or damaged
ones. The app writes a missing one when it first reads the page. Static servers send a copy
without checking it. So copies are fsynced like the page file, and a crash leaves a copy whole or
missing, never short. A missing copy is harmless, because the static servers then send the
page file itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lxml import etree

from simplefeed import codings
from simplefeed.archive.store import page_number
from simplefeed.errors import ArchiveUnreadable
from simplefeed.model import ATOM_NS, ArchivedPage, PageRecord

log = logging.getLogger(__name__)


def strong_etag(body: bytes) -> str:
    """The page's ETag, its SHA-256 in lowercase hex, quoted.

    Pages frozen before 2026-11-22 keep the first 32 digits of it.
    """
    return '"' + hashlib.sha256(body).hexdigest() + '"'


def page_path(archive_dir: Path, feed: str, default_feed: str, number: int) -> Path:
    if feed == default_feed:
        return archive_dir / "pages" / str(number)
    return archive_dir / "feeds" / feed / "pages" / str(number)


def encoded_path(path: Path, coding: str) -> Path:
    """Where the page file ``path``'s copy in ``coding`` is."""
    return path.with_name(path.name + codings.SUFFIXES[coding])


def write_page(path: Path, body: bytes, mtime_us: int) -> None:
    """The page file and its precompressed copies."""
    write_atomically(path, body, mtime_us)
    for coding in codings.CODINGS:
        write_atomically(encoded_path(path, coding), codings.encode(body, coding), mtime_us)


def write_atomically(path: Path, body: bytes, mtime_us: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        # Readable by a static server running as another user, such as nginx or a CDN origin.
        # mkstemp creates files 0600.
        os.chmod(tmp, 0o644)
        os.utime(tmp, ns=(mtime_us * 1000, mtime_us * 1000))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # No fsync of the directory. The file's bytes are on disk before the rename. So a crash
    # can only lose the rename, and the file is then missing, never wrong. A missing page file
    # heals itself. The app renders the page again from its entries and writes the file.
    # `simplefeed archive rebuild` does too. A damaged one would not heal. This saves one fsync
    # per page.


def encoded_copy(path: Path, body: bytes, coding: str, mtime_us: int) -> os.stat_result | None:
    """The ``stat`` of the page file ``path``'s copy in ``coding``, checked or written now.

    The copy must decode to ``body``, the page's bytes. It is written now if it is missing or
    does not. None if it cannot be written. That coding is then not offered for the page.
    """
    copy = encoded_path(path, coding)
    try:
        encoded = copy.read_bytes()
        if codings.decode(encoded, coding) == body:
            return os.stat(copy)
        log.warning("%s does not decode to its page's bytes; writing it again", copy)
    except FileNotFoundError:
        pass
    except ValueError as exc:
        log.warning("%s: %s; writing it again", copy, exc)
    encoded = codings.encode(body, coding)
    try:
        write_atomically(copy, encoded, mtime_us)
        return os.stat(copy)
    except OSError as exc:
        log.warning("could not write %s: %s", copy, exc.strerror or exc)
        return None


#: What the writability probe (:func:`writable_problems`) writes, one file system block.
PROBE = b"\0" * 4096


def writable_problems(archive_dir: Path) -> list[str]:
    """Why page files cannot be written now.

    It tries the archive directory, made if missing. It tries every feed's page directory
    there is (``pages``, ``feeds/NAME/pages``). Each gets a temporary file of a block, written
    and removed. Permissions alone say nothing for root or a read-only mount. A full file
    system still makes empty files. A page directory alone can be what is not writable.
    """
    found = []
    try:
        archive_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return [f"the archive directory {archive_dir} cannot be written: {exc.strerror or exc}"]
    pages = [archive_dir / "pages", *sorted(archive_dir.glob("feeds/*/pages"))]
    for directory in (archive_dir, *(p for p in pages if p.exists())):
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".healthz.", suffix=".tmp")
            try:  # A block's worth, because a full file system lets an empty file be made.
                os.write(fd, PROBE)
            finally:
                os.close(fd)
                os.unlink(tmp)
        except OSError as exc:
            found.append(
                f"the archive directory {directory} cannot be written: {exc.strerror or exc}"
            )
    return found


def holds_another_page(path: Path, body: bytes) -> bool:
    """Whether the file ``path`` holds another page than ``body``.

    Another page is an Atom page whose entries, by id, are others than ``body``'s. It is a page
    of another history of the feed. A database restored from a backup older than the archive
    makes one. Readers and caches may hold it, and its entries may be nowhere else. So the
    service never writes over it. Some files are damaged instead. One is cut short, or not an
    Atom page. Or it holds the same entries with other, edited bytes.
    """
    try:
        on_disk = path.read_bytes()
    except FileNotFoundError:
        return False
    if on_disk == body:
        return False
    others = entry_ids(on_disk)
    return bool(others) and others != entry_ids(body)


#: Only reads a page's entry ids. It loads no entity, DTD or network resource.
_PAGE_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True
)
_ENTRY_IDS = etree.XPath("/a:feed/a:entry/a:id/text()", namespaces={"a": ATOM_NS})


def entry_ids(page: bytes) -> list[str]:
    """The ids of the entries of an Atom page, in order.

    None are found if it is not one, or is not well-formed.
    """
    try:
        found = _ENTRY_IDS(etree.fromstring(page, _PAGE_PARSER))
    except etree.XMLSyntaxError:
        return []
    return [str(text) for text in found] if isinstance(found, list) else []


def file_matches(path: Path, page: ArchivedPage) -> bool:
    try:
        return path.read_bytes() == page.body
    except FileNotFoundError:
        return False


def read_if_recorded(path: Path, record: PageRecord) -> bytes | None:
    """The page file's bytes if they have the page's recorded digest, else None.

    A missing file gives None too.
    """
    try:
        body = path.read_bytes()
    except FileNotFoundError:
        return None
    return body if sha256(body) == record.sha256 else None


def sha256(body: bytes) -> str:
    """The lowercase hex SHA-256 of ``body``."""
    return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class VerifyReport:
    """What ``simplefeed archive verify`` found: pages checked, and every difference."""

    checked: int
    problems: list[str]


def holds_files(archive_dir: Path) -> bool:
    """Whether the archive directory holds a file besides the two the repository keeps there."""
    return archive_dir.is_dir() and any(
        p.is_file() and not (p.parent == archive_dir and p.name in _REPOSITORY_FILES)
        for p in archive_dir.rglob("*")
    )


#: The repository's archive/ holds these to say what lands there. They are no pages.
_REPOSITORY_FILES = frozenset({"README.md", ".gitignore"})


def empty_archive_problem(archive_dir: Path, holds: bool, frozen: int) -> str | None:
    """Why an empty archive directory is more likely the wrong one than a lost archive, or None.

    The caller names ``archive_dir``. ``holds`` says whether it holds a file. The database has
    ``frozen`` pages.
    """
    if holds or frozen == 0:
        return None
    return (
        f"no page files at all, but the database has {frozen} archived pages: is this the"
        " service's archive? (SIMPLEFEED_ARCHIVE_DIR, relative to the directory the command"
        " runs in; `simplefeed archive rebuild` writes the files)"
    )


def record_problems(path: Path, record: PageRecord, on_disk: bytes | None) -> list[str]:
    """How the page file ``path`` and its copies differ from the page the database records.

    The file holds ``on_disk``, which is None when it is missing. The record is the digest.
    """
    if on_disk is None:
        return [f"{path}: missing (`simplefeed archive rebuild` writes it)"]
    digest = hashlib.sha256(on_disk).hexdigest()
    if digest != record.sha256:
        return [
            f"{path}: not the database's page {record.number} ({len(on_disk)} bytes with"
            f" SHA-256 {digest}, not its recorded {record.sha256})"
        ]
    return file_problems(path, on_disk, f"the database's page {record.number}")


def file_problems(path: Path, body: bytes, what: str = "the page") -> list[str]:
    """How the page file ``path`` and its copies differ from ``body`` (``what`` names it)."""
    try:
        on_disk = path.read_bytes()
    except FileNotFoundError:
        return [f"{path}: missing (`simplefeed archive rebuild` writes it)"]
    problems: list[str] = []
    if on_disk != body:
        problems.append(
            f"{path}: not {what} ({len(on_disk)} bytes with SHA-256 "
            f"{hashlib.sha256(on_disk).hexdigest()}, not {len(body)} with"
            f" {hashlib.sha256(body).hexdigest()})"
        )
    for coding in codings.CODINGS:
        problem = copy_problem(encoded_path(path, coding), body, coding)
        if problem is not None:
            problems.append(problem)
    return problems


def copy_problem(copy: Path, body: bytes, coding: str) -> str | None:
    try:
        decoded = codings.decode(copy.read_bytes(), coding)
    except FileNotFoundError:
        return f"{copy}: missing (`simplefeed archive rebuild` writes it)"
    except ValueError as exc:
        return f"{copy}: {exc}"
    return None if decoded == body else f"{copy}: does not decode to its page's bytes"


def read_with_copies(path: Path) -> tuple[tuple[bytes, ...], int] | None:
    """What the page file ``path`` and its compressed copies hold, decoded.

    The file's bytes come first. Each different body comes once. A copy that does not decode
    is left out. It also returns the modification time, in microseconds, of the first there.
    None when neither the file nor a copy is there. Raises :class:`OSError` for one that cannot
    be read.
    """
    bodies: list[bytes] = []
    mtime_us: int | None = None
    for coding in (None, *codings.CODINGS):
        where = path if coding is None else encoded_path(path, coding)
        try:
            with where.open("rb") as f:
                raw, stat = f.read(), os.fstat(f.fileno())
        except FileNotFoundError:
            continue
        if mtime_us is None:
            mtime_us = stat.st_mtime_ns // 1000
        try:
            body = raw if coding is None else codings.decode(raw, coding)
        except ValueError:
            continue
        if body not in bodies:
            bodies.append(body)
    if mtime_us is None:
        return None
    return tuple(bodies), mtime_us


def chain_problem(before: PageRecord, after: PageRecord, given: str | None) -> str | None:
    """Whether ``after``'s prev-archive digest is the SHA-256 of ``before``.

    ``given`` is that digest, its ``sf:sha256``. ``before`` is the page before ``after``. Pages
    frozen before digests were given carry none.
    """
    actual = before.sha256
    if given is None or given == actual:
        return None
    return (
        f"page {after.number} gives page {before.number} the SHA-256 {given}; "
        f"its bytes have {actual}"
    )


def stray_files(directory: Path, frozen: int) -> list[tuple[int, Path]]:
    """Page files and copies in ``directory`` for pages beyond the ``frozen`` ones.

    They come as page number and path, in order. No page URL should find them. A database
    older than the archive leaves them. So do a copy from another database and a restore gone
    wrong.
    """
    try:
        names = os.listdir(directory)  # Names only. A Path for each of 300,000 takes 1.2 s.
    except FileNotFoundError:  # No archive there yet, so nothing stray.
        return []
    except OSError as exc:
        raise ArchiveUnreadable(directory, f"cannot be read ({exc.strerror or exc})") from exc
    numbered = ((page_number(name), name) for name in names)
    return sorted((n, directory / name) for n, name in numbered if n is not None and n > frozen)


def past_gap(strays: list[tuple[int, Path]], frozen: int) -> tuple[int, list[tuple[int, Path]]]:
    """The first page after the ``frozen`` ones that no file of ``strays`` holds, and those past.

    ``archive recover`` takes back only the pages that follow the frozen ones.
    """
    numbers = {n for n, _ in strays}
    missing = frozen + 1
    while missing in numbers:
        missing += 1
    return missing, [(n, p) for n, p in strays if n > missing]


@dataclass(frozen=True)
class RebuildReport:
    checked: int
    restored: list[Path]
    #: Temporary files left by writes that never finished, as after a crash mid-write.
    removed: list[Path] = field(default_factory=list)
    #: Page files that could not be written, as "PATH: why", one a page.
    unwritten: list[str] = field(default_factory=list)
    #: The places of pages put in the bucket (SIMPLEFEED_ARCHIVE_URL) because it lacked them.
    uploaded: list[str] = field(default_factory=list)


#: A temporary file older than this is no write in progress, because a write takes
#: milliseconds. A crashed process left it behind.
STALE_TEMP_S = 600.0


def remove_stale_temp_files(directory: Path, now: float | None = None) -> list[Path]:
    """Delete the temporary files (``.<page>.*.tmp``) of writes that never finished.

    They are invisible to readers, because no page URL maps to them. But nothing else would
    ever remove them. Recent ones are left alone. Another process, or a node sharing the
    directory, may be writing them right now.
    """
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        candidates = list(directory.glob(".*.tmp"))
    except OSError:
        return removed
    for path in candidates:
        with contextlib.suppress(FileNotFoundError):
            if now - path.stat().st_mtime > STALE_TEMP_S:
                path.unlink()
                removed.append(path)
    return removed


def ensure_files(path: Path, page: ArchivedPage) -> list[Path]:
    """Write the page's file and copies that are not already there with the right bytes.

    Returns the paths written.
    """
    written: list[Path] = []
    if not file_matches(path, page):
        write_atomically(path, page.body, page.frozen_us)
        written.append(path)
    for coding in codings.CODINGS:
        copy = encoded_path(path, coding)
        if copy_problem(copy, page.body, coding) is not None:
            write_atomically(copy, codings.encode(page.body, coding), page.frozen_us)
            written.append(copy)
    return written

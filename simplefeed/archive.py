"""Archived pages on disk: atomic writes, and rebuilding missing or damaged files.

A frozen page's bytes live in the database (``pages.body``) and, as a copy that uWSGI, nginx or a
CDN origin can serve without Python, in a static file whose path mirrors the page's URL path:

    default feed:  <archive_dir>/pages/<n>
    named feed:    <archive_dir>/feeds/<name>/pages/<n>

Files are written with a temporary file, fsync and ``os.replace``, so a reader (or a crash) sees
either no file or the whole file, never part of one. The file's mtime is the page's freeze time, so
the static server's Last-Modified equals the app's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from simplefeed.model import FrozenPage


def strong_etag(body: bytes) -> str:
    """The page's ETag: its SHA-256 in lowercase hex, quoted (pages frozen before 2026-11-22
    keep the first 32 digits of it)."""
    return '"' + hashlib.sha256(body).hexdigest() + '"'


def page_sha256(page: FrozenPage) -> str:
    """The lowercase hex SHA-256 of a frozen page's bytes: its ETag's, unless the page was
    frozen when ETags held half of it."""
    etag = page.etag.strip('"')
    if len(etag) == 64:
        return etag
    return hashlib.sha256(page.body).hexdigest()


def page_path(archive_dir: Path, feed: str, default_feed: str, number: int) -> Path:
    if feed == default_feed:
        return archive_dir / "pages" / str(number)
    return archive_dir / "feeds" / feed / "pages" / str(number)


def write_atomically(path: Path, body: bytes, mtime_us: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        # Readable by a static server running as another user (nginx, a CDN origin):
        # mkstemp creates files 0600.
        os.chmod(tmp, 0o644)
        os.utime(tmp, ns=(mtime_us * 1000, mtime_us * 1000))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # No fsync of the directory: the file's bytes are on disk before the rename, so a crash
    # can only lose the rename, i.e. the file is missing, never wrong. A missing page file
    # heals itself (the app serves the page from the database and writes the file again;
    # `simplefeed archive rebuild` too); a damaged one would not. One fsync per page saved.


def writable_problem(directory: Path) -> str | None:
    """Why no page file can be written into ``directory`` now, or None: a temporary file is
    created there and removed (permissions alone say nothing for root or a read-only mount)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".healthz.", suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return f"the archive directory {directory} cannot be written: {exc.strerror or exc}"
    return None


def file_matches(path: Path, page: FrozenPage) -> bool:
    try:
        return path.read_bytes() == page.body
    except FileNotFoundError:
        return False


@dataclass(frozen=True)
class VerifyReport:
    """What ``simplefeed archive verify`` found: pages checked, and every difference."""

    checked: int
    problems: list[str]


def page_problems(path: Path, page: FrozenPage) -> list[str]:
    """How a frozen page disagrees with itself (its ETag and its bytes) or with its static
    file: the file missing or holding other bytes."""
    problems: list[str] = []
    digest = hashlib.sha256(page.body).hexdigest()
    if page.etag not in (f'"{digest}"', f'"{digest[:32]}"'):
        problems.append(f"page {page.number}: ETag {page.etag} is not its bytes' ({digest})")
    try:
        on_disk = path.read_bytes()
    except FileNotFoundError:
        problems.append(f"{path}: missing (`simplefeed archive rebuild` writes it)")
        return problems
    if on_disk != page.body:
        problems.append(
            f"{path}: not the database's page {page.number} ({len(on_disk)} bytes with SHA-256 "
            f"{hashlib.sha256(on_disk).hexdigest()}, not {len(page.body)} with {digest})"
        )
    return problems


def chain_problem(before: FrozenPage, after: FrozenPage, given: str | None) -> str | None:
    """Whether ``after``'s prev-archive digest (``given``, its ``sf:sha256``) is the SHA-256
    of ``before``, the page before it. Pages frozen before digests were given carry none."""
    actual = hashlib.sha256(before.body).hexdigest()
    if given is None or given == actual:
        return None
    return (
        f"page {after.number} gives page {before.number} the SHA-256 {given}; "
        f"its bytes have {actual}"
    )


def stray_files(directory: Path, frozen: int) -> list[Path]:
    """Page files in ``directory`` for pages beyond the ``frozen`` ones (no page URL should
    find them: a copy from another database, or a restore gone wrong)."""
    try:
        names = [p for p in directory.iterdir() if p.name.isdigit() and p.name[0] != "0"]
    except FileNotFoundError:
        return []
    return sorted((p for p in names if int(p.name) > frozen), key=lambda p: int(p.name))


@dataclass(frozen=True)
class RebuildReport:
    checked: int
    restored: list[Path]
    #: Temporary files left by writes that never finished (a crash mid-write).
    removed: list[Path] = field(default_factory=list)


#: A temporary file older than this is no write in progress (a write takes milliseconds), but
#: one a crashed process left behind.
STALE_TEMP_S = 600.0


def remove_stale_temp_files(directory: Path, now: float | None = None) -> list[Path]:
    """Delete the temporary files (``.<page>.*.tmp``) of writes that never finished.

    They are invisible to readers (no page URL maps to them) but nothing else would ever
    remove them. Recent ones are left alone: another process, or node sharing the directory,
    may be writing them right now.
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


def ensure_file(path: Path, page: FrozenPage) -> bool:
    """Write the page's file unless it is already there with the right bytes; True if written."""
    if file_matches(path, page):
        return False
    write_atomically(path, page.body, page.frozen_us)
    return True

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
from dataclasses import dataclass
from pathlib import Path

from simplefeed.model import FrozenPage


def strong_etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


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
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def file_matches(path: Path, page: FrozenPage) -> bool:
    try:
        return path.read_bytes() == page.body
    except FileNotFoundError:
        return False


@dataclass(frozen=True)
class RebuildReport:
    checked: int
    restored: list[Path]


def ensure_file(path: Path, page: FrozenPage) -> bool:
    """Write the page's file unless it is already there with the right bytes; True if written."""
    if file_matches(path, page):
        return False
    write_atomically(path, page.body, page.frozen_us)
    return True

"""The archive in a directory: page files that uWSGI, nginx or any static server sends as they
are (:class:`~simplefeed.archive.store.PageStore`).

A key is a relative path under the directory. Files are written atomically and fsynced, and
each keeps the page's freeze time as its modification time, so a static server's Last-Modified
is the freeze time.
"""

from __future__ import annotations

import os
from pathlib import Path

from simplefeed import codings
from simplefeed.archive import copy_problem, file_problems, write_atomically, write_page
from simplefeed.archive.store import copy_key, other_bytes, page_number
from simplefeed.errors import ArchiveUnreadable, PageConflict

__all__ = ["DirectoryStore"]


class DirectoryStore:
    """Archived pages as files under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        return self.root / key

    def where(self, key: str) -> str:
        return str(self.path(key))

    def put(self, key: str, body: bytes, frozen_us: int) -> None:
        found = self.get(key)
        if found is None:
            write_page(self.path(key), body, frozen_us)
            return
        if found != body:
            raise PageConflict(self.where(key), other_bytes(self.where(key), found, body))
        for coding in codings.CODINGS:
            copy = self.path(copy_key(key, coding))
            if copy_problem(copy, body, coding) is not None:
                write_atomically(copy, codings.encode(body, coding), frozen_us)

    def get(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except FileNotFoundError:
            return None

    def numbers(self, pages: str) -> list[int]:
        directory = self.root / pages
        try:
            with os.scandir(directory) as entries:
                names = [entry.name for entry in entries if entry.is_file()]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ArchiveUnreadable(directory, f"cannot be read ({exc.strerror or exc})") from exc
        return sorted({n for n in map(page_number, names) if n is not None})

    def problems(self, key: str, body: bytes) -> list[str]:
        return file_problems(self.path(key), body)

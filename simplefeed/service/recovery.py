"""Decide which archived pages ``simplefeed archive recover`` can take back, with no I/O.

The entries the database already holds must be the file's. Each page rendered again from the
entries read back must give the file's bytes exactly, digest chain included. And those bytes
must be the ones the next page recorded (``sf:sha256``) when it was archived. Rendering alike
shows that the reading lost nothing. It cannot show an edit that reads back consistently, such
as a changed title. Only the next page's digest tells that. For the newest page, its compressed
copies tell. A file and its ``.br`` and ``.gz`` copies are each a candidate. So a damaged
file's intact copy passes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from lxml import etree

from simplefeed import atom
from simplefeed.model import Entry
from simplefeed.rules import paging

__all__ = ["PageFile", "Recoverable", "Render", "recoverable"]


@dataclass(frozen=True)
class PageFile:
    """A page's file as the archive holds it.

    It holds what the file and its compressed copies hold, decoded. The file's comes first, and
    each different one once. A copy that does not decode is left out. It holds the file's
    modification time too. That is the time the page was archived (``archive.write_page``).
    """

    number: int
    bodies: tuple[bytes, ...]
    mtime_us: int


@dataclass(frozen=True)
class Recoverable:
    """What :func:`recoverable` found for one feed.

    It holds the pages to store, with their entries oldest first and their bytes. It says why
    the next page could not be taken.
    """

    entries: tuple[Entry, ...]
    pages: tuple[tuple[PageFile, bytes], ...]
    problem: str | None


#: Renders archived page ``number`` of the feed from its entries, newest first. It takes the
#: digest of the page before it.
Render = Callable[[int, tuple[Entry, ...], str | None], bytes]


def recoverable(
    render: Render,
    files: Sequence[PageFile],
    stored: Mapping[int, Entry],
    stored_seqs: Mapping[str, int],
    page_size: int,
    locator_base: str,
    prev_sha256: str | None,
    following: PageFile | None,
) -> Recoverable:
    """Say which of ``files`` can be taken back, in order, stopping at the first that cannot.

    The ``files`` are consecutive, from the one after the feed's archived pages. A page is
    taken back with bytes that its file or a copy holds. Its entries, read back from them, must
    render to them. And the bytes must be vouched for. The next page's digest of them vouches,
    its ``sf:sha256`` in its file or a copy. ``following`` is the page file after the last of
    ``files``, if there is one. For the newest page, being the only bytes of its file and
    copies that render alike vouches. A consistent edit, such as a changed title, renders
    alike. Only the digest the next page recorded when it was archived tells. A damaged file
    whose copy is intact is taken back from the copy.

    ``stored`` holds the database's entries past its archived pages, by sequence number.
    ``stored_seqs`` holds the sequence numbers of the ids read, where the database has them.
    ``prev_sha256`` is the digest of the database's newest archived page, or None if it has
    none.
    """
    entries: list[Entry] = []
    pages: list[tuple[PageFile, bytes]] = []
    for index, file in enumerate(files):
        number = file.number
        alike: list[tuple[bytes, list[Entry]]] = []
        problem: str | None = None
        for body in file.bodies:
            page, wrong = _read_back(
                render, number, body, stored, stored_seqs, page_size, locator_base, prev_sha256
            )
            if wrong is None:
                alike.append((body, page))
            elif problem is None:
                problem = wrong
        after = files[index + 1] if index + 1 < len(files) else following
        chosen, unvouched = _vouched(number, alike, after)
        if chosen is None:
            return Recoverable(tuple(entries), tuple(pages), problem if not alike else unvouched)
        body, page = chosen
        entries += reversed(page)
        pages.append((file, body))
        prev_sha256 = hashlib.sha256(body).hexdigest()
    return Recoverable(tuple(entries), tuple(pages), None)


def _read_back(
    render: Render,
    number: int,
    body: bytes,
    stored: Mapping[int, Entry],
    stored_seqs: Mapping[str, int],
    page_size: int,
    locator_base: str,
    prev_sha256: str | None,
) -> tuple[list[Entry], str | None]:
    """Return page ``number``'s entries read back from ``body``, if they render to ``body``.

    Those the database holds are given as it holds them. If they do not render to ``body``,
    return why not.
    """
    try:
        read = atom.page_entries(body, locator_base)
    except atom.PageUnreadable as exc:
        return [], f"page {number} {exc}"
    page, problem = _with_stored(number, read, page_size, stored, stored_seqs)
    if problem is None and render(number, tuple(page), prev_sha256) != body:
        problem = (
            f"page {number}: its entries, read back, do not render to the file's bytes"
            " (damaged, edited, rendered with another base URL or by another release, or"
            " not this feed's)"
        )
    return page, problem


def _vouched(
    number: int, alike: list[tuple[bytes, list[Entry]]], after: PageFile | None
) -> tuple[tuple[bytes, list[Entry]] | None, str]:
    """Say which of the bytes that render alike, with their entries, are page ``number``'s.

    They are those whose digest the next page gives. For the newest page, they are the only
    ones. Else return None and why none is.
    """
    if not alike:
        return None, ""
    if after is None:
        if len(alike) == 1:
            return alike[0], ""
        return None, (
            f"page {number}: its file and its compressed copies differ, each rendering alike,"
            " and no later page file vouches for either"
        )
    given = [g for g in map(_prev_digest, after.bodies) if g is not None]
    for body, page in alike:
        if hashlib.sha256(body).hexdigest() in given:
            return (body, page), ""
    if not given:
        return None, (
            f"page {number}: page {number + 1}, which vouches for its bytes, gives no digest"
            " of them (it cannot be read, or it is damaged)"
        )
    digest = hashlib.sha256(alike[0][0]).hexdigest()
    return None, (
        f"page {number}: its bytes (SHA-256 {digest}) are not those page {number + 1}"
        f" gives it ({given[0]}): damaged or edited"
    )


def _prev_digest(body: bytes) -> str | None:
    try:
        return atom.prev_archive_sha256(body)
    except etree.XMLSyntaxError:
        return None


def _with_stored(
    number: int,
    read: list[Entry],
    page_size: int,
    stored: Mapping[int, Entry],
    stored_seqs: Mapping[str, int],
) -> tuple[list[Entry], str | None]:
    """Return the page's entries, newest first, those the database holds as it holds them.

    Else return why the page is not the continuation of the database's entries.
    """
    first, last = paging.seq_range(number, page_size)
    seqs = [e.seq for e in read]
    if seqs != list(range(last, first - 1, -1)):
        if not seqs:
            return [], f"page {number} holds no entry"
        return [], f"page {number} holds entries {seqs[-1]}..{seqs[0]}, not {first}..{last}"
    page: list[Entry] = []
    for entry in read:
        held = stored.get(entry.seq)
        if held is not None and held.id != entry.id:
            return [], (
                f"page {number}: the database holds entry {held.id!r} as number"
                f" {entry.seq}, the file {entry.id!r}: the database is not the archive's"
                " past (published to since it was restored?)"
            )
        elsewhere = stored_seqs.get(entry.id)
        if elsewhere is not None and elsewhere != entry.seq:
            return [], (
                f"page {number}: entry {entry.id!r} is number {entry.seq} in the file and"
                f" {elsewhere} in the database"
            )
        page.append(held if held is not None else entry)
    return page, None

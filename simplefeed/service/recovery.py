"""Reading an archived page of ours back into the entries it was rendered from: the inverse of
:func:`simplefeed.atom.render`, for ``simplefeed archive recover``. No I/O here.

A database restored from a backup older than the archive lacks the entries of the pages that
froze after the backup (a database lost and started anew, every page's); their files (and every
cache) hold them. :func:`page_entries` reads a
page file's entries, and :func:`recoverable` decides which pages a feed can take back: the
entries the database already holds must be the file's, each page rendered again from the
entries read must give the file's bytes exactly, digest chain included, and those bytes must
be the ones the next page recorded (``sf:sha256``) when it froze. Rendering alike shows the
reading lost nothing; it cannot show an edit that reads back consistently (a title changed),
which only the next page's digest (or, for the newest page, its compressed copies) tells. A
file and its ``.br``/``.gz`` copies are each a candidate: a damaged file's intact copy passes.

What the documents cannot tell is read as the renderer would have written it:

- content of type ``text`` has no ``content_type`` (a producer's ``text`` or ``text/plain``
  renders alike, and a retry spelt so is a replay: :meth:`Event.replay_fingerprints`);
- a summary equal to the title of an entry without content, or with Base64 content, is the one
  the server added (RFC 4287 4.1.1.1), and an entry without content whose last link is its own
  entry locator, with no other alternate link, got that link from the server (4.1.1);
- JSON content is the text the page carries (``<`` written ``\\u003c``: the same value);
- the entry's ``published`` is the time the producer gave (``updated`` in its event).

So a recovered entry's fingerprint is that of the event as its page shows it: a producer's
retry of it that spells it otherwise (no ``updated``, say) is answered as a conflict.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from lxml import etree

from simplefeed import atom
from simplefeed.model import (
    ATOM_NS,
    SF_NS,
    Author,
    Category,
    Entry,
    Event,
    Link,
    datetime_to_us,
    text_problem,
)
from simplefeed.rules import paging

_A = f"{{{ATOM_NS}}}"
_ENTRY = f"{_A}entry"
_SF_TYPE = f"{{{SF_NS}}}type"
_DIV = f"{{{atom.XHTML_NS}}}div"
#: Only the well-formed XML the renderer writes is read: no DTD, no entity, no network.
_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, remove_pis=True
)


class PageUnreadable(ValueError):
    """The file is not a page this service rendered: said in one sentence."""


def page_entries(body: bytes, locator_base: str) -> list[Entry]:
    """The entries of an archived page's bytes, newest first (as the page lists them).
    ``locator_base`` is the feed's (:attr:`Document.locator_base`)."""
    return _entries(_root(body), locator_base)


def _root(body: bytes) -> Any:
    try:
        root = etree.fromstring(body, _PARSER)
    except etree.XMLSyntaxError as exc:
        raise PageUnreadable(f"is not well-formed XML ({exc})") from None
    if root.tag != f"{_A}feed":
        raise PageUnreadable(f"is not an Atom feed (its root is {root.tag!r})")
    return root


def _entries(root: Any, locator_base: str) -> list[Entry]:
    try:
        return [_entry(el, locator_base) for el in root.iterchildren(_ENTRY)]
    except PageUnreadable:
        raise
    except (TypeError, ValueError) as exc:  # a value this service does not write
        raise PageUnreadable(
            f"holds an entry this service could not have written ({exc})"
        ) from None


@dataclass(frozen=True)
class FeedHead:
    """What a feed's first page says of the feed: enough to create it again, as it was."""

    uuid: str
    title: str
    page_size: int
    #: When its first entry was published: the feed's creation time is in no page.
    created_us: int


def feed_head(body: bytes) -> FeedHead:
    """The feed a first page belongs to (:class:`PageUnreadable` if it does not say)."""
    root = _root(body)
    atom_id = root.findtext(f"{_A}id") or ""
    title = root.findtext(f"{_A}title") or ""
    entries = _entries(root, "")
    try:
        uuid = str(UUID(atom_id.removeprefix("urn:uuid:")))
    except ValueError:
        uuid = ""
    if atom_id != f"urn:uuid:{uuid}" or not entries or text_problem(title) or not title:
        raise PageUnreadable("is not the first page of a feed this service wrote")
    return FeedHead(
        uuid=uuid,
        title=title,
        page_size=len(entries),
        created_us=entries[-1].published_us,
    )


def _entry(el: Any, locator_base: str) -> Entry:
    fields: dict[str, Any] = {}
    links: list[Link] = []
    categories: list[Category] = []
    for child in el:
        if not isinstance(child.tag, str):
            raise PageUnreadable("an entry holds a comment or processing instruction")
        name = etree.QName(child)
        if name.namespace == SF_NS and name.localname == "seq":
            fields["seq"] = child.text
            continue
        if name.namespace != ATOM_NS:
            raise PageUnreadable(f"an entry holds an element this service does not write: {name}")
        tag = name.localname
        if tag == "link":
            links.append(_link(child))
        elif tag == "category":
            categories.append(
                Category(child.get("term", ""), child.get("scheme"), child.get("label"))
            )
        elif tag == "author":
            parts = {str(part.tag).removeprefix(_A): part.text or "" for part in child}
            fields["author"] = Author(parts.get("name", ""), parts.get("email"), parts.get("uri"))
        elif tag == "content":
            fields["content_type"], fields["content"] = _content(child)
        elif tag in ("id", "title", "summary", "updated", "published"):
            if len(child):
                raise PageUnreadable(
                    f"an entry's {tag} holds elements, which this service does not write"
                )
            fields[tag] = child.text or ""
        else:
            raise PageUnreadable(f"an entry holds an element this service does not write: {tag}")
    missing = [
        name for name in ("id", "seq", "title", "updated", "published") if name not in fields
    ]
    if missing:
        raise PageUnreadable(f"an entry lacks what this service writes in every entry: {missing}")
    entry_id, seq, title = fields["id"], int(fields["seq"]), fields["title"]
    updated_us, published_us = _us(fields["updated"]), _us(fields["published"])
    content = fields.get("content")
    summary = fields.get("summary")
    mode = atom.content_mode(fields.get("content_type"))
    if summary == title and (content is None or mode == "base64"):
        summary = None  # the server's (RFC 4287 4.1.1.1)
    if content is None and links and not any(link.rel == "alternate" for link in links[:-1]):
        locator = Link(href=locator_base + paging.locator_segment(entry_id))
        if links[-1] == locator:
            links.pop()  # the server's (RFC 4287 4.1.1)
    event = Event(
        title=title,
        content=content,
        content_type=fields.get("content_type"),
        summary=summary,
        author=fields.get("author"),
        categories=tuple(categories),
        links=tuple(links),
        id=entry_id,
        updated_us=published_us,
    )
    return Entry(seq, entry_id, updated_us, published_us, event)


def _us(text: str) -> int:
    return datetime_to_us(datetime.fromisoformat(text))


def _link(el: Any) -> Link:
    length = el.get("length")
    return Link(
        href=el.get("href", ""),
        rel=el.get("rel", "alternate"),
        type=el.get("type"),
        hreflang=el.get("hreflang"),
        title=el.get("title"),
        length=int(length) if length is not None else None,
    )


def _content(el: Any) -> tuple[str | None, str]:
    """(content type as the event had it, content text) of ``atom:content``."""
    kind = el.get("type", "text")
    declared = el.get(_SF_TYPE)
    if declared is not None:
        return declared, el.text or ""  # JSON, as the text the page carries
    mode = atom.content_mode(kind)
    if mode == "text":
        return None, el.text or ""
    if mode == "xhtml":
        div = el.find(_DIV)
        if div is None:
            raise PageUnreadable("XHTML content without its div")
        return kind, _inner(div)
    if mode == "xml":
        children = list(el)
        if len(children) != 1:
            raise PageUnreadable(f"inline {kind} content without one root element")
        return kind, _serialised(children[0])
    if mode == "base64":
        try:
            return kind, base64.b64decode(el.text or "", validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise PageUnreadable(f"{kind} content is not Base64 of UTF-8 text") from None
    return kind, el.text or ""  # html, other text/*


def _serialised(el: Any) -> str:
    """An element as XML text, on its own (a copy: no namespace of the page around it)."""
    alone = copy.deepcopy(el)
    alone.tail = None
    text: str = etree.tostring(alone, encoding="unicode")
    return text


def _inner(div: Any) -> str:
    """What the renderer's XHTML ``div`` was written around: its text and children as XML."""
    whole = _serialised(div)
    start = whole.find(">") + 1
    if whole.endswith("/>"):
        return ""
    return whole[start : whole.rindex("</")]


@dataclass(frozen=True)
class PageFile:
    """A page's file as the archive holds it: what the file and its compressed copies hold,
    decoded, the file's first, each different one once (a copy that does not decode is left
    out), and the file's modification time (the page's freeze time: ``archive.write_page``)."""

    number: int
    bodies: tuple[bytes, ...]
    mtime_us: int


@dataclass(frozen=True)
class Recoverable:
    """What :func:`recoverable` found for one feed: the pages to store (their entries oldest
    first, their bytes), and why the next page could not be taken."""

    entries: tuple[Entry, ...]
    pages: tuple[tuple[PageFile, bytes], ...]
    problem: str | None


#: Renders archived page ``number`` of the feed from its entries (newest first), with the
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
    """Which of ``files`` (consecutive, from the one after the feed's frozen pages) can be
    taken back, in order, stopping at the first that cannot.

    A page is taken back with bytes its file or a copy holds, when its entries, read back from
    them, render to them, and they are vouched for: by the next page's digest of them (its
    ``sf:sha256``, in its file or a copy; ``following`` is the page file after the last of
    ``files``, if there is one), or, for the newest page, by being the only bytes of its file
    and copies that render alike. A consistent edit (a title changed) renders alike; only the
    digest the next page recorded when it froze tells. A damaged file whose copy is intact is
    taken back from the copy.

    ``stored`` holds the database's entries past its frozen pages, by sequence number, and
    ``stored_seqs`` the sequence numbers of the ids read, where the database has them;
    ``prev_sha256`` is the digest of the database's newest frozen page (None: it has none)."""
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
    """Page ``number``'s entries read back from ``body``, those the database holds as it holds
    them, if they render to ``body``; else why not."""
    try:
        read = page_entries(body, locator_base)
    except PageUnreadable as exc:
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
    """Which of the bytes that render alike (with their entries) are page ``number``'s, or
    None and why none is: those whose digest the next page gives, or, for the newest page, the
    only ones."""
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
    """The page's entries, newest first, those the database holds as it holds them; or why
    the page is not the continuation of the database's entries."""
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

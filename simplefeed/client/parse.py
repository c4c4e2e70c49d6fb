"""Bytes to a :class:`Page`: the only user of feedparser.

Retrieval is elsewhere (:mod:`simplefeed.client.fetch`). This module never does I/O.

:mod:`simplefeed.client.tree` always reads the entries. It reads strictly by namespace, and
keeps values exactly as published. feedparser's values cannot be handed on as the producer's.
It strips whitespace and maps C1 characters to cp1252. Inside content, it reads elements of
the vocabularies it knows as the entry's own. The parser choice (``parser=``) says what else
reads the document:

``"feedparser"`` (the default)
    feedparser must accept the document too, as the reference reader of Atom. A SAX error
    (not well-formed XML) raises :class:`~simplefeed.client.errors.NotAtom`. So does
    :class:`feedparser.CharacterEncodingUnknown`, and a root that is not an Atom 1.0 ``feed``.
    feedparser's other ``bozo`` conditions are kept in :attr:`Page.warnings` and logged.
``"lxml"``
    The strict reading alone, several times faster.

Both give equal pages (``tests/test_client_parse.py``). :func:`outline_page` reads only what
walking back needs. That is the links, the archive flag, and the newest and oldest sequence
numbers.

Every page carries the SHA-256 of its bytes (:attr:`Page.sha256`). It also carries the digest
its ``prev-archive`` link gives for the page before it (:attr:`Page.prev_sha256`). That digest
comes from the ``sf:sha256`` attribute. It is ``None`` on pages written before servers gave
one. The walk checks one digest against the other (:mod:`simplefeed.client.walk`).
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import xml.sax
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import Literal

from lxml import etree

from simplefeed.client import tree
from simplefeed.client.entry import EntryAuthor, EntryCategory, EntryLink, FeedEntry
from simplefeed.client.errors import MalformedPage, NotAtom, RepeatedEntry
from simplefeed.model import MAX_ATTRIBUTES

log = logging.getLogger(__name__)

__all__ = [
    "PARSERS",
    "EntryAuthor",
    "EntryCategory",
    "EntryLink",
    "FeedEntry",
    "Outline",
    "Page",
    "Parser",
    "Verdict",
    "accepted",
    "feedparser_verdict",
    "outline_page",
    "parse_page",
]

#: What reads documents besides the strict reading. It is feedparser too, or nothing else.
Parser = Literal["feedparser", "lxml"]
PARSERS: tuple[Parser, ...] = ("feedparser", "lxml")


class _Linked:
    """The links a walk follows, for anything with a ``url`` and its ``links`` by rel."""

    url: str
    links: Mapping[str, str]

    @property
    def permanent_url(self) -> str:
        """Where this page stays: ``via`` for the recent document, else ``self``."""
        return self.links.get("via") or self.links.get("self") or self.url

    @property
    def prev_archive(self) -> str | None:
        return self.links.get("prev-archive")

    @property
    def next_archive(self) -> str | None:
        return self.links.get("next-archive")


@dataclass(frozen=True)
class Page(_Linked):
    """One Atom document of a feed."""

    #: The URL it was retrieved from.
    url: str
    #: The feed-level links, by rel (the first of each rel).
    links: Mapping[str, str]
    #: The entries, OLDEST FIRST (the reverse of document order). Sequence numbers ascend.
    entries: tuple[FeedEntry, ...]
    #: True when ``fh:archive`` is present. Such an archived page never changes.
    is_archive: bool
    #: The bozo conditions that did not stop parsing.
    warnings: tuple[str, ...] = field(default=())
    #: The lowercase hex SHA-256 of the document's bytes.
    sha256: str = ""
    #: The digest the ``prev-archive`` link gives for the page before (``sf:sha256``), if any.
    prev_sha256: str | None = None

    @property
    def oldest_seq(self) -> int | None:
        return self.entries[0].seq if self.entries else None

    @property
    def newest_seq(self) -> int | None:
        return self.entries[-1].seq if self.entries else None

    def position(self, entry_id: str, seq: int) -> int | None:
        """Find the entry with this id and sequence number in :attr:`entries`.

        Returns its index (oldest first), or None. The id at another sequence number raises
        :class:`RepeatedEntry`.
        """
        for i, entry in enumerate(self.entries):
            if entry.id == entry_id:
                if entry.seq != seq:
                    raise RepeatedEntry(self.url, entry_id, seq, entry.seq)
                return i
        return None


@dataclass(frozen=True)
class Outline(_Linked):
    """What walking back through a document needs, without the entries.

    That is its links and whether it is archived. It is also the sequence numbers of its
    newest and (when known) oldest entries, and the digests.
    """

    url: str
    links: Mapping[str, str]
    is_archive: bool
    oldest_seq: int | None
    newest_seq: int | None
    sha256: str = ""
    prev_sha256: str | None = None

    @classmethod
    def of(cls, page: Page) -> Outline:
        return cls(
            page.url,
            page.links,
            page.is_archive,
            page.oldest_seq,
            page.newest_seq,
            page.sha256,
            page.prev_sha256,
        )


def parse_page(url: str, body: bytes, *, parser: Parser = "feedparser") -> Page:
    """Parse one document. Raises :class:`NotAtom` or :class:`MalformedPage`."""
    if parser == "feedparser":
        warnings = accepted(url, feedparser_verdict(body))
    elif parser == "lxml":
        warnings = ()
    else:
        raise ValueError(f"parser must be one of {', '.join(PARSERS)}, not {parser!r}")
    feed = tree.read_feed(url, tree.root(url, body))
    permanent = feed.links.get("via") or feed.links.get("self") or url
    entries = tree.read_entries(url, feed.entries[::-1], permanent)
    seen: set[str] = set()
    previous: FeedEntry | None = None
    for entry in entries:
        if previous is not None and entry.seq <= previous.seq:
            raise MalformedPage(
                url,
                f"entries are not newest first by sequence number "
                f"({entry.id!r} seq {entry.seq} is above {previous.id!r} seq {previous.seq})",
            )
        if entry.id in seen:
            raise MalformedPage(url, f"entry id {entry.id!r} is on the page twice")
        seen.add(entry.id)
        previous = entry
    return Page(
        url,
        feed.links,
        tuple(entries),
        feed.is_archive,
        warnings,
        hashlib.sha256(body).hexdigest(),
        feed.prev_sha256,
    )


def outline_page(url: str, body: bytes) -> Outline:
    """Outline one document, for walking back through it.

    A server writes the feed-level elements before the entries. So the document up to the end
    of its first entry, closed with ``</feed>``, holds all of them. That prefix is read
    strictly like any document. It is well-formed only when cut where the first entry, a child
    of the feed, ends. It gives the links, the archive flag and the newest sequence number.
    It costs a fraction of the whole document. The oldest sequence number is left unknown,
    because the full parse on the way forward reads and checks every entry.

    Anything else is outlined from the whole document. That covers no entry, or a prefix that
    is not well-formed or not one entry. When the sequence numbers are not consistent, the
    outline is the full parse's, so that the error raised is the full parse's.
    """
    digest = hashlib.sha256(body).hexdigest()
    end = body.find(b"</entry>")
    if end != -1:
        try:
            first = tree.read_feed(url, tree.root(url, body[: end + 8] + b"</feed>"))
        except NotAtom:
            pass
        else:
            if len(first.entries) == 1:
                newest = tree.seq_of(url, first.entries[0])
                return Outline(
                    url, first.links, first.is_archive, None, newest, digest, first.prev_sha256
                )
    feed = tree.read_feed(url, tree.root(url, body))
    if not feed.entries:
        return Outline(url, feed.links, feed.is_archive, None, None, digest, feed.prev_sha256)
    newest = tree.seq_of(url, feed.entries[0])
    oldest = tree.seq_of(url, feed.entries[-1])
    if newest - oldest < len(feed.entries) - 1:
        return Outline.of(parse_page(url, body, parser="lxml"))
    return Outline(url, feed.links, feed.is_archive, oldest, newest, digest, feed.prev_sha256)


#: What feedparser makes of a document (:func:`feedparser_verdict`). The first part says
#: why it is not Atom 1.0, or None when it is. The second holds its other bozo conditions.
Verdict = tuple[str | None, tuple[str, ...]]


#: The most namespace prefixes a document may declare for feedparser to read it.
#: For each element in a namespace it does not know, feedparser looks at every prefix
#: declared so far. So its time grows with prefixes times elements. 40,000 prefixes in 1.5 MB
#: take 29 s. 62 prefixes and 245,000 elements in 1.96 MB take 5.2 s. A Simplefeed document
#: declares two, and its inline content the same sixteen at most (``c0``...).
MAX_PREFIXES = 32
#: Only to count attributes, because a document feedparser reads need not be well-formed.
_COUNTING = etree.XMLParser(recover=True, resolve_entities=False, no_network=True)
_PREFIX = re.compile(rb"xmlns:([^\s=>/]+)\s*=")


def quadratic_problem(body: bytes) -> str | None:
    """Say why feedparser must not read ``body``, or return None.

    The reasons are an element with over :data:`MAX_ATTRIBUTES` attributes, or over
    :data:`MAX_PREFIXES` namespace prefixes declared.

    Every attribute of a start tag is written with a '=' between its '<' and the next '<'.
    No raw '<' can be in an attribute. So a stretch from one '<' to the next holds every '=' of
    its tag. A document with no stretch over the bound is let through without parsing. That
    takes about 0.1 ms a page of a hundred entries. The other documents are counted exactly
    (escaped markup in content, say). Prefixes are counted only where ``xmlns:`` is written
    more often than the bound.
    """
    if body.count(b"xmlns:") > MAX_PREFIXES:
        prefixes = set(_PREFIX.findall(body))
        if len(prefixes) > MAX_PREFIXES:
            return (
                f"{len(prefixes)} namespace prefixes declared (over {MAX_PREFIXES}, which"
                " feedparser reads in time that grows with their number times the elements')"
            )
    if max(map(bytes.count, body.split(b"<"), repeat(b"="))) <= MAX_ATTRIBUTES:
        return None
    root = etree.fromstring(body, _COUNTING)
    if root is None:
        return None
    for element in root.iter(etree.Element):
        if len(element.attrib) > MAX_ATTRIBUTES:
            return (
                f"an element with {len(element.attrib)} attributes"
                f" (<{etree.QName(element).localname}>; over {MAX_ATTRIBUTES}, which feedparser"
                " reads in time that grows with their square)"
            )
    return None


def feedparser_verdict(body: bytes) -> Verdict:
    """Have feedparser read the document, unless :func:`quadratic_problem` says it must not.

    It does no I/O and logs nothing, because :mod:`simplefeed.client.checker` runs it in a
    process of its own.
    """
    crowded = quadratic_problem(body)
    if crowded is not None:
        return crowded, ()
    # Imported here, because its import takes a tenth of a second of every start-up, and the
    # consumer with ``parser="lxml"`` never needs it.
    import feedparser

    d = feedparser.parse(io.BytesIO(body), sanitize_html=False, resolve_relative_uris=False)
    warnings: list[str] = []
    if d.get("bozo"):
        exc = d.get("bozo_exception")
        if isinstance(exc, xml.sax.SAXException | feedparser.CharacterEncodingUnknown):
            return f"{type(exc).__name__}: {exc}", ()
        warnings.append(f"{type(exc).__name__}: {exc}")
    version = d.get("version")
    if version != "atom10":
        what = f"a {version} document" if version else "no Atom feed element at the root"
        return what, tuple(warnings)
    return None, tuple(warnings)


def accepted(url: str, verdict: Verdict) -> tuple[str, ...]:
    """Require that feedparser took the document for Atom 1.0, else raise :class:`NotAtom`.

    Logs feedparser's warnings and returns them.
    """
    reason, warnings = verdict
    for warning in warnings:
        log.warning("%s: feedparser: %s", url, warning)
    if reason is not None:
        raise NotAtom(url, reason)
    return warnings

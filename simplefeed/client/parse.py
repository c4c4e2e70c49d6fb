"""Bytes to a :class:`Page`: the only user of feedparser.

Retrieval is elsewhere (:mod:`simplefeed.client.fetch`); this module never does I/O. feedparser
is called on a :class:`io.BytesIO` (a bare ``bytes`` or ``str`` could be taken for a file name or
a URL) with HTML sanitising and relative-URI resolution off, so content reaches the consumer as
the producer wrote it.

feedparser's ``bozo`` flag is handled explicitly:

* a SAX error (the bytes are not well-formed XML; feedparser's loose fallback parser may still
  have produced something from them) and :class:`feedparser.CharacterEncodingUnknown` raise
  :class:`~simplefeed.client.errors.NotAtom`: a consumer that must not miss entries does not
  guess at a half-parsed page;
* the other "things nobody cares about" (an encoding override, an undeclared namespace) are
  kept in :attr:`Page.warnings` and logged, and parsing goes on;
* a well-formed document whose root is not an Atom 1.0 ``feed`` (HTML, RSS, Atom 0.3, an error
  page) raises :class:`NotAtom` too.

What feedparser gives, and how it lands here:

* extension elements are keyed by the prefix the *document* binds: ``<sf:seq>`` becomes
  ``sf_seq``. The prefix is looked up from the namespace URI, so any prefix works.
* Base64 content (JSON and other non-XML media types) arrives decoded when it is UTF-8 text;
  binary content stays Base64 text.
* Inline XML content under an XML media type is something feedparser drops (it keeps XHTML
  only); for those entries the content element is serialised again with the standard library's
  ElementTree from the same, already well-formed, bytes.
* feedparser invents a ``type`` for links that have none, so link types are not reported.

Two parsers (``parser=``):

``"feedparser"`` (the default)
    feedparser for every document: the reference.
``"lxml"``
    :mod:`simplefeed.client.parse_fast` for the documents a Simplefeed server renders (more
    than ten times faster), feedparser for anything else: what the fast path returns is equal
    to what feedparser returns, entry for entry (``tests/test_client_parse.py``), and it gives
    up on anything it does not vouch for.

:func:`outline_page` reads only what walking back needs (the links, the archive flag, the
newest and oldest sequence numbers), whichever parser reads entries: with the fast path's
feed-level reading, or with feedparser when that gives up. The entries of a page walked back
through are parsed, and checked, when the walk comes forward again.
"""

from __future__ import annotations

import io
import itertools
import logging
import xml.sax
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from xml.etree import ElementTree

import feedparser

from simplefeed.client import parse_fast
from simplefeed.client.errors import MalformedPage, NotAtom
from simplefeed.model import ATOM_NS, FH_NS, SF_NS

log = logging.getLogger(__name__)

__all__ = [
    "PARSERS",
    "EntryLink",
    "FeedEntry",
    "Outline",
    "Page",
    "Parser",
    "outline_page",
    "parse_page",
]

#: Which parser reads entries: feedparser for everything, or the fast path where it applies.
Parser = Literal["feedparser", "lxml"]
PARSERS: tuple[Parser, ...] = ("feedparser", "lxml")


@dataclass(frozen=True)
class EntryLink:
    href: str
    rel: str = "alternate"
    title: str | None = None


@dataclass(frozen=True)
class FeedEntry:
    """One entry as the consumer sees it."""

    #: The entry's ``atom:id``.
    id: str
    #: Its sequence number in the feed (``sf:seq``): contiguous from 1.
    seq: int
    title: str
    #: ``atom:updated`` as the document carries it (RFC 3339).
    updated: str
    #: The content, decoded (Base64 undone for UTF-8 text); ``None`` when there is no content.
    content: str | None
    #: feedparser's name for the content's type: ``text/plain``, ``text/html``,
    #: ``application/xhtml+xml``, or the producer's media type (``application/json``...).
    content_type: str | None
    summary: str | None
    links: tuple[EntryLink, ...]
    #: Permanent URL of the page the entry was read from (``via`` or ``self``).
    page_url: str

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``simplefeed consume --jsonl`` prints)."""
        return {
            "id": self.id,
            "seq": self.seq,
            "title": self.title,
            "updated": self.updated,
            "content": self.content,
            "content_type": self.content_type,
            "summary": self.summary,
            "links": [
                {k: v for k, v in (("rel", link.rel), ("href", link.href), ("title", link.title))}
                for link in self.links
            ],
            "page": self.page_url,
        }


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
    #: The entries, OLDEST FIRST (the reverse of document order), sequence numbers ascending.
    entries: tuple[FeedEntry, ...]
    #: ``fh:archive`` present: an archived page, which never changes.
    is_archive: bool
    #: bozo conditions that did not stop parsing.
    warnings: tuple[str, ...] = field(default=())

    @property
    def oldest_seq(self) -> int | None:
        return self.entries[0].seq if self.entries else None

    @property
    def newest_seq(self) -> int | None:
        return self.entries[-1].seq if self.entries else None

    def position(self, entry_id: str) -> int | None:
        """Index of the entry in :attr:`entries` (oldest first), or None."""
        for i, entry in enumerate(self.entries):
            if entry.id == entry_id:
                return i
        return None


@dataclass(frozen=True)
class Outline(_Linked):
    """What walking back through a document needs: its links, whether it is archived, and the
    sequence numbers of its oldest and newest entries, without the entries themselves."""

    url: str
    links: Mapping[str, str]
    is_archive: bool
    oldest_seq: int | None
    newest_seq: int | None

    @classmethod
    def of(cls, page: Page) -> Outline:
        return cls(page.url, page.links, page.is_archive, page.oldest_seq, page.newest_seq)


def parse_page(url: str, body: bytes, *, parser: Parser = "feedparser") -> Page:
    """Parse one document. Raises :class:`NotAtom` or :class:`MalformedPage`."""
    if parser == "lxml":
        scanned = parse_fast.scan(body)
        if scanned is not None:
            try:
                return _page(
                    url, body, scanned.links, scanned.entries, scanned.is_archive, (), _SEQ
                )
            except ElementTree.ParseError:
                pass  # lxml took it, expat did not (for inline XML): leave it to feedparser
        log.debug("%s: not a usual Simplefeed document; parsed with feedparser", url)
    elif parser != "feedparser":
        raise ValueError(f"parser must be one of {', '.join(PARSERS)}, not {parser!r}")
    return _parse_with_feedparser(url, body)


def outline_page(url: str, body: bytes) -> Outline:
    """The outline of one document: the fast path's feed-level reading, or a full feedparser
    parse's when the fast path gives up or the sequence numbers are not right (so that the
    error raised is feedparser's). The entries are not checked here, only counted."""
    head = parse_fast.outline(body)
    if head is not None:
        if head.count == 0:
            return Outline(url, head.links, head.is_archive, None, None)
        newest, oldest = _seq_or_none(head.newest_seq), _seq_or_none(head.oldest_seq)
        if newest is not None and oldest is not None and newest - oldest >= head.count - 1:
            return Outline(url, head.links, head.is_archive, oldest, newest)
    return Outline.of(_parse_with_feedparser(url, body))


_SEQ = ("sf_seq",)


def _seq_or_none(text: object) -> int | None:
    try:
        seq = int(str(text).strip())
    except ValueError:
        return None
    return seq if seq >= 1 else None


def _parse_with_feedparser(url: str, body: bytes) -> Page:
    d = feedparser.parse(io.BytesIO(body), sanitize_html=False, resolve_relative_uris=False)
    warnings: list[str] = []
    if d.get("bozo"):
        exc = d.get("bozo_exception")
        if isinstance(exc, xml.sax.SAXException | feedparser.CharacterEncodingUnknown):
            raise NotAtom(url, f"{type(exc).__name__}: {exc}")
        warnings.append(f"{type(exc).__name__}: {exc}")
        log.warning("%s: feedparser: %s", url, warnings[-1])
    version = d.get("version")
    if version != "atom10":
        what = f"a {version} document" if version else "no Atom feed element at the root"
        raise NotAtom(url, what)

    namespaces: Mapping[str, str] = d.get("namespaces", {})
    seq_keys = _keys(namespaces, SF_NS, "seq", default="sf")
    archive_keys = _keys(namespaces, FH_NS, "archive", default="fh")

    links: dict[str, str] = {}
    for link in d.feed.get("links", ()):
        rel, href = link.get("rel"), link.get("href")
        if rel and href and rel not in links:
            links[rel] = href
    is_archive = any(key in d.feed for key in archive_keys)
    return _page(url, body, links, list(d.entries), is_archive, tuple(warnings), seq_keys)


def _page(
    url: str,
    body: bytes,
    links: dict[str, str],
    raw_entries: Sequence[Mapping[str, Any]],
    is_archive: bool,
    warnings: tuple[str, ...],
    seq_keys: tuple[str, ...],
) -> Page:
    """A :class:`Page` from entries keyed as feedparser keys them (newest first)."""
    permanent = links.get("via") or links.get("self") or url
    contents = [_content(raw) for raw in raw_entries]
    xml_content: dict[str, str] | None = None
    if any(_is_inline_xml(content) for content in contents):
        xml_content = _inline_xml_contents(body)

    entries = [  # documents list entries newest first
        _entry(url, raw, content, seq_keys, permanent, xml_content)
        for raw, content in zip(reversed(raw_entries), reversed(contents), strict=True)
    ]
    for older, newer in itertools.pairwise(entries):
        if newer.seq <= older.seq:
            raise MalformedPage(
                url,
                f"entries are not newest first by sequence number "
                f"({newer.id!r} seq {newer.seq} is above {older.id!r} seq {older.seq})",
            )
    return Page(url, links, tuple(entries), is_archive, warnings)


def _keys(namespaces: Mapping[str, str], uri: str, local: str, *, default: str) -> tuple[str, ...]:
    """feedparser's keys for ``{uri}local``: ``<prefix>_<local>`` for each prefix bound to uri."""
    prefixes = {prefix for prefix, bound in namespaces.items() if bound == uri and prefix}
    prefixes.add(default)
    return tuple(f"{p}_{local}" for p in sorted(prefixes))


def _content(raw: Mapping[str, Any]) -> Mapping[str, Any] | None:
    content = raw.get("content")
    if not content:
        return None
    first: Mapping[str, Any] = content[0]
    return first


def _is_inline_xml(content: Mapping[str, Any] | None) -> bool:
    if content is None:
        return False
    media = str(content.get("type") or "").lower()
    return media != "application/xhtml+xml" and (media.endswith("/xml") or media.endswith("+xml"))


def _entry(
    url: str,
    raw: Mapping[str, Any],
    content: Mapping[str, Any] | None,
    seq_keys: tuple[str, ...],
    page_url: str,
    xml_content: Mapping[str, str] | None,
) -> FeedEntry:
    entry_id = raw.get("id")
    if not entry_id:
        raise MalformedPage(url, f"an entry has no id (title {raw.get('title')!r})")
    seq_text = None
    for key in seq_keys:
        if key in raw:
            seq_text = raw[key]
            break
    try:
        seq = int(str(seq_text).strip())
    except ValueError:
        raise MalformedPage(
            url, f"entry {entry_id!r} has no valid sequence number (sf:seq: {seq_text!r})"
        ) from None
    if seq < 1:
        raise MalformedPage(url, f"entry {entry_id!r} has sequence number {seq}")
    text: str | None = None
    content_type: str | None = None
    if content is not None:
        content_type = content.get("type")
        text = content.get("value", "")
        if xml_content is not None and _is_inline_xml(content):
            text = xml_content.get(entry_id, text)
    summary_detail = raw.get("summary_detail")
    summary = summary_detail.get("value") if summary_detail else None
    links = tuple(
        [
            EntryLink(href=link["href"], rel=link.get("rel", "alternate"), title=link.get("title"))
            for link in raw.get("links", ())
            if link.get("href")
        ]
    )
    return FeedEntry(
        id=entry_id,
        seq=seq,
        title=raw.get("title", ""),
        updated=raw.get("updated", ""),
        content=text,
        content_type=content_type,
        summary=summary,
        links=links,
        page_url=page_url,
    )


def _inline_xml_contents(body: bytes) -> dict[str, str]:
    """Entry id -> its inline XML content, serialised again (feedparser drops it).

    Called on bytes feedparser's strict parser or lxml has already accepted as well-formed
    (:class:`ElementTree.ParseError` should lxml be more lenient than expat).
    """
    root = ElementTree.fromstring(body)
    out: dict[str, str] = {}
    atom = f"{{{ATOM_NS}}}"
    for entry in root.iter(f"{atom}entry"):
        entry_id = entry.findtext(f"{atom}id")
        content = entry.find(f"{atom}content")
        if entry_id is None or content is None:
            continue
        children = list(content)
        out[entry_id.strip()] = "".join(_serialise(child) for child in children) or (
            content.text or ""
        )
    return out


def _serialise(element: ElementTree.Element) -> str:
    """The element as XML text; its own namespace as the default one when that works."""
    if element.tag.startswith("{"):
        namespace = element.tag[1:].partition("}")[0]
        try:
            return ElementTree.tostring(element, encoding="unicode", default_namespace=namespace)
        except ValueError:  # un-namespaced descendants: keep generated prefixes
            pass
    return ElementTree.tostring(element, encoding="unicode")

"""The strict reading of a document: lxml, element by element, by namespace.

This is the consumer's only lxml user. It does no I/O.

Whichever parser is chosen (:mod:`simplefeed.client.parse`), entries come from here. That
gives three promises.

* Nothing inside ``atom:content`` (or any other element) is ever taken for structure. An
  entry's id, title, links, sequence number... are the Atom (and ``sf``) children of an
  ``atom:entry``. That entry is a child of the root ``atom:feed``, and nothing else counts.
  Elements of other vocabularies inside content (Atom 0.3, RSS, Dublin Core...) are content.
* Values are what the producer published, character for character. No whitespace is
  stripped from titles, summaries or content. Identifiers, dates and numbers are stripped.
  No character is mapped.
* JSON content is restored to its value, from either form a server writes. One is the
  readable form (``type="text"`` with ``sf:type="application/json"``). The other is the
  older Base64 form.

Links (the feed's and the entries') are absolute. RFC 4287 allows a relative reference. It is
resolved against the ``xml:base`` in scope and the URL the document was asked for (RFC 3986
5.1). So a feed whose ``prev-archive`` links read ``?page=3`` can be walked.

A DOCTYPE is refused, because no entity is ever expanded. So is a root other than
``atom:feed``.
"""

from __future__ import annotations

import binascii
import functools
import json
import math
from dataclasses import dataclass
from json.scanner import make_scanner
from typing import Any
from urllib.parse import urljoin
from xml.etree import ElementTree

from lxml import etree

from simplefeed.client.entry import EntryAuthor, EntryCategory, EntryLink, FeedEntry, made
from simplefeed.client.errors import MalformedPage, NotAtom
from simplefeed.model import ATOM_NS, FH_NS, SF_NS, locator_segment

__all__ = ["MAX_SEQ", "Feed", "is_json", "read_entries", "read_feed", "root"]

XHTML_NS = "http://www.w3.org/1999/xhtml"
_XML_NS = "http://www.w3.org/XML/1998/namespace"
#: Sequence numbers above this are refused, because they would not fit a SQLite INTEGER.
MAX_SEQ = 2**63 - 1

_A = f"{{{ATOM_NS}}}"
_FEED = f"{_A}feed"
_ENTRY = f"{_A}entry"
_ID = f"{_A}id"
_TITLE = f"{_A}title"
_UPDATED = f"{_A}updated"
_PUBLISHED = f"{_A}published"
_CONTENT = f"{_A}content"
_SUMMARY = f"{_A}summary"
_LINK = f"{_A}link"
_CATEGORY = f"{_A}category"
_AUTHOR = f"{_A}author"
_NAME = f"{_A}name"
_EMAIL = f"{_A}email"
_URI = f"{_A}uri"
_SEQ = f"{{{SF_NS}}}seq"
_SF_TYPE = f"{{{SF_NS}}}type"
_SF_SHA256 = f"{{{SF_NS}}}sha256"
_ARCHIVE = f"{{{FH_NS}}}archive"
_XHTML_DIV = f"{{{XHTML_NS}}}div"

_PARSER = etree.XMLParser(
    resolve_entities=False,
    no_network=True,
    load_dtd=False,
    huge_tree=False,
    collect_ids=False,
    remove_comments=True,
    remove_pis=True,
)


def root(url: str, body: bytes) -> Any:
    """Return the ``atom:feed`` element of ``body``. Raise :class:`NotAtom` for anything else."""
    try:
        element = etree.fromstring(body, _PARSER, base_url=url)
    except (etree.LxmlError, ValueError) as exc:
        raise NotAtom(url, f"not well-formed XML: {exc}") from None
    doctype: str = element.getroottree().docinfo.doctype  # type: ignore[union-attr]
    if doctype:
        raise NotAtom(url, "a DOCTYPE (refused: no entity is expanded)")
    if element.tag != _FEED:
        raise NotAtom(url, f"the root element is {element.tag!r}, not an Atom 1.0 feed")
    return element


@dataclass
class Feed:
    """The feed-level reading.

    It holds the links by rel (the first of each). It holds the digest the ``prev-archive``
    link gives (``sf:sha256``), and the archive flag. It holds the entry elements in document
    order, newest first.
    """

    links: dict[str, str]
    prev_sha256: str | None
    is_archive: bool
    entries: list[Any]


def read_feed(url: str, feed: Any) -> Feed:
    links: dict[str, str] = {}
    prev_sha256: str | None = None
    is_archive = False
    entries = []
    for child in feed:
        tag = child.tag
        if tag == _ENTRY:
            entries.append(child)
        elif tag == _LINK:
            rel = child.get("rel", "alternate")
            href = child.get("href")
            if href and rel not in links:
                links[rel] = absolute(child, href)
                if rel == "prev-archive":
                    digest = child.get(_SF_SHA256)
                    prev_sha256 = digest.strip().lower() if digest is not None else None
        elif tag == _ARCHIVE:
            is_archive = True
    return Feed(links, prev_sha256, is_archive, entries)


def seq_of(url: str, entry: Any) -> int:
    """Return the sequence number of an entry element, or raise :class:`MalformedPage`."""
    for child in entry:
        if child.tag == _SEQ:
            return _seq(url, _stripped(child), _id_text(entry))
    raise MalformedPage(url, f"entry {_id_text(entry)!r} has no valid sequence number (no sf:seq)")


def read_entries(url: str, elements: list[Any], page_url: str) -> list[FeedEntry]:
    """Read the entries, in the order given."""
    return [_entry(url, element, page_url) for element in elements]


def _entry(url: str, el: Any, page_url: str) -> FeedEntry:
    entry_id: str | None = None
    seq_text: str | None = None
    title: str | None = None
    updated: str | None = None
    published: str | None = None
    summary: str | None = None
    content: Any = None
    content_type: str | None = None
    has_content = False
    author: EntryAuthor | None = None
    categories: list[EntryCategory] = []
    links: list[EntryLink] = []
    for child in el:
        tag = child.tag
        if tag == _ID:
            if entry_id is not None:
                raise MalformedPage(url, f"entry {entry_id!r} has two ids")
            entry_id = _stripped(child)
        elif tag == _SEQ:
            if seq_text is not None:
                raise MalformedPage(url, "an entry has two sequence numbers")
            seq_text = _stripped(child)
        elif tag == _TITLE:
            title = _text_construct(child)
        elif tag == _UPDATED:
            updated = _stripped(child)
        elif tag == _PUBLISHED:
            published = _stripped(child)
        elif tag == _LINK:
            links.append(_link(url, child))
        elif tag == _CONTENT:
            if has_content:
                raise MalformedPage(url, "an entry has two content elements")
            has_content = True
            content_type, content = _content(url, child)
        elif tag == _SUMMARY:
            summary = _text_construct(child)
        elif tag == _CATEGORY and child.get("term") is not None:
            categories.append(_category(child))
        elif tag == _AUTHOR and author is None:
            author = _author(child)
    if not entry_id:
        raise MalformedPage(url, f"an entry has no id (title {title!r})")
    if seq_text is None:
        raise MalformedPage(url, f"entry {entry_id!r} has no valid sequence number (no sf:seq)")
    if not has_content and links:
        links = _producer_links(links, entry_id, page_url)
    return made(
        FeedEntry,
        {
            "id": entry_id,
            "seq": _seq(url, seq_text, entry_id),
            "title": title if title is not None else "",
            "updated": updated if updated is not None else "",
            "content": content,
            "content_type": content_type,
            "summary": summary,
            "links": tuple(links),
            "page_url": page_url,
            "author": author,
            "categories": tuple(categories),
            "published": published,
        },
    )


def _producer_links(links: list[EntryLink], entry_id: str, page_url: str) -> list[EntryLink]:
    """Return the links of an entry without content, less the one the server added.

    The server adds an alternate link to the entry's own locator, last. It does so when the
    producer gave no alternate link, because RFC 4287 4.1.1 wants one. The locator is
    ``entries/`` beside the page's ``pages/`` (:meth:`simplefeed.rules.paging.Urls.entry`).
    Handed on, it would read as the producer's.
    """
    locator = EntryLink(href=urljoin(page_url, "../entries/" + locator_segment(entry_id)))
    if links[-1] != locator or any(link.rel == "alternate" for link in links[:-1]):
        return links
    return links[:-1]


def _category(el: Any) -> EntryCategory:
    get = el.get
    return made(
        EntryCategory, {"term": get("term"), "scheme": get("scheme"), "label": get("label")}
    )


def _seq(url: str, text: str, entry_id: str | None) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise MalformedPage(url, f"entry {entry_id!r} has no valid sequence number: {text!r:.40}")
    seq = int(text)
    if not 1 <= seq <= MAX_SEQ:
        raise MalformedPage(url, f"entry {entry_id!r} has sequence number {seq} (out of range)")
    return seq


def _id_text(entry: Any) -> str | None:
    for child in entry:
        if child.tag == _ID:
            return _stripped(child)
    return None


def _stripped(el: Any) -> str:
    return _string(el).strip()


def _string(el: Any) -> str:
    """Return the element's text, descendants' text included, exactly as it stands."""
    if len(el):
        return "".join(el.itertext())
    text: str | None = el.text
    return text if text is not None else ""


def _text_construct(el: Any) -> str:
    """Read a title or summary: text for ``text`` and ``html``, markup for ``xhtml``."""
    if el.get("type") == "xhtml":
        return _xhtml(el)
    return _string(el)


def _author(el: Any) -> EntryAuthor:
    name = email = uri = None
    for part in el:
        if part.tag == _NAME and name is None:
            name = _string(part)
        elif part.tag == _EMAIL and email is None:
            email = _string(part)
        elif part.tag == _URI and uri is None:
            uri = _string(part)
    return EntryAuthor(name or "", email, uri)


def _link(url: str, el: Any) -> EntryLink:
    href = el.get("href")
    if href is None:
        raise MalformedPage(url, "a link without href")
    length_text = el.get("length")
    length: int | None = None
    if length_text is not None:
        length_text = length_text.strip()
        if not length_text.isascii() or not length_text.isdigit() or len(length_text) > 19:
            raise MalformedPage(url, f"a link with a length that is not a number: {href!r}")
        length = int(length_text)
    get = el.get
    return made(
        EntryLink,
        {
            "href": absolute(el, href),
            "rel": get("rel", "alternate"),
            "type": get("type"),
            "hreflang": get("hreflang"),
            "title": get("title"),
            "length": length,
        },
    )


#: How an absolute http(s) reference starts, in the case servers write. ``urljoin`` leaves
#: such a reference as it is. So this only skips the work for the links of most feeds.
_ABSOLUTE = ("https://", "http://")


def absolute(el: Any, href: str) -> str:
    """Resolve ``href``, a link's reference, against the base URI of ``el``.

    That base is its ``xml:base`` in scope, resolved against the URL the document was asked for
    (:func:`root`).
    """
    if href.startswith(_ABSOLUTE):
        return href
    base: str | None = el.base
    return urljoin(base, href) if base else href


@functools.lru_cache(maxsize=256)
def is_json(media_type: str) -> bool:
    """Whether ``media_type`` is JSON. A feed names a few types, so each is worked out once."""
    media = media_type.partition(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _content(url: str, el: Any) -> tuple[str | None, Any]:
    """Read ``atom:content`` as (content type, value)."""
    if el.get("src") is not None:
        return el.get("type"), None  # Out-of-line content. The link is the src.
    kind = el.get("type", "text")
    declared = el.get(_SF_TYPE)
    if declared is not None and kind == "text":  # The readable form of JSON or other text.
        text = _string(el)
        return declared, _json(url, text) if is_json(declared) else text
    lowered = kind.lower()
    if lowered in ("text", "html"):
        return kind, _string(el)
    if lowered == "xhtml":
        return kind, _xhtml(el)
    if lowered.endswith("/xml") or lowered.endswith("+xml"):
        children = list(el)
        if not children:
            return kind, _string(el)
        return kind, "".join(_xml(child) for child in children)
    if lowered.startswith("text/"):
        return kind, _string(el)
    text = _string(el)
    try:
        decoded = binascii.a2b_base64(text).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        return kind, text  # Not Base64 of UTF-8 text, so keep it as it stands.
    return kind, _json(url, decoded) if is_json(kind) else decoded


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    """Read a JSON number with a fraction or an exponent as a double.

    A number past a double's range (``1e400``) is refused. It would read as infinity, which
    JSON cannot write back. ``--jsonl`` would print ``Infinity``, a line no strict JSON reader
    takes.
    """
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} overflows a double")
    return value


#: One decoder for every entry, because ``json.loads`` with an argument makes one each call.
_JSON = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)
#: Its scanner, which reads one value from a place in the text.
_SCAN = make_scanner(_JSON)  # type: ignore[arg-type]  # Its stub wants a scanner, not a decoder.


def _json(url: str, text: str) -> Any:
    """Read JSON text, or raise :class:`MalformedPage`.

    A server writes the value with no whitespace around it. So the scanner reads it first,
    without the decoder's steps for that whitespace, an eighth of the decoding. Any
    other text goes through the whole decoder, which gives the value or the error.
    """
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError, RecursionError):
        pass
    else:
        if end == len(text):
            return value
    try:
        return _JSON.decode(text)
    except (ValueError, RecursionError) as exc:
        raise MalformedPage(url, f"JSON content that is not JSON: {exc}") from None


def _xml(el: Any) -> str:
    """Write inline XML content as XML text.

    The text leaves out the declarations of the document around it. It uses the content's own
    namespace as the default one when that works. Producers mostly send that form:
    ``<svg xmlns="http://www.w3.org/2000/svg" width="1"><circle r="1"/></svg>``. The server
    writes it with prefixes of its own, ``c0:svg``.
    """
    tag: str = el.tag
    if tag.startswith("{") and all(isinstance(d.tag, str) and d.tag[:1] == "{" for d in el.iter()):
        namespace = tag[1:].partition("}")[0]
        others = sorted(_namespaces(el) - {namespace, _XML_NS})
        nsmap: dict[str | None, str] = {None: namespace}
        nsmap.update((f"ns{number}", uri) for number, uri in enumerate(others))
        return str(etree.tostring(_rebuilt(el, nsmap), encoding="unicode"))
    # An element without a namespace is inside. Its default namespace is none, so prefixes stay.
    written = etree.tostring(el, encoding="unicode", with_tail=False)
    standalone = ElementTree.fromstring(written)  # lxml writes every declaration in scope.
    return ElementTree.tostring(standalone, encoding="unicode")


def _namespaces(el: Any) -> set[str]:
    """Return the namespaces of the elements and attributes in ``el``."""
    found: set[str] = set()
    for descendant in el.iter():
        for name in (descendant.tag, *descendant.attrib):
            if name[:1] == "{":
                found.add(name[1:].partition("}")[0])
    return found


def _rebuilt(el: Any, nsmap: dict[str | None, str] | None = None) -> Any:
    """Copy ``el`` (names, attributes, text) with the declarations of ``nsmap`` at its top.

    Its descendants use those declarations. Their elements in the default namespace are
    unprefixed.
    """
    # lxml-stubs type nsmap's keys as str. But lxml's API keys the default namespace by None.
    copy = etree.Element(el.tag, dict(el.attrib), nsmap=nsmap)  # type: ignore[arg-type]
    copy.text = el.text
    for child in el:
        rebuilt = _rebuilt(child)
        rebuilt.tail = child.tail
        copy.append(rebuilt)
    return copy


def _xhtml(el: Any) -> str:
    """Return the markup inside the wrapping XHTML ``div``, or inside ``el`` without one."""
    children = list(el)
    inner = children[0] if len(children) == 1 and children[0].tag == _XHTML_DIV else el
    written: str = etree.tostring(inner, encoding="unicode", with_tail=False)
    if written.endswith("/>") and len(inner) == 0 and not inner.text:
        return ""
    return written[written.index(">") + 1 : written.rindex("</")]

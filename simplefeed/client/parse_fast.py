"""The fast parse path: lxml over the documents a Simplefeed server renders, or nothing.

:func:`scan` reads a document with lxml and gives back, for the entries, exactly the values
feedparser gives for them (the same ``id``, ``title``, ``updated``, ``content``, ``summary``,
``links`` and ``sf:seq``, processed the way :mod:`feedparser` processes them: whitespace stripped,
Base64 undone, XHTML re-serialised, its "UTF-8 read as Latin-1" repair and its cp1252 mapping
applied), or ``None`` when the document is anything but the usual. The caller
(:func:`simplefeed.client.parse.parse_page`) then parses it with feedparser, so the two paths
always give equal pages; ``tests/test_client_parse.py`` checks that on every kind of document
the server renders and on hand-written edge cases.

"The usual" is a whitelist, checked before anything is believed:

* UTF-8 bytes that start with an XML 1.0 declaration naming UTF-8; no DOCTYPE;
* namespace declarations: Atom as the default on the root, ``sf`` and ``fh`` bound to ours and
  to RFC 5005's, XHTML as the default of XHTML content, and ``c0``, ``c1``... bound to namespaces
  feedparser does not know (what the server writes for inline XML content);
* no attribute named ``base`` anywhere (``xml:base``: feedparser resolves IRIs against it);
* the root is ``atom:feed``; feed-level children and entry children are the Atom elements a feed
  has (anything else, ``atom:source`` or any extension but ``fh:archive`` and ``sf:seq``, is
  unusual), with no child elements but where Atom has them, and with only the attributes Atom
  gives them where feedparser reads attributes (``link``, ``content``, text constructs, the
  entry itself, ``sf:seq``);
* entries have one ``id``, one ``updated``, one ``sf:seq``, at most one ``title``, ``content``
  and ``summary``; link IRIs are absolute, and neither they nor ids have a third slash after
  ``scheme:`` (which feedparser drops);
* text constructs (title, summary) are ``text`` or ``html``; content is text, HTML, XHTML (in
  the XHTML namespace, nothing feedparser would treat specially), inline XML (every element in
  a ``cN`` namespace, in an entry with an ASCII id), other ``text/*``, or Base64 under any
  other media type.

:func:`outline` checks as much of the document but its entries, which it only counts.
Within the consumer this module is the only user of lxml, and it does no I/O.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
import threading
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from lxml import etree

from simplefeed.model import ATOM_NS, FH_NS, SF_NS

__all__ = ["FEEDPARSER_NAMESPACES", "Head", "Scan", "outline", "scan"]

XHTML_NS = "http://www.w3.org/1999/xhtml"

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
_CONTRIBUTOR = f"{_A}contributor"
_RIGHTS = f"{_A}rights"
_PERSONS = frozenset({_AUTHOR, _CONTRIBUTOR})
_PERSON_PARTS = frozenset({f"{_A}name", f"{_A}email", f"{_A}uri"})
_SEQ = f"{{{SF_NS}}}seq"
_ARCHIVE = f"{{{FH_NS}}}archive"
_XHTML = f"{{{XHTML_NS}}}"


_LINK_ATTRS = frozenset({"href", "rel", "type", "hreflang", "title", "length"})
#: Values of ``type`` on a text construct that feedparser reads as the plain text it holds.
_TEXT_TYPES = frozenset({"text", "html"})

#: Every namespace feedparser 6 knows by URI (``feedparser.mixin._FeedParserMixin.namespaces``,
#: lower-cased). An element in one of them means something to feedparser (``dc:title`` is a
#: title, even inside content), so inline XML content in one of them is unusual. The test suite
#: checks this list against the installed feedparser.
FEEDPARSER_NAMESPACES = frozenset(
    {
        "",
        "http://backend.userland.com/rss",
        "http://blogs.law.harvard.edu/tech/rss",
        "http://purl.org/rss/1.0/",
        "http://my.netscape.com/rdf/simple/0.9/",
        "http://example.com/newformat#",
        "http://example.com/necho",
        "http://purl.org/echo/",
        "uri/of/echo/namespace#",
        "http://purl.org/pie/",
        "http://purl.org/atom/ns#",
        "http://www.w3.org/2005/atom",
        "http://purl.org/rss/1.0/modules/rss091#",
        "http://webns.net/mvcb/",
        "http://purl.org/rss/1.0/modules/aggregation/",
        "http://purl.org/rss/1.0/modules/annotate/",
        "http://media.tangent.org/rss/1.0/",
        "http://backend.userland.com/blogchannelmodule",
        "http://creativecommons.org/ns#license",
        "http://web.resource.org/cc/",
        "http://cyber.law.harvard.edu/rss/creativecommonsrssmodule.html",
        "http://backend.userland.com/creativecommonsrssmodule",
        "http://purl.org/rss/1.0/modules/company",
        "http://purl.org/rss/1.0/modules/content/",
        "http://my.theinfo.org/changed/1.0/rss/",
        "http://purl.org/dc/elements/1.1/",
        "http://purl.org/dc/terms/",
        "http://purl.org/rss/1.0/modules/email/",
        "http://purl.org/rss/1.0/modules/event/",
        "http://rssnamespace.org/feedburner/ext/1.0",
        "http://freshmeat.net/rss/fm/",
        "http://xmlns.com/foaf/0.1/",
        "http://www.w3.org/2003/01/geo/wgs84_pos#",
        "http://www.georss.org/georss",
        "http://www.opengis.net/gml",
        "http://postneo.com/icbm/",
        "http://purl.org/rss/1.0/modules/image/",
        "http://www.itunes.com/dtds/podcast-1.0.dtd",
        "http://example.com/dtds/podcast-1.0.dtd",
        "http://purl.org/rss/1.0/modules/link/",
        "http://search.yahoo.com/mrss",
        "http://search.yahoo.com/mrss/",
        "http://madskills.com/public/xml/rss/module/pingback/",
        "http://prismstandard.org/namespaces/1.2/basic/",
        "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
        "http://www.w3.org/2000/01/rdf-schema#",
        "http://purl.org/rss/1.0/modules/reference/",
        "http://purl.org/rss/1.0/modules/richequiv/",
        "http://purl.org/rss/1.0/modules/search/",
        "http://purl.org/rss/1.0/modules/slash/",
        "http://schemas.xmlsoap.org/soap/envelope/",
        "http://purl.org/rss/1.0/modules/servicestatus/",
        "http://hacks.benhammersley.com/rss/streaming/",
        "http://purl.org/rss/1.0/modules/subscription/",
        "http://purl.org/rss/1.0/modules/syndication/",
        "http://schemas.pocketsoap.com/rss/mydescmodule/",
        "http://purl.org/rss/1.0/modules/taxonomy/",
        "http://purl.org/rss/1.0/modules/threading/",
        "http://purl.org/rss/1.0/modules/textinput/",
        "http://madskills.com/public/xml/rss/module/trackback/",
        "http://wellformedweb.org/commentapi/",
        "http://purl.org/rss/1.0/modules/wiki/",
        "http://www.w3.org/1999/xhtml",
        "http://www.w3.org/1999/xlink",
        "http://www.w3.org/xml/1998/namespace",
        "http://podlove.org/simple-chapters",
    }
)
#: XHTML element names whose end tag feedparser acts on inside XHTML content (``_end_xhtml_*``):
#: ``</body>`` ends the content element. Checked against the installed feedparser too.
FEEDPARSER_XHTML_END_HANDLERS = frozenset({"body"})
#: Elements feedparser treats specially inside XHTML content (it adds ``xmlns`` to them).
_XHTML_SPECIAL = frozenset({"svg", "math"})

#: feedparser's map of the C1 controls to the characters cp1252 puts there
#: (``feedparser.html._cp1252``), applied to every text value it returns.
CP1252 = {
    128: "\u20ac",
    130: "\u201a",
    131: "\u0192",
    132: "\u201e",
    133: "\u2026",
    134: "\u2020",
    135: "\u2021",
    136: "\u02c6",
    137: "\u2030",
    138: "\u0160",
    139: "\u2039",
    140: "\u0152",
    142: "\u017d",
    145: "\u2018",
    146: "\u2019",
    147: "\u201c",
    148: "\u201d",
    149: "\u2022",
    150: "\u2013",
    151: "\u2014",
    152: "\u02dc",
    153: "\u2122",
    154: "\u0161",
    155: "\u203a",
    156: "\u0153",
    158: "\u017e",
    159: "\u0178",
}

_DECLARATION = re.compile(rb"<\?xml version=([\"'])1\.0\1 encoding=([\"'])[Uu][Tt][Ff]-8\2\s*\?>")
_XMLNS = re.compile(rb"xmlns(?::([^\s=/>]*))?\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
_CONTENT_PREFIX = re.compile(rb"c[0-9]+")
_ELEMENT = re.compile(rb"<[^!?]")
#: feedparser's ``_urifixer``: it drops the slashes after ``scheme://`` in IRIs it resolves.
_URIFIXER = re.compile(r"^([A-Za-z][A-Za-z0-9+-.]*://)(/+)")
#: An absolute IRI whose scheme is not followed by a third slash (which ``_URIFIXER`` drops).
_USUAL_IRI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:(?!///)")
_C1 = re.compile("[\x80-\x9f]")
_QUOT = {'"': "&quot;"}


@dataclass
class Scan:
    """What :func:`scan` read: the feed-level links (first of each rel), the archive flag, and
    one mapping per entry, in document order (newest first), keyed as feedparser keys its
    entries (``id``, ``title``, ``updated``, ``content``, ``summary_detail``, ``links``,
    ``sf_seq``)."""

    links: dict[str, str]
    is_archive: bool
    entries: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Head:
    """What :func:`outline` read: the feed-level links and archive flag, how many entries,
    and the ``sf:seq`` text of the first and the last in document order (newest, oldest)."""

    links: dict[str, str]
    is_archive: bool
    count: int
    newest_seq: str | None
    oldest_seq: str | None


class _Unusual(Exception):
    """The document is not one this module vouches for: parse it with feedparser."""


_local = threading.local()


def _parser() -> etree.XMLParser:
    parser: etree.XMLParser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = etree.XMLParser(
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            huge_tree=False,
            collect_ids=False,
            # SAX (feedparser) reports neither: the text around them is one text.
            remove_comments=True,
            remove_pis=True,
        )
        _local.parser = parser
    return parser


def scan(body: bytes) -> Scan | None:
    """The document's links, archive flag and entries as feedparser reads them, or None if
    the document is not the usual (see the module docstring)."""
    root = _root(body)
    if root is None:
        return None
    try:
        result = Scan({}, False)
        for entry in _feed(root, result.links, result):
            result.entries.append(_entry(entry))
    except _Unusual:
        return None
    return result


def outline(body: bytes) -> Head | None:
    """The feed-level part of :func:`scan`, with the sequence numbers of the newest and the
    oldest entry, for walking back through ``prev-archive``; the entries themselves are not
    checked (the full parse of the page, on the way forward, does that)."""
    root = _root(body)
    if root is None:
        return None
    try:
        head = Head({}, False, 0, None, None)
        entries = _feed(root, head.links, head)
        head.count = len(entries)
        if entries:
            head.newest_seq = _seq_text(entries[0])
            head.oldest_seq = _seq_text(entries[-1])
    except _Unusual:
        return None
    return head


def _root(body: bytes) -> Any:
    if not _usual_bytes(body):
        return None
    try:
        return etree.fromstring(body, _parser())
    except (etree.LxmlError, ValueError):
        return None  # not well-formed, not UTF-8, too big...: feedparser will say what


def _seq_text(entry: Any) -> str | None:
    for child in entry:
        if child.tag == _SEQ:
            return _text(child)
    return None


def _usual_bytes(body: bytes) -> bool:
    declaration = _DECLARATION.match(body)
    if declaration is None:
        return False
    root = _ELEMENT.search(body, declaration.end())
    if root is None or b"<!DOCTYPE" in body[: root.start()]:  # only the prolog may hold one
        return False
    for match in _XMLNS.finditer(body):
        prefix, double, single = match.groups()
        uri = double if double is not None else single
        if not _allowed_declaration(prefix, uri):
            return False
    return not _has_base_attribute(body)


_DEFAULT_NAMESPACES = frozenset({ATOM_NS.encode(), XHTML_NS.encode()})
_PREFIXED = {b"sf": SF_NS.encode(), b"fh": FH_NS.encode()}
_OURS = frozenset({ATOM_NS.lower(), SF_NS.lower(), FH_NS.lower(), XHTML_NS.lower()})
_BEFORE_ATTRIBUTE = frozenset(b" \t\r\n:")
_SPACE = b" \t\r\n"


def _allowed_declaration(prefix: bytes | None, uri: bytes) -> bool:
    if prefix is None:
        return uri in _DEFAULT_NAMESPACES
    if prefix in _PREFIXED:
        return uri == _PREFIXED[prefix]
    if _CONTENT_PREFIX.fullmatch(prefix) is None or b"&" in uri:
        return False
    try:
        text = uri.decode("utf-8").lower()
    except UnicodeDecodeError:
        return False
    return (
        bool(text)
        and text not in FEEDPARSER_NAMESPACES
        and text not in _OURS
        and "backend.userland.com/rss" not in text
    )


def _has_base_attribute(body: bytes) -> bool:
    """Whether an attribute named ``base`` (``xml:base``, any case, any prefix) may be in the
    document: feedparser resolves IRIs against it, and keeps it after the element ends.
    Text that merely looks like one gives a false alarm, which only costs the fast path."""
    lowered = body.lower()
    at = lowered.find(b"base")
    while at != -1:
        if lowered[at - 1] in _BEFORE_ATTRIBUTE and lowered[at + 4 :].lstrip(_SPACE)[:1] == b"=":
            return True
        at = lowered.find(b"base", at + 4)
    return False


# -- the tree ----------------------------------------------------------------------------


def _fix(text: str) -> str:
    """What feedparser does to every text value after stripping it: take text that reads as
    UTF-8 bytes seen as Latin-1 for that, then map C1 controls as cp1252 would."""
    if text.isascii():
        return text
    with contextlib.suppress(UnicodeEncodeError, UnicodeDecodeError):
        text = text.encode("iso-8859-1").decode("utf-8")
    # translate() looks every character up: only when there is something to map.
    return text.translate(CP1252) if _C1.search(text) else text


def _text(el: Any) -> str:
    """The stripped, fixed text of a leaf element."""
    if len(el):
        raise _Unusual  # feedparser would read the child elements too
    text = el.text
    if not text:
        return ""
    text = text.strip()
    return text if text.isascii() else _fix(text)


def _iri(value: str) -> None:
    """Only absolute IRIs that feedparser leaves as they are."""
    if _USUAL_IRI.match(value) is None:
        raise _Unusual


def _link(el: Any) -> tuple[str, str, str | None]:
    """(rel, href, title) of an atom:link, as feedparser reports them."""
    if len(el):
        raise _Unusual
    attrs = el.attrib
    if not _LINK_ATTRS.issuperset(attrs):
        raise _Unusual  # url= or uri= would be the href, for one
    href = attrs.get("href")
    if href is None:
        raise _Unusual  # feedparser would take the element's text for the href
    if href:
        _iri(href)
    return attrs.get("rel", "alternate").lower(), href, attrs.get("title")


def _text_construct(el: Any) -> str:
    """A title, summary or rights: ``text`` or ``html``, as feedparser reads both."""
    attrs = el.attrib
    if attrs:
        kind = attrs.get("type")
        if len(attrs) > 1 or kind is None or kind.lower() not in _TEXT_TYPES:
            raise _Unusual
    return _text(el)


def _person(el: Any) -> None:
    text = el.text
    if text and text.strip():
        raise _Unusual
    for part in el:
        if part.tag not in _PERSON_PARTS or len(part):
            raise _Unusual


def _feed(root: Any, links: dict[str, str], result: Scan | Head) -> list[Any]:
    """Check the feed-level elements, fill ``links`` and ``result.is_archive``; the entry
    elements, in document order."""
    if root.tag != _FEED:
        raise _Unusual
    entries = []
    for child in root:
        tag = child.tag
        if tag == _ENTRY:
            entries.append(child)
        elif tag == _LINK:
            rel, href, _ = _link(child)
            if rel and href and rel not in links:
                links[rel] = href
        elif tag in _FEED_LEAVES:
            if len(child):
                raise _Unusual
            if tag == _ARCHIVE:
                result.is_archive = True
        elif tag in _PERSONS:
            _person(child)
        else:
            raise _Unusual
    return entries


#: Feed-level children read as leaves (their attributes mean nothing to what is reported).
_FEED_LEAVES = frozenset(
    {
        _ID,
        _TITLE,
        _UPDATED,
        _RIGHTS,
        _CATEGORY,
        _ARCHIVE,
        f"{_A}subtitle",
        f"{_A}icon",
        f"{_A}logo",
        f"{_A}generator",
    }
)


def _entry(el: Any) -> dict[str, Any]:
    if el.attrib:
        raise _Unusual  # lastmod= and href= would make an updated and a link
    entry_id: str | None = None
    seq: str | None = None
    updated: str | None = None
    title: str | None = None
    summary: str | None = None
    content: Any = None
    links: list[dict[str, str]] | None = None
    for child in el:
        tag = child.tag
        if tag == _ID:
            if entry_id is not None:
                raise _Unusual
            entry_id = _text(child)
            if _URIFIXER.match(entry_id):
                raise _Unusual  # feedparser would drop the slashes after "scheme://"
        elif tag == _TITLE:
            if title is not None:
                raise _Unusual
            title = _text_construct(child)
        elif tag == _UPDATED:
            if updated is not None:
                raise _Unusual
            updated = _text(child)
        elif tag == _SEQ:
            if seq is not None or child.attrib:
                raise _Unusual
            seq = _text(child)
        elif tag == _CONTENT:
            if content is not None:
                raise _Unusual
            content = child
        elif tag == _LINK:
            rel, href, link_title = _link(child)
            link = {"rel": rel, "href": href}
            if link_title is not None:
                link["title"] = link_title
            if links is None:
                links = [link]
            else:
                links.append(link)
        elif tag == _SUMMARY:
            if summary is not None:
                raise _Unusual
            summary = _text_construct(child)
        elif tag in _ENTRY_LEAVES:
            if len(child):
                raise _Unusual
        elif tag in _PERSONS:
            _person(child)
        elif tag == _RIGHTS:
            _text_construct(child)
        else:
            raise _Unusual
    # feedparser answers `updated` with `published` (and a DeprecationWarning) when an entry
    # has no updated; a missing sf:seq is the protocol's problem: feedparser reports both.
    if updated is None or seq is None:
        raise _Unusual
    raw: dict[str, Any] = {"updated": updated, "sf_seq": seq}
    if entry_id is not None:
        raw["id"] = entry_id
    if title is not None:
        raw["title"] = title
    if summary is not None:
        raw["summary_detail"] = {"value": summary}
    if content is not None:
        media, value = _content(content, entry_id)
        raw["content"] = [{"type": media, "value": value}]
    if links is not None:
        raw["links"] = links
    return raw


#: Entry children read as leaves (their attributes mean nothing to what is reported).
_ENTRY_LEAVES = frozenset({_CATEGORY, _PUBLISHED})


def _content(el: Any, entry_id: str | None) -> tuple[str, str]:
    """(feedparser's type, value) of atom:content."""
    attrs = el.attrib
    kind = "text/plain"
    if attrs:
        kind = attrs.get("type")
        if len(attrs) > 1 or kind is None:
            raise _Unusual  # src= and mode= change what feedparser reports
    media = _media_type(kind)
    if media == "application/xhtml+xml":
        return media, _xhtml(el)
    if media.endswith("/xml") or media.endswith("+xml"):
        _inline_xml(el, entry_id)
        return media, ""  # parse.py serialises it again, as it does for feedparser's entries
    if len(el):
        raise _Unusual  # markup in escaped content: feedparser would turn it into XHTML
    text = el.text
    value = text.strip() if text else ""
    if not media.startswith("text/"):
        with contextlib.suppress(binascii.Error, binascii.Incomplete, UnicodeDecodeError):
            value = base64.decodebytes(value.encode("utf-8")).decode("utf-8")
    return media, value if value.isascii() else _fix(value)


def _media_type(kind: str) -> str:
    """feedparser's ``map_content_type``."""
    kind = kind.lower()
    if kind in ("text", "plain"):
        return "text/plain"
    if kind == "html":
        return "text/html"
    if kind == "xhtml":
        return "application/xhtml+xml"
    return kind


def _inline_xml(el: Any, entry_id: str | None) -> None:
    """Inline XML content: feedparser reads its elements as feed elements; that is harmless
    only when every one of them is in a ``cN`` namespace it does not know (parse.py then
    replaces the value, finding it by the entry's id as it stands in the bytes)."""
    if entry_id is None or not entry_id.isascii():
        raise _Unusual
    for node in el.iterdescendants():
        tag = node.tag
        namespace = tag[1 : tag.find("}")] if tag[0] == "{" else ""
        if not namespace or namespace.lower() in _OURS or not tag.isascii():
            raise _Unusual
        for key in node.attrib:
            if not key.isascii():
                raise _Unusual


def _xhtml(el: Any) -> str:
    """feedparser's XHTML content: its elements written back as ``<name attrs>`` ...
    ``</name>`` pieces, text escaped, the wrapping ``div`` taken off, then stripped."""
    pieces: list[str] = []
    if el.text:
        pieces.append(escape(el.text))
    for child in el:
        _xhtml_element(child, pieces)
        if child.tail:
            pieces.append(escape(child.tail))
    while len(pieces) > 1 and not pieces[-1].strip():
        del pieces[-1]
    while len(pieces) > 1 and not pieces[0].strip():
        del pieces[0]
    if (
        pieces
        and (pieces[0] == "<div>" or pieces[0].startswith("<div "))
        and pieces[-1] == "</div>"
    ):
        depth = 0
        for piece in pieces[:-1]:
            if piece.startswith("</"):
                depth -= 1
                if depth == 0:
                    break
            elif piece.startswith("<") and not piece.endswith("/>"):
                depth += 1
        else:
            pieces = pieces[1:-1]
    return _fix("".join(pieces).strip())


def _xhtml_element(el: Any, pieces: list[str]) -> None:
    tag = el.tag
    if not tag.startswith(_XHTML):
        raise _Unusual
    name = tag[len(_XHTML) :]
    if not name.isascii():
        raise _Unusual
    name = name.lower()
    if name in _XHTML_SPECIAL or name in FEEDPARSER_XHTML_END_HANDLERS:
        raise _Unusual
    # feedparser lower-cases attribute names (the last of equal ones wins, in the place of
    # the first) and the values of rel and type.
    attributes: dict[str, str] = {}
    for key, value in el.items():
        if key[0] == "{" or not key.isascii():
            raise _Unusual
        attributes[key.lower()] = value
    written = "".join(
        f' {key}="{escape(value.lower() if key in ("rel", "type") else value, _QUOT)}"'
        for key, value in attributes.items()
    )
    pieces.append(f"<{name}{written}>")
    if el.text:
        pieces.append(escape(el.text))
    for child in el:
        _xhtml_element(child, pieces)
        if child.tail:
            pieces.append(escape(child.tail))
    pieces.append(f"</{name}>")


__all__ += ["CP1252", "FEEDPARSER_XHTML_END_HANDLERS", "XHTML_NS"]

"""Rendering documents to Atom bytes.

Rendering is deterministic: the bytes depend on the :class:`~simplefeed.model.Document` alone (no
clock reads, no library version strings), so a frozen page re-rendered from the database is
byte-identical to the one written when it froze.

Two renderers give the same bytes. :func:`render_with_feedgen` builds the document through
feedgen's object model (with an extension for what feedgen 1.0 cannot say) and lxml writes it
out; it is the reference. :func:`render`, the one the service uses, writes those bytes directly:
the same elements and attributes in feedgen's order, escaped as libxml2 escapes them (lxml still
parses and writes inline XML content). A page of 100 entries costs a fraction of the time,
which matters because a page is rendered under the feed's lock when it freezes. Tests hold the
two to byte equality, over the test corpus and over generated documents
(``tests/test_atom.py``), so a feedgen or lxml upgrade that changes the output shows up there.

Content is declared honestly (RFC 4287 section 4.1.3):

============================  ====================================================
``content_type``               rendered as
============================  ====================================================
none, ``text``,                ``type="text"``, escaped
``text/plain``
``html``, ``text/html``        ``type="html"``, escaped
``xhtml``                      ``type="xhtml"``, inline ``<div>``
``*/xml``, ``*+xml``           inline XML under the media type (explicit prefixes)
``application/json``,          ``type="text" sf:type="<media type>"``: the JSON text
``*+json``                     itself, readable by any Atom reader; no summary added
other ``text/*``               escaped text under the media type
anything else                  Base64 under the media type, with a ``summary``
no content (or empty)          no ``content``; an alternate link to the entry's
                               locator unless the producer gave an alternate link;
                               the title as ``summary`` unless the producer gave one
============================  ====================================================

RFC 4287 4.1.1 wants every entry to have content or an alternate link, and validators warn
about an empty ``<content/>``: an entry without content links to its own permanent URL, the
entry locator (``<prefix>/entries/<percent-encoded id>``, which redirects to its page), unless
the producer's own alternate link already stands for it. Where RFC 4287 requires a summary
(Base64 content) or advises one (no content, 4.1.1.1: the W3C validator warns "Missing textual
content") and the producer gave none, the summary is the title: a reader may take a summary
equal to the title of such an entry for none.
"""

from __future__ import annotations

import base64
import copy as copy_module
import io
import re
from collections.abc import Mapping
from html import escape
from typing import Any, Protocol

from feedgen.ext.base import BaseEntryExtension, BaseExtension
from feedgen.feed import FeedGenerator
from feedgen.util import xml_fromstring
from lxml import etree

from simplefeed.door import markup
from simplefeed.door.namespaces import FEED_NAMESPACES, USERLAND_RSS
from simplefeed.model import (
    ATOM_NS,
    DISCOURAGED_CHAR,
    FH_NS,
    MAX_ATTRIBUTES,
    MAX_CONTENT_NAMESPACES,
    SAME_CONTENT_TYPE,
    SF_NS,
    ContentMode,
    Document,
    Entry,
    Event,
    Link,
    us_to_datetime,
)
from simplefeed.rules import uris
from simplefeed.rules.paging import locator_segment

GENERATOR = "Simplefeed"
#: The form of the documents this renderer writes. Live documents' ETags include it, so a release
#: that changes their bytes (as 2 did: JSON content as text, sf:sha256 digests, no empty
#: content; as 3 did: inline content's attribute namespaces declared once) changes every live
#: ETag: a client's old copy is not confirmed by a 304. Raise it with every such change;
#: archived pages are never re-rendered and keep their bytes and ETags.
DOCUMENT_FORMAT = 3
GENERATOR_URI = "https://simplefeed.dev/"

#: The most bytes a document may take as rendered (an archived page, or a live document, which
#: holds up to a page): within the 64 MiB a Simplefeed consumer reads of a response by default
#: (``simplefeed.client.fetch.Bounds.max_bytes``), with room to spare. A page is frozen once and
#: kept for good, so one a consumer cannot read would stop it there for good: the door refuses
#: an entry that could make a page of its feed larger (:func:`max_entry_bytes`). JSON text that
#: escapes heavily (``<`` is written ``\\u003c``) takes six bytes a character, so 22 entries
#: within the body limit once made a 69 MB page.
MAX_DOCUMENT_BYTES = 48 * 1024 * 1024
#: What a document takes besides its entries, at the most: the feed's id, title (twice) and
#: links, each within its own limit.
_HEAD_BYTES = 64 * 1024
#: What an entry takes besides its :data:`EntryParts`: its ``updated``, number and end tags.
_NUMBERED_BYTES = 128


#: The content types of ``model.SAME_CONTENT_TYPE``, each to the mode Atom carries it in.
_SPELT: dict[str | None, ContentMode] = {
    spelling: mode for mode, spellings in SAME_CONTENT_TYPE.items() for spelling in spellings
}


def content_mode(content_type: str | None) -> ContentMode:
    """How content of a given ``content_type`` is carried in Atom."""
    ct = content_type.lower() if content_type is not None else None
    spelt = _SPELT.get(ct)
    if spelt is not None:
        return spelt
    assert ct is not None
    if ct == "xhtml":
        return "xhtml"
    if ct.endswith("/xml") or ct.endswith("+xml"):
        return "xml"
    if ct == "application/json" or ct.endswith("+json"):
        return "json"
    if ct.startswith("text/"):
        return "textual"
    return "base64"


def atom_content_type(content_type: str | None) -> str:
    mode = content_mode(content_type)
    if mode in ("text", "html", "xhtml"):
        return mode
    assert content_type is not None
    return content_type


class _FeedExtension(BaseExtension):  # type: ignore[misc]
    """Feed level: ``fh:archive`` on archived pages."""

    def __init__(self) -> None:
        self.archive = False
        self.prev_sha256: str | None = None

    def extend_ns(self) -> dict[str, str]:
        ns = {"sf": SF_NS}
        if self.archive:
            ns["fh"] = FH_NS
        return ns

    def extend_atom(self, feed: Any) -> Any:
        if self.prev_sha256 is not None:
            for link in feed.findall("link[@rel='prev-archive']"):
                link.set(f"{{{SF_NS}}}sha256", self.prev_sha256)
        if self.archive:
            etree.SubElement(feed, f"{{{FH_NS}}}archive")
        return feed


class _EntryExtension(BaseEntryExtension):  # type: ignore[misc]
    """Entry level: ``sf:seq``, and what feedgen 1.0 cannot do itself: Base64 content, the
    ``sf:type`` of JSON content, and entry links (its ``atom_entry`` drops every link attribute
    but ``href``)."""

    def __init__(self) -> None:
        self.seq = 0
        self.base64: tuple[str, str] | None = None
        self.inline_xml: str | None = None
        self.json_type: str | None = None
        self.links: tuple[Link, ...] = ()

    def extend_atom(self, entry: Any) -> Any:
        for placeholder in entry.findall(f"link[@href='{_PLACEHOLDER}']"):
            entry.remove(placeholder)
        if self.json_type is not None:
            entry.find("content").set(f"{{{SF_NS}}}type", self.json_type)
        if self.inline_xml is not None:
            content = entry.find("content")
            for child in list(content):
                content.remove(child)
            content.append(_prefixed(etree.fromstring(self.inline_xml, _SAFE_PARSER)))
        for link in self.links:
            el = etree.SubElement(entry, "link")  # un-namespaced, like feedgen's: Atom by default
            el.set("href", link.href)
            el.set("rel", link.rel)
            if link.type is not None:
                el.set("type", link.type)
            if link.hreflang is not None:
                el.set("hreflang", link.hreflang)
            if link.title is not None:
                el.set("title", link.title)
            if link.length is not None:
                el.set("length", str(link.length))
        if self.base64 is not None:
            media_type, text = self.base64
            content = entry.find("content")  # feedgen builds un-namespaced elements
            content.set("type", media_type)
            content.text = base64.b64encode(text.encode("utf-8")).decode("ascii")
        seq = etree.SubElement(entry, f"{{{SF_NS}}}seq")
        seq.text = str(self.seq)
        return entry


#: An entry's XML but for its ``updated`` and its sequence number, which are known only under
#: the feed's lock: what goes before ``updated``, and what goes between it and the number.
EntryParts = tuple[str, str]


def render(doc: Document, parts: Mapping[str, EntryParts] | None = None) -> bytes:
    """Render a document to UTF-8 Atom bytes: the bytes :func:`render_with_feedgen` gives,
    written directly (inline XML content is parsed and serialised by lxml, as there).

    ``parts`` holds entries already written by :func:`entry_parts` (by entry id): an append
    prepares the page it may fill before it takes the feed's lock, and only fills them in.
    """
    feed = doc.feed
    archive = doc.kind == "archive"
    out = [_HEAD_ARCHIVE if archive else _HEAD_LIVE]
    out += (
        "<id>",
        _text(feed.atom_id),
        "</id><title>",
        _text(feed.title),
        "</title><updated>",
        _iso(doc.updated_us),
        "</updated><author><name>",
        _text(feed.title),
        "</name></author>",
    )
    for rel, href in doc.links:
        out += ('<link href="', _attr(href), '" rel="', _attr(rel), '"')
        if rel == "prev-archive" and doc.prev_sha256 is not None:
            out += (' sf:sha256="', _attr(doc.prev_sha256), '"')
        out.append("/>")
    out.append(_GENERATOR)
    if archive:
        out.append("<fh:archive/>")
    for entry in doc.entries:
        found = parts.get(entry.id) if parts is not None else None
        if found is not None:
            head, middle = found
        else:
            head, middle = entry_parts(entry, doc.locator_base)
        out += (head, _iso(entry.updated_us), middle, str(entry.seq), "</sf:seq></entry>")
    out.append("</feed>")
    return "".join(out).encode("utf-8")


def entry_parts(entry: WritableEntry, locator_base: str) -> EntryParts:
    """An entry, in the order feedgen's ``atom_entry`` and :class:`_EntryExtension` write it,
    but for its ``updated`` and its sequence number (see :data:`EntryParts`).
    ``locator_base`` is the document's (:attr:`Document.locator_base`)."""
    event = entry.event
    head = f"<entry><id>{_text(entry.id)}</id><title>{_text(event.title)}</title><updated>"
    out = ["</updated>"]
    author = event.author
    if author is not None and author.name:
        out += ("<author><name>", _text(author.name), "</name>")
        if author.email:
            out += ("<email>", _text(author.email), "</email>")
        if author.uri:
            out += ("<uri>", _text(author.uri), "</uri>")
        out.append("</author>")
    mode = content_mode(event.content_type)
    text = event.content
    summary = event.summary
    if not text:
        # No content element: an alternate link instead (entry_links), and the title as the
        # summary unless the producer gave one (RFC 4287 4.1.1.1 advises textual content).
        if summary is None:
            summary = event.title
    elif mode == "base64":
        assert event.content_type is not None
        encoded = base64.b64encode(text.encode("utf-8")).decode("ascii")
        out += ('<content type="', _attr(event.content_type), '">', encoded, "</content>")
        if summary is None:
            summary = event.title  # RFC 4287 4.1.1.1: Base64 content requires a summary
    elif mode == "json":
        assert event.content_type is not None
        out += ('<content type="text" sf:type="', _attr(event.content_type), '">')
        out += (_text(json_text(text)), "</content>")
    else:
        kind = _attr(atom_content_type(event.content_type))
        if mode == "xml":
            inline = _prefixed(etree.fromstring(text, _SAFE_PARSER))
            body = etree.tostring(inline, encoding="unicode")
        elif mode == "xhtml":
            body = etree.tostring(xml_fromstring(f"{_XHTML_DIV}{text}</div>"), encoding="unicode")
        else:
            body = _text(text)
        out += ('<content type="', kind, '">', body, "</content>")
    if summary is not None:
        out.append(f"<summary>{_text(summary)}</summary>" if summary else "<summary/>")
    for cat in event.categories:
        out += ('<category term="', _attr(cat.term), '"')
        if cat.scheme:
            out += (' scheme="', _attr(cat.scheme), '"')
        if cat.label:
            out += (' label="', _attr(cat.label), '"')
        out.append("/>")
    out += ("<published>", _iso(entry.published_us), "</published>")
    for link in entry_links(event, entry.id, locator_base):
        out += ('<link href="', _attr(link.href), '" rel="', _attr(link.rel), '"')
        if link.type is not None:
            out += (' type="', _attr(link.type), '"')
        if link.hreflang is not None:
            out += (' hreflang="', _attr(link.hreflang), '"')
        if link.title is not None:
            out += (' title="', _attr(link.title), '"')
        if link.length is not None:
            out += (' length="', str(link.length), '"')
        out.append("/>")
    out.append("<sf:seq>")
    return head, "".join(out)


def max_entry_bytes(page_size: int) -> int:
    """The most bytes an entry of a feed with pages of ``page_size`` may take as rendered: so
    many of them and a document's head stay within :data:`MAX_DOCUMENT_BYTES`."""
    return (MAX_DOCUMENT_BYTES - _HEAD_BYTES) // page_size


def entry_bytes_bound(stored: str, locator_base: str) -> int:
    """At least the bytes an entry takes as rendered, from what is stored of it (``stored``:
    ``Event.canonical``), for the cost of a length: every character of a field is at least
    one character there, and takes at most six bytes rendered (an XML or JSON escape), twelve
    for a title written again as the summary; the markup besides, and an entry locator link,
    take less than 4 KiB and the locator base."""
    return 12 * len(stored) + 4096 + len(locator_base)


def entry_bytes(entry: WritableEntry, locator_base: str) -> int:
    """The bytes ``entry`` takes in a document, at the most (its ``updated`` and number
    counted at their longest)."""
    head, middle = entry_parts(entry, locator_base)
    return len(head.encode("utf-8")) + len(middle.encode("utf-8")) + _NUMBERED_BYTES


def entry_links(event: Event, entry_id: str, locator_base: str) -> tuple[Link, ...]:
    """The entry's links: the producer's, and for an entry without content that has no
    alternate link of the producer's, one to its entry locator (RFC 4287 4.1.1: an entry
    without content must have an alternate link; the producer's, if any, is the better one, and
    a second one without ``type`` and ``hreflang`` beside an untyped one would be invalid)."""
    if event.content or any(link.rel == "alternate" for link in event.links):
        return event.links
    return (*event.links, Link(href=locator_base + locator_segment(entry_id)))


def json_text(text: str) -> str:
    """JSON text as ``atom:content`` carries it, some characters written as JSON escapes
    (``\\u003c``), which can only stand inside JSON strings and leave the value unchanged:
    those XML cannot carry (U+FFFE, U+FFFF), those validators flag in text (C1 controls,
    U+FFFD), and ``<``, ``>`` and ``&`` (as Go's encoder does), so that no string in the JSON
    reads as markup or an entity to a reader that guesses (the W3C validator warns of HTML in
    text content when it sees ``</p>`` or ``&amp;``)."""
    return text.translate(_JSON_ESCAPES) if not _NEEDS_JSON_ESCAPE.isdisjoint(text) else text


_JSON_ESCAPED = [ord("<"), ord(">"), ord("&"), *range(0x80, 0xA0), 0xFFFD, 0xFFFE, 0xFFFF]
_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in _JSON_ESCAPED}
_NEEDS_JSON_ESCAPE = frozenset(map(chr, _JSON_ESCAPED))


class WritableEntry(Protocol):
    """What :func:`entry_parts` needs of an entry, numbered or not (an
    :class:`~simplefeed.model.Entry`, or a :class:`~simplefeed.model.PendingEntry` before the
    feed's lock): all but its ``updated`` and number."""

    @property
    def id(self) -> str: ...
    @property
    def event(self) -> Event: ...
    @property
    def published_us(self) -> int: ...


def _iso(us: int) -> str:
    """``us_to_datetime(us).isoformat()`` (what feedgen writes), with the part up to the second
    cached: the entries of a page mostly share their seconds."""
    seconds, micro = divmod(us, 1_000_000)
    head = _SECONDS.get(seconds)
    if head is None:
        if len(_SECONDS) > 4096:
            _SECONDS.clear()
        head = _SECONDS[seconds] = us_to_datetime(seconds * 1_000_000).isoformat()[:19]
    return f"{head}.{micro:06d}+00:00" if micro else f"{head}+00:00"


_SECONDS: dict[int, str] = {}


# What lxml (libxml2) writes for the root element feedgen builds: its namespace declarations
# (nsmap, in order) before its one attribute, a literal `xmlns`.
_HEAD_LIVE = (
    f"<?xml version='1.0' encoding='UTF-8'?>\n<feed xmlns:sf=\"{SF_NS}\" xmlns=\"{ATOM_NS}\">"
)
_HEAD_ARCHIVE = (
    "<?xml version='1.0' encoding='UTF-8'?>\n"
    f'<feed xmlns:sf="{SF_NS}" xmlns:fh="{FH_NS}" xmlns="{ATOM_NS}">'
)
_GENERATOR = f'<generator uri="{GENERATOR_URI}">{GENERATOR}</generator>'
# libxml2's escaping when it writes UTF-8: in text, & < > and CR; in attribute values also the
# double quote, LF and tab (the characters XML's attribute-value normalisation would change).
_TEXT_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"})
_ATTR_ESCAPES = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        '"': "&quot;",
        "\r": "&#13;",
        "\n": "&#10;",
        "\t": "&#9;",
    }
)
_NEEDS_TEXT_ESCAPE = frozenset("&<>\r")
_NEEDS_ATTR_ESCAPE = frozenset('&<>"\r\n\t')


def _text(value: str) -> str:
    # Most values need no escaping: a set check is several times cheaper than translate.
    return value.translate(_TEXT_ESCAPES) if not _NEEDS_TEXT_ESCAPE.isdisjoint(value) else value


def _attr(value: str) -> str:
    return value.translate(_ATTR_ESCAPES) if not _NEEDS_ATTR_ESCAPE.isdisjoint(value) else value


def render_with_feedgen(doc: Document) -> bytes:
    """Render a document to UTF-8 Atom bytes through feedgen: the reference for :func:`render`."""
    fg = FeedGenerator()
    fg.register_extension("sf", _FeedExtension, _EntryExtension, atom=True, rss=False)
    fg.sf.archive = doc.kind == "archive"
    fg.sf.prev_sha256 = doc.prev_sha256
    feed = doc.feed
    fg.id(feed.atom_id)
    fg.title(feed.title)
    fg.updated(us_to_datetime(doc.updated_us))
    fg.author({"name": feed.title})
    fg.generator(GENERATOR, uri=GENERATOR_URI)
    for rel, href in doc.links:
        fg.link(href=href, rel=rel)
    # feedgen prepends added entries by default; add oldest first so the newest ends up on top.
    for entry in reversed(doc.entries):
        _add_entry(fg, entry, doc.locator_base)
    out: bytes = fg.atom_str(pretty=False)
    return out


def _add_entry(fg: Any, entry: Entry, locator_base: str) -> None:
    event = entry.event
    fe = fg.add_entry()
    fe.id(entry.id)
    fe.title(event.title)
    fe.updated(us_to_datetime(entry.updated_us))
    fe.published(us_to_datetime(entry.published_us))
    if event.author is not None:
        author = {"name": event.author.name}
        if event.author.email:
            author["email"] = event.author.email
        if event.author.uri:
            author["uri"] = event.author.uri
        fe.author(author)
    mode = content_mode(event.content_type)
    text = event.content
    summary = event.summary
    if not text:
        # No content element: an alternate link instead (entry_links), written by the
        # extension. feedgen refuses an entry with neither among its own links, which lose
        # their attributes: it gets a placeholder that the extension takes out again.
        fe.link(href=_PLACEHOLDER, rel="alternate")
        if summary is None:
            summary = event.title  # RFC 4287 4.1.1.1 advises textual content
    elif mode == "base64":
        assert event.content_type is not None
        fe.content("")  # an empty placeholder the entry extension fills in
        fe.sf.base64 = (event.content_type, text)
        if summary is None:
            summary = event.title  # RFC 4287 4.1.1.1: Base64 content requires a summary
    elif mode == "json":
        fe.content(json_text(text), type="text")
        fe.sf.json_type = event.content_type
    elif mode == "xml":
        fe.content("", type=atom_content_type(event.content_type))
        fe.sf.inline_xml = text
    else:
        fe.content(text, type=atom_content_type(event.content_type))
    fe.sf.links = entry_links(event, entry.id, locator_base)
    if summary is not None:
        fe.summary(summary)
    for cat in event.categories:
        fields: dict[str, str] = {"term": cat.term}
        if cat.scheme is not None:
            fields["scheme"] = cat.scheme
        if cat.label is not None:
            fields["label"] = cat.label
        fe.category(**fields)
    fe.sf.seq = entry.seq


_PLACEHOLDER = "urn:simplefeed:placeholder"
XHTML_NS = "http://www.w3.org/1999/xhtml"
_XHTML_DIV = f'<div xmlns="{XHTML_NS}">'
_SAFE_PARSER = etree.XMLParser(
    resolve_entities=False,
    no_network=True,
    load_dtd=False,
    dtd_validation=False,
    huge_tree=False,
    remove_pis=True,
)
#: What declares a namespace in a tag of XML text (text that mentions one is not counted).
_NAMESPACE_DECLARATION = re.compile(r"xmlns(?::[^\s=>/]+)?\s*=")
_TAG = re.compile(r"<[^<>]*>")
#: The door's parser: as :data:`_SAFE_PARSER`, but keeping processing instructions, to refuse
#: them (the documents would not carry them: content comes back as it was sent, or is refused).
_CHECK_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, dtd_validation=False, huge_tree=False
)


def prev_archive_sha256(body: bytes) -> str | None:
    """The ``sf:sha256`` of a document's ``prev-archive`` link, if it has one (to check the
    chain of archived pages: ``simplefeed archive verify``)."""
    root = etree.fromstring(body, _SAFE_PARSER)
    for link in root.iterfind(f"{{{ATOM_NS}}}link"):
        if link.get("rel") == "prev-archive":
            value: str | None = link.get(f"{{{SF_NS}}}sha256")
            return value
    return None


def self_href(body: bytes) -> str | None:
    """The ``href`` of a document's own ``self`` link (the feed element's, which the renderer
    writes in the feed's head), or None if it has none or cannot be read. Read up to the first
    entry only: a frozen page's entries are most of its bytes."""
    atom_link, atom_entry = f"{{{ATOM_NS}}}link", f"{{{ATOM_NS}}}entry"
    events = etree.iterparse(
        io.BytesIO(body),
        events=("start",),
        tag=(atom_link, atom_entry),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_pis=True,
    )
    try:
        for _, element in events:
            if element.tag == atom_entry:
                return None
            parent = element.getparent()
            if parent is not None and parent.getparent() is None and element.get("rel") == "self":
                href: str | None = element.get("href")
                return href
    except etree.XMLSyntaxError:
        return None
    return None


def check_inline_xml(text: str, *, xhtml: bool) -> str | None:
    """Why ``text`` cannot be inline XML content, or None if it can.

    Parsed as feedgen will parse it, with entity expansion, DTD loading and network access off;
    a DOCTYPE is refused outright (its entities could not be carried into the feed). Content
    under an XML media type must be namespaced, and in no namespace that feedparser reads as
    feed structure (:mod:`simplefeed.door.namespaces`): no element, attribute or namespace
    declaration of one, and no prefix feedparser gives one (a reader that matches prefixes
    would read the element as the entry's own). XHTML is in that table: it belongs in
    ``xhtml`` content.
    """
    declarations = sum(len(_NAMESPACE_DECLARATION.findall(tag)) for tag in _TAG.findall(text))
    if declarations > MAX_CONTENT_NAMESPACES:
        # Before parsing: checking declarations costs their number times the elements'.
        return (
            f"{declarations} namespace declarations: at most {MAX_CONTENT_NAMESPACES} (feed"
            " readers take time growing with their square)"
        )
    source = f"{_XHTML_DIV}{text}</div>" if xhtml else text
    try:
        root = etree.fromstring(source, _CHECK_PARSER)
    except (etree.XMLSyntaxError, ValueError) as exc:
        return str(exc)
    doctype: str = root.getroottree().docinfo.doctype  # type: ignore[union-attr]
    if doctype:
        return "DOCTYPE declarations are not allowed"
    for comment in root.iter(etree.Comment):
        problem = _comment_problem(str(comment.text), xhtml)
        if problem:
            return problem
    for node in (*root.itersiblings(preceding=True), *root.itersiblings(), *root.iter(etree.PI)):
        # The rendered document would not hold them (only the root element goes into it, and
        # feedgen's parser drops processing instructions): refused, never silently dropped.
        what = (
            "a processing instruction"
            if isinstance(node, etree._ProcessingInstruction)
            else "a comment outside the root element"
        )
        return f"{what} ({str(node)[:40]!r}) is not allowed: the feed would not carry it"
    for el in root.iter(etree.Element):
        for value in (el.text, el.tail, *el.attrib.values()):
            if not value:
                continue
            qname = _QNAME_VALUE.match(value)
            if qname is not None and qname[1] in el.nsmap and not xhtml:
                # The document renames every prefix (c0, c1, ...: _prefixed), so a value that
                # names one (xsi:type="xs:string") would name nothing there.
                return (
                    f"<{etree.QName(el).localname}> holds {value.strip()[:40]!r}, a name with the"
                    f" prefix {qname[1]!r}: the feed renames prefixes, so it would name nothing;"
                    " send such XML as Base64 (application/octet-stream) or without the prefix"
                )
            bad = DISCOURAGED_CHAR.search(value)
            if bad is not None:
                # Written as a character reference, it passed the check on the text as sent.
                return (
                    f"<{etree.QName(el).localname}> holds U+{ord(bad.group()):04X}, which XML"
                    " discourages and feed validators flag (a control character or the"
                    " replacement character; as a character reference too)"
                )
        if len(el.attrib) > MAX_ATTRIBUTES:
            return (
                f"<{etree.QName(el).localname}> has {len(el.attrib)} attributes: at most"
                f" {MAX_ATTRIBUTES} (feedparser's time grows with their square; the Simplefeed"
                " consumer refuses such a page)"
            )
        namespace = etree.QName(el).namespace
        if xhtml:
            if namespace != XHTML_NS:
                return f"<{el.tag}> is not an XHTML element"
            if el.prefix is not None:
                # The W3C validator warns "Avoid Namespace Prefix", on a page kept for good.
                return (
                    f"<{el.prefix}:{etree.QName(el).localname}> names XHTML with a prefix: write"
                    f" <{etree.QName(el).localname}> (xhtml content is the content of a div"
                    " that makes XHTML the default namespace)"
                )
        elif namespace is None:
            return (
                f"<{el.tag}> has no namespace; inline XML content must declare one "
                "(inside an Atom document it would otherwise read as Atom)"
            )
        elif namespace == XHTML_NS:
            return (
                f"<{etree.QName(el).localname}> is XHTML; send XHTML as content_type xhtml "
                "(the content of a div), not under an XML media type"
            )
        elif _feed_vocabulary(namespace):
            return (
                f"<{etree.QName(el).localname}> is in {namespace}, a namespace feed readers "
                "(feedparser) read as feed structure; inline XML content must not use it"
            )
        problem = (
            _feed_vocabulary_attribute(el)
            or _feed_vocabulary_declaration(el, xhtml)
            or (_xhtml_policy_problem(el) if xhtml else _xml_script_problem(el))
        )
        if problem:
            return problem
    if xhtml:
        problem = markup.written_tree_problem(*html_reading(root))
        if problem:
            return f"feed readers pass XHTML on as HTML, which reads it otherwise: {problem}"
    return None


def _comment_problem(text: str, xhtml: bool) -> str | None:
    """Why a comment holding ``text`` may not be in inline content, or None. HTML reads
    ``<!-->`` and ``<!--->`` as a whole comment, and what follows as markup: a reader that
    puts the content in its page ran the ``<img onerror>`` after one (a producer's trial).
    XHTML holds none, as HTML content holds none (feedparser drops them)."""
    if xhtml:
        return (
            f"a comment (<!--{text[:40]}-->) is not allowed: xhtml content holds none, as html"
            " content holds none (feed readers drop them)"
        )
    if text.startswith((">", "->")):
        return (
            f"a comment beginning <!--{text[:2]} is not allowed: HTML's parser ends it there and"
            " reads what follows as markup"
        )
    return None


def html_reading(div: Any) -> tuple[list[markup.Token], str]:
    """The content of the XHTML ``div`` as HTML, as a generic reader passes XHTML content on
    (feedparser gives it as a string; a page puts it in its HTML): its tokens, and its text.
    Start tags with their attributes (those in no namespace), text, and an end tag for each
    element but an empty void one (comments are refused before). Iterative: no recursion
    however deep the tree is."""
    tokens: list[markup.Token] = []
    out: list[str] = []

    def text(value: str | None) -> None:
        if value:
            tokens.append(("text", value, ()))
            out.append(escape(value, quote=False))

    text(div.text)
    stack: list[tuple[Any, Any]] = [(div, iter(div))]
    while stack:
        parent, children = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            if parent is not div:
                tag = etree.QName(parent).localname
                if len(parent) or parent.text or tag not in markup.VOID_ELEMENTS:
                    tokens.append(("end", tag, ()))
                    out.append(f"</{tag}>")
                text(parent.tail)
            continue
        tag = etree.QName(child).localname
        attributes = tuple((k, v) for k, v in child.attrib.items() if k[0] != "{")
        tokens.append(("start", tag, attributes))
        written = "".join(f' {name}="{escape(value)}"' for name, value in attributes)
        out.append(f"<{tag}{written}>")
        text(child.text)
        stack.append((child, iter(child)))
    return tokens, "".join(out)


def _xhtml_policy_problem(el: Any) -> str | None:
    """XHTML content holds what the HTML policy allows (:mod:`simplefeed.door.markup`), in a tree
    HTML reads as it is written: feed readers pass XHTML content on as HTML."""
    tag = etree.QName(el).localname
    problem = markup.element_problem(tag)
    if problem:
        return problem
    above = el.getparent()
    parent = etree.QName(above).localname if above is not None else "div"  # (the content's div)
    if markup.ends_at(parent, tag):
        return (
            f"a <{tag}> in a <{parent}>: HTML ends the <{parent}> at it, and feed readers pass"
            f" XHTML on as HTML (close the <{parent}> first)"
        )
    for name, value in el.attrib.items():
        qname = etree.QName(name)
        if qname.namespace == XML_NS and qname.localname == "lang":
            continue
        if qname.namespace is not None:
            return f"the attribute {qname.localname!r} of <{tag}> is in {qname.namespace}"
        problem = markup.attribute_problem(tag, qname.localname, value)
        if problem:
            return problem
    return None


#: XML vocabularies browsers render inline, resolving their URL attributes (XLink's are
#: refused: feedparser reads them as feed structure).
_RENDERED_NAMESPACES = frozenset(
    {"http://www.w3.org/2000/svg", "http://www.w3.org/1998/Math/MathML"}
)


def _xml_script_problem(el: Any) -> str | None:
    attributes = [(etree.QName(name).localname, value) for name, value in el.attrib.items()]
    rendered = etree.QName(el).namespace in _RENDERED_NAMESPACES
    return markup.xml_script_problem(etree.QName(el).localname, attributes, rendered=rendered)


#: Feed-vocabulary namespaces, in lower case, as feedparser compares them, without a trailing
#: '/' (a reader may match either spelling), and the two this service's documents are read by:
#: an ``<fh:archive/>`` or ``<sf:seq>`` in content would mark a live document archived, or
#: give an entry another sequence number, to a reader that searches the whole document.
_FEED_NAMESPACES = frozenset(
    uri.lower().rstrip("/") for uri in (*FEED_NAMESPACES, FH_NS, SF_NS) if uri
)
#: Prefixes feedparser gives feed vocabularies: ``<dc:title>`` is Dublin Core's title to it.
_FEED_PREFIXES = frozenset(p.lower() for p in FEED_NAMESPACES.values() if p) - {"xml"}
XML_NS = "http://www.w3.org/XML/1998/namespace"
#: The attributes in a feed-vocabulary namespace that inline content may carry: xml:lang and
#: xml:space (no xml:base: it would re-base URLs). XLink is in feedparser's table too: SVG
#: links are written ``href``, as SVG 2 has them.
_ALLOWED_NAMESPACED_ATTRIBUTES = {XML_NS: frozenset({"lang", "space"})}


def _feed_vocabulary(namespace: str) -> bool:
    lower = namespace.lower()
    return lower.rstrip("/") in _FEED_NAMESPACES or USERLAND_RSS in lower


def _feed_vocabulary_attribute(el: Any) -> str | None:
    for name in el.attrib:
        qname = etree.QName(name)
        namespace = qname.namespace
        if namespace is None or not _feed_vocabulary(namespace):
            continue
        if qname.localname in _ALLOWED_NAMESPACED_ATTRIBUTES.get(namespace, ()):
            continue
        return (
            f"the attribute {qname.localname!r} of <{etree.QName(el).localname}> is in "
            f"{namespace}, a namespace feed readers read as feed structure"
        )
    return None


def _feed_vocabulary_declaration(el: Any, xhtml: bool) -> str | None:
    parent = el.getparent()
    inherited = parent.nsmap if parent is not None else {}
    for prefix, namespace in el.nsmap.items():
        if inherited.get(prefix) == namespace:
            continue
        if _feed_vocabulary(namespace):
            if xhtml and namespace == XHTML_NS:
                continue
            return (
                f"it declares {namespace}, a namespace feed readers read as feed structure; "
                "inline XML content must not use it"
            )
        if prefix is not None and prefix.lower() in _FEED_PREFIXES:
            return (
                f"the prefix {prefix!r} is the one feed readers (feedparser) give a feed "
                "vocabulary; choose another prefix"
            )
        scheme = markup.SCHEME.match(namespace)
        if scheme is None:
            return f"the namespace name {namespace!r} is not an absolute URI"
        if scheme[1].lower() not in markup.EVENT_URL_SCHEMES:
            # Feed validators flag "URI scheme not IANA registered" (javascript:, foo:).
            return (
                f"the namespace name {namespace[:80]!r} has the scheme {scheme[1]!r}: name a"
                f" namespace with one of {', '.join(sorted(markup.EVENT_URL_SCHEMES))}"
            )
        problem = uris.iri_problem(namespace)
        if problem:
            return f"the namespace name {namespace!r} {problem}"
    return None


#: A value that is a qualified name (``xs:string``): its prefix is looked up among those declared.
_QNAME_VALUE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.\-]*):[A-Za-z_][A-Za-z0-9_.\-]*\s*\Z")


def _prefixed(root: Any) -> Any:
    """A copy of an XML tree in which every element's namespace has an explicit prefix.

    Inline content sits inside an Atom document whose default namespace is Atom. Content in a
    default namespace of its own is correct XML, but feed parsers such as feedparser read such
    elements by local name (a ``<link>`` in the content becomes a link of the entry). Explicit
    prefixes (``c0``, ``c1``, ... in document order) keep the same XML infoset and no ambiguity
    (a value naming a prefix, ``xsi:type="xs:string"``, is refused at the door: it would not).

    The namespaces of attributes (``xlink:href``, ``inkscape:label``) are declared once, on the
    root, after its own: left to lxml, each element holding one declared a prefix of its own
    (``ns0``, ``ns1``, ...), so that 65 such elements made a page declare 67 prefixes, which the
    Simplefeed consumer refuses (feedparser's time grows with them).
    """
    prefixes: dict[str, str] = {etree.QName(root).namespace: "c0"}
    for el in root.iter(etree.Element):
        for key in el.attrib:
            namespace = etree.QName(key).namespace
            if namespace is not None and namespace != XML_NS and namespace not in prefixes:
                prefixes[namespace] = f"c{len(prefixes)}"
    on_root = {prefix: namespace for namespace, prefix in prefixes.items()}

    def copy(node: Any, parent: Any) -> Any:
        if not isinstance(node.tag, str):  # comment or processing instruction
            clone = copy_module.copy(node)
            clone.tail = node.tail
            parent.append(clone)
            return clone
        namespace = etree.QName(node).namespace
        if namespace not in prefixes:
            prefixes[namespace] = f"c{len(prefixes)}"
        nsmap = {prefixes[namespace]: namespace}
        if parent is None:
            el = etree.Element(node.tag, nsmap=on_root)
        else:
            el = etree.SubElement(parent, node.tag, nsmap=nsmap)
        for key, value in node.attrib.items():
            el.set(key, value)
        el.text = node.text
        el.tail = node.tail
        for child in node:
            copy(child, el)
        return el

    return copy(root, None)

"""Rendering documents to Atom bytes.

Rendering is deterministic. The bytes depend on the :class:`~simplefeed.model.Document` alone,
with no clock reads and no library version strings. So an archived page rendered again from the
database is byte for byte the one written when it was archived.

Two renderers give the same bytes. The reference is :func:`render_with_feedgen`. It builds the
document through feedgen's object model, and lxml writes it out. The function :func:`render`
writes the same bytes directly, in a fraction of the time. Speed matters because a page is
rendered under the feed's lock. Tests hold the two to byte equality (``tests/test_atom.py``).
So an upgrade of feedgen or lxml that changes the output shows there.

Content is declared honestly, as RFC 4287 section 4.1.3 asks. The table shows how.

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

RFC 4287 4.1.1 wants content or an alternate link in every entry. Validators warn about an
empty ``<content/>``. So an entry without content links to its entry locator, which redirects
to its page. The producer's own alternate link replaces it. RFC 4287 requires a summary with
Base64 content, and advises one without content. Where the producer gave none, the summary is
the title.
"""

from __future__ import annotations

import base64
import copy as copy_module
from collections.abc import Mapping
from typing import Any, Protocol

from feedgen.ext.base import BaseEntryExtension, BaseExtension
from feedgen.feed import FeedGenerator
from feedgen.util import xml_fromstring
from lxml import etree

from simplefeed.model import (
    ATOM_NS,
    FH_NS,
    SF_NS,
    XHTML_NS,
    XML_NS,
    Document,
    Entry,
    Event,
    Link,
    content_mode,
    locator_segment,
    us_to_datetime,
)

__all__ = [
    "DOCUMENT_FORMAT",
    "GENERATOR",
    "GENERATOR_URI",
    "MAX_DOCUMENT_BYTES",
    "EntryParts",
    "WritableEntry",
    "atom_content_type",
    "entry_bytes",
    "entry_bytes_bound",
    "entry_links",
    "entry_parts",
    "json_text",
    "max_entry_bytes",
    "render",
    "render_with_feedgen",
]

GENERATOR = "Simplefeed"


#: The form of the documents this renderer writes. Live documents' ETags include it. So a
#: release that changes their bytes changes every live ETag. Then a 304 does not confirm a
#: client's old copy. Such changes include JSON content as text, sf:sha256 digests, and no
#: empty content. Declaring inline content's attribute namespaces once is one too. Raise the
#: number with every such change. Archived pages are never rendered again, and keep their bytes
#: and ETags.
DOCUMENT_FORMAT = 3


GENERATOR_URI = "https://simplefeed.dev/"


#: The most bytes a document may take as rendered. The document is an archived page, or a live
#: document, which holds up to a page. The bound lies within the 64 MiB that a Simplefeed
#: consumer reads of a response by default (``simplefeed.client.fetch.Bounds.max_bytes``). It
#: leaves room to spare. A page is archived once and kept for good. So a page that a consumer
#: cannot read would stop it there for good. The door refuses an entry that could make a page of
#: its feed larger (:func:`max_entry_bytes`). JSON text that escapes heavily takes six bytes a
#: character, since ``<`` is written ``\\u003c``. So 22 entries within the body limit could make
#: a 69 MB page.
MAX_DOCUMENT_BYTES = 48 * 1024 * 1024


#: What a document takes besides its entries, at the most. That is the feed's id, its title
#: twice, and its links, each within its own limit.
_HEAD_BYTES = 64 * 1024


#: What an entry takes besides its :data:`EntryParts`. That is its ``updated``, number and end
#: tags.
_NUMBERED_BYTES = 128


def atom_content_type(content_type: str | None) -> str:
    mode = content_mode(content_type)
    if mode in ("text", "html", "xhtml"):
        return mode
    assert content_type is not None
    return content_type


class _FeedExtension(BaseExtension):  # type: ignore[misc]
    """Write the feed-level ``fh:archive`` on archived pages."""

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
    """Write the entry-level ``sf:seq``, and what feedgen 1.0 cannot do itself.

    It cannot write Base64 content, or the ``sf:type`` of JSON content. Nor can it write entry
    links, because its ``atom_entry`` drops every link attribute but ``href``.
    """

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
            el = etree.SubElement(entry, "link")  # Un-namespaced like feedgen's, so Atom.
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
            content = entry.find("content")  # Feedgen builds un-namespaced elements.
            content.set("type", media_type)
            content.text = base64.b64encode(text.encode("utf-8")).decode("ascii")
        seq = etree.SubElement(entry, f"{{{SF_NS}}}seq")
        seq.text = str(self.seq)
        return entry


#: An entry's XML but for its ``updated`` and its sequence number. Those are known only under
#: the feed's lock. So it holds what goes before ``updated``, and what goes between it and the
#: number.
EntryParts = tuple[str, str]


def render(doc: Document, parts: Mapping[str, EntryParts] | None = None) -> bytes:
    """Render a document to UTF-8 Atom bytes, as :func:`render_with_feedgen` gives them.

    The bytes are written directly. Inline XML content is parsed and serialised by lxml, as
    there. ``parts`` holds entries already written by :func:`entry_parts`, by entry id. An
    append prepares the page it may fill before it takes the feed's lock. Under the lock it
    only fills them in.
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
    """Write an entry in the order that feedgen's ``atom_entry`` and the extension use.

    The extension is :class:`_EntryExtension`. The entry's ``updated`` and sequence number are
    left out (see :data:`EntryParts`). ``locator_base`` is the document's
    (:attr:`Document.locator_base`).
    """
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
    summary = _write_content(out, event)
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


def _write_content(out: list[str], event: Event) -> str | None:
    """Write the event's content element, if any, and return the summary the entry carries."""
    mode = content_mode(event.content_type)
    text = event.content
    summary = event.summary
    if not text:
        # No content element, but an alternate link instead (entry_links). The title is the
        # summary unless the producer gave one, because RFC 4287 4.1.1.1 advises text.
        return event.title if summary is None else summary
    if mode == "base64":
        assert event.content_type is not None
        encoded = base64.b64encode(text.encode("utf-8")).decode("ascii")
        out += ('<content type="', _attr(event.content_type), '">', encoded, "</content>")
        # RFC 4287 4.1.1.1 says Base64 content requires a summary.
        return event.title if summary is None else summary
    if mode == "json":
        assert event.content_type is not None
        out += ('<content type="text" sf:type="', _attr(event.content_type), '">')
        out += (_text(json_text(text)), "</content>")
        return summary
    kind = _attr(atom_content_type(event.content_type))
    if mode == "xml":
        inline = _prefixed(etree.fromstring(text, _SAFE_PARSER))
        body = etree.tostring(inline, encoding="unicode")
    elif mode == "xhtml":
        body = etree.tostring(xml_fromstring(f"{_XHTML_DIV}{text}</div>"), encoding="unicode")
    else:
        body = _text(text)
    out += ('<content type="', kind, '">', body, "</content>")
    return summary


def max_entry_bytes(page_size: int) -> int:
    """Return the most bytes an entry may take as rendered, for pages of ``page_size``.

    So many entries and a document's head stay within :data:`MAX_DOCUMENT_BYTES`.
    """
    return (MAX_DOCUMENT_BYTES - _HEAD_BYTES) // page_size


def entry_bytes_bound(stored: str, locator_base: str) -> int:
    """Bound from above the bytes an entry takes as rendered, for the cost of a length.

    The bound comes from what is stored of the entry. ``stored`` is ``Event.canonical``. Every
    character of a field is at least one character there. It takes at most six bytes rendered,
    as an XML or JSON escape. A title written again as the summary takes twelve. The markup
    besides, and an entry locator link, take less than 4 KiB and the locator base.
    """
    return 12 * len(stored) + 4096 + len(locator_base)


def entry_bytes(entry: WritableEntry, locator_base: str) -> int:
    """Return the bytes ``entry`` takes in a document, at the most.

    Its ``updated`` and number are counted at their longest.
    """
    head, middle = entry_parts(entry, locator_base)
    return len(head.encode("utf-8")) + len(middle.encode("utf-8")) + _NUMBERED_BYTES


def entry_links(event: Event, entry_id: str, locator_base: str) -> tuple[Link, ...]:
    """Return the entry's links.

    They are the producer's links. An entry without content gets one more, to its entry
    locator, unless the producer gave an alternate link. RFC 4287 4.1.1 says an entry without
    content must have an alternate link. The producer's, if any, is the better one. A second
    one without ``type`` and ``hreflang`` beside an untyped one would be invalid.
    """
    if event.content or any(link.rel == "alternate" for link in event.links):
        return event.links
    return (*event.links, Link(href=locator_base + locator_segment(entry_id)))


def json_text(text: str) -> str:
    """Return JSON text as ``atom:content`` carries it.

    Some characters are written as JSON escapes (``\\u003c``). Such escapes can only stand
    inside JSON strings, and they leave the value unchanged. Escaped are the characters XML
    cannot carry (U+FFFE, U+FFFF). So are those validators flag in text (C1 controls, U+FFFD).
    So are ``<``, ``>`` and ``&``, as Go's encoder does. Then no string in the JSON reads as
    markup or an entity to a reader that guesses. The W3C validator warns of HTML in text
    content when it sees ``</p>`` or ``&amp;``.
    """
    return text.translate(_JSON_ESCAPES) if not _NEEDS_JSON_ESCAPE.isdisjoint(text) else text


_JSON_ESCAPED = [ord("<"), ord(">"), ord("&"), *range(0x80, 0xA0), 0xFFFD, 0xFFFE, 0xFFFF]


_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in _JSON_ESCAPED}


_NEEDS_JSON_ESCAPE = frozenset(map(chr, _JSON_ESCAPED))


class WritableEntry(Protocol):
    """What :func:`entry_parts` needs of an entry, numbered or not.

    The entry is an :class:`~simplefeed.model.Entry`, or a
    :class:`~simplefeed.model.PendingEntry` before the feed's lock. All but its ``updated`` and
    number is needed.
    """

    @property
    def id(self) -> str: ...
    @property
    def event(self) -> Event: ...
    @property
    def published_us(self) -> int: ...


def _iso(us: int) -> str:
    """Return ``us_to_datetime(us).isoformat()``, which is what feedgen writes.

    The part up to the second is cached, because the entries of a page mostly share it.
    """
    seconds, micro = divmod(us, 1_000_000)
    head = _SECONDS.get(seconds)
    if head is None:
        if len(_SECONDS) > 4096:
            _SECONDS.clear()
        head = _SECONDS[seconds] = us_to_datetime(seconds * 1_000_000).isoformat()[:19]
    return f"{head}.{micro:06d}+00:00" if micro else f"{head}+00:00"


_SECONDS: dict[int, str] = {}


# What lxml (libxml2) writes for the root element feedgen builds. Its namespace declarations
# (nsmap, in order) come before its one attribute, a literal `xmlns`.
_HEAD_LIVE = (
    f"<?xml version='1.0' encoding='UTF-8'?>\n<feed xmlns:sf=\"{SF_NS}\" xmlns=\"{ATOM_NS}\">"
)


_HEAD_ARCHIVE = (
    "<?xml version='1.0' encoding='UTF-8'?>\n"
    f'<feed xmlns:sf="{SF_NS}" xmlns:fh="{FH_NS}" xmlns="{ATOM_NS}">'
)


_GENERATOR = f'<generator uri="{GENERATOR_URI}">{GENERATOR}</generator>'


# How libxml2 escapes when it writes UTF-8. In text it escapes & < > and CR. In attribute values
# it also escapes the double quote, LF and tab. XML's attribute-value normalisation would change
# those.
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
    # Most values need no escaping, and a set check is several times cheaper than translate.
    return value.translate(_TEXT_ESCAPES) if not _NEEDS_TEXT_ESCAPE.isdisjoint(value) else value


def _attr(value: str) -> str:
    return value.translate(_ATTR_ESCAPES) if not _NEEDS_ATTR_ESCAPE.isdisjoint(value) else value


def render_with_feedgen(doc: Document) -> bytes:
    """Render a document to UTF-8 Atom bytes through feedgen, the reference for :func:`render`."""
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
    # Feedgen prepends added entries by default. Add oldest first, so the newest ends up on top.
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
        # No content element, but an alternate link instead (entry_links), which the extension
        # writes. Feedgen refuses an entry with neither among its own links. Its own links
        # lose their attributes. So the entry gets a placeholder that the extension takes out.
        fe.link(href=_PLACEHOLDER, rel="alternate")
        if summary is None:
            summary = event.title  # RFC 4287 4.1.1.1 advises textual content.
    elif mode == "base64":
        assert event.content_type is not None
        fe.content("")  # An empty placeholder that the entry extension fills in.
        fe.sf.base64 = (event.content_type, text)
        if summary is None:
            summary = event.title  # RFC 4287 4.1.1.1 makes Base64 content need a summary.
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


_XHTML_DIV = f'<div xmlns="{XHTML_NS}">'


_SAFE_PARSER = etree.XMLParser(
    resolve_entities=False,
    no_network=True,
    load_dtd=False,
    dtd_validation=False,
    huge_tree=False,
    remove_pis=True,
)


def _prefixed(root: Any) -> Any:
    """Return a copy of an XML tree in which every element's namespace has an explicit prefix.

    Inline content sits inside an Atom document whose default namespace is Atom. Content in a
    default namespace of its own is correct XML. But feed parsers such as feedparser read such
    elements by local name. So a ``<link>`` in the content becomes a link of the entry. Explicit
    prefixes keep the same XML infoset with no ambiguity. They are ``c0``, ``c1``, ... in
    document order. A value naming a prefix, such as ``xsi:type="xs:string"``, would not keep
    its meaning. So the door refuses it.

    The namespaces of attributes (``xlink:href``, ``inkscape:label``) are declared once. They
    go on the root, after its own. Left to lxml, each element holding one declares a prefix of
    its own (``ns0``, ``ns1``, ...). Then 65 such elements make a page declare 67 prefixes. The
    Simplefeed consumer refuses that, because feedparser's time grows with them.
    """
    prefixes: dict[str, str] = {etree.QName(root).namespace: "c0"}
    for el in root.iter(etree.Element):
        for key in el.attrib:
            namespace = etree.QName(key).namespace
            if namespace is not None and namespace != XML_NS and namespace not in prefixes:
                prefixes[namespace] = f"c{len(prefixes)}"
    on_root = {prefix: namespace for namespace, prefix in prefixes.items()}

    def copy(node: Any, parent: Any) -> Any:
        if not isinstance(node.tag, str):  # A comment or processing instruction.
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

"""Rendering documents to Atom bytes: the only user of feedgen.

Rendering is deterministic: the bytes depend on the :class:`~simplefeed.model.Document` alone (no
clock reads, no library version strings), so a frozen page re-rendered from the database is
byte-identical to the one written when it froze.

Content is declared honestly (RFC 4287 section 4.1.3):

========================  ====================================================
``content_type``           rendered as
========================  ====================================================
none, ``text``,            ``type="text"``, escaped
``text/plain``
``html``, ``text/html``    ``type="html"``, escaped
``xhtml``                  ``type="xhtml"``, inline ``<div>``
``*/xml``, ``*+xml``       inline XML under the media type
other ``text/*``           escaped text under the media type
anything else (JSON...)    Base64 under the media type, with a ``summary``
========================  ====================================================
"""

from __future__ import annotations

import base64
import copy as copy_module
from typing import Any

from feedgen.ext.base import BaseEntryExtension, BaseExtension
from feedgen.feed import FeedGenerator
from lxml import etree

from simplefeed.model import (
    ATOM_NS,
    FH_NS,
    SF_NS,
    ContentMode,
    Document,
    Entry,
    Link,
    us_to_datetime,
)

GENERATOR = "Simplefeed"
GENERATOR_URI = "https://simplefeed.dev/"


def content_mode(content_type: str | None) -> ContentMode:
    """How content of a given ``content_type`` is carried in Atom."""
    if content_type is None:
        return "text"
    ct = content_type.lower()
    if ct in ("text", "text/plain"):
        return "text"
    if ct in ("html", "text/html"):
        return "html"
    if ct == "xhtml":
        return "xhtml"
    if ct.endswith("/xml") or ct.endswith("+xml"):
        return "xml"
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

    def extend_ns(self) -> dict[str, str]:
        ns = {"sf": SF_NS}
        if self.archive:
            ns["fh"] = FH_NS
        return ns

    def extend_atom(self, feed: Any) -> Any:
        if self.archive:
            etree.SubElement(feed, f"{{{FH_NS}}}archive")
        return feed


class _EntryExtension(BaseEntryExtension):  # type: ignore[misc]
    """Entry level: ``sf:seq``, and what feedgen 1.0 cannot do itself: Base64 content, and
    entry links (its ``atom_entry`` drops every link attribute but ``href``)."""

    def __init__(self) -> None:
        self.seq = 0
        self.base64: tuple[str, str] | None = None
        self.inline_xml: str | None = None
        self.links: tuple[Link, ...] = ()

    def extend_atom(self, entry: Any) -> Any:
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


def render(doc: Document) -> bytes:
    """Render a document to UTF-8 Atom bytes."""
    fg = FeedGenerator()
    fg.register_extension("sf", _FeedExtension, _EntryExtension, atom=True, rss=False)
    fg.sf.archive = doc.kind == "archive"
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
        _add_entry(fg, entry)
    out: bytes = fg.atom_str(pretty=False)
    return out


def _add_entry(fg: Any, entry: Entry) -> None:
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
    text = event.content if event.content is not None else ""
    summary = event.summary
    if mode == "base64":
        assert event.content_type is not None
        fe.content("")  # an empty placeholder the entry extension fills in
        fe.sf.base64 = (event.content_type, text)
        if summary is None:
            summary = event.title  # RFC 4287 4.1.1.1: Base64 content requires a summary
    elif text == "":
        fe.content("")
    elif mode == "xml":
        fe.content("", type=atom_content_type(event.content_type))
        fe.sf.inline_xml = text
    else:
        fe.content(text, type=atom_content_type(event.content_type))
    fe.sf.links = event.links
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


def check_inline_xml(text: str, *, xhtml: bool) -> str | None:
    """Why ``text`` cannot be inline XML content, or None if it can.

    Parsed as feedgen will parse it, with entity expansion, DTD loading and network access off;
    a DOCTYPE is refused outright (its entities could not be carried into the feed).
    """
    source = f"{_XHTML_DIV}{text}</div>" if xhtml else text
    try:
        root = etree.fromstring(source, _SAFE_PARSER)
    except (etree.XMLSyntaxError, ValueError) as exc:
        return str(exc)
    doctype: str = root.getroottree().docinfo.doctype  # type: ignore[union-attr]
    if doctype:
        return "DOCTYPE declarations are not allowed"
    for el in root.iter(etree.Element):
        namespace = etree.QName(el).namespace
        if xhtml:
            if namespace != XHTML_NS:
                return f"<{el.tag}> is not an XHTML element"
        elif namespace is None:
            return (
                f"<{el.tag}> has no namespace; inline XML content must declare one "
                "(inside an Atom document it would otherwise read as Atom)"
            )
        elif namespace == ATOM_NS:
            return f"<{el.tag}> is an Atom element; entries cannot nest Atom elements"
    return None


def _prefixed(root: Any) -> Any:
    """A copy of an XML tree in which every element's namespace has an explicit prefix.

    Inline content sits inside an Atom document whose default namespace is Atom. Content in a
    default namespace of its own is correct XML, but feed parsers such as feedparser read such
    elements by local name (a ``<link>`` in the content becomes a link of the entry). Explicit
    prefixes (``c0``, ``c1``, ... in document order) keep the same XML infoset and no ambiguity.
    """
    prefixes: dict[str, str] = {}

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
            el = etree.Element(node.tag, nsmap=nsmap)
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

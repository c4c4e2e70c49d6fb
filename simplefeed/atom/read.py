"""Read our own pages back, their links and the entries they were rendered from.

The function :func:`page_entries` is the inverse of :func:`simplefeed.atom.render`. It serves
``simplefeed archive recover``. Say a database is restored from a backup older than the
archive. It lacks the entries of the pages archived after the backup, and their files hold
them. This module does no I/O.

What a page cannot tell is read as the renderer would have written it. Content of type
``text`` has no ``content_type``, because ``text`` and ``text/plain`` render alike. A retry
spelt either way is a replay (:meth:`Event.replay_fingerprints`). Take an entry without
content, or with Base64 content. A summary equal to its title is the one the server added
(RFC 4287 4.1.1.1). Take an entry without content whose last link is its own entry locator.
If it has no other alternate link, that link came from the server (4.1.1). JSON content is
the text the page carries. A ``<`` written ``\\u003c`` is the same value. The entry's
``published`` is the time the producer gave, as ``updated`` in its event.

So a recovered entry's fingerprint is that of the event as its page shows it. A producer's
retry that spells the event otherwise is answered as a conflict. It may lack ``updated``, say.
"""

from __future__ import annotations

import base64
import binascii
import copy
import io
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from lxml import etree

from simplefeed.model import (
    ATOM_NS,
    SF_NS,
    XHTML_NS,
    Author,
    Category,
    Entry,
    Event,
    Link,
    content_mode,
    datetime_to_us,
    locator_segment,
    text_problem,
)

__all__ = [
    "FeedHead",
    "PageUnreadable",
    "feed_head",
    "page_entries",
    "prev_archive_sha256",
    "self_href",
]

_A = f"{{{ATOM_NS}}}"
_ENTRY = f"{_A}entry"
_SF_TYPE = f"{{{SF_NS}}}type"
_DIV = f"{{{XHTML_NS}}}div"
#: Only the well-formed XML the renderer writes is read. So no DTD, no entity, no network.
_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, remove_pis=True
)


class PageUnreadable(ValueError):
    """The file is not a page this service rendered, said in one sentence."""


def page_entries(body: bytes, locator_base: str) -> list[Entry]:
    """Return the entries of an archived page's bytes, newest first, as the page lists them.

    ``locator_base`` is the feed's (:attr:`Document.locator_base`).
    """
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
    except (TypeError, ValueError) as exc:  # A value this service does not write.
        raise PageUnreadable(
            f"holds an entry this service could not have written ({exc})"
        ) from None


@dataclass(frozen=True)
class FeedHead:
    """What a feed's first page says of the feed, enough to create it again as it was."""

    uuid: str
    title: str
    page_size: int
    #: When its first entry was published, because the feed's creation time is in no page.
    created_us: int


def feed_head(body: bytes) -> FeedHead:
    """Return the feed a first page belongs to.

    Raises :class:`PageUnreadable` if the page does not say.
    """
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
    fields, links, categories = _fields(el)
    missing = [
        name for name in ("id", "seq", "title", "updated", "published") if name not in fields
    ]
    if missing:
        raise PageUnreadable(f"an entry lacks what this service writes in every entry: {missing}")
    entry_id, seq, title = fields["id"], int(fields["seq"]), fields["title"]
    updated_us, published_us = _us(fields["updated"]), _us(fields["published"])
    content = fields.get("content")
    summary = fields.get("summary")
    mode = content_mode(fields.get("content_type"))
    if summary == title and (content is None or mode == "base64"):
        summary = None  # The server's (RFC 4287 4.1.1.1).
    if content is None and links and not any(link.rel == "alternate" for link in links[:-1]):
        locator = Link(href=locator_base + locator_segment(entry_id))
        if links[-1] == locator:
            links.pop()  # The server's (RFC 4287 4.1.1).
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


def _fields(el: Any) -> tuple[dict[str, Any], list[Link], list[Category]]:
    """Return an entry element's fields by name, its links and its categories, as written."""
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
    return fields, links, categories


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
    """Return the content type, as the event had it, and the text of ``atom:content``."""
    kind = el.get("type", "text")
    declared = el.get(_SF_TYPE)
    if declared is not None:
        return declared, el.text or ""  # JSON, as the text the page carries.
    mode = content_mode(kind)
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
    return kind, el.text or ""  # HTML, or other text/*.


def _serialised(el: Any) -> str:
    """Return an element as XML text, on its own.

    It is a copy, so it holds no namespace of the page around it.
    """
    alone = copy.deepcopy(el)
    alone.tail = None
    text: str = etree.tostring(alone, encoding="unicode")
    return text


def _inner(div: Any) -> str:
    """Return what the renderer wrote the XHTML ``div`` around, its text and children as XML."""
    whole = _serialised(div)
    start = whole.find(">") + 1
    if whole.endswith("/>"):
        return ""
    return whole[start : whole.rindex("</")]


def prev_archive_sha256(body: bytes) -> str | None:
    """Return the ``sf:sha256`` of a document's ``prev-archive`` link, if it has one.

    It checks the chain of archived pages, for ``simplefeed archive verify``.
    """
    root = etree.fromstring(body, _PARSER)
    for link in root.iterfind(f"{{{ATOM_NS}}}link"):
        if link.get("rel") == "prev-archive":
            value: str | None = link.get(f"{{{SF_NS}}}sha256")
            return value
    return None


def self_href(body: bytes) -> str | None:
    """Return the ``href`` of a document's own ``self`` link, or None.

    The link is the feed element's, which the renderer writes in the feed's head. None means
    the document has none or cannot be read. Only the part before the first entry is read,
    because an archived page's entries are most of its bytes.
    """
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

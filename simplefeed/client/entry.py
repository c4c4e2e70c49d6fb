"""What the consumer hands over: one :class:`FeedEntry` per entry, every field the producer sent.

Pure values, no I/O. :meth:`FeedEntry.to_json` is what ``simplefeed consume --jsonl`` prints
and what ``--exec`` commands read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from simplefeed.lines import BIDI

__all__ = ["EntryAuthor", "EntryCategory", "EntryLink", "FeedEntry", "json_text"]

#: Written as ``\uXXXX`` escapes, which read back as the same characters: a surrogate code
#: point on its own (JSON content may write one as an escape, ``"\ud800"``, which RFC 8259
#: allows and I-JSON does not; Python's decoder keeps it, and UTF-8 cannot carry it); DEL and
#: the C1 controls, U+2028 and U+2029 (line breaks to JavaScript before ES2019 and to
#: ``str.splitlines``), Unicode's bidirectional formatting characters (a line shown in a
#: terminal or a log viewer reordered: CVE-2021-42574).
_ESCAPED = re.compile("[\ud800-\udfff\x7f-\x9f\u2028\u2029" + "".join(chr(c) for c in BIDI) + "]")


def json_text(value: Any) -> str:
    """``value`` as compact JSON text that UTF-8 can carry and a terminal shows as it is:
    characters as they are, but those of :data:`_ESCAPED` escaped, so that the text reads back
    as the same value. Printed as it was, a lone surrogate stopped ``consume --jsonl`` and
    ``--exec`` at its entry ("surrogates not allowed"), as a failed handler, for good."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _ESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


@dataclass(frozen=True)
class EntryLink:
    """An ``atom:link`` of an entry, with every attribute Atom gives it."""

    href: str
    rel: str = "alternate"
    type: str | None = None
    hreflang: str | None = None
    title: str | None = None
    length: int | None = None


@dataclass(frozen=True)
class EntryAuthor:
    name: str
    email: str | None = None
    uri: str | None = None


@dataclass(frozen=True)
class EntryCategory:
    term: str
    scheme: str | None = None
    label: str | None = None


@dataclass(frozen=True)
class FeedEntry:
    """One entry as the producer published it, with its place in the feed."""

    #: The entry's ``atom:id``.
    id: str
    #: Its sequence number in the feed (``sf:seq``): contiguous from 1.
    seq: int
    #: The title, exactly as published (no whitespace stripped).
    title: str
    #: ``atom:updated`` as the document carries it (RFC 3339).
    updated: str
    #: The content: the JSON value itself for JSON media types (``application/json``,
    #: ``*+json``), else the text exactly as published (Base64 undone when it was UTF-8 text;
    #: XHTML and inline XML as XML text); ``None`` when the entry has no content.
    content: Any
    #: The content's type: ``text``, ``html``, ``xhtml`` or the producer's media type.
    content_type: str | None
    summary: str | None
    links: tuple[EntryLink, ...]
    #: Permanent URL of the page the entry was read from (``via`` or ``self``).
    page_url: str
    author: EntryAuthor | None = None
    categories: tuple[EntryCategory, ...] = ()
    #: ``atom:published`` (RFC 3339), when the document has it.
    published: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FeedEntry:
        """The entry :meth:`to_json` gave (a parked entry, read back)."""
        author = data.get("author")
        return cls(
            id=data["id"],
            seq=data["seq"],
            title=data["title"],
            updated=data["updated"],
            content=data.get("content"),
            content_type=data.get("content_type"),
            summary=data.get("summary"),
            links=tuple(EntryLink(**link) for link in data.get("links", ())),
            page_url=data["page"],
            author=EntryAuthor(**author) if author is not None else None,
            categories=tuple(EntryCategory(**c) for c in data.get("categories", ())),
            published=data.get("published"),
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``simplefeed consume --jsonl`` prints): every field, the
        optional ones as ``null`` when absent."""
        author = self.author
        return {
            "id": self.id,
            "seq": self.seq,
            "title": self.title,
            "updated": self.updated,
            "published": self.published,
            "content": self.content,
            "content_type": self.content_type,
            "summary": self.summary,
            "author": None
            if author is None
            else {"name": author.name, "email": author.email, "uri": author.uri},
            "categories": [
                {"term": c.term, "scheme": c.scheme, "label": c.label} for c in self.categories
            ],
            "links": [
                {
                    "href": link.href,
                    "rel": link.rel,
                    "type": link.type,
                    "hreflang": link.hreflang,
                    "title": link.title,
                    "length": link.length,
                }
                for link in self.links
            ],
            "page": self.page_url,
        }

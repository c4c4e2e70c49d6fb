"""What the consumer hands over: one :class:`FeedEntry` per entry.

A :class:`FeedEntry` holds every field the producer sent. These are pure values, with no I/O.
:meth:`FeedEntry.to_json` is what ``simplefeed consume --jsonl`` prints and what ``--exec``
commands read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any, TypeVar

from simplefeed import jsontext
from simplefeed.lines import BIDI

__all__ = [
    "EntryAuthor",
    "EntryCategory",
    "EntryLink",
    "FeedEntry",
    "entry_json",
    "json_text",
    "made",
]

#: The characters written as ``\uXXXX`` escapes, which read back as the same characters.
#:
#: - A surrogate code point on its own. JSON content may write one as an escape,
#:   ``"\ud800"``. RFC 8259 allows it and I-JSON does not. Python's decoder keeps it, and
#:   UTF-8 cannot carry it.
#: - DEL and the C1 controls.
#: - U+2028 and U+2029. JavaScript before ES2019 and ``str.splitlines`` read them as line
#:   breaks.
#: - Unicode's bidirectional formatting characters. They reorder a line shown in a terminal
#:   or a log viewer (CVE-2021-42574).
_ESCAPED = re.compile("[\ud800-\udfff\x7f-\x9f\u2028\u2029" + "".join(chr(c) for c in BIDI) + "]")


def json_text(value: Any) -> str:
    """Write ``value`` as compact JSON text that UTF-8 can carry and a terminal shows as it is.

    Characters stay as they are, except those of :data:`_ESCAPED`. Those are escaped, so the
    text reads back as the same value. A lone surrogate printed raw fails with "surrogates not
    allowed". That would stop ``consume --jsonl`` and ``--exec`` at its entry for good, as a
    failed handler.
    """
    return _escaped(_VALUE(value))


#: Compact JSON text, characters unescaped.
_VALUE = jsontext.writer(ensure_ascii=False)


def _escaped(text: str) -> str:
    """Escape the characters of :data:`_ESCAPED` in JSON text."""
    if text.isascii():  # A flag of the string, so the common case costs no scan.
        return text
    return _ESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_Value = TypeVar("_Value")


def made(cls: type[_Value], fields: dict[str, Any]) -> _Value:
    """Return ``cls(**fields)`` for one of this module's frozen dataclasses, in one step.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``. For a
    :class:`FeedEntry` with its link and categories, that was an eighth of reading an entry. So
    the parser hands over the instance's dict whole. ``fields`` must hold every field of
    ``cls`` and nothing else. ``tests/test_client_units.py`` checks that parsed values equal
    those ``__init__`` makes.
    """
    value = object.__new__(cls)
    object.__setattr__(value, "__dict__", fields)
    return value


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
    #: Its sequence number in the feed (``sf:seq``). Numbers are contiguous from 1.
    seq: int
    #: The title, exactly as published (no whitespace stripped).
    title: str
    #: ``atom:updated`` as the document carries it (RFC 3339).
    updated: str
    #: The content. For JSON media types (``application/json``, ``*+json``) it is the JSON
    #: value itself. Otherwise it is the text exactly as published. Base64 is undone when it
    #: was UTF-8 text. XHTML and inline XML come as XML text. It is ``None`` when the entry
    #: has no content.
    content: Any
    #: The content's type. It is ``text``, ``html``, ``xhtml`` or the producer's media type.
    content_type: str | None
    summary: str | None
    links: tuple[EntryLink, ...]
    #: The permanent URL of the page the entry was read from (``via`` or ``self``).
    page_url: str
    author: EntryAuthor | None = None
    categories: tuple[EntryCategory, ...] = ()
    #: ``atom:published`` (RFC 3339), when the document has it.
    published: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FeedEntry:
        """Read back the entry :meth:`to_json` gave, such as a parked entry."""
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
        """Return a JSON-ready dict, which ``simplefeed consume --jsonl`` prints.

        It holds every field. Absent optional fields are ``null``.
        """
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


def entry_json(entry: FeedEntry) -> str:
    """Return ``json_text(entry.to_json())``, built about three times faster.

    ``consume --jsonl`` and ``--exec-stream`` write a line per entry, and the general encoder
    over the dict would cost more than reading the entry. So the fields are written in
    :meth:`FeedEntry.to_json`'s order, and only the content goes through the encoder.
    ``tests/test_client_units.py`` checks that both give the same text.
    """
    s = encode_basestring
    author = entry.author
    return _escaped(
        "".join(
            [
                '{"id":',
                s(entry.id),
                ',"seq":',
                str(entry.seq),
                ',"title":',
                s(entry.title),
                ',"updated":',
                s(entry.updated),
                ',"published":',
                _optional(entry.published),
                ',"content":',
                _VALUE(entry.content),
                ',"content_type":',
                _optional(entry.content_type),
                ',"summary":',
                _optional(entry.summary),
                ',"author":',
                "null"
                if author is None
                else f'{{"name":{s(author.name)},"email":{_optional(author.email)},'
                f'"uri":{_optional(author.uri)}}}',
                ',"categories":[',
                ",".join([_category(category) for category in entry.categories]),
                '],"links":[',
                ",".join([_link(link) for link in entry.links]),
                '],"page":',
                s(entry.page_url),
                "}",
            ]
        )
    )


def _optional(text: str | None) -> str:
    return "null" if text is None else encode_basestring(text)


def _category(category: EntryCategory) -> str:
    return (
        f'{{"term":{encode_basestring(category.term)},"scheme":{_optional(category.scheme)},'
        f'"label":{_optional(category.label)}}}'
    )


def _link(link: EntryLink) -> str:
    length = "null" if link.length is None else str(link.length)
    return (
        f'{{"href":{encode_basestring(link.href)},"rel":{encode_basestring(link.rel)},'
        f'"type":{_optional(link.type)},"hreflang":{_optional(link.hreflang)},'
        f'"title":{_optional(link.title)},"length":{length}}}'
    )

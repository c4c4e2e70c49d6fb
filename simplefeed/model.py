"""Domain value types: feeds, events, entries, pages and documents. No I/O here."""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote

from simplefeed import jsontext

#: Our Atom extension namespace (a name, not a document). ``<sf:seq>`` carries the sequence number.
SF_NS = "https://simplefeed.dev/ns/1.0"
#: SQLite's ``PRAGMA application_id`` of a consumer's state file ("SFcs"). It says what the file
#: is, for ``file(1)`` and for the consumer, which opens no file another application marked. It
#: also serves ``db upgrade``, which migrates no such file into a service database.
STATE_FILE_APPLICATION_ID = 0x53466373
#: RFC 5005 feed history namespace: ``<fh:archive/>`` marks an archived page.
FH_NS = "http://purl.org/syndication/history/1.0"
ATOM_NS = "http://www.w3.org/2005/Atom"
XHTML_NS = "http://www.w3.org/1999/xhtml"
XML_NS = "http://www.w3.org/XML/1998/namespace"
#: The most attributes an element of a document may have. feedparser looks each one up among
#: all of them (stdlib SAX's ``getValueByQName``), so its time grows with their square. 43,000
#: on one element (462 KB) take 11-15 s. The door refuses more in inline content. The consumer
#: refuses documents with more before feedparser reads them.
MAX_ATTRIBUTES = 256
#: The most namespace declarations inline content may make. feedparser's time grows with the
#: square of the namespaces a document declares, so 40,000 in 1.5 MB take 29 s. The door's own
#: check grows with their number times the elements'.
MAX_CONTENT_NAMESPACES = 16
ATOM_MEDIA_TYPE = "application/atom+xml; charset=utf-8"
#: Characters XML 1.0 can carry but discourages, and the replacement character. Section 2.2
#: discourages DEL and the C1 controls. The W3C validator flags each as "bad characters",
#: because text decoded with the wrong charset looks like that. JSON content carries them as
#: escapes, and Base64 content encoded. Text fields and inline XML refuse them, written or as
#: references.
DISCOURAGED_CHAR = re.compile("[\u007f-\u009f\ufffd]")
#: A percent sign that does not start a percent-encoded octet.
BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")

#: Characters XML 1.0 cannot carry: C0 controls but tab/LF/CR, lone surrogates, U+FFFE/U+FFFF.
_NOT_XML_CHAR = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def text_problem(value: str, max_chars: int | None = None) -> str | None:
    """Why ``value`` cannot be a text the documents carry, or None if it can.

    Such a text is an entry's title or a feed's. It must hold no characters XML cannot carry or
    feed validators flag, and no more than ``max_chars``.
    """
    if value.isascii() and value.isprintable():  # the common case: neither kind of character
        return None if max_chars is None or len(value) <= max_chars else _too_long(max_chars)
    bad = _NOT_XML_CHAR.search(value)
    if bad:
        return f"contains U+{ord(bad.group()):04X}, which XML cannot carry"
    bad = DISCOURAGED_CHAR.search(value)
    if bad:
        code = ord(bad.group())
        what = "the replacement character" if code == 0xFFFD else "a control character"
        return (
            f"contains U+{code:04X}, {what}, which XML discourages and feed validators flag "
            "(text decoded with the wrong charset?); JSON content may hold it"
        )
    if max_chars is not None and len(value) > max_chars:
        return _too_long(max_chars)
    return None


def _too_long(max_chars: int) -> str:
    return f"is longer than {max_chars} characters"


def us_to_datetime(us: int) -> datetime:
    """Microseconds since the epoch to an aware UTC datetime (exact, no float rounding)."""
    return EPOCH + timedelta(microseconds=us)


def datetime_to_us(dt: datetime) -> int:
    delta = dt.astimezone(UTC) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def rfc3339(us: int) -> str:
    """RFC 3339 timestamp as the documents carry it (``Z``, microseconds when non-zero)."""
    dt = us_to_datetime(us)
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if dt.microsecond:
        text += f".{dt.microsecond:06d}"
    return text + "Z"


_FIELDS: dict[type, tuple[str, ...]] = {}
_CANONICAL_JSON = jsontext.writer(sort_keys=True)
_STORED_JSON = jsontext.writer(ensure_ascii=False)
#: JSON's own string escapes (the C ones where built), as the writers above use them.
_JSON_ASCII = jsontext.string_writer(ensure_ascii=True)
_JSON_UNICODE = jsontext.string_writer(ensure_ascii=False)


def plain(value: Any) -> Any:
    """``dataclasses.asdict`` without its deep copies: dataclasses become dicts, tuples lists.

    JSON writes lists and tuples alike, so the JSON of this equals the JSON of ``asdict``. It
    takes a fraction of the time. ``asdict`` would be half the CPU time of publishing a batch
    of 100.
    """
    names = _FIELDS.get(type(value))
    if names is None:
        if not is_dataclass(value) or isinstance(value, type):
            if isinstance(value, (list, tuple)):
                return [plain(v) for v in value]
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return value
        names = _FIELDS[type(value)] = tuple(f.name for f in fields(value))
    out = {}
    for name in names:
        v = getattr(value, name)
        out[name] = v if v is None or type(v) is str or type(v) is int else plain(v)
    return out


@dataclass(frozen=True)
class Feed:
    id: int
    name: str
    uuid: str
    title: str
    page_size: int
    created_us: int
    head_seq: int
    #: ``updated`` of the newest entry (None while the feed is empty).
    head_updated_us: int | None
    #: Server clock when the feed last changed. It drives Last-Modified of the live documents.
    modified_us: int
    #: The base URL its archived pages were rendered with (None while no page is frozen).
    base_url: str | None = None
    #: When it was retired (None while it takes events). A retired feed is read, never appended to.
    retired_us: int | None = None

    @property
    def atom_id(self) -> str:
        return f"urn:uuid:{self.uuid}"


@dataclass(frozen=True)
class Author:
    name: str
    email: str | None = None
    uri: str | None = None


@dataclass(frozen=True)
class Category:
    term: str
    scheme: str | None = None
    label: str | None = None


@dataclass(frozen=True)
class Link:
    href: str
    rel: str = "alternate"
    type: str | None = None
    hreflang: str | None = None
    title: str | None = None
    length: int | None = None


ContentMode = Literal["text", "html", "xhtml", "xml", "json", "textual", "base64"]


@dataclass(frozen=True)
class Event:
    """What a producer sent, validated and normalised; nothing assigned by the server.

    ``content`` is always text, because the API serialises JSON values before they get here.
    ``content_type`` is ``None`` (plain text), ``text``, ``html``, ``xhtml`` or a media type.
    """

    title: str
    content: str | None = None
    content_type: str | None = None
    summary: str | None = None
    author: Author | None = None
    categories: tuple[Category, ...] = ()
    links: tuple[Link, ...] = ()
    id: str | None = None
    updated_us: int | None = None

    def fingerprint(self) -> str:
        """Hash of everything the producer said: equal fingerprints mean a replay."""
        return _fingerprint(self._plain())

    def to_json(self) -> dict[str, Any]:
        """The event as stored: every field the producer gave but the id, which has a column."""
        return _stored(self._plain())

    def stored_json(self) -> str:
        """:meth:`to_json` as the compact JSON text the store keeps."""
        return _STORED_JSON(self.to_json())

    def replay_fingerprints(self) -> frozenset[str]:
        """The fingerprints under which an entry stored with this event's id is a replay of it.

        They are its own, and those of the event with its content type spelt another way. The
        documents cannot tell those spellings apart. Text content may be named ``text``,
        ``text/plain`` or not at all. HTML may be ``html`` or ``text/html``. So a producer's
        retry that names the default or leaves it out is not a conflict.
        """
        data = self._plain()
        found = {_fingerprint(data)}
        if self.content is not None:
            for spellings in SAME_CONTENT_TYPE.values():
                if self.content_type in spellings:
                    found.update(_fingerprint({**data, "content_type": s}) for s in spellings)
        return frozenset(found)

    def canonical(self) -> tuple[str, str]:
        """:meth:`fingerprint` and :meth:`stored_json` together, each written out directly.

        A batch's events each need both before the lock. The general JSON writers cost most
        of that time, because they walk a dict built for them and sort its keys. These texts
        have a fixed shape, so they are written field by field with the same string escapes.
        Tests hold them equal to the general ones.
        """
        return _digest(_canonical_json(self)), _stored_json(self)

    def _plain(self) -> dict[str, Any]:
        """``plain(self)``, written out for this class.

        Publishing a batch spent most of its own time on it. Tests hold the two equal.
        """
        author = self.author
        return {
            "title": self.title,
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
            "id": self.id,
            "updated_us": self.updated_us,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], entry_id: str | None = None) -> Event:
        author = data.get("author")
        return cls(
            title=data["title"],
            content=data.get("content"),
            content_type=data.get("content_type"),
            summary=data.get("summary"),
            author=Author(**author) if author else None,
            categories=tuple(Category(**c) for c in data.get("categories", ())),
            links=tuple(Link(**link) for link in data.get("links", ())),
            id=entry_id,
            updated_us=data.get("updated_us"),
        )


#: Spellings of a content type that Atom carries alike, by ``type``, as the door keeps them
#: (lower case). :func:`content_mode` reads them. An event's fingerprint is of the spelling it
#: was sent with. A retry with another is a replay (:meth:`Event.replay_fingerprints`).
SAME_CONTENT_TYPE: dict[ContentMode, tuple[str | None, ...]] = {
    "text": (None, "text", "text/plain"),
    "html": ("html", "text/html"),
}

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


def locator_segment(entry_id: str) -> str:
    """An entry id as one path segment of its entry locator.

    Every byte of its UTF-8 but RFC 3986's unreserved characters is percent-encoded. So ``/``,
    ``?``, ``#`` and ``%`` in ids survive.
    """
    return quote(entry_id, safe="")


def _fingerprint(data: dict[str, Any]) -> str:
    return _digest(_CANONICAL_JSON(data))


def _digest(canonical: str) -> str:
    """A fingerprint: the SHA-256 of an event's canonical JSON."""
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _stored(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None and v != [] and k != "id"}


def _ascii(value: str | int | None) -> str:
    """A value of the canonical JSON: ``null``, an integer, or an ASCII-escaped string."""
    if value is None:
        return "null"
    return _JSON_ASCII(value) if isinstance(value, str) else str(value)


def _utf8(value: str | int | None) -> str:
    """A value of the stored JSON: ``null``, an integer, or a string left in Unicode."""
    if value is None:
        return "null"
    return _JSON_UNICODE(value) if isinstance(value, str) else str(value)


def _canonical_json(event: Event) -> str:
    """``_CANONICAL_JSON(event._plain())``: every field, keys sorted, ASCII escapes."""
    a = _ascii
    author = event.author
    people = (
        "null"
        if author is None
        else f'{{"email":{a(author.email)},"name":{a(author.name)},"uri":{a(author.uri)}}}'
    )
    categories = links = ""
    if event.categories:
        categories = ",".join(
            f'{{"label":{a(c.label)},"scheme":{a(c.scheme)},"term":{a(c.term)}}}'
            for c in event.categories
        )
    if event.links:
        links = ",".join(
            f'{{"href":{a(k.href)},"hreflang":{a(k.hreflang)},"length":{a(k.length)},'
            f'"rel":{a(k.rel)},"title":{a(k.title)},"type":{a(k.type)}}}'
            for k in event.links
        )
    return (
        f'{{"author":{people},"categories":[{categories}],"content":{a(event.content)},'
        f'"content_type":{a(event.content_type)},"id":{a(event.id)},"links":[{links}],'
        f'"summary":{a(event.summary)},"title":{a(event.title)},'
        f'"updated_us":{a(event.updated_us)}}}'
    )


def _stored_json(event: Event) -> str:
    """``_STORED_JSON(_stored(event._plain()))``: the fields given, in order, but the id."""
    u = _utf8
    out = []
    for name, value in (
        ("title", event.title),
        ("content", event.content),
        ("content_type", event.content_type),
        ("summary", event.summary),
    ):
        if value is not None:
            out.append(f'"{name}":{u(value)}')
    author = event.author
    if author is not None:
        out.append(
            f'"author":{{"name":{u(author.name)},"email":{u(author.email)},"uri":{u(author.uri)}}}'
        )
    if event.categories:
        categories = ",".join(
            f'{{"term":{u(c.term)},"scheme":{u(c.scheme)},"label":{u(c.label)}}}'
            for c in event.categories
        )
        out.append(f'"categories":[{categories}]')
    if event.links:
        links = ",".join(
            f'{{"href":{u(k.href)},"rel":{u(k.rel)},"type":{u(k.type)},'
            f'"hreflang":{u(k.hreflang)},"title":{u(k.title)},"length":{u(k.length)}}}'
            for k in event.links
        )
        out.append(f'"links":[{links}]')
    if event.updated_us is not None:
        out.append(f'"updated_us":{u(event.updated_us)}')
    return "{" + ",".join(out) + "}"


@dataclass(frozen=True)
class Entry:
    """An event as it stands in a feed: id, sequence number and timestamps assigned."""

    seq: int
    id: str
    updated_us: int
    published_us: int
    event: Event


@dataclass(frozen=True)
class PendingEntry:
    """An event on its way into a feed, with its entry id and time fixed.

    The entry id is the producer's, or one made for it. The time it happened is its own, or when
    it was received. Its sequence number and ``updated`` are not fixed yet.
    :mod:`simplefeed.rules.appending` decides them under the feed's lock. ``fingerprint`` and
    ``data`` are :meth:`Event.canonical`, computed before the lock.
    """

    id: str
    event: Event
    published_us: int
    fingerprint: str
    data: str

    def entry(self, seq: int, updated_us: int) -> Entry:
        return Entry(seq, self.id, updated_us, self.published_us, self.event)


@dataclass(frozen=True)
class StoredEntry:
    """What the store says of an entry id already in a feed.

    It says where the entry is, and gives the fingerprint of the event stored under it. That is
    equal for a replay, and different for a conflict.
    """

    id: str
    seq: int
    fingerprint: str


@dataclass(frozen=True)
class TokenRecord:
    """A producer token as stored: the secret only as its SHA-256."""

    id: int
    secret_hash: str
    feed: str | None
    label: str | None
    created_us: int
    revoked_us: int | None


@dataclass(frozen=True)
class Appended:
    """The outcome of publishing one event."""

    entry_id: str
    seq: int
    page: int
    created: bool


@dataclass(frozen=True)
class Located:
    """Where an entry is: its sequence number and the page that holds it."""

    entry_id: str
    seq: int
    #: The permanent URL of the page holding it, the same before and after it freezes.
    page_url: str
    #: Whether that page is frozen. Otherwise it is the working page.
    frozen: bool


@dataclass(frozen=True)
class PageRecord:
    """What the database keeps of an archived page: its number, its digest and when it froze.

    Its bytes live in the archive store, and render again from its entries, byte for byte.
    """

    feed_id: int
    number: int
    #: Lowercase hex SHA-256 of the page's bytes: what the next page's ``sf:sha256`` gives.
    sha256: str
    frozen_us: int


@dataclass(frozen=True)
class ArchivedPage:
    """A page archived for good with its bytes: rendered when it froze, or again since."""

    feed_id: int
    number: int
    body: bytes
    frozen_us: int

    @functools.cached_property
    def sha256(self) -> str:
        """Lowercase hex SHA-256 of the page's bytes.

        It is computed once, because a freeze asks for it four times: for the next page's
        link, the page's row, the digest cache and the upload.
        """
        return hashlib.sha256(self.body).hexdigest()

    @property
    def record(self) -> PageRecord:
        """What the database keeps of the page."""
        return PageRecord(self.feed_id, self.number, self.sha256, self.frozen_us)


DocumentKind = Literal["recent", "working", "archive"]


@dataclass(frozen=True)
class Document:
    """One Atom document ready to render: feed metadata, links, entries newest first."""

    feed: Feed
    kind: DocumentKind
    number: int
    updated_us: int
    links: tuple[tuple[str, str], ...]
    #: Where entry locators start: ``<prefix>/entries/``, see
    #: :class:`simplefeed.rules.paging.Urls`. An entry without content links to
    #: ``locator_base`` plus its percent-encoded id.
    locator_base: str
    entries: tuple[Entry, ...] = field(default=())
    #: Lowercase hex SHA-256 of the previous page's bytes, carried as ``sf:sha256`` on the
    #: ``prev-archive`` link. None for page 1, or when not known.
    prev_sha256: str | None = None

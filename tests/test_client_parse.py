"""What a producer published is what the consumer hands over, and nothing inside content is
ever taken for structure.

- Round trip through the real app: generated events (every field, every content kind, awkward
  text) are published through the API and consumed with each parser; every field comes back
  as published (JSON content as the same value, text byte for byte, XML as the same XML), plus
  contiguous sequence numbers and the page URL. feedparser, reading the same documents as any
  generic reader would, sees the same ids, titles and JSON values.
- A wide corpus through the app, read with either parser: equal entries.
- Hand-written documents a hostile server could send: Atom 0.3, RSS, Dublin Core, our own
  namespace and Atom itself inside content are content, never an entry's id, link, title or
  sequence number; JSON in both forms (readable text with ``sf:type``, and Base64).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any
from xml.etree import ElementTree
from xml.sax.saxutils import escape, quoteattr

import falcon.testing
import feedparser
import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lxml import etree

from simplefeed import atom
from simplefeed.app import create_app
from simplefeed.client import (
    ClientError,
    Consumer,
    EntryAuthor,
    EntryCategory,
    EntryLink,
    FeedEntry,
    MalformedPage,
    NotAtom,
)
from simplefeed.client.parse import PARSERS, Outline, Page, outline_page, parse_page
from simplefeed.door.events import MAX_EXACT_INTEGER, parse_event
from simplefeed.errors import InvalidEvent
from simplefeed.model import ATOM_NS, Document, DocumentKind, Entry, Event, Feed, content_mode
from simplefeed.rules import paging
from simplefeed.service import Simplefeed
from simplefeed.settings import Limits
from tests.conftest import START_US, FakeClock

BASE = "http://feeds.example.test"
A = f"{{{ATOM_NS}}}"
XHTML = "http://www.w3.org/1999/xhtml"


def both(url: str, body: bytes) -> Page:
    """Parse with both parsers; they must agree (on the page, or on the error). The page."""
    results: dict[str, Page | tuple[type[Exception], str]] = {}
    for parser in PARSERS:
        try:
            results[parser] = parse_page(url, body, parser=parser)
        except ClientError as exc:
            results[parser] = (type(exc), str(exc))
    lxml, reference = results["lxml"], results["feedparser"]
    if isinstance(reference, Page) and isinstance(lxml, Page):
        assert lxml == replace(reference, warnings=())
        outline = outline_page(url, body)
        assert outline.oldest_seq in (None, reference.oldest_seq)  # None: read from the head
        assert outline == replace(Outline.of(reference), oldest_seq=outline.oldest_seq)
        return reference
    assert lxml == reference
    raise AssertionError(f"both parsers refused the document: {reference}")


def same_xml(a: str, b: str) -> bool:
    """Equal as XML: names, attributes, text and structure (prefixes and comments aside)."""

    def shape(el: ElementTree.Element) -> Any:
        return (el.tag, el.attrib, el.text or "", [(shape(c), c.tail or "") for c in el])

    return bool(shape(ElementTree.fromstring(a)) == shape(ElementTree.fromstring(b)))


def is_json_type(media: str | None) -> bool:
    return media is not None and (media == "application/json" or media.endswith("+json"))


def assert_published(entry: FeedEntry, event: Event) -> None:
    """``entry`` carries every field of ``event`` as the producer sent it."""
    if event.id is not None:
        assert entry.id == event.id
    assert entry.title == event.title
    mode = content_mode(event.content_type)
    if event.content is None:
        assert entry.content is None and entry.content_type is None
    else:
        assert entry.content_type == atom.atom_content_type(event.content_type)
        if is_json_type(event.content_type):
            assert entry.content == json.loads(event.content)
        elif mode == "xml":
            assert same_xml(entry.content, event.content)
        elif mode == "xhtml":
            wrap = f'<div xmlns="{XHTML}">{{}}</div>'
            assert same_xml(wrap.format(entry.content), wrap.format(event.content))
        else:
            assert entry.content == event.content  # byte for byte: nothing stripped
    if event.summary is None and (mode == "base64" or event.content is None):
        # RFC 4287 4.1.1.1 needs one for Base64 and advises one without content: the title.
        assert entry.summary in (None, event.title)
    else:
        assert entry.summary == event.summary
    # Every optional value comes back as sent: the door refuses empty ones, which would read
    # back as absent.
    author = event.author
    assert entry.author == (
        None if author is None else EntryAuthor(author.name, author.email, author.uri)
    )
    assert entry.categories == tuple(
        EntryCategory(c.term, c.scheme, c.label) for c in event.categories
    )
    published = tuple(EntryLink(**asdict(link)) for link in event.links)
    # Exactly the producer's: not the server's alternate link to the locator of an entry
    # without content.
    assert entry.links == published
    assert entry.updated and entry.published


# -- a corpus through the real app ---------------------------------------------------------

WORDS = "café ☕ 𝄞 שלום عنوان 漢字 Ã© a < b && c > d ]]> 'q' \"dq\" \u00a0nbsp\u2028ls"
#: C1 controls and U+FFFD: the door refuses them in text (the W3C validator flags them); JSON
#: content carries them escaped, other media types in Base64.
ODD = "\x85\x92\x7f\ufffd"
XHTML_SAMPLES = [
    '<p>Para <em>em</em> &amp; <a href="https://example.com/x" title="T &quot;q&quot;">'
    "link</a></p>",
    # Upper-case names, class, rel and type attributes are refused at the door (nh3's policy),
    # and comments (HTML ends <!--> at once); the hand-written documents below still carry them.
    "<p title='Up'>Upper <br/>case</p>",
    '<a hreflang="EN" href="https://e.test/">hreflang</a>',
    "<div>inner div</div>",
    "<div>one</div><div>two</div>",
    "plain text only, with &lt;escapes&gt;",
    f"<ul><li>{escape(WORDS)}</li><li/></ul>",
    "<p>\n  indented\n</p>\n",
    "<p>CDATA <![CDATA[<not markup> & stuff]]></p>",
]
XML_SAMPLES = [
    ("application/xml", '<order xmlns="urn:example:orders" id="7"><line qty="2">w</line></order>'),
    ("image/svg+xml", '<svg xmlns="http://www.w3.org/2000/svg" width="1"><circle r="1"/></svg>'),
    ("text/xml", '<x:doc xmlns:x="urn:example:x"><x:a n="1">one</x:a><!-- c --></x:doc>'),
    (
        "application/vnd.example+xml",
        '<r xmlns="urn:example:r" xmlns:o="urn:example:o">'
        "<o:title>not a title</o:title><o:id>no</o:id></r>",
    ),
    ("application/xml", f'<t xmlns="urn:example:t">{escape(WORDS)}<![CDATA[ <x> ]]></t>'),
]


def corpus() -> list[list[dict[str, Any]]]:
    """Batches of producer events: every content kind, every field, awkward text."""
    batches: list[list[dict[str, Any]]] = [
        [{"title": "No content"}],
        [{"title": "  Padded title  ", "content": "  padded text  ", "summary": "  padded  "}],
        [{"title": WORDS, "content": WORDS, "summary": WORDS, "content_type": "text"}],
        [{"title": "Text plain", "content": "x\r\ny\tz", "content_type": "text/plain"}],
        [
            {
                "title": "HTML",
                "content": "<p>Hi <b>there</b> &amp; ]]&gt;</p>",
                "content_type": "html",
            }
        ],
        [{"title": "text/html", "content": "<em>e</em>", "content_type": "text/html"}],
        [
            {"title": f"XHTML {i}", "content": x, "content_type": "xhtml"}
            for i, x in enumerate(XHTML_SAMPLES)
        ],
        [
            {"title": f"XML {i}", "content": x, "content_type": t}
            for i, (t, x) in enumerate(XML_SAMPLES)
        ],
        [{"title": "CSV", "content": 'a,b\r\n1,"2, 3"', "content_type": "text/csv"}],
        [{"title": "JSON", "content": {"note": WORDS + ODD, "n": [1, 2.5, None, True], "e": {}}}],
        [{"title": "JSON array", "content": [1, "two", "<&>"], "content_type": "application/json"}],
        [{"title": "JSON scalar", "content": 42}, {"title": "JSON bool", "content": False}],
        [{"title": "JSON string", "content": '{"a": "Ã©"}', "content_type": "application/json"}],
        [{"title": "ld+json", "content": {"@c": "x"}, "content_type": "application/ld+json"}],
        [
            {
                "title": "Octets",
                "content": f"bytes ☃ {ODD}",
                "content_type": "application/octet-stream",
            }
        ],
        [{"title": "Vendor", "content": "k=v", "content_type": "application/x-custom"}],
        [
            {"title": "Author", "author": "Alice"},
            {
                "title": "Author obj",
                "author": {"name": "Bob", "email": "b@x.test", "uri": "https://x.test/b"},
            },
            {
                "title": "Categories",
                "categories": [
                    "a",
                    "b c",
                    {"term": "t", "scheme": "https://s.test/", "label": "L"},
                ],
            },
        ],
        [
            {
                "title": "Links",
                "links": [
                    {
                        "href": "https://example.com/a",
                        "rel": "alternate",
                        "type": "text/html",
                        "hreflang": "en",
                        "title": "Alt ☃",
                    },
                    {
                        "href": "https://example.com/f.mp3",
                        "rel": "enclosure",
                        "type": "audio/mpeg",
                        "length": 12,
                    },
                    {
                        "href": "https://example.com/r?q=1&x=2",
                        "rel": "related",
                        "title": "  spaced  ",
                    },
                    {"href": "https://example.com/s", "rel": "self"},
                    {"href": "https://example.com/v", "rel": "via"},
                    {"href": "mailto:a@example.com"},
                ],
            }
        ],
        [
            {"title": "urn id", "id": "urn:example:order:7"},
            {"title": "tag id", "id": "tag:example.com,2027:event/1"},
            {"title": "http id", "id": "http://example.com/e/1?x=1&y=2#frag"},
            {"title": "IRI id", "id": "https://example.com/%C3%A9v%C3%A9nement/%C3%BC"},
            {"title": "mojibake id", "id": "urn:test:%C3%83%C2%A9"},
        ],
        [{"title": "Updated", "updated": "2027-01-15T08:02:00Z"}],
    ]
    return batches


def post(client: falcon.testing.TestClient, batch: list[dict[str, Any]]) -> None:
    result = client.simulate_post("/entries", json=batch)
    assert result.status_code == 201, result.text


def documents(client: falcon.testing.TestClient) -> list[tuple[str, bytes]]:
    """Every document of the default feed, following links from /recent."""
    out: list[tuple[str, bytes]] = []

    def get(url: str) -> bytes:
        result = client.simulate_get(url[len(BASE) :])
        assert result.status_code == 200, url
        out.append((url, result.content))
        return result.content

    def rel(body: bytes, name: str) -> str | None:
        for link in etree.fromstring(body).findall(f"{A}link"):
            if link.get("rel") == name:
                return link.get("href")
        return None

    body = get(f"{BASE}/recent")
    url = rel(body, "via")
    while url is not None:
        body = get(url)
        url = rel(body, "prev-archive")
    return out


# -- random valid events through validation and the renderer --------------------------------

FEED = Feed(
    id=1,
    name="events",
    uuid="8c5d1a3e-0000-4000-8000-000000000001",
    title="events",
    page_size=10,
    created_us=START_US,
    head_seq=0,
    head_updated_us=None,
    modified_us=START_US,
)

#: Pieces hypothesis builds text from: anything XML can carry, and what trips parsers up.
TRICKY = [
    " ",
    "\t",
    "\n",
    "\r\n",
    "\u00a0",
    "\u2028",
    "\u3000",
    "&",
    "<",
    ">",
    '"',
    "'",
    "]]>",
    "&amp;",
    "&#x41;",
    "Ã©",
    "Ã",
    "é",
    "𝄞",
    "\ufeff",
    "\u202b",
    ' base="x"',
    'xmlns:a="urn:a"',
    "<div>",
    "</div>",
    "=",
    "://",
    "http:///x",
]
#: What the door refuses in text fields but JSON and Base64 content carry.
ODD_PIECES = ["\x7f", "\x80", "\x85", "\x9f", "\ufffd"]
xml_char = st.characters(
    min_codepoint=0x20,
    blacklist_categories=["Cs"],
    blacklist_characters="\ufffe\uffff\ufffd" + "".join(map(chr, range(0x7F, 0xA0))),
)
text = st.lists(st.one_of(st.text(xml_char, max_size=8), st.sampled_from(TRICKY)), max_size=6).map(
    "".join
)
#: An optional field's value: often empty, which the door refuses (it would read back as absent).
maybe_empty = st.just("") | text
#: Text for JSON values and Base64 content: the odd characters too.
any_text = st.lists(st.one_of(text, st.sampled_from(ODD_PIECES)), max_size=3).map("".join)
word = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters="<>&\"'"),
    min_size=1,
    max_size=8,
)
iri = st.builds(
    lambda scheme, path: f"{scheme}{path}",
    st.sampled_from(["https://example.com/", "urn:example:", "tag:example.com,2027:", "mailto:"]),
    st.text(
        st.characters(
            min_codepoint=0x21,
            blacklist_characters='<>"{}|\\^`',
            blacklist_categories=["Cs", "Zs", "Cc"],
        ),
        max_size=10,
    ),
)


#: Values the door takes or refuses for links' and authors' attributes: whatever it takes, every
#: reader must read back as sent (a newline after the grammar, an underscore, no subtype...).
MEDIA_TYPES = ["text/html", "application/atom+xml", "image/png", "Text/HTML", "text/html\n", "html"]
LANGUAGE_TAGS = ["en", "en-US", "x-klingon", "de-CH-1901", "en_US", "en\n", ""]
EMAILS = ["a@example.com", "first.last+tag@mail.example.org", "a@example.com\n", "a", ""]


@st.composite
def xhtml(draw: st.DrawFn) -> str:
    def element(depth: int) -> str:
        name = draw(st.sampled_from(["p", "em", "b", "span", "div", "a", "br", "ul", "li"]))
        attrs = draw(
            st.dictionaries(
                st.sampled_from(["title", "lang"]),  # what the door allows on every element
                text,
                max_size=3,
            )
        )
        written = "".join(f" {k}={quoteattr(v)}" for k, v in attrs.items())
        children = []
        for _ in range(draw(st.integers(0, 2 if depth < 3 else 0))):
            children.append(element(depth + 1))
            children.append(escape(draw(text)))
        return f"<{name}{written}>{escape(draw(text))}{''.join(children)}</{name}>"

    parts = [escape(draw(text))]
    for _ in range(draw(st.integers(0, 3))):
        parts.append(element(0))
        parts.append(escape(draw(text)))
    if draw(st.booleans()):
        parts.append("<!-- a comment -->")
    return "".join(parts)


@st.composite
def inline_xml(draw: st.DrawFn) -> tuple[str, str]:
    media = draw(
        st.sampled_from(
            [
                "application/xml",
                "text/xml",
                "image/svg+xml",
                "application/atom+xml",
                "application/x.y+xml",
            ]
        )
    )
    ns = draw(
        st.sampled_from(
            [
                "urn:example:a",
                "urn:example:b",
                "http://www.w3.org/2000/svg",
                "https://example.com/ns#",
            ]
        )
    )
    local = draw(st.sampled_from(["order", "title", "id", "entry", "content", "seq", "link"]))
    inner = escape(draw(text))
    attrs = "".join(
        f" {k}={quoteattr(v)}"
        for k, v in draw(
            st.dictionaries(st.sampled_from(["n", "id", "href", "type"]), text, max_size=2)
        ).items()
    )
    child = (
        f"<p:{local} xmlns:p={quoteattr(ns)}{attrs}>{inner}</p:{local}>"
        if draw(st.booleans())
        else ""
    )
    comment = "<!-- c -->" if draw(st.booleans()) else ""
    cdata = f"<![CDATA[{draw(text).replace(']]>', '')}]]>" if draw(st.booleans()) else ""
    return media, f'<{local} xmlns="{ns}">{inner}{child}{comment}{cdata}</{local}>'


def content() -> st.SearchStrategy[dict[str, Any]]:
    json_value = st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-MAX_EXACT_INTEGER, MAX_EXACT_INTEGER)
        | st.floats(allow_nan=False, allow_infinity=False)
        | any_text,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
        max_leaves=8,
    )
    return st.one_of(
        st.just({}),
        st.builds(lambda t: {"content": t}, maybe_empty),
        st.builds(
            lambda t, k: {"content": t, "content_type": k},
            maybe_empty,
            st.sampled_from(
                ["text", "TEXT", "text/plain", "html", "text/html", "text/csv", "text/x-other"]
            ),
        ),
        st.builds(lambda x: {"content": x, "content_type": "xhtml"}, xhtml()),
        st.builds(lambda mx: {"content": mx[1], "content_type": mx[0]}, inline_xml()),
        st.builds(lambda v: {"content": v}, json_value),
        st.builds(
            lambda v, k: {"content": json.dumps(v, ensure_ascii=False), "content_type": k},
            json_value,
            st.sampled_from(["application/json", "application/ld+json", "Application/JSON"]),
        ),
        st.builds(
            lambda t, k: {"content": t, "content_type": k},
            st.text(max_size=20),
            st.sampled_from(["application/octet-stream", "image/png", "application/x-custom"]),
        ),
    )


@st.composite
def event(draw: st.DrawFn) -> dict[str, Any]:
    raw: dict[str, Any] = {"title": draw(text)}
    raw.update(draw(content()))
    if draw(st.booleans()):
        raw["summary"] = draw(maybe_empty)
    if draw(st.booleans()):
        raw["id"] = draw(iri)
    author = draw(
        st.one_of(
            st.none(),
            text,
            st.builds(lambda n, u: {"name": n, "uri": u}, text, iri),
            st.builds(lambda n, e: {"name": n, "email": e}, text, st.sampled_from(EMAILS)),
        )
    )
    if author is not None:
        raw["author"] = author
    raw["categories"] = draw(
        st.lists(
            st.one_of(
                text,
                st.builds(lambda t, lab: {"term": t, "label": lab}, text, maybe_empty),
                st.builds(lambda t, sch: {"term": t, "scheme": sch}, text, iri),
            ),
            max_size=2,
        )
    )
    raw["links"] = draw(
        st.lists(
            st.builds(
                lambda href, rel, title, extra: {
                    "href": href,
                    "rel": rel,
                    **({"title": title} if title is not None else {}),
                    **extra,
                },
                iri,
                st.sampled_from(["alternate", "enclosure", "related", "self", "via"]),
                st.none() | maybe_empty,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "type": st.sampled_from(MEDIA_TYPES),
                        "hreflang": st.sampled_from(LANGUAGE_TAGS),
                        # Past 2^63 - 1 too: what the door takes, every reader must read.
                        "length": st.integers(min_value=-1, max_value=2**64),
                    },
                ),
            ),
            max_size=3,
            unique_by=lambda link: (link["rel"], link["href"]),
        )
    )
    return raw


def render(kind: DocumentKind, number: int, events: list[Any]) -> bytes:
    entries = [
        Entry(
            seq=(number - 1) * 10 + i + 1,
            id=e.id or f"urn:uuid:00000000-0000-4000-8000-{i:012d}",
            updated_us=START_US + i,
            published_us=START_US + i,
            event=e,
        )
        for i, e in enumerate(events)
    ]
    urls = paging.Urls(BASE, "events", "events")
    doc = Document(
        feed=replace(FEED, head_seq=len(entries)),
        kind=kind,
        number=number,
        updated_us=entries[-1].updated_us if entries else START_US,
        links=paging.links(urls, kind, number),
        locator_base=urls.locator_base,
        entries=tuple(reversed(entries)),
    )
    return atom.render(doc)


# -- hand-written documents ----------------------------------------------------------------

DECL = b"<?xml version='1.0' encoding='UTF-8'?>\n"
ROOT = (
    b'<feed xmlns="http://www.w3.org/2005/Atom" xmlns:sf="https://simplefeed.dev/ns/1.0" '
    b'xmlns:fh="http://purl.org/syndication/history/1.0">'
)
HEAD = (
    b"<id>urn:feed</id><title>t</title><updated>2027-01-01T00:00:00Z</updated>"
    b'<link rel="self" href="http://x.test/pages/2"/>'
    b'<link rel="prev-archive" href="http://x.test/pages/1"/>'
    b'<link rel="next-archive" href="http://x.test/pages/3"/><fh:archive/>'
)


def entry(seq: int, inner: bytes = b"", *, head: bytes | None = None) -> bytes:
    if head is None:
        head = b"<id>urn:e:%d</id><title>e%d</title><updated>2027-01-01T00:00:%02dZ</updated>" % (
            seq,
            seq,
            seq,
        )
    return b"<entry>%s%s<sf:seq>%d</sf:seq></entry>" % (head, inner, seq)


def doc(*entries: bytes, decl: bytes = DECL, root: bytes = ROOT, head: bytes = HEAD) -> bytes:
    return decl + root + head + b"".join(reversed(entries)) + b"</feed>"


def b64(text: str) -> bytes:
    return base64.b64encode(text.encode("utf-8"))


# -- round trip through the real app -------------------------------------------------------


class Reader:
    """A consumer per parser over the in-process app, each with its own state file: each
    :meth:`read` hands over what was published since the last one."""

    def __init__(self, core: Simplefeed, clock: FakeClock, tmp_path: Path) -> None:
        self.app = create_app(core.settings, core=core)
        self.clock = clock
        self.tmp_path = tmp_path

    def read(self, parser: str) -> list[FeedEntry]:
        with Consumer(
            f"{BASE}/recent",
            self.tmp_path / f"{parser}.sqlite3",
            transport=httpx.WSGITransport(app=self.app),
            clock=lambda: self.clock.now / 1_000_000,
            parser=parser,  # type: ignore[arg-type]
        ) as consumer:
            return list(consumer.entries())


def feedparser_view(client: falcon.testing.TestClient, urls: set[str]) -> dict[str, Any]:
    """Entry id -> feedparser's entry, over the documents at ``urls`` (a generic reader)."""
    out: dict[str, Any] = {}
    for url in urls:
        result = client.simulate_get(url[len(BASE) :])
        assert result.status_code == 200
        parsed = feedparser.parse(result.content)
        assert parsed.version == "atom10" and not parsed.bozo
        for item in parsed.entries:
            out[item.id] = item
    return out


@pytest.fixture
def reader(core: Simplefeed, clock: FakeClock, tmp_path: Path) -> Iterator[Reader]:
    yield Reader(core, clock, tmp_path)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(raws=st.lists(event(), min_size=1, max_size=7))
@example(  # each empty optional string, which would read back as absent if accepted
    raws=[
        {"title": "e", "content": ""},
        {"title": "e", "summary": ""},
        {"title": "e", "categories": [{"term": "t", "label": ""}]},
        {"title": "e", "links": [{"href": "https://example.com/", "title": ""}]},
    ]
)
@example(  # the longest link length the door takes; 20 digits, which no Simplefeed consumer read
    raws=[
        {"title": "e", "links": [{"href": "https://example.com/", "length": 2**63 - 1}]},
        {"title": "f", "links": [{"href": "https://example.com/", "length": 10**19}]},
    ]
)
def test_what_a_producer_publishes_every_reader_receives(
    reader: Reader, client: falcon.testing.TestClient, clock: FakeClock, raws: list[dict[str, Any]]
) -> None:
    events: list[Event] = []
    for raw in raws:
        try:
            events.append(parse_event(raw, Limits(), clock.now, None))
        except InvalidEvent:
            continue  # the app refuses it: no document will ever hold it
        clock.advance(1)
        result = client.simulate_post("/entries", json=raw)
        if result.status_code in (200, 409):  # an id another example used: not new
            events.pop()
            continue
        assert result.status_code == 201, result.text
    clock.advance(3600)  # past the recent document's max-age: the readers ask again
    read = {parser: reader.read(parser) for parser in PARSERS}
    assert read["lxml"] == read["feedparser"]
    entries = read["lxml"]
    assert len(entries) == len(events)
    for entry, event in zip(entries, events, strict=True):
        assert_published(entry, event)
        assert entry.page_url.startswith(f"{BASE}/pages/")
    if entries:
        first = entries[0].seq
        assert [e.seq for e in entries] == list(range(first, first + len(entries)))
    generic = feedparser_view(client, {e.page_url for e in entries})
    for entry, event in zip(entries, events, strict=True):
        seen = generic[entry.id]
        assert seen.title == event.title.strip() or not event.title.isascii()
        if is_json_type(event.content_type) and event.content and event.content.isascii():
            assert json.loads(seen.content[0].value) == entry.content


def test_an_entry_carries_exactly_the_producers_links(
    reader: Reader, client: falcon.testing.TestClient, clock: FakeClock
) -> None:
    """Events with and without content, with and without links (an alternate one among them):
    each parser hands over exactly the links sent. The server's alternate link to the locator
    of an entry without content, which the document carries, is left out."""
    page = {"href": "https://shop.test/o/7", "rel": "alternate", "type": "text/html"}
    enclosure = {"href": "https://shop.test/o/7.pdf", "rel": "enclosure", "length": 9}
    note = {"content": "a note"}
    events = {
        "bare": {},
        "enclosure": {"links": [enclosure]},
        "alternate": {"links": [page, enclosure]},
        "bare with content": note,
        "enclosure with content": {**note, "links": [enclosure]},
        "alternate with content": {**note, "links": [page]},
        "locator-like": {"links": [{"href": f"{BASE}/entries/urn%3Aother", "rel": "alternate"}]},
    }
    clock.advance(1)
    post(client, [{"title": title, **event} for title, event in events.items()])
    clock.advance(3600)
    documents_text = b"".join(body for _, body in documents(client))
    assert documents_text.count(b"/entries/") >= 2  # the locator of "bare" and "enclosure"
    for parser in PARSERS:
        entries = {entry.title: entry for entry in reader.read(parser)}
        for title, event in events.items():
            sent = tuple(EntryLink(**link) for link in event.get("links", []))
            assert entries[title].links == sent, (parser, title)
            assert entries[title].to_json()["links"] == [
                {"type": None, "hreflang": None, "title": None, "length": None, **link}
                for link in event.get("links", [])
            ]


def test_a_corpus_reads_the_same_with_either_parser_and_exactly_as_published(
    core: Simplefeed, client: falcon.testing.TestClient, clock: FakeClock, tmp_path: Path
) -> None:
    for batch in corpus():
        clock.advance(1)
        post(client, batch)
    docs = documents(client)
    for url, body in docs:
        both(url, body)
    reader = Reader(core, clock, tmp_path)
    read = {parser: reader.read(parser) for parser in PARSERS}
    assert read["lxml"] == read["feedparser"]
    # The parser makes its values without __init__ (entry.made). Each holds exactly the fields
    # __init__ gives, because replace() calls it with each field read back.
    for entry in read["lxml"]:
        for value in (entry, *entry.links, *entry.categories):
            assert vars(replace(value)) == vars(value)
    by_title = {e.title: e for e in read["lxml"]}
    assert by_title["  Padded title  "].content == "  padded text  "
    assert by_title["  Padded title  "].summary == "  padded  "
    assert by_title["CSV"].content == 'a,b\r\n1,"2, 3"'
    assert by_title["Text plain"].content == "x\r\ny\tz"
    assert by_title["JSON"].content == {"note": WORDS + ODD, "n": [1, 2.5, None, True], "e": {}}
    assert by_title["JSON scalar"].content == 42
    assert by_title["JSON bool"].content is False
    assert by_title["JSON string"].content == {"a": "Ã©"}  # no mojibake repair
    assert by_title["Octets"].content == f"bytes ☃ {ODD}"  # no cp1252 mapping
    words = next(e for title, e in by_title.items() if title.startswith("café"))
    assert words.title == WORDS and words.content == WORDS
    assert by_title["Author obj"].author == EntryAuthor("Bob", "b@x.test", "https://x.test/b")
    assert by_title["Categories"].categories[2] == EntryCategory("t", "https://s.test/", "L")
    links = by_title["Links"].links
    assert links[1] == EntryLink(
        "https://example.com/f.mp3", "enclosure", "audio/mpeg", None, None, 12
    )
    assert links[0].hreflang == "en" and links[2].title == "  spaced  "
    as_json = by_title["Links"].to_json()
    assert as_json["links"][1]["length"] == 12 and as_json["published"]
    # Inline XML in the form the producer wrote it, its namespace the default one again (the
    # server writes c0:svg; the consumer gave <ns0:svg xmlns:ns0=...> for any element with an
    # attribute), where that form has no comment or CDATA section.
    for number in (0, 1):
        assert by_title[f"XML {number}"].content == XML_SAMPLES[number][1]
    assert by_title["XML 3"].content == (  # another namespace declared once, at the top
        '<r xmlns="urn:example:r" xmlns:ns0="urn:example:o">'
        "<ns0:title>not a title</ns0:title><ns0:id>no</ns0:id></r>"
    )


# -- hand-written documents: what a hostile server may send --------------------------------


#: Elements of every vocabulary a parser might know, inside content: all of it is content.
POISON = [
    '<a:entry xmlns:a="http://purl.org/atom/ns#"><a:id>urn:inner</a:id></a:entry>',
    '<a:entry xmlns:a="http://www.w3.org/2005/Atom"><a:id>urn:inner</a:id>'
    '<a:title>inner</a:title><a:link href="http://evil.test/"/></a:entry>',
    '<x:id xmlns:x="http://www.w3.org/2005/Atom">urn:inner</x:id>',
    '<s:seq xmlns:s="https://simplefeed.dev/ns/1.0">99</s:seq>',
    '<dc:title xmlns:dc="http://purl.org/dc/elements/1.1/">inner title</dc:title>',
    '<r:item xmlns:r="http://purl.org/rss/1.0/"><r:link>http://evil.test/</r:link></r:item>',
    '<l:link xmlns:l="http://www.w3.org/2005/Atom" rel="next-archive" href="http://evil.test/"/>',
]


@pytest.mark.parametrize("poison", POISON)
@pytest.mark.parametrize("media", ["application/xml", "text", "xhtml"])
def test_nothing_inside_content_becomes_structure(poison: str, media: str) -> None:
    inner = poison.encode() if media != "text" else escape(poison).encode()
    if media == "xhtml":
        inner = f'<div xmlns="{XHTML}">'.encode() + inner + b"</div>"
    content = b'<content type="%s">%s</content>' % (media.encode(), inner)
    body = doc(entry(1), entry(2, content), entry(3))
    page = both("http://x.test/pages/2", body)
    assert [e.id for e in page.entries] == ["urn:e:1", "urn:e:2", "urn:e:3"]
    assert [e.seq for e in page.entries] == [1, 2, 3]
    poisoned = page.entries[1]
    assert poisoned.title == "e2" and poisoned.links == ()
    assert page.next_archive == "http://x.test/pages/3"
    if media == "text":
        assert poisoned.content == poison
    else:
        assert (
            "urn:inner" in poisoned.content
            or "evil" in poisoned.content
            or "99" in (poisoned.content)
            or "inner title" in poisoned.content
        )


def test_poisoned_entries_served_by_a_hostile_server_are_read_as_content(tmp_path: Path) -> None:
    poison = POISON[0]
    url = "http://x.test/recent"
    body = doc(
        entry(1),
        entry(2, b'<content type="application/xml">%s</content>' % poison.encode()),
        head=b"<id>urn:f</id><title>t</title><updated>2027-01-01T00:00:00Z</updated>"
        b'<link rel="self" href="http://x.test/recent"/>',
    )

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "application/atom+xml")])
        return [body]

    for parser in PARSERS:
        with Consumer(
            url,
            tmp_path / f"{parser}.sqlite3",
            transport=httpx.WSGITransport(app=app),
            parser=parser,  # type: ignore[arg-type]
        ) as consumer:
            entries = list(consumer.entries())
        assert [(e.id, e.seq) for e in entries] == [("urn:e:1", 1), ("urn:e:2", 2)]
        assert same_xml(entries[1].content, poison)


def test_json_content_in_either_form_is_the_json_value() -> None:
    value = {"note": "é <&> ]]>", "n": [1, 2.5, None, True], "s": "  spaced\n"}
    text = json.dumps(value, ensure_ascii=False)
    readable = b'<content type="text" xmlns:q="https://simplefeed.dev/ns/1.0" '
    readable += b'q:type="application/json">%s</content>' % escape(text).encode()
    old = b'<content type="application/vnd.x+json">%s</content>' % b64(text)
    csv = b'<content type="text/csv">a,b\n1,2\n</content>'
    page = both("http://x.test/pages/2", doc(entry(1, readable), entry(2, old), entry(3, csv)))
    assert page.entries[0].content == value
    assert page.entries[0].content_type == "application/json"
    assert page.entries[1].content == value
    assert page.entries[1].content_type == "application/vnd.x+json"
    assert page.entries[2].content == "a,b\n1,2\n"  # the trailing newline too


@pytest.mark.parametrize(
    ("text", "value"),
    [('{"a":[1,2.5]}', {"a": [1, 2.5]}), (' {"a":1}\n', {"a": 1}), ("7", 7), ('"x" ', "x")],
)
def test_json_content_with_or_without_whitespace_around_it(text: str, value: object) -> None:
    content = b'<content type="text" xmlns:q="https://simplefeed.dev/ns/1.0" '
    content += b'q:type="application/json">%s</content>' % escape(text).encode()
    page = both("http://x.test/pages/2", doc(entry(1, content)))
    assert page.entries[0].content == value


@pytest.mark.parametrize("text", ['{"a":1} 2', "[1,", "", " ", "NaN", "1e400", "[" * 5000])
def test_json_content_that_is_not_one_json_value_is_refused(text: str) -> None:
    content = b'<content type="text" xmlns:q="https://simplefeed.dev/ns/1.0" '
    content += b'q:type="application/json">%s</content>' % escape(text).encode()
    for parser in PARSERS:
        with pytest.raises(MalformedPage, match="not JSON"):
            parse_page("http://x.test/pages/2", doc(entry(1, content)), parser=parser)


@pytest.mark.parametrize(
    ("body", "error", "reason"),
    [
        (
            doc(entry(1, b'<content type="application/json">bm90IGpzb24=</content>')),
            MalformedPage,
            "not JSON",
        ),
        (
            doc(entry(1, b'<content type="application/json">%s</content>' % b64("NaN"))),
            MalformedPage,
            "not JSON",
        ),
        (
            DECL + b'<!DOCTYPE feed [<!ENTITY x "y">]>' + ROOT + HEAD + b"</feed>",
            NotAtom,
            "DOCTYPE|SAXParseException",
        ),
        (
            DECL + b'<feed xmlns="http://purl.org/atom/ns#"/>',
            NotAtom,
            "not an Atom 1.0 feed|a atom document",
        ),
        (doc(entry(1, b"<sf:seq>1</sf:seq>")), MalformedPage, "two sequence numbers"),
    ],
)
def test_documents_that_break_the_protocol(
    body: bytes, error: type[Exception], reason: str
) -> None:
    for parser in PARSERS:
        with pytest.raises(error, match=reason):
            parse_page("http://x.test/pages/2", body, parser=parser)  # type: ignore[arg-type]


def test_the_outline_reads_the_head_and_falls_back_to_the_whole_document() -> None:
    url = "http://x.test/pages/2"
    plain = doc(entry(1), entry(2), entry(3))
    assert outline_page(url, plain) == Outline(
        url,
        {
            "self": url,
            "prev-archive": "http://x.test/pages/1",
            "next-archive": "http://x.test/pages/3",
        },
        True,
        None,  # the head alone does not tell the oldest
        3,
        hashlib.sha256(plain).hexdigest(),
        None,
    )
    # The first entry's content holds "</entry>": the cut is not well-formed, the whole
    # document is read instead.
    inner = f'<content type="xhtml"><div xmlns="{XHTML}"><entry>x</entry></div></content>'
    tricky = doc(entry(1), entry(2), entry(3, inner.encode()))
    outline = outline_page(url, tricky)
    assert (outline.oldest_seq, outline.newest_seq) == (1, 3)
    assert outline.prev_archive == "http://x.test/pages/1"


def test_the_prev_archive_digest_is_read() -> None:
    digest = "ab" * 32
    head = HEAD.replace(
        b'<link rel="prev-archive" href="http://x.test/pages/1"/>',
        b'<link rel="prev-archive" href="http://x.test/pages/1" sf:sha256="%s"/>'
        % digest.upper().encode(),
    )
    body = doc(entry(1), head=head)
    page = both("http://x.test/pages/2", body)
    assert page.prev_sha256 == digest
    assert page.sha256 == hashlib.sha256(body).hexdigest()
    assert both("http://x.test/pages/2", doc(entry(1))).prev_sha256 is None


def test_an_unknown_parser_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="parser"):
        Consumer(f"{BASE}/recent", tmp_path / "s.sqlite3", parser="sax")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="parser"):
        parse_page("u", b"", parser="sax")  # type: ignore[arg-type]

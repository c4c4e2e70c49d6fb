"""Every served document is valid Atom (RFC 4287) and follows the RFC 5005 archive rules.

The strict checker in ``tests/atomcheck.py`` judges each document. What producers publish
comes back unchanged through feedparser. Rendering is deterministic, as the golden files and
re-rendered archived pages show.

Golden files live in ``tests/data/golden/``. After an intended change of the rendering,
regenerate them with one command and review the diff:

    SIMPLEFEED_REGEN_GOLDEN=1 .venv/bin/pytest tests/test_atom.py -k golden

Without that variable a difference is a failure, never a silent rewrite.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import falcon.testing
import feedparser
import pytest
from lxml import etree

from simplefeed.service import Simplefeed
from tests.atomcheck import ATOM_NS, FH_NS, SF_NS, check_atom
from tests.conftest import START_US, FakeClock

GOLDEN_DIR = Path(__file__).parent / "data" / "golden"
REGEN_ENV = "SIMPLEFEED_REGEN_GOLDEN"
BASE = "http://feeds.example.test"
PAGE_SIZE = 5  # As in the `settings` fixture.

A = f"{{{ATOM_NS}}}"
Event = dict[str, Any]

# -- the corpus: every content kind and every field a producer can send ------------------------

JSON_OBJECT = {
    "order": 7,
    "items": [{"sku": "A-1", "qty": 2, "price": 9.5}],
    "note": "café ☕ 𝄞 שלום",
    "nested": {"ok": True, "none": None, "empty": {}},
}
JSON_ARRAY = [1, "two", 3.25, False, None, {"k": []}, "<&>"]

CORPUS: list[Event | list[Event]] = [
    {"title": "No content at all"},
    {"title": "Plain text", "content": "Just words, nothing else."},
    {
        "title": "Markup characters in text",
        "content": "a < b && c > d ]]> <![CDATA[x]]> &amp; \"quoted\" 'single'",
    },
    {"title": "Explicit text type", "content": "tab\there\r\nCRLF line", "content_type": "text"},
    {"title": "text/plain type", "content": "plain as text/plain", "content_type": "text/plain"},
    [
        {
            "title": "HTML content",
            "content": "<p>Hello <b>world</b> &amp; ]]&gt; <i>again</i></p>",
            "content_type": "html",
        },
        {"title": "text/html content", "content": "<em>emphasis</em>", "content_type": "text/html"},
        {
            "title": "XHTML content",
            "content": '<p>Para <em>em</em> &amp; <a href="https://example.com/x">link</a></p>',
            "content_type": "xhtml",
        },
        {
            "title": "application/xml inline",
            # No element names of Atom or RSS here, because feedparser would misread them.
            # See test_feedparser_is_not_misled_by_inline_xml_content.
            "content": '<order xmlns="urn:example:orders" id="7"><line qty="2">widget</line>'
            "<note>a &amp; b</note></order>",
            "content_type": "application/xml",
        },
        {
            "title": "+xml inline",
            "content": '<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1">'
            '<circle r="1"/></svg>',
            "content_type": "image/svg+xml",
        },
        {
            "title": "text/xml with a prefix",
            "content": '<x:doc xmlns:x="urn:example:x"><x:a n="1">one</x:a></x:doc>',
            "content_type": "text/xml",
        },
    ],
    {"title": "CSV", "content": 'a,b\r\n1,"two, three"\r\n4,5', "content_type": "text/csv"},
    {"title": "JSON object", "content": JSON_OBJECT},
    {"title": "JSON array", "content": JSON_ARRAY, "content_type": "application/json"},
    {"title": "JSON number", "content": 42},
    {"title": "JSON true", "content": True},
    {
        "title": "JSON as a string",
        "content": '{"already": "serialised", "n": 1}',
        "content_type": "application/json",
        "summary": "A producer's own summary of JSON",
    },
    {
        "title": "+json object",
        "content": {"@context": "https://schema.org"},
        "content_type": "application/ld+json",
    },
    {
        "title": "Other media type",
        "content": "raw text carried as bytes ☃",
        "content_type": "application/octet-stream",
    },
    {"title": "Vendor media type", "content": "k=v;k2=v2", "content_type": "application/x-custom"},
    [
        {"title": "Author as a string", "author": "Alice Producer"},
        {
            "title": "Author as an object",
            "author": {
                "name": "Bob Builder",
                "email": "bob@example.com",
                "uri": "https://example.com/~bob",
            },
            "summary": "Bob's summary",
        },
        {
            "title": "Categories",
            "categories": [
                "alpha",
                "beta gamma",
                {"term": "t1", "scheme": "http://example.com/scheme#", "label": "Term One"},
                {"term": "t2"},
                {"term": "t3", "label": "Only a label"},
            ],
        },
        {
            "title": "Every link relation",
            "links": [
                {
                    "href": "https://example.com/a",
                    "rel": "alternate",
                    "type": "text/html",
                    "hreflang": "en-GB",
                    "title": "Alternate",
                },
                {
                    "href": "https://example.com/a.fr",
                    "rel": "alternate",
                    "type": "text/html",
                    "hreflang": "fr",
                },
                {
                    "href": "https://example.com/f.mp3",
                    "rel": "enclosure",
                    "type": "audio/mpeg",
                    "length": 12345,
                    "title": "Audio",
                },
                {"href": "https://example.com/empty", "rel": "enclosure", "length": 0},
                {"href": "https://example.com/r?q=1&x=2", "rel": "related", "title": "Related ☃"},
                {"href": "https://example.com/s", "rel": "self", "type": "application/atom+xml"},
                {"href": "https://example.com/v", "rel": "via", "hreflang": "de"},
            ],
        },
        {"title": "Default link relation", "links": [{"href": "https://example.com/only"}]},
    ],
    [
        {"title": "Explicit urn id", "id": "urn:example:order:7"},
        {"title": "Explicit tag id", "id": "tag:example.com,2027:event/1"},
        {"title": "Explicit http id", "id": "http://example.com/events/1?x=1&y=2#frag"},
        {"title": "Explicit uuid id", "id": "urn:uuid:6f1c2a4e-1d2b-4c3d-9e8f-0a1b2c3d4e5f"},
        # Ids are URIs in canonical form, so an IRI arrives percent-encoded
        # (simplefeed.door.uris).
        {"title": "Explicit IRI id", "id": "https://example.com/%C3%A9v%C3%A9nement/%C3%BC"},
    ],
    [
        # Two equal `updated` values in one batch. The server still makes them distinct.
        {"title": "Explicit updated, first", "updated": "2027-01-15T08:02:00Z"},
        {"title": "Explicit updated, same instant", "updated": "2027-01-15T08:02:00Z"},
        {"title": "Explicit updated, offset", "updated": "2027-01-15T10:02:00.5+02:00"},
        {"title": "Explicit updated, in the past", "updated": "2027-01-15T07:00:00.123456Z"},
    ],
    {
        # Fraktur "Unicode" (U+1D518 and on), escaped, because ruff flags the letters as
        # look-alikes.
        "title": "Astral plane 𝄞 😀 \U0001d518\U0001d52b\U0001d526\U0001d520"
        "\U0001d52c\U0001d521\U0001d522",
        "content": "Emoji 🎉 and math 𝛼𝛽 and CJK 漢字",
        "summary": "𐐷 summary",
        "categories": ["🏷️"],
    },
    {
        "title": "عنوان بالعربية — כותרת בעברית",
        "content": "\u202bRTL embedding\u202c مرحبا بالعالم שלום עולם",
        "author": "מחבר",
        "content_type": "text",
    },
]

XML_TYPES = ("application/xml", "image/svg+xml", "text/xml")


def _batches() -> list[list[Event]]:
    return [item if isinstance(item, list) else [item] for item in CORPUS]


def post(client: falcon.testing.TestClient, payload: Any, path: str = "/entries") -> Any:
    result = client.simulate_post(path, json=payload)
    assert result.status_code == 201, result.text
    return result.json


def publish_corpus(
    client: falcon.testing.TestClient, clock: FakeClock
) -> list[tuple[Event, dict[str, Any]]]:
    """Publish the corpus, and return (event, reply entry) pairs.

    Singles and batches go a second apart.
    """
    published: list[tuple[Event, dict[str, Any]]] = []
    for batch in _batches():
        clock.advance(1)
        # A single event is posted as an object, a batch as an array.
        replies = [post(client, batch[0])] if len(batch) == 1 else post(client, batch)["entries"]
        assert len(replies) == len(batch)
        published += zip(batch, replies, strict=True)
    return published


def fetch_documents(client: falcon.testing.TestClient) -> list[tuple[str, str, bytes]]:
    """Return every document of the default feed, reached by following links from /recent.

    Each is (kind, url, body). Recent comes first, then the working page, then the archived
    pages, newest first.
    """
    docs: list[tuple[str, str, bytes]] = []

    def get(url: str) -> bytes:
        assert url.startswith(BASE), url
        result = client.simulate_get(url[len(BASE) :])
        assert result.status_code == 200, (url, result.text)
        return result.content

    def rels(body: bytes) -> dict[str, str]:
        root = etree.fromstring(body)
        return {str(el.get("rel")): str(el.get("href")) for el in root.findall(f"{A}link")}

    recent = get(f"{BASE}/recent")
    docs.append(("recent", f"{BASE}/recent", recent))
    working_url = rels(recent)["via"]
    body = get(working_url)
    docs.append(("working", working_url, body))
    seen = {working_url}
    while (prev := rels(body).get("prev-archive")) is not None:
        assert prev not in seen, f"link loop at {prev}"
        seen.add(prev)
        body = get(prev)
        docs.append(("archive", prev, body))
    return docs


def entries_by_id(docs: list[tuple[str, str, bytes]]) -> dict[str, Any]:
    """Return feedparser's entries of the archived pages and the working page, by id."""
    found: dict[str, Any] = {}
    for kind, _url, body in docs:
        if kind == "recent":
            continue
        for entry in feedparser.parse(body).entries:
            assert entry.id not in found, f"{entry.id} is on two pages"
            found[entry.id] = entry
    return found


# -- validity -------------------------------------------------------------------------------------


def test_every_document_is_valid(client: falcon.testing.TestClient, clock: FakeClock) -> None:
    published = publish_corpus(client, clock)
    docs = fetch_documents(client)
    total = len(published)
    assert len(docs) == 1 + total // PAGE_SIZE + 1  # Recent, archived pages, working page.
    problems = {url: check_atom(body, kind=kind) for kind, url, body in docs}
    assert problems == {url: [] for _kind, url, _body in docs}
    # The recent document holds the working page's entries.
    recent, working = docs[0][2], docs[1][2]
    ids = [e.id for e in feedparser.parse(recent).entries]
    assert ids == [e.id for e in feedparser.parse(working).entries]


def test_updated_is_distinct_and_increasing_across_the_feed(
    client: falcon.testing.TestClient, clock: FakeClock
) -> None:
    published = publish_corpus(client, clock)
    found = entries_by_id(fetch_documents(client))
    oldest_first = sorted(found.values(), key=lambda e: int(e["sf_seq"]))
    assert [int(e["sf_seq"]) for e in oldest_first] == list(range(1, len(published) + 1))
    updated = [datetime.fromisoformat(e.updated) for e in oldest_first]
    assert all(a < b for a, b in itertools.pairwise(updated))

    by_title = {e.title: e for e in oldest_first}
    first = by_title["Explicit updated, first"]
    same = by_title["Explicit updated, same instant"]
    producer = datetime(2027, 1, 15, 8, 2, tzinfo=UTC)
    # Both keep the producer's instant as `published`; `updated` differs.
    assert datetime.fromisoformat(first.published) == producer
    assert datetime.fromisoformat(same.published) == producer
    assert datetime.fromisoformat(first.updated) < datetime.fromisoformat(same.updated)
    offset = by_title["Explicit updated, offset"]
    assert datetime.fromisoformat(offset.published) == datetime(
        2027, 1, 15, 8, 2, 0, 500_000, tzinfo=UTC
    )


def test_empty_documents_are_valid(client: falcon.testing.TestClient) -> None:
    # A feed without entries: recent and the working page 1.
    assert check_atom(client.simulate_get("/recent").content, kind="recent") == []
    assert check_atom(client.simulate_get("/pages/1").content, kind="working") == []
    # Right after a page is archived, the recent document is empty. Its `updated` is the
    # newest entry's.
    replies = post(client, [{"title": f"event {i}"} for i in range(PAGE_SIZE)])["entries"]
    assert replies[-1]["page"] == 1
    recent = client.simulate_get("/recent").content
    assert check_atom(recent, kind="recent") == []
    assert check_atom(client.simulate_get("/pages/2").content, kind="working") == []
    assert check_atom(client.simulate_get("/pages/1").content, kind="archive") == []
    root = etree.fromstring(recent)
    assert root.find(f"{A}entry") is None
    page1 = etree.fromstring(client.simulate_get("/pages/1").content)
    assert root.findtext(f"{A}updated") == page1.findtext(f"{A}entry/{A}updated")


# -- round trip -----------------------------------------------------------------------------------


def _expected_content(event: Event) -> tuple[str, str] | None:
    """Return the (type, value) that feedparser should report.

    Return None for inline XML, which lxml checks instead. Return None too for no content,
    where there is no content element at all.
    """
    value = event.get("content")
    ctype = event.get("content_type")
    if value is None:
        return None
    if not isinstance(value, str):
        # JSON in its readable form is text, with the media type in sf:type. lxml checks that.
        return "text/plain", json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if ctype == "application/json" or (ctype or "").endswith("+json"):
        return "text/plain", value
    if ctype in (None, "text", "text/plain"):
        return "text/plain", value
    if ctype in ("html", "text/html"):
        return "text/html", value
    if ctype == "xhtml":
        return "application/xhtml+xml", value
    if ctype in XML_TYPES:
        return None
    return ctype, value


def _is_json(event: Event) -> bool:
    media = event.get("content_type") or (
        "application/json" if not isinstance(event.get("content"), str) else "text"
    )
    return bool(media == "application/json" or media.endswith("+json"))


def test_round_trip_through_feedparser(client: falcon.testing.TestClient, clock: FakeClock) -> None:
    published = publish_corpus(client, clock)
    found = entries_by_id(fetch_documents(client))
    assert len(found) == len(published)
    for event, reply in published:
        entry = found[reply["id"]]
        where = event["title"]
        if "id" in event:
            assert reply["id"] == event["id"], where
        assert entry.id == reply["id"], where
        assert entry.title == event["title"], where
        assert entry["sf_seq"] == str(reply["seq"]), where

        expected = _expected_content(event)
        if expected is not None:
            (content,) = entry.content
            if expected[0] == "text/plain" and _is_json(event):
                # JSON's readable form holds the same value. Some characters are JSON escapes.
                got = (content.type, json.loads(content.value))
                assert got == ("text/plain", json.loads(expected[1])), where
            else:
                assert (content.type, content.value) == expected, where
        if "content" not in event:
            assert "content" not in entry, where
        if "summary" in event:
            assert entry.summary == event["summary"], where
        elif expected is not None and not expected[0].startswith(("text/", "application/xhtml")):
            assert entry.summary == event["title"], where  # Base64 content needs a summary.

        author = event.get("author")
        if author is None:
            assert entry.get("author_detail") is None, where
        elif isinstance(author, str):
            assert entry.author_detail == {"name": author}, where
        else:
            assert entry.author_detail == {
                "name": author["name"],
                "email": author["email"],
                "href": author["uri"],
            }, where

        categories = [
            {"term": c, "scheme": None, "label": None}
            if isinstance(c, str)
            else {"term": c["term"], "scheme": c.get("scheme"), "label": c.get("label")}
            for c in event.get("categories", [])
        ]
        assert [dict(t) for t in entry.get("tags", [])] == categories, where

        links = list(event.get("links", []))
        if "content" not in event and all(
            link.get("rel", "alternate") != "alternate" for link in links
        ):
            # With no content and no alternate link of the producer's, the alternate link goes
            # to the entry locator.
            locator = f"{BASE}/entries/{urllib.parse.quote(reply['id'], safe='')}"
            links.append({"href": locator, "rel": "alternate"})
        parsed_links = entry.get("links", [])
        assert len(parsed_links) == len(links), where
        for given, parsed in zip(links, parsed_links, strict=True):
            want = {k: str(v) for k, v in given.items()}
            want.setdefault("rel", "alternate")
            assert {k: parsed.get(k) for k in want} == want, where


def _shape(element: etree._Element) -> tuple[Any, ...]:
    """Return what an XML element means: its qualified names, attributes and text.

    Its spelling is left out: prefixes, CDATA sections, quoting and comments.
    """
    return (
        element.tag,
        sorted(element.attrib.items()),
        (element.text or "") + "".join(child.tail or "" for child in element),
        [_shape(child) for child in element if isinstance(child.tag, str)],
    )


def test_inline_xml_content_keeps_its_meaning(
    client: falcon.testing.TestClient, clock: FakeClock
) -> None:
    """Inline XML content keeps its meaning.

    feedparser does not surface inline XML content, so this compares the served XML itself. It
    has the same elements, namespaces, attributes and text as the producer's.
    """
    published = publish_corpus(client, clock)
    docs = fetch_documents(client)
    served: dict[str, etree._Element] = {}
    for kind, _url, body in docs:
        if kind != "recent":
            for entry in etree.fromstring(body).findall(f"{A}entry"):
                served[entry.findtext(f"{A}id") or ""] = entry
    checked = 0
    for event, reply in published:
        if event.get("content_type") not in XML_TYPES:
            continue
        content = served[reply["id"]].find(f"{A}content")
        assert content is not None
        assert content.get("type") == event["content_type"]
        (child,) = list(content)
        assert _shape(child) == _shape(etree.fromstring(event["content"])), event["title"]
        checked += 1
    assert checked == len(XML_TYPES)


def test_json_content_is_readable_text(client: falcon.testing.TestClient, clock: FakeClock) -> None:
    """JSON content is readable text.

    JSON content is the JSON text itself under type="text", with its media type in sf:type. It
    has no summary but the producer's. The value read back is the value sent.
    """
    published = publish_corpus(client, clock)
    served: dict[str, etree._Element] = {}
    for kind, _url, body in fetch_documents(client):
        if kind != "recent":
            for entry in etree.fromstring(body).findall(f"{A}entry"):
                served[entry.findtext(f"{A}id") or ""] = entry
    checked = 0
    for event, reply in published:
        ctype = event.get("content_type")
        value = event.get("content")
        media = ctype if ctype is not None else "application/json"
        is_json = media == "application/json" or media.endswith("+json")
        if value is None or not is_json or (ctype is None and isinstance(value, str)):
            continue
        entry = served[reply["id"]]
        content = entry.find(f"{A}content")
        assert content is not None
        assert dict(content.attrib) == {"type": "text", f"{{{SF_NS}}}type": media}
        sent = json.loads(value) if isinstance(value, str) else value
        assert json.loads(content.text or "") == sent, event["title"]
        assert entry.findtext(f"{A}summary") == event.get("summary"), event["title"]
        checked += 1
    assert checked == 6


def test_json_text_keeps_the_value_and_reads_as_no_markup() -> None:
    """JSON text keeps the value and reads as no markup.

    atom.json_text rewrites some characters as JSON escapes, and the JSON value stays as it
    was. The text holds nothing that XML cannot carry. It holds nothing a validator takes for
    markup or an entity.
    """
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from simplefeed import atom

    text = st.text(
        st.one_of(
            st.sampled_from('<>&"\\\u0085\u009f\ufffd\ufffe\uffff/'),
            st.characters(codec="utf-8", exclude_categories=("Cs",)),
        )
    )
    values = st.recursive(
        st.none() | st.booleans() | st.integers() | text,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
        max_leaves=8,
    )

    @settings(
        max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(values)
    def check(value: Any) -> None:
        written = atom.json_text(json.dumps(value, ensure_ascii=False))
        assert json.loads(written) == value
        assert not set(written) & {"<", ">", "&", "\ufffe", "\uffff", "\ufffd", "\u0085"}

    check()


# -- determinism ----------------------------------------------------------------------------------


def test_archived_pages_rerender_byte_identical(
    core: Simplefeed, client: falcon.testing.TestClient, clock: FakeClock
) -> None:
    publish_corpus(client, clock)
    feed = core.feed("events")
    frozen = feed.head_seq // PAGE_SIZE
    assert frozen >= 5
    for number in range(1, frozen + 1):
        served = client.simulate_get(f"/pages/{number}").content
        assert core.rerender(feed, number) == served, f"page {number}"
        assert core.page_path("events", number).read_bytes() == served, f"page {number} file"


def test_the_direct_renderer_matches_feedgen_byte_for_byte(
    core: Simplefeed, client: falcon.testing.TestClient, clock: FakeClock
) -> None:
    """The direct renderer matches feedgen byte for byte.

    The service renders with lxml directly (atom.render). feedgen (atom.render_with_feedgen)
    is the reference. Each document of the corpus must come out the same from both. That holds
    for archived pages, the working page, the recent document and the golden events.
    """
    from simplefeed import atom
    from simplefeed.rules import paging

    publish_corpus(client, clock)
    clock.advance(60)
    post(client, GOLDEN_EVENTS)
    feed = core.feed("events")
    compared = 0
    for number in range(1, paging.working_page(feed.head_seq, PAGE_SIZE) + 1):
        first, last = paging.seq_range(number, PAGE_SIZE)
        entries = tuple(core.store.entries_between(feed.id, first, min(last, feed.head_seq)))
        for kind in ("archive", "working", "recent"):
            doc = core._chain.document(feed, kind, number, entries)  # type: ignore[arg-type]
            assert atom.render(doc) == atom.render_with_feedgen(doc), (number, kind)
            compared += 1
    empty = core._chain.document(feed, "recent", 1, ())
    assert atom.render(empty) == atom.render_with_feedgen(empty)
    assert compared >= 18


def _xml_text(min_size: int = 0) -> Any:
    """Return strings that XML can carry, rich in what needs escaping.

    These are the strings that validation lets through.
    """
    from hypothesis import strategies as st

    chars = st.one_of(
        st.sampled_from("&<>\"'\t\n\r ;#]]>"),
        st.characters(
            codec="utf-8",
            exclude_categories=("Cs",),
            exclude_characters="".join(map(chr, [*range(0, 9), 11, 12, *range(14, 32)]))
            + "\ufffe\uffff",
        ),
    )
    return st.text(chars, min_size=min_size, max_size=12)


def _events() -> Any:
    from hypothesis import strategies as st

    from simplefeed.model import Author, Category, Link
    from simplefeed.model import Event as ModelEvent

    optional = lambda s: st.none() | s  # noqa: E731
    return st.builds(
        ModelEvent,
        title=_xml_text(1),
        content=optional(_xml_text()),
        content_type=optional(
            st.sampled_from(
                ["text", "html", "text/plain", "text/csv", "application/json", "image/png"]
            )
        ),
        summary=optional(_xml_text()),
        author=optional(
            st.builds(Author, _xml_text(1), optional(_xml_text(1)), optional(_xml_text(1)))
        ),
        categories=st.lists(
            st.builds(Category, _xml_text(1), optional(_xml_text()), optional(_xml_text())),
            max_size=2,
        ).map(tuple),
        links=st.lists(
            st.builds(
                Link,
                _xml_text(1),
                _xml_text(1),
                optional(_xml_text(1)),
                optional(_xml_text(1)),
                optional(_xml_text()),
                optional(st.integers(0, 10**12)),
            ),
            max_size=2,
        ).map(tuple),
        id=optional(_xml_text(1)),
        updated_us=optional(st.integers(0, 4_102_444_800_000_000)),
    )


def _documents() -> Any:
    from hypothesis import strategies as st

    from simplefeed.model import Document, Entry, Feed

    optional = lambda s: st.none() | s  # noqa: E731
    events = _events()
    times = st.integers(0, 4_102_444_800_000_000)  # From 1970 to 2100, any microsecond.
    entries = st.lists(
        st.builds(Entry, st.integers(1, 10**9), _xml_text(1), times, times, events), max_size=3
    ).map(tuple)
    feeds = st.builds(
        Feed,
        st.just(1),
        st.just("events"),
        st.uuids().map(str),
        _xml_text(1),
        st.just(5),
        times,
        st.integers(0, 100),
        optional(times),
        times,
    )
    # Feed-level links are the server's own (rules/paging.py). feedgen knows these relations.
    rels = st.sampled_from(["self", "current", "via", "prev-archive", "next-archive"])
    links = st.lists(st.tuples(rels, _xml_text(1)), max_size=3).map(tuple)
    return st.builds(
        Document,
        feed=feeds,
        kind=st.sampled_from(["archive", "working", "recent"]),
        number=st.integers(1, 10**6),
        updated_us=times,
        links=links,
        locator_base=_xml_text(1),
        entries=entries,
        prev_sha256=optional(st.text("0123456789abcdef", min_size=64, max_size=64)),
    )


def test_the_direct_renderer_matches_feedgen_on_generated_documents() -> None:
    """The direct renderer matches feedgen on generated documents.

    The documents hold any text the API accepts, in every field. They hold every character
    that needs escaping in text or in attributes. The direct renderer writes what feedgen and
    lxml write.
    """
    from hypothesis import HealthCheck, given, settings

    from simplefeed import atom

    @settings(
        max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(_documents())
    def check(doc: Any) -> None:
        assert atom.render(doc) == atom.render_with_feedgen(doc)

    check()


def test_an_events_stored_forms_are_those_of_its_generic_plain_form() -> None:
    """An event's stored forms are those of its generic plain form.

    Event._plain is ``plain(event)`` written out for speed. The fingerprint for replay
    detection, and the stored JSON of every event, must not change.
    """
    from hypothesis import HealthCheck, given, settings

    from simplefeed.model import plain

    @settings(
        max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(_events())
    def check(event: Any) -> None:
        generic = plain(event)
        assert event._plain() == generic
        stored = {k: v for k, v in generic.items() if v not in (None, (), []) and k != "id"}
        expected_fp = hashlib.sha256(
            json.dumps(generic, sort_keys=True, separators=(",", ":")).encode(
                "utf-8", "surrogatepass"
            )
        ).hexdigest()
        stored_json = json.dumps(stored, ensure_ascii=False, separators=(",", ":"))
        assert event.canonical() == (expected_fp, stored_json)
        assert (event.fingerprint(), event.stored_json()) == event.canonical()

    check()


GOLDEN_EVENTS: list[Event] = [
    {"title": "Order placed", "content": {"order": 1, "total": "9.50"}, "author": "shop"},
    {"title": "Note", "content": "a < b & c", "categories": ["notes", {"term": "t", "label": "T"}]},
    {"title": "Receipt", "content": "<p>Thanks <b>you</b></p>", "content_type": "html"},
    {
        "title": "Shipment",
        "content": '<shipment xmlns="urn:example:ship"><box n="1"/></shipment>',
        "content_type": "application/xml",
        "id": "urn:example:shipment:1",
        "links": [{"href": "https://example.com/track/1", "type": "text/html", "title": "Track"}],
    },
    {"title": "Invoice", "content": "<p>Invoice <em>1</em></p>", "content_type": "xhtml"},
    {
        "title": "Delivered ✓",
        "author": {"name": "Courier", "email": "c@example.com", "uri": "https://example.com/"},
        "updated": "2027-01-15T08:01:00Z",
    },
    {"title": "Feedback", "content": "5 stars", "content_type": "text/csv", "summary": "good"},
]


def _golden(name: str, body: bytes, database_url: str) -> None:
    path = GOLDEN_DIR / name
    if os.environ.get(REGEN_ENV) and database_url.startswith("sqlite"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    assert path.exists(), f"{path} is missing: run with {REGEN_ENV}=1 to create it"
    assert body == path.read_bytes(), f"{name} differs from {path} ({REGEN_ENV}=1 regenerates)"


def test_golden_documents(
    client: falcon.testing.TestClient, clock: FakeClock, database_url: str
) -> None:
    """The documents match the golden files.

    The injected FakeClock and SequentialIds make the bytes fully deterministic. They must be
    the same on SQLite and PostgreSQL.
    """
    assert clock.now == START_US
    for event in GOLDEN_EVENTS[:3]:
        post(client, event)
    clock.advance(30)
    post(client, GOLDEN_EVENTS[3:])
    page1 = client.simulate_get("/pages/1").content
    recent = client.simulate_get("/recent").content
    assert check_atom(page1, kind="archive") == []
    assert check_atom(recent, kind="recent") == []
    _golden("page-1.atom", page1, database_url)
    _golden("recent.atom", recent, database_url)


# -- known product bugs: each test fails until the product is fixed ------------------------------


def _valid_after(client: falcon.testing.TestClient, event: Event) -> list[str]:
    """Publish ``event`` and return the problems of the documents that hold it.

    A refusal (4xx) is fine. Once the event is accepted, every document that holds it must be
    served, not a 500, and valid. So must the archived page it ends up on.
    """
    result = client.simulate_post("/entries", json=event)
    assert result.status_code < 500, result.text
    if result.status_code != 201:
        assert result.status_code == 422, result.text
        return []
    problems: list[str] = []
    for path, kind in (("/recent", "recent"), ("/pages/1", "working")):
        got = client.simulate_get(path)
        assert got.status_code == 200, f"{path}: {got.status_code} {got.text}"
        problems += check_atom(got.content, kind=kind)
    fill = client.simulate_post("/entries", json=[{"title": f"f{i}"} for i in range(PAGE_SIZE)])
    assert fill.status_code == 201, f"freezing page 1 failed: {fill.status_code} {fill.text}"
    problems += check_atom(client.simulate_get("/pages/1").content, kind="archive")
    return problems


@pytest.mark.parametrize(
    "content_type, content",
    [
        ("Application/XML", "<r xmlns='urn:x'/>"),
        ("image/svg+XML", "<s xmlns='urn:s'/>"),
        ("Text/CSV", "a,b"),
    ],
)
def test_media_type_case_does_not_break_rendering(
    client: falcon.testing.TestClient, content_type: str, content: str
) -> None:
    """Media type case does not break rendering.

    Media types are case-insensitive (RFC 2045), so `Text/CSV` must not poison the feed.
    """
    event = {"title": "mixed case", "content": content, "content_type": content_type}
    assert _valid_after(client, event) == []


@pytest.mark.parametrize(
    "xhtml",
    [
        '<p>circle <svg xmlns="http://www.w3.org/2000/svg"><circle r="1"/></svg></p>',
        '<p><q xmlns="">no namespace</q></p>',
        '<a:title xmlns:a="http://www.w3.org/2005/Atom">atom</a:title>',
    ],
    ids=["svg", "no-namespace", "atom"],
)
def test_xhtml_content_with_foreign_elements(client: falcon.testing.TestClient, xhtml: str) -> None:
    """XHTML content with foreign elements is refused or kept valid.

    RFC 4287's schema allows only XHTML elements inside type="xhtml" content.
    """
    event = {"title": "xhtml", "content": xhtml, "content_type": "xhtml"}
    assert _valid_after(client, event) == []


def test_author_email_must_look_like_an_address(client: falcon.testing.TestClient) -> None:
    event = {"title": "email", "author": {"name": "Bob", "email": "not-an-address"}}
    assert _valid_after(client, event) == []


def test_no_two_alternate_links_with_same_type_and_hreflang(
    client: falcon.testing.TestClient,
) -> None:
    event = {
        "title": "two alternates",
        "links": [{"href": "https://example.com/1"}, {"href": "https://example.com/2"}],
    }
    assert _valid_after(client, event) == []


@pytest.mark.parametrize("content_type", ["multipart/mixed", "message/rfc822"])
def test_composite_media_types_are_not_content_types(
    client: falcon.testing.TestClient, content_type: str
) -> None:
    """Composite media types are not content types.

    RFC 4287 4.1.3.1 says the type of atom:content MUST NOT be a composite type.
    """
    event = {"title": "composite", "content": "x", "content_type": content_type}
    assert _valid_after(client, event) == []


def test_relative_link_href_is_refused_or_made_absolute(
    client: falcon.testing.TestClient,
) -> None:
    """A relative link href is refused or made absolute.

    A relative href resolves against the document's URL. So /recent and /pages/N would give
    the same entry different links.
    """
    event = {"title": "relative", "links": [{"href": "docs/1"}]}
    assert _valid_after(client, event) == []


def test_inline_xml_without_namespace_stays_without_namespace(
    client: falcon.testing.TestClient,
) -> None:
    """Inline XML without a namespace stays without one.

    `<r/>` under application/xml must not become an atom:r element in the served document.
    """
    source = "<r><a>1</a></r>"
    result = client.simulate_post(
        "/entries", json={"title": "no ns", "content": source, "content_type": "application/xml"}
    )
    assert result.status_code in (201, 422), result.text
    if result.status_code == 201:
        root = etree.fromstring(client.simulate_get("/recent").content)
        content = root.find(f"{A}entry/{A}content")
        assert content is not None
        (child,) = list(content)
        assert _shape(child) == _shape(etree.fromstring(source))


@pytest.mark.parametrize(
    "content_type, xml",
    [
        ("application/xml", '<order xmlns="urn:example:orders"><item>1</item></order>'),
        ("application/xml", '<doc xmlns="urn:x"><link href="https://evil.example/"/></doc>'),
        (
            "application/atom+xml",
            '<entry xmlns="http://www.w3.org/2005/Atom"><id>urn:example:inner</id>'
            "<title>inner</title><updated>2027-01-01T00:00:00Z</updated></entry>",
        ),
    ],
    ids=["rss-item", "link", "atom-entry"],
)
def test_feedparser_is_not_misled_by_inline_xml_content(
    client: falcon.testing.TestClient, content_type: str, xml: str
) -> None:
    """feedparser is not misled by inline XML content.

    Inline XML content is valid RFC 4287. But feedparser reads element names inside it as feed
    vocabulary. An `item` or an `atom:entry` becomes a phantom entry, and a `link` a phantom
    link of the entry. A document that feedparser misreads fails the issue's feedparser
    criterion.
    """
    event = {"title": "xml", "content": xml, "content_type": content_type}
    assert _valid_after(client, event) == []


# -- the checker itself: it must catch what it claims to catch ------------------------------------

FEED_ID = "urn:uuid:00000000-0000-0000-0000-000000000001"


def _entry(
    seq: int,
    *,
    ident: str | None = None,
    updated: str | None = None,
    content: str | None = '<content type="text">x</content>',
    author: str = "",
    extra: str = "",
    seq_xml: str | None = None,
) -> str:
    ident = ident or f"urn:uuid:00000000-0000-0000-0000-{seq:012d}"
    updated = updated or f"2027-01-15T08:00:{seq:02d}Z"
    seq_xml = f"<sf:seq>{seq}</sf:seq>" if seq_xml is None else seq_xml
    return (
        f"<entry><id>{ident}</id><title>entry {seq}</title><updated>{updated}</updated>"
        f"{author}{content or ''}{extra}{seq_xml}</entry>"
    )


def _links(kind: str, number: int = 2) -> str:
    page = f"{BASE}/pages/{number}"
    rels: list[tuple[str, str]]
    if kind == "recent":
        rels = [("self", f"{BASE}/recent"), ("via", page)]
    else:
        rels = [("self", page), ("current", f"{BASE}/recent")]
    if number > 1:
        rels.append(("prev-archive", f"{BASE}/pages/{number - 1}"))
    if kind == "archive":
        rels.append(("next-archive", f"{BASE}/pages/{number + 1}"))
    return "".join(f'<link href="{href}" rel="{rel}"/>' for rel, href in rels)


def _doc(
    *,
    kind: str = "archive",
    entries: list[str] | None = None,
    links: str | None = None,
    updated: str = "2027-01-15T08:00:07Z",
    author: bool = True,
    archive: bool | None = None,
    extra: str = "",
    root: str = "feed",
) -> bytes:
    entries = [_entry(7), _entry(6)] if entries is None else entries
    links = _links(kind) if links is None else links
    archive = kind == "archive" if archive is None else archive
    return (
        "<?xml version='1.0' encoding='UTF-8'?>\n"
        f'<{root} xmlns="{ATOM_NS}" xmlns:sf="{SF_NS}" xmlns:fh="{FH_NS}">'
        f"<id>{FEED_ID}</id><title>events</title><updated>{updated}</updated>"
        + ("<author><name>events</name></author>" if author else "")
        + links
        + ("<fh:archive/>" if archive else "")
        + extra
        + "".join(entries)
        + f"</{root}>"
    ).encode()


B64 = '<content type="application/json">eyJhIjoxfQ==</content>'

BAD_DOCUMENTS: dict[str, tuple[bytes, str | None, str]] = {
    # Each name maps to a document, its kind, and a fragment of the expected problem.
    "duplicate id": (
        _doc(entries=[_entry(7, ident="urn:x:1"), _entry(6, ident="urn:x:1")]),
        "archive",
        "duplicate atom:id",
    ),
    "missing author": (_doc(author=False), "archive", "no atom:author"),
    "json not base64": (
        _doc(
            entries=[
                _entry(
                    7,
                    content='<content type="application/json">{"a":1}</content>'
                    "<summary>s</summary>",
                ),
                _entry(6),
            ]
        ),
        "archive",
        "not valid Base64",
    ),
    "base64 without summary": (
        _doc(entries=[_entry(7, content=B64), _entry(6)]),
        "archive",
        "without atom:summary",
    ),
    "equal updated": (
        _doc(entries=[_entry(7), _entry(6, updated="2027-01-15T08:00:07Z")]),
        "archive",
        "equal to the entry before",
    ),
    "equal updated instant, other spelling": (
        _doc(entries=[_entry(7), _entry(6, updated="2027-01-15T09:00:07+01:00")]),
        "archive",
        "share an identical atom:updated",
    ),
    "updated out of order": (
        _doc(
            entries=[_entry(7, updated="2027-01-15T08:00:01Z"), _entry(6)],
            updated="2027-01-15T08:00:06Z",
        ),
        "archive",
        "later than the entry before",
    ),
    "missing fh:archive": (_doc(archive=False), "archive", "0 fh:archive"),
    "two fh:archive": (_doc(extra="<fh:archive/>"), "archive", "2 fh:archive"),
    "fh:archive not empty": (
        _doc(archive=False, extra="<fh:archive>yes</fh:archive>"),
        "archive",
        "not empty",
    ),
    "fh:archive on recent": (_doc(kind="recent", archive=True), "recent", "carries fh:archive"),
    "fh:archive on working page": (
        _doc(kind="working", archive=True),
        "working",
        "carries fh:archive",
    ),
    "archive without next-archive": (_doc(links=_links("working")), "archive", "no next-archive"),
    "archive without current": (
        _doc(links=_links("archive").replace('rel="current"', 'rel="related"')),
        "archive",
        "no current",
    ),
    "archive without prev-archive": (
        _doc(links=_links("archive", 1).replace("/pages/1", "/pages/2")),
        "archive",
        "no prev-archive",
    ),
    "first archive with prev-archive": (
        _doc(links=_links("archive", 1) + f'<link href="{BASE}/pages/0" rel="prev-archive"/>'),
        "archive",
        "must not have a prev-archive",
    ),
    "recent with next-archive": (
        _doc(kind="recent", links=_links("recent") + f'<link href="{BASE}/p" rel="next-archive"/>'),
        "recent",
        "must not have a next-archive",
    ),
    "recent self elsewhere": (
        _doc(kind="recent", links=_links("recent").replace("/recent", "/latest")),
        "recent",
        "is not .../recent",
    ),
    "recent without via": (
        _doc(kind="recent", links=_links("recent").replace('rel="via"', 'rel="related"')),
        "recent",
        "no via link",
    ),
    "working without current": (
        _doc(kind="working", links=_links("working").replace('rel="current"', 'rel="related"')),
        "working",
        "no current",
    ),
    "two self links": (
        _doc(links=_links("archive") + f'<link href="{BASE}/x" rel="self"/>'),
        "archive",
        "2 self links",
    ),
    "relative link href": (
        _doc(entries=[_entry(7, extra='<link href="docs/1"/>'), _entry(6)]),
        "archive",
        "href 'docs/1' is not an absolute IRI",
    ),
    "relative feed link": (
        _doc(links=_links("archive").replace(f"{BASE}/recent", "/recent")),
        "archive",
        "href '/recent' is not an absolute IRI",
    ),
    "relative id": (
        _doc(entries=[_entry(7, ident="entry-7"), _entry(6)]),
        "archive",
        "not an absolute IRI",
    ),
    "id with a space": (
        _doc(entries=[_entry(7, ident="urn:x:a b"), _entry(6)]),
        "archive",
        "not an absolute IRI",
    ),
    "broken urn:uuid": (
        _doc(entries=[_entry(7, ident="urn:uuid:1234"), _entry(6)]),
        "archive",
        "urn:uuid",
    ),
    "timestamp without offset": (
        _doc(entries=[_entry(7, updated="2027-01-15T08:00:07"), _entry(6)]),
        "archive",
        "not an RFC 3339 date-time",
    ),
    "impossible timestamp": (_doc(updated="2027-02-30T08:00:07Z"), "archive", "RELAX NG"),
    "missing seq": (_doc(entries=[_entry(7, seq_xml=""), _entry(6)]), "archive", "0 sf:seq"),
    "two seqs": (
        _doc(entries=[_entry(7, seq_xml="<sf:seq>7</sf:seq><sf:seq>7</sf:seq>"), _entry(6)]),
        "archive",
        "2 sf:seq",
    ),
    "seq zero": (
        _doc(entries=[_entry(7, seq_xml="<sf:seq>0</sf:seq>"), _entry(6)]),
        "archive",
        "not a positive integer",
    ),
    "seq not a number": (
        _doc(entries=[_entry(7, seq_xml="<sf:seq>seven</sf:seq>"), _entry(6)]),
        "archive",
        "not a positive integer",
    ),
    "seq in another namespace": (
        _doc(entries=[_entry(7, seq_xml='<seq xmlns="urn:other">7</seq>'), _entry(6)]),
        "archive",
        "0 sf:seq",
    ),
    "seq oldest first": (
        _doc(
            entries=[
                _entry(6, updated="2027-01-15T08:00:07Z"),
                _entry(7, updated="2027-01-15T08:00:06Z"),
            ]
        ),
        "archive",
        "newest first",
    ),
    "seq gap": (
        _doc(entries=[_entry(8, updated="2027-01-15T08:00:07Z"), _entry(6)]),
        "archive",
        "a gap",
    ),
    "feed updated not the newest entry's": (
        _doc(updated="2027-01-15T09:00:00Z"),
        "archive",
        "not the newest entry's updated",
    ),
    "no content, no alternate link": (
        _doc(entries=[_entry(7, content=None), _entry(6)]),
        "archive",
        "neither atom:content",
    ),
    "text/csv with an element": (
        _doc(entries=[_entry(7, content='<content type="text/csv"><b>1</b></content>'), _entry(6)]),
        "archive",
        "text/csv content has child elements",
    ),
    "untyped content with an element": (
        _doc(entries=[_entry(7, content="<content><b>1</b></content>"), _entry(6)]),
        "archive",
        "text content has child elements",
    ),
    "xml content with two roots": (
        _doc(
            entries=[
                _entry(
                    7,
                    content='<content type="application/xml">'
                    '<a xmlns="urn:a"/><b xmlns="urn:b"/></content>',
                ),
                _entry(6),
            ]
        ),
        "archive",
        "must be one XML element",
    ),
    "xml content as text": (
        _doc(
            entries=[
                _entry(7, content='<content type="application/xml">&lt;a/&gt;</content>'),
                _entry(6),
            ]
        ),
        "archive",
        "must be one XML element",
    ),
    "composite content type": (
        _doc(
            entries=[
                _entry(
                    7, content='<content type="multipart/mixed">eA==</content><summary>s</summary>'
                ),
                _entry(6),
            ]
        ),
        "archive",
        "composite type",
    ),
    "content type not a media type": (
        _doc(entries=[_entry(7, content='<content type="json">e30=</content>'), _entry(6)]),
        "archive",
        "RELAX NG",
    ),
    "xhtml content with svg": (
        _doc(
            entries=[
                _entry(
                    7,
                    content='<content type="xhtml"><div xmlns="http://www.w3.org/'
                    '1999/xhtml"><svg xmlns="http://www.w3.org/2000/svg"/>'
                    "</div></content>",
                ),
                _entry(6),
            ]
        ),
        "archive",
        "RELAX NG",
    ),
    "author email without @": (
        _doc(
            entries=[_entry(7, author="<author><name>b</name><email>b</email></author>"), _entry(6)]
        ),
        "archive",
        "RELAX NG",
    ),
    "missing title": (
        _doc(entries=[_entry(7).replace("<title>entry 7</title>", ""), _entry(6)]),
        "archive",
        "RELAX NG",
    ),
    "unknown atom element": (_doc(extra="<colour>red</colour>"), "archive", "RELAX NG"),
    "two alternate links alike": (
        _doc(
            entries=[
                _entry(
                    7, extra='<link href="http://a/1"/><link rel="alternate" href="http://a/2"/>'
                ),
                _entry(6),
            ]
        ),
        "archive",
        "second alternate link",
    ),
    "link length not a number": (
        _doc(
            entries=[
                _entry(7, extra='<link href="http://a/1" rel="enclosure" length="big"/>'),
                _entry(6),
            ]
        ),
        "archive",
        "not a number of octets",
    ),
    "root is an entry": (_doc(root="entry"), "archive", "not atom:feed"),
    "not well-formed": (_doc()[:-3], "archive", "not well-formed"),
    "not well-formed, feedparser": (_doc()[:-3], "archive", "feedparser: bozo"),
    "not UTF-8": (_doc(extra="<sf:x>caf\xe9</sf:x>").replace(b"\xc3\xa9", b"\xe9"), None, "UTF-8"),
}


def test_checker_accepts_the_hand_written_valid_documents() -> None:
    assert check_atom(_doc(), kind="archive") == []
    assert check_atom(_doc(kind="recent"), kind="recent") == []
    assert check_atom(_doc(kind="working"), kind="working") == []
    assert check_atom(_doc(links=_links("archive", 1)), kind="archive") == []
    assert check_atom(_doc(kind="recent", links=_links("recent", 1)), kind="recent") == []
    assert check_atom(_doc(kind="recent", entries=[]), kind="recent") == []
    base64_entry = _entry(7, content=B64 + "<summary>a JSON object</summary>")
    assert check_atom(_doc(entries=[base64_entry, _entry(6)]), kind="archive") == []
    with pytest.raises(ValueError):
        check_atom(_doc(), kind="frozen")


@pytest.mark.parametrize("name", list(BAD_DOCUMENTS))
def test_checker_reports_bad_documents(name: str) -> None:
    body, kind, fragment = BAD_DOCUMENTS[name]
    problems = check_atom(body, kind=kind)
    assert any(fragment in p for p in problems), problems


def test_checker_sees_a_valid_document_break_in_each_way() -> None:
    """The checker sees a valid document break in each way.

    Each bad document differs from a valid one, so the fragments are not noise.
    """
    assert check_atom(_doc(), kind="archive") == []
    assert all(check_atom(body, kind=kind) for body, kind, _ in BAD_DOCUMENTS.values())

"""Every kind of document the service serves passes the W3C Feed Validator and feedparser.

This holds for every kind of event the API accepts. The validator is
``../shared/judges/w3c-feed-validate``, beside the project as on CI. feedparser reads each
document without complaint, with ``bozo`` false.

The validator must report nothing but "Use of unknown namespace" for our own namespace. Any
other message is accepted only where :data:`CORPUS` names it for the entry it points into. The
reason is written beside it. A message about anything outside an entry fails.

Each document is judged as served from its own URL, because the validator checks ``self``
against it. The documents come from three feeds. One is empty. One is judged right after a
page was archived, so its recent document is empty. One holds the corpus, as archived pages,
working page and recent document. The validator runs in processes of its own, two at a time,
with the Python that runs the tests. The dev extras bring the lxml, html5lib and rdflib it
needs. It takes a fraction of a second a document.
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import unescape

import falcon.testing
import feedparser
import pytest
from lxml import etree

from simplefeed.service import Simplefeed
from tests.conftest import VALID_IRIS, FakeClock

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
JUDGE = SHARED / "judges" / "w3c-feed-validate"
BASE = "http://feeds.example.test"
PAGE_SIZE = 5  # As in the `settings` fixture.
ATOM = "{http://www.w3.org/2005/Atom}"
#: A fixed instant in the validator's past. "Implausible date" is anything after its clock.
START_US = 1_748_736_000_000_000  # 2025-06-01T00:00:00Z

OUR_NAMESPACE = "Use of unknown namespace: https://simplefeed.dev/ns/1.0"

# Reasons for the messages the corpus allows, written once.
HTML_LOOKALIKE = (
    "the producer's text literally contains an HTML end tag or entity reference; it is "
    "declared type text and escaped, and readers show it as written (the round trip tests "
    "read it back unchanged). The validator's heuristic cannot tell; rewriting the text "
    "would change what the producer said."
)
PRODUCER_NAMESPACE = (
    "inline XML content in the producer's own vocabulary: RFC 4287 4.1.3.3 carries XML media "
    "types inline, and the validator knows only a fixed list of namespaces (it says the same "
    "of ours)."
)
MOJIBAKE_LOOKALIKE = (
    "the producer's text is made of Latin-1 characters that would also read as UTF-8 ('Ã©' "
    "for 'é'): the validator suspects text decoded twice, and it may be; but it is valid text, "
    "kept as sent (the round trip tests read it back unchanged), and guessing would change it."
)
OLD_DATE = (
    "the producer's own time, kept as published (and as updated, since nothing earlier is in "
    "the feed); the API accepts any time from 1970, and an event may be that old. The "
    "validator thinks any date before 1990 implausible."
)


#: A URL of each scheme the door takes (markup.EVENT_URL_SCHEMES) that VALID_IRIS has not.
OTHER_SCHEMES = (
    "http://example.com/",
    "im:someone@example.com",
    "news:comp.lang.python",
    "nntp://news.example.com/comp.lang.python",
    "openpgp4fpr:0123456789ABCDEF0123456789ABCDEF01234567",
    "sip:someone@example.com",
    "tel:+1-201-555-0123",
    "xmpp:someone@example.com",
)


@dataclass(frozen=True)
class Case:
    """An event or a batch, and the validator messages its entries may cause, with why."""

    events: list[dict[str, Any]]
    allowed: dict[str, str] = field(default_factory=dict)


def one(event: dict[str, Any], **allowed: str) -> Case:
    return Case([event], {k.replace("_", " "): v for k, v in allowed.items()})


JSON_VALUE = {
    "order": 7,
    "lines": [{"sku": "A-1", "qty": 2, "price": 9.5}],
    "html": "<p>Tom &amp; Jerry</p> </b> &lt;",
    "odd": "\u0085 \u009f \ufffd \ufffe \uffff",
    "unicode": "café ☕ 𝄞 שלום",
    "nested": {"ok": True, "none": None, "empty": {}},
}

CORPUS: list[Case] = [
    # -- content, every way it is carried -------------------------------------------------
    one({"title": "No content"}),
    # The door refuses empty or blank content, summaries, labels and link titles
    # (tests/test_door.py).
    one({"title": "Plain text", "content": "Just words."}),
    one(
        {"title": "Text that looks like HTML", "content": "a </b> &amp; b", "content_type": "text"},
        content_should_not_contain_HTML=HTML_LOOKALIKE,
    ),
    one({"title": "text/plain", "content": "line 1\r\nline 2\n", "content_type": "text/plain"}),
    one(
        {"title": "HTML", "content": "<p>Hello <b>world</b> &amp; all</p>", "content_type": "html"}
    ),
    one({"title": "text/html", "content": "<em>emphasis</em>", "content_type": "text/html"}),
    one(
        {
            "title": "XHTML",
            "content": '<p>Para <em>em</em> &amp; <a href="https://example.com/x">a link</a></p>',
            "content_type": "xhtml",
        }
    ),
    one(
        {
            "title": "XML, default namespace",
            "content": '<order xmlns="urn:example:orders" id="7"><line qty="2">w</line></order>',
            "content_type": "application/xml",
        },
        Use_of_unknown_namespace=PRODUCER_NAMESPACE,
    ),
    one(
        {
            "title": "XML, prefixed, namespaced attribute",
            "content": '<x:doc xmlns:x="urn:example:x" xmlns:y="urn:example:y" y:n="1">'
            '<x:a xml:lang="en">one</x:a><!-- a comment --></x:doc>',
            "content_type": "text/xml",
        },
        Use_of_unknown_namespace=PRODUCER_NAMESPACE,
    ),
    one(
        {
            # The door refuses XLink attributes, because feedparser reads them as links.
            "title": "SVG, a namespace the validator knows",
            "content": '<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1">'
            '<g><circle r="1"/></g></svg>',
            "content_type": "image/svg+xml",
        }
    ),
    one({"title": "CSV", "content": 'a,b\r\n1,"two, three"\n', "content_type": "text/csv"}),
    one({"title": "Markdown", "content": "# Title\n\n*x*", "content_type": "text/markdown"}),
    one({"title": "JSON object", "content": JSON_VALUE}),
    one(
        {
            "title": "JSON array",
            "content": [1, "two", None, False],
            "content_type": "application/json",
        }
    ),
    one({"title": "JSON number", "content": 42}),
    one({"title": "JSON false", "content": False}),
    one(
        {
            "title": "JSON as text, with a summary",
            "content": '{"already": "serialised", "html": "<i>x</i>"}',
            "content_type": "application/json",
            "summary": "The producer's own summary",
        }
    ),
    one(
        {
            "title": "+json",
            "content": {"@context": "https://schema.org"},
            "content_type": "application/ld+json",
        }
    ),
    one(
        {
            # C1 controls and U+FFFD are refused in text. Base64 and JSON content carry them.
            "title": "Octet stream",
            "content": "bytes ☃ \x85\x9f\ufffd",
            "content_type": "application/octet-stream",
        }
    ),
    one({"title": "Vendor type", "content": "k=v", "content_type": "application/x-custom"}),
    # -- authors ---------------------------------------------------------------------------
    one({"title": "Author as a string", "author": "Alice Producer"}),
    one({"title": "Author, name only", "author": {"name": "Bob"}}),
    one({"title": "Author with e-mail", "author": {"name": "Bob", "email": "bob@example.com"}}),
    one({"title": "Author with URI", "author": {"name": "Bob", "uri": "https://example.com/~bob"}}),
    one(
        {
            "title": "Author, every field",
            "author": {
                "name": "Zoë Ångström",
                "email": "zoe.a+feeds@example.co.uk",
                "uri": "https://example.com/",
            },
        }
    ),
    # -- ids -------------------------------------------------------------------------------
    Case(
        [
            {"title": "urn:uuid id", "id": "urn:uuid:6f1c2a4e-1d2b-4c3d-9e8f-0a1b2c3d4e5f"},
            {"title": "tag id", "id": "tag:example.com,2025:event/1"},
            {"title": "urn id", "id": "urn:example:order:7"},
            {"title": "https id", "id": "https://example.com/events/1?x=1&y=2#frag"},
            {"title": "http id", "id": "http://example.com/events/2"},
        ]
    ),
    # -- links -----------------------------------------------------------------------------
    one(
        {
            "title": "Every link relation",
            "content": "with links",
            "links": [
                {
                    "href": "https://example.com/a",
                    "type": "text/html",
                    "hreflang": "en-GB",
                    "title": "A",
                },
                {"href": "https://example.com/a.fr", "type": "text/html", "hreflang": "fr"},
                {
                    "href": "https://example.com/f.mp3",
                    "rel": "enclosure",
                    "type": "audio/mpeg",
                    "length": 12345,
                },
                {"href": "https://example.com/r?q=1&x=2", "rel": "related", "title": "Related ☃"},
                {"href": "https://example.com/v", "rel": "via", "hreflang": "de"},
                {"href": "https://example.com/i/42", "rel": "https://example.com/rels/invoice"},
                {"href": "https://example.com/t", "rel": "tag:example.com,2026:rels/track"},
                {
                    "href": "https://example.com/s.atom",
                    "rel": "self",
                    "type": "application/atom+xml",
                },
            ],
        }
    ),
    one(
        {
            "title": "IRIs of every scheme the door takes",
            "content": "x",
            "links": [{"href": href, "rel": "related"} for href in (*VALID_IRIS, *OTHER_SCHEMES)],
            "author": {"name": "A", "uri": "tag:example.com,2025:a"},
            "categories": [{"term": "t", "scheme": "urn:example:scheme"}],
        }
    ),
    one(
        {
            "title": "No content, the producer's alternate link",
            "links": [{"href": "https://example.com/p"}],
        }
    ),
    one(
        {
            "title": "No content, a typed alternate link",
            "links": [{"href": "https://example.com/p.json", "type": "application/json"}],
        }
    ),
    one(
        {
            "title": "No content, an enclosure only",
            "links": [{"href": "https://example.com/e", "rel": "enclosure", "length": 0}],
        }
    ),
    # -- categories, summaries, times --------------------------------------------------------
    one(
        {
            "title": "Categories",
            "content": "x",
            "categories": [
                "alpha",
                {"term": "t1", "scheme": "https://example.com/scheme#", "label": "One"},
            ],
        }
    ),
    one({"title": "Summary only", "summary": "A summary and no content"}),
    one(
        {"title": "Summary that looks like HTML", "content": "x", "summary": "a </p> b"},
        summary_should_not_contain_HTML=HTML_LOOKALIKE,
    ),
    one(
        {"title": "Mojibake-looking text", "content": "Ã©tÃ©", "summary": "Ã©"},
        content_contains_bad_characters=MOJIBAKE_LOOKALIKE,
        summary_contains_bad_characters=MOJIBAKE_LOOKALIKE,
    ),
    Case(
        [
            {"title": "Producer's time", "updated": "2025-05-31T23:00:00Z"},
            {"title": "Same producer time", "updated": "2025-05-31T23:00:00Z"},
            {"title": "Offset time", "updated": "2025-06-01T01:00:00.5+02:00"},
        ]
    ),
    # -- Unicode -------------------------------------------------------------------------------
    one(
        {
            "title": "Astral 𝄞 😀 \U0001d518\U0001d52b\U0001d526",
            "content": "Emoji 🎉, math 𝛼𝛽, CJK 漢字, combining e\u0301, ZWJ 👩\u200d💻",
            "summary": "𐐷 summary",
            "categories": ["🏷️"],
        }
    ),
    one(
        {
            "title": "عنوان — כותרת",
            "content": "\u202bRTL\u202c مرحبا שלום \u200f",
            "author": "מחבר",
        }
    ),
    one({"title": "BOM and non-characters", "content": "\ufeff zero width\u200b \U0010fffd"}),
]

#: A producer's time before 1990, in a feed of its own. It would drag every later `updated`.
OLD_EVENT = one(
    {"title": "An event from 1985", "updated": "1985-03-01T12:00:00Z"}, Implausible_date=OLD_DATE
)


def publish(client: falcon.testing.TestClient, case: Case, path: str = "/entries") -> list[str]:
    """Publish a case and return the ids of its entries."""
    payload: Any = case.events[0] if len(case.events) == 1 else case.events
    result = client.simulate_post(path, json=payload)
    assert result.status_code == 201, (case.events[0]["title"], result.text)
    replies = [result.json] if len(case.events) == 1 else result.json["entries"]
    return [reply["id"] for reply in replies]


def documents(client: falcon.testing.TestClient, recent: str) -> list[tuple[str, bytes]]:
    """Return (url, body) of the recent document at ``recent`` and every page behind it."""
    out: list[tuple[str, bytes]] = []

    def get(url: str) -> bytes:
        result = client.simulate_get(url.removeprefix(BASE))
        assert result.status_code == 200, (url, result.text)
        out.append((url, result.content))
        return result.content

    def link(body: bytes, rel: str) -> str | None:
        for el in etree.fromstring(body).findall(f"{ATOM}link"):
            if el.get("rel") == rel:
                return el.get("href")
        return None

    body = get(recent)
    url = link(body, "via")
    assert url is not None
    while url is not None:
        url = link(get(url), "prev-archive")
    return out


def judge(documents: list[tuple[str, bytes]], tmp: Path) -> list[list[str]]:
    """Return the validator's messages for each document, in order."""

    def run(index: int) -> list[str]:
        url, body = documents[index]
        path = tmp / f"document-{index}.atom"
        path.write_bytes(body)
        done = subprocess.run(
            [sys.executable, str(JUDGE), str(path), url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        lines = done.stdout.splitlines()
        assert lines, (url, done.stderr)
        if lines == ["No errors or warnings"]:
            assert done.returncode == 0
            return []
        assert done.returncode == 1, (url, done.stdout, done.stderr)
        return lines

    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(run, range(len(documents))))


_MESSAGE = re.compile(r"^line (\d+), column (\d+): (.*)$")


def entry_title_at(body: bytes, line: int, column: int) -> str | None:
    """Return the title of the entry at a position the validator reports, or None outside any."""
    text = body.decode("utf-8")
    lines = text.split("\n")
    offset = sum(len(x) + 1 for x in lines[: line - 1]) + column
    start = text.rfind("<entry>", 0, offset + 1)
    if start < 0 or text.find("</entry>", start) < offset:
        return None
    title = _TITLE.search(text, start)
    assert title is not None
    return unescape(title.group(1), {"&#13;": "\r"})


_TITLE = re.compile(r"<title>(.*?)</title>", re.S)


def unexplained(
    docs: list[tuple[str, bytes]],
    verdicts: list[list[str]],
    allowed: dict[str, dict[str, str]],
    feed_allowed: dict[str, dict[str, str]] | None = None,
) -> list[str]:
    """Return the validator messages that nothing explains.

    A message is explained if it is about our namespace. It is also explained if ``allowed``
    names it for the entry it points at, by entry title. Outside entries, ``feed_allowed`` may
    name it for the feed, by the URL prefix of its documents.
    """
    out: list[str] = []
    for (url, body), messages in zip(docs, verdicts, strict=True):
        feed_reasons = {
            prefix: reason
            for start, reasons in (feed_allowed or {}).items()
            if url.startswith(start)
            for prefix, reason in reasons.items()
        }
        for message in messages:
            match = _MESSAGE.match(message)
            assert match, message
            what = match.group(3)
            if what == OUR_NAMESPACE:
                continue
            title = entry_title_at(body, int(match.group(1)), int(match.group(2)))
            reasons = allowed.get(title, {}) if title is not None else feed_reasons
            if not any(what.startswith(prefix) for prefix in reasons):
                out.append(f"{url} (entry {title!r}): {message}")
    return out


def allowances(cases: list[Case]) -> dict[str, dict[str, str]]:
    return {event["title"]: case.allowed for case in cases for event in case.events}


@pytest.fixture
def judge_ready() -> None:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent: the W3C validator lives there (CI has it)")
    assert JUDGE.is_file(), f"{JUDGE} is missing from {SHARED}"
    for module in ("lxml", "html5lib", "rdflib"):
        __import__(module)  # The dev extras (pyproject.toml) bring them.


def feedparser_problems(docs: list[tuple[str, bytes]]) -> list[str]:
    out = []
    for url, body in docs:
        parsed = feedparser.parse(body)
        if parsed.bozo:
            out.append(f"{url}: {parsed.bozo_exception!r}")
    return out


def test_every_document_passes_the_w3c_validator(
    judge_ready: None,
    core: Simplefeed,
    client: falcon.testing.TestClient,
    clock: FakeClock,
    tmp_path: Path,
) -> None:
    clock.now = START_US
    core.create_feed("empty")
    core.create_feed("frozen")
    core.create_feed("old")
    docs: list[tuple[str, bytes]] = []
    # The empty feed: its recent document and working page 1.
    docs += documents(client, f"{BASE}/feeds/empty/recent")
    # Right after a page is archived: an empty recent document and working page, and an
    # archived page 1.
    publish(
        client,
        Case([{"title": f"event {i}", "content": "x"} for i in range(PAGE_SIZE)]),
        "/feeds/frozen/entries",
    )
    docs += documents(client, f"{BASE}/feeds/frozen/recent")
    publish(client, OLD_EVENT, "/feeds/old/entries")
    docs += documents(client, f"{BASE}/feeds/old/recent")
    # The corpus, in the default feed: archived pages, the working page and the recent one.
    for case in CORPUS:
        clock.advance(1)
        publish(client, case)
    clock.advance(1)
    publish(client, Case([{"title": "the last one", "content": "x"}]))
    docs += documents(client, f"{BASE}/recent")

    kinds = {
        etree.fromstring(body).find("{http://purl.org/syndication/history/1.0}archive") is not None
        for _, body in docs
    }
    assert kinds == {True, False}
    assert len(docs) >= 2 + 3 + 2 + 2 + 8
    verdicts = judge(docs, tmp_path)
    # The old event's feed: its `updated` is its newest entry's (RFC 4287 4.2.15).
    old_feed = {f"{BASE}/feeds/old/": {"Implausible date": OLD_DATE}}
    problems = unexplained(docs, verdicts, allowances([*CORPUS, OLD_EVENT]), old_feed)
    assert problems == [], "\n".join(problems)
    assert feedparser_problems(docs) == []
    # The reasons are for messages that do occur, so none is a blanket allowance.
    seen = {
        (title, prefix)
        for (_url, body), messages in zip(docs, verdicts, strict=True)
        for message in messages
        if (match := _MESSAGE.match(message)) is not None
        and (title := entry_title_at(body, int(match.group(1)), int(match.group(2)))) is not None
        for prefix in allowances([*CORPUS, OLD_EVENT]).get(title, {})
        if match.group(3).startswith(prefix)
    }
    wanted = {
        (e["title"], prefix)
        for case in [*CORPUS, OLD_EVENT]
        for e in case.events
        for prefix in case.allowed
    }
    assert seen == wanted


def test_the_corpus_links_to_every_scheme_the_door_takes() -> None:
    """The corpus links to every scheme the door takes.

    So the judge sees a URL of each (test_every_document_passes_the_w3c_validator).
    """
    from simplefeed.door.markup import EVENT_URL_SCHEMES

    linked = {href.partition(":")[0].lower() for href in (*VALID_IRIS, *OTHER_SCHEMES)}
    assert linked == EVENT_URL_SCHEMES


def test_the_judge_flags_what_it_should(judge_ready: None, tmp_path: Path) -> None:
    """The judge flags what it should.

    The validator, run as the corpus test runs it, reports an empty content element against
    its entry. An empty content element is the wrong way to write an event without content.
    """
    body = (
        "<?xml version='1.0' encoding='UTF-8'?>\n"
        '<feed xmlns="http://www.w3.org/2005/Atom"><id>urn:uuid:6f1c2a4e-1d2b-4c3d-9e8f-0a1b2c3d4e5f</id>'
        f"<title>t</title><updated>2025-06-01T00:00:00Z</updated><author><name>a</name></author>"
        f'<link href="{BASE}/recent" rel="self"/>'
        "<entry><id>urn:uuid:6f1c2a4e-1d2b-4c3d-9e8f-0a1b2c3d4e50</id><title>blank</title>"
        "<updated>2025-06-01T00:00:00Z</updated><content/></entry></feed>"
    ).encode()
    docs = [(f"{BASE}/recent", body)]
    verdicts = judge(docs, tmp_path)
    (problem,) = unexplained(docs, verdicts, {})
    assert problem.startswith(f"{BASE}/recent (entry 'blank'): ")
    assert problem.endswith(": content should not be blank")

"""Property: whatever the door accepts, every reader reads (issue #11).

Hypothesis generates events within the documented limits. They cover every content type,
authors, ids, links, categories, dates and Unicode. Some of them are hostile: feed
vocabularies inside inline XML, JSON that strict parsers refuse, ids in another spelling, and
script in markup. Each is published through the real app over a real database, SQLite and
PostgreSQL. A valid event must be accepted. A hostile one may be refused, and then nothing is
stored.

Then every document of the feed must be read with the same entries and ids, in the order they
were published. That covers archived pages, the working page and the recent document.
feedparser must read each with bozo false. So must the consumer's strict lxml path
(``parse_page(..., parser="lxml")``, ``simplefeed.client.tree``). JSON content must pass
``json.loads`` with NaN, Infinity and overflowing numbers refused. The test is bounded to a
few dozen examples, with no deadline.
"""

from __future__ import annotations

import base64
import html
import itertools
import json
import unicodedata
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import falcon.testing
import feedparser
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from simplefeed.app import create_app
from simplefeed.client.parse import parse_page
from simplefeed.client.tree import is_json
from simplefeed.door.events import MAX_EXACT_INTEGER
from simplefeed.door.namespaces import FEED_NAMESPACES
from simplefeed.service import Simplefeed
from tests.conftest import START_US

PAGE_SIZE = 3
_feeds = itertools.count(1)

# -- valid events -----------------------------------------------------------------------------

# Characters XML can carry, but no C1 controls, and no line ends other than LF. A feed reader's
# cp1252 repair of C1 controls is the consumer's business, tested in test_client_parse.
_chars = st.characters(
    blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufffe\uffff"
) | st.sampled_from(["\n", "\t", " ", "é", "😀", "\u2028", "&", "<", ">", '"', "'"])
text = st.text(_chars, max_size=30)
#: Optional fields are left out or not empty. The door refuses "", which reads back as absent.
some_text = st.text(_chars, min_size=1, max_size=30)
#: Names and titles of which a reader shows something. The door refuses those of only spaces
#: and invisible characters, such as a title of U+00AD, the soft hyphen.
_INVISIBLE = {"Zs", "Zl", "Zp", "Cc", "Cf"}
label = st.text(_chars, min_size=1, max_size=20).filter(
    lambda s: any(unicodedata.category(ch) not in _INVISIBLE for ch in s)
)
word = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)


@st.composite
def html_inline(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["text", "text", "b", "em", "code", "a", "br", "img"]))
        if kind == "text" or depth > 2:
            parts.append(html.escape(draw(text), quote=False))
        elif kind == "a" and depth == 0:
            href = f"https://example.com/{draw(word)}"
            parts.append(f'<a href="{href}">{html.escape(draw(text), quote=False)}</a>')
        elif kind == "br":
            parts.append("<br>")
        elif kind == "img":
            alt = html.escape(draw(text))
            parts.append(f'<img src="https://example.com/{draw(word)}.png" alt="{alt}">')
        elif kind in ("b", "em", "code"):
            parts.append(f"<{kind}>{draw(html_inline(depth + 1))}</{kind}>")
    return "".join(parts)


@st.composite
def html_fragment(draw: st.DrawFn) -> str:
    blocks = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["p", "pre", "ul", "table", "inline"]))
        if kind == "p":
            blocks.append(f'<p title="{html.escape(draw(text))}">{draw(html_inline())}</p>')
        elif kind == "pre":
            blocks.append(f"<pre><code>{html.escape(draw(text), quote=False)}</code></pre>")
        elif kind == "ul":
            items = draw(st.lists(html_inline(), min_size=1, max_size=3))
            blocks.append("<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>")
        elif kind == "table":
            cells = draw(st.lists(html_inline(), min_size=1, max_size=3))
            blocks.append("<table><tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr></table>")
        else:
            blocks.append(draw(html_inline()))
    return "".join(blocks)


def _xml_escape(value: str) -> str:
    return html.escape(value, quote=True).replace("\r", "&#13;")


@st.composite
def inline_xml(draw: st.DrawFn) -> tuple[str, str]:
    if draw(st.booleans()):
        shape = f'<circle r="{draw(st.integers(1, 9))}"/><text>{_xml_escape(draw(text))}</text>'
        svg = (
            f'<svg xmlns="http://www.w3.org/2000/svg">{shape}'
            f'<a href="https://example.com/{draw(word)}"><text>l</text></a></svg>'
        )
        return svg, "image/svg+xml"
    name = draw(word)
    body = (
        f'<o:order xmlns:o="urn:example:{name}" n="{_xml_escape(draw(text))}">'
        f"<o:line>{_xml_escape(draw(text))}</o:line></o:order>"
    )
    return body, draw(st.sampled_from(["application/xml", "text/xml", "application/x-o+xml"]))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_EXACT_INTEGER, MAX_EXACT_INTEGER)  # Past it, refused (test_door.py).
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=8,
)


@st.composite
def content(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(
            ["none", "text", "html", "xhtml", "xml", "json", "json-text", "csv", "octets"]
        )
    )
    if kind == "none":
        return {}
    if kind == "text":
        return {
            "content": draw(some_text),
            **draw(st.sampled_from([{}, {"content_type": "text"}])),
        }
    if kind == "html":
        media_type = draw(st.sampled_from(["html", "text/html"]))
        return {"content": draw(html_fragment()) or "x", "content_type": media_type}
    if kind == "xhtml":
        return {"content": _xhtml(draw(html_fragment())) or "x", "content_type": "xhtml"}
    if kind == "xml":
        body, media_type = draw(inline_xml())
        return {"content": body, "content_type": media_type}
    if kind == "json":
        ct = draw(st.sampled_from([{}, {"content_type": "application/json"}]))
        value = draw(json_values)
        if isinstance(value, str):  # A string is text, and under a JSON type, JSON text.
            return {"content": value} if value else {}
        return {"content": value, **ct} if value is not None else {}
    if kind == "json-text":
        value = draw(json_values)
        ct = draw(st.sampled_from(["application/json", "application/ld+json"]))
        return {"content": json.dumps(value, ensure_ascii=draw(st.booleans())), "content_type": ct}
    if kind == "csv":
        return {"content": draw(some_text), "content_type": "text/csv"}
    return {"content": draw(some_text), "content_type": "application/octet-stream"}


def _xhtml(fragment: str) -> str:
    """Return the HTML fragments above as XML, with void elements closed."""
    out = fragment.replace("<br>", "<br/>")
    pieces = out.split("<img ")
    return pieces[0] + "".join("<img " + p.replace(">", "/>", 1) for p in pieces[1:])


@st.composite
def updated(draw: st.DrawFn) -> str:
    us = draw(st.integers(0, START_US))
    offset = timezone(timedelta(minutes=draw(st.integers(-12 * 60, 14 * 60))))
    local = datetime.fromtimestamp(us / 1_000_000, UTC).astimezone(offset)
    if local.year < 1 or local.year > 9999:  # pragma: no cover - not within 1970..2027
        return "2027-01-01T00:00:00Z"
    return local.isoformat()


@st.composite
def valid_event(draw: st.DrawFn, n: int) -> dict[str, Any]:
    ev: dict[str, Any] = {"title": draw(label), **draw(content())}
    which_id = draw(st.sampled_from(["server", "tag", "uuid", "https", "urn"]))
    if which_id == "tag":
        ev["id"] = f"tag:example.com,2027-01-15:{n}/{draw(word)}"
    elif which_id == "uuid":
        ev["id"] = f"urn:uuid:{uuid.UUID(int=(draw(st.integers(0, 2**96 - 1)) << 32) + n)}"
    elif which_id == "https":
        ev["id"] = f"https://example.com/e/{n}/{draw(word)}?x={draw(word)}"
    elif which_id == "urn":
        ev["id"] = f"urn:example:{n}:{draw(word)}"
    if draw(st.booleans()):
        ev["summary"] = draw(some_text)
    author = draw(st.sampled_from(["none", "name", "full"]))
    if author == "name":
        ev["author"] = draw(label)
    elif author == "full":
        ev["author"] = {
            "name": draw(label),
            "email": f"{draw(word)}.{draw(word)}+x@{draw(word)}.example.com",
            "uri": f"https://example.com/~{draw(word)}",
        }
    ev["categories"] = draw(
        st.lists(
            label | st.fixed_dictionaries({"term": label, "scheme": st.just("urn:example:s"), "label": label}),  # noqa: E501
            max_size=2,
        )
    )  # fmt: skip
    links = [{"href": f"https://example.com/a/{draw(word)}", "rel": "alternate"}]
    links += draw(
        st.lists(
            st.builds(
                lambda w, rel, t: {"href": f"https://example.com/{w}", "rel": rel, "title": t},
                word,
                st.sampled_from(["related", "via", "enclosure", "https://example.com/rels/a-b"]),
                label,
            ),
            max_size=2,
        )
    )  # fmt: skip
    ev["links"] = links[: draw(st.integers(0, len(links)))]
    if draw(st.booleans()):
        ev["updated"] = draw(updated())
    return ev


# -- hostile events ---------------------------------------------------------------------------

_VOCABULARIES = sorted(ns for ns in FEED_NAMESPACES if ns)


@st.composite
def hostile_event(draw: st.DrawFn, n: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(["vocabulary", "json", "id", "script"]))
    if kind == "vocabulary":
        ns = draw(st.sampled_from(_VOCABULARIES))
        local = draw(st.sampled_from(["entry", "id", "title", "link", "item", "content"]))
        inner = f"urn:inner:{n}"
        body = f'<v:{local} xmlns:v="{ns}"><v:id>{inner}</v:id><v:title>t</v:title></v:{local}>'
        if draw(st.booleans()):
            body = f'<x:doc xmlns:x="urn:example:x">{body}</x:doc>'
        media_type = draw(st.sampled_from(["application/xml", "image/svg+xml", "text/xml"]))
        return {"title": "hostile", "content": body, "content_type": media_type}
    if kind == "json":
        bad = draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e400"]))
        return {
            "title": "hostile",
            "content": f'{{"v": [{bad}]}}',
            "content_type": "application/json",
        }
    if kind == "id":
        spelling = draw(
            st.sampled_from(["HTTP://Example.COM/e/", "https://example.com:443/e/", "urn:X:"])
        )
        return {"title": "hostile", "id": f"{spelling}{n}"}
    payload = draw(
        st.sampled_from(
            [
                "<script>alert(1)</script>",
                '<img src="x" onerror="alert(1)">',
                '<a href="javascript:alert(1)">x</a>',
            ]
        )
    )
    return {"title": "hostile", "content": payload, "content_type": "html"}


@st.composite
def plans(draw: st.DrawFn) -> list[tuple[str, list[dict[str, Any]]]]:
    """Draw requests to send: ("valid", a batch of valid events) or ("hostile", [one event])."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    n = 0
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):  # Hostile half the time, so each refusal is exercised.
            out.append(("hostile", [draw(hostile_event(n))]))
            n += 1
        else:
            size = draw(st.integers(1, 4))
            out.append(("valid", [draw(valid_event(n + i)) for i in range(size)]))
            n += size
    return out


# -- the property -----------------------------------------------------------------------------


class NotStrict(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise NotStrict(name)


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise NotStrict(text)
    return value


ATOM = "{http://www.w3.org/2005/Atom}"
SF_TYPE = "{https://simplefeed.dev/ns/1.0}type"


def _json_texts(body: bytes) -> list[str]:
    """Return the JSON texts a document carries as content.

    The server writes them in either of two forms: the readable one (``sf:type``), or Base64
    under the media type.
    """
    texts = []
    for el in etree.fromstring(body).iter(f"{ATOM}content"):
        declared, kind = el.get(SF_TYPE), el.get("type", "text")
        if declared is not None and is_json(declared):
            texts.append(el.text or "")
        elif declared is None and is_json(kind):
            texts.append(base64.b64decode(el.text or "").decode("utf-8"))
    return texts


def _read_everywhere(client: falcon.testing.TestClient, feed: str) -> list[str]:
    """Read every document of the feed three ways, and return the ids, oldest first."""
    recent = client.simulate_get(f"/feeds/{feed}/recent")
    assert recent.status_code == 200
    documents = {"recent": recent.content}
    n = 1
    while True:
        r = client.simulate_get(f"/feeds/{feed}/pages/{n}")
        if r.status_code == 404:
            break
        assert r.status_code == 200, r.text
        documents[f"page {n}"] = r.content
        n += 1
    ids: list[str] = []
    for name, body in documents.items():
        d = feedparser.parse(body)
        assert not d.bozo, (name, d.get("bozo_exception"))
        url = f"http://feeds.example.test/feeds/{feed}/{name}"
        strict = parse_page(url, body, parser="lxml")  # Raises MalformedPage or NotAtom.
        assert [e["id"] for e in reversed(d.entries)] == [e.id for e in strict.entries], name
        assert parse_page(url, body, parser="feedparser") == strict, name
        for text in _json_texts(body):
            json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
        if name.startswith("page"):
            ids += [e.id for e in strict.entries]
    return ids


def test_whatever_the_door_accepts_every_reader_reads(core: Simplefeed, token: str) -> None:
    app = create_app(core.settings, core=core)
    client = falcon.testing.TestClient(app, headers={"Authorization": f"Bearer {token}"})

    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )
    @given(plans())
    def check(plan: list[tuple[str, list[dict[str, Any]]]]) -> None:
        feed = f"prop{next(_feeds)}"
        core.create_feed(feed, page_size=PAGE_SIZE)
        published: list[str] = []
        for kind, events in plan:
            body: Any = events if len(events) > 1 or kind == "valid" else events[0]
            r = client.simulate_post(f"/feeds/{feed}/entries", json=body)
            if kind == "valid":
                assert r.status_code == 201, (r.text, events)
            else:
                assert r.status_code in (201, 422), r.text
                if r.status_code == 422:
                    continue
            replies = (
                r.json["entries"] if isinstance(r.json, dict) and "entries" in r.json else [r.json]
            )
            published += [reply["id"] for reply in replies]
        assert _read_everywhere(client, feed) == published

    check()


def test_each_json_writer_writes_what_json_dumps_writes() -> None:
    """The writers built once give json.dumps's text, byte for byte, on generated values."""
    import json

    from simplefeed import jsontext

    values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=20,
    )

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(values, st.booleans(), st.booleans())
    def check(value: object, ensure_ascii: bool, sort_keys: bool) -> None:
        write = jsontext.writer(ensure_ascii=ensure_ascii, sort_keys=sort_keys)
        expected = json.dumps(
            value, ensure_ascii=ensure_ascii, sort_keys=sort_keys, separators=(",", ":")
        )
        assert write(value) == expected

    check()
    with pytest.raises(ValueError):
        jsontext.writer(allow_nan=False)([float("nan")])

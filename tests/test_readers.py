"""Generic readers in JavaScript, a browser and Node, get every event back as sent.

Our own consumer and feedparser read the documents in Python. Browsers and Node read them as
often, with their own XML parser and their own ``JSON.parse``. Caches keep an archived page for
a year, so whatever they cannot read stays unreadable.

Headless Chromium runs against a real uWSGI. It is Debian's, driven by Playwright, as in
tests/test_html_browser.py. It walks the feed from /recent through every ``prev-archive`` link,
with ``fetch`` and ``DOMParser``. It reads each entry as a generic reader would: the title, and
the content by its ``type``. JSON, marked by ``sf:type``, goes through ``JSON.parse``. Text and
HTML read as text, and XHTML and XML as elements. Any other media type goes through ``atob``.
Node's most used feed reader, rss-parser, reads the same documents. Every event published
comes back as sent.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.servers import UwsgiServer, ensure_debian_binary
from tests.test_html_browser import CHROMIUM_ARGS

pytestmark = pytest.mark.e2e

#: Events whose content a generic reader must get back as sent, each under its own id.
EVENTS: list[dict[str, Any]] = [
    {
        "title": "json object",
        "content": {
            "order": 42,
            "lines": [{"sku": "é-1", "qty": 2, "price": "9.90"}],
            "paid": True,
            "note": None,
            "ratio": 0.1,
            "largest safe integer": 9007199254740991,
            "markup": "<b>&amp;</b> ]]> \u2028 \u2029",
        },
    },
    {"title": "json array", "content": [1, "two", 3.5, [], {}]},
    # A string under a JSON media type is JSON text, so the value is what it says.
    {"title": "json string", "content": '"a JSON string"', "content_type": "application/json"},
    {"title": "json text", "content": '{"b": [1, 2]}', "content_type": "application/json"},
    {"title": "json number", "content": -12.5e-3, "content_type": "application/json"},
    {"title": "vendor json", "content": {"a": 1}, "content_type": "application/vnd.acme+json"},
    {"title": "text keeps its last newline", "content": "line one\n  line two\n"},
    {"title": "csv", "content": "a,b\n1,2\n", "content_type": "text/csv"},
    {"title": "html", "content": "<p>Hi <b>there</b> &amp; more</p>", "content_type": "html"},
    {"title": "xhtml", "content": "<p>Hi <em>there</em></p>", "content_type": "xhtml"},
    {
        "title": "xml",
        "content": '<order xmlns="urn:example:orders"><id>7</id></order>',
        "content_type": "application/xml",
    },
    {"title": "bytes", "content": "\x00\x01 binary é", "content_type": "application/x-thing"},
    {"title": "Unicode: 🎉 שלום e\u0301 \u00a0end", "content": "שלום 🎉"},
    {"title": "  spaces kept  ", "summary": "a summary", "author": {"name": "billing"}},
]

#: Runs in the page. It walks the feed from ``start`` through prev-archive links. It reads each
#: entry's id, title and content as a generic reader would.
READ_FEED = """async (start) => {
  const ATOM = "http://www.w3.org/2005/Atom", SF = "https://simplefeed.dev/ns/1.0";
  const documents = [];
  for (let url = start, n = 0; url && n < 20; n++) {
    const text = await (await fetch(url)).text();
    const doc = new DOMParser().parseFromString(text, "application/xml");
    const error = doc.getElementsByTagName("parsererror")[0];
    if (error) { documents.push({url, error: error.textContent}); break; }
    const own = (parent, name) =>
      [...parent.children].filter((c) => c.namespaceURI === ATOM && c.localName === name);
    const entries = own(doc.documentElement, "entry").map((entry) => {
      const read = {id: own(entry, "id")[0].textContent, title: own(entry, "title")[0].textContent};
      const content = own(entry, "content")[0];
      if (content === undefined) return read;
      const type = content.getAttribute("type") || "text";
      if (content.hasAttributeNS(SF, "type")) {
        read.media = content.getAttributeNS(SF, "type");
        try { read.json = JSON.parse(content.textContent); }
        catch (e) { read.jsonError = String(e); }
      } else if (type === "xhtml" || type.endsWith("/xml") || type.endsWith("+xml")) {
        const element = content.firstElementChild;
        read.element = {ns: element.namespaceURI, name: element.localName,
                        text: element.textContent,
                        children: [...element.querySelectorAll("*")].map((c) => c.localName)};
      } else if (type === "text" || type === "html" || type.startsWith("text/")) {
        read.text = content.textContent;
      } else {
        read.bytes = atob(content.textContent.replace(/\\s/g, ""));
      }
      return read;
    });
    const prev = own(doc.documentElement, "link")
      .find((link) => link.getAttribute("rel") === "prev-archive");
    documents.push({url, entries});
    url = prev ? prev.getAttribute("href") : null;
  }
  return documents;
}"""


@contextlib.contextmanager
def every_kind_published(tmp_path: Path) -> Iterator[tuple[UwsgiServer, list[dict[str, Any]]]]:
    """Yield a scratch server whose default feed holds :data:`EVENTS`, and those events.

    Each event has an id of its own. Pages hold 4, so pages 1-3 are archived, and /recent
    follows them.
    """
    events = [{**event, "id": f"urn:example:reader:{i}"} for i, event in enumerate(EVENTS)]
    with UwsgiServer.scratch(tmp_path, page_size=4) as s:
        reply = httpx.post(
            s.url("/entries"), json=events, headers={"Authorization": f"Bearer {s.token}"}
        )
        assert reply.status_code == 201, reply.text
        yield s, events


def expected(event: dict[str, Any]) -> tuple[str, Any]:
    """Return how a generic reader gets the event's content back.

    It is ("json", the value), or ("text", the string). For elements, it is ("xhtml", None)
    or ("xml", None). Otherwise it is ("bytes", None) or ("none", None).
    """
    content, content_type = event.get("content"), event.get("content_type", "text")
    if content is None:
        return "none", None
    if isinstance(content, dict | list | float) or content_type.endswith("json"):
        return "json", json.loads(content) if isinstance(content, str) else content
    if content_type in ("text", "html", "text/csv"):
        return "text", content
    if content_type in ("xhtml", "application/xml"):
        return content_type.rpartition("/")[2], None
    return "bytes", None


def test_every_document_reads_in_a_browser_as_it_was_published(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = ensure_debian_binary("chromium", lambda: shutil.which("chromium"))
    with every_kind_published(tmp_path) as (s, events), sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            # The feed's own origin, so that fetch needs no CORS. It comes from a reply
            # without the Content-Security-Policy of the pages for people, which allows no
            # fetch.
            page.goto(s.url("/healthz"))
            documents = page.evaluate(READ_FEED, s.url("/recent"))
        finally:
            browser.close()

    assert [d["url"] for d in documents] == [s.url(f"/{p}") for p in RECENT_AND_PAGES]
    assert not [d for d in documents if "error" in d]
    read = {entry["id"]: entry for d in documents for entry in d["entries"]}
    assert sorted(read) == sorted(e["id"] for e in events)
    for event in events:
        entry = read[event["id"]]
        assert entry["title"] == event["title"]
        kind, value = expected(event)
        if kind == "none":
            assert set(entry) == {"id", "title"}
        elif kind == "json":
            assert "jsonError" not in entry, entry
            assert entry["json"] == value
        elif kind == "text":
            assert entry["text"] == value
        elif kind == "xhtml":
            assert entry["element"] == {
                "ns": "http://www.w3.org/1999/xhtml",
                "name": "div",
                "text": "Hi there",
                "children": ["p", "em"],
            }
        elif kind == "xml":
            assert entry["element"] == {
                "ns": "urn:example:orders",
                "name": "order",
                "text": "7",
                "children": ["id"],
            }
        else:  # Base64. atob gives the UTF-8 bytes, one character each.
            assert entry["bytes"] == event["content"].encode("utf-8").decode("latin-1")


#: Where the walk goes: /recent, then the archived pages newest first.
RECENT_AND_PAGES = ["recent", "pages/3", "pages/2", "pages/1"]


#: Node's most used feed reader, pinned. Issue #13 found JSON content an opaque blob in it.
RSS_PARSER = "rss-parser@3.13.0"
READ_WITH_RSS_PARSER = """
const Parser = require("rss-parser");
(async () => {
  const documents = [];
  for (const url of process.argv.slice(1)) {
    const feed = await new Parser().parseURL(url);
    documents.push({url, items: feed.items.map(
      (item) => ({id: item.id, title: item.title, content: item.content}))});
  }
  console.log(JSON.stringify(documents));
})().catch((error) => { console.error(String(error.stack || error)); process.exit(1); });
"""


def rss_parser() -> Path:
    """Return a directory whose node_modules holds :data:`RSS_PARSER`.

    It is installed from the npm registry once, in the machine's temporary directory, and kept
    between runs. When Node or npm cannot be had, the test skips and says why.
    """
    ensure_debian_binary("nodejs", lambda: shutil.which("node"))
    npm = ensure_debian_binary("npm", lambda: shutil.which("npm"))
    home = Path(tempfile.gettempdir()) / "simplefeed-tests-node" / RSS_PARSER.replace("@", "-")
    if not (home / "node_modules" / "rss-parser" / "package.json").is_file():
        home.mkdir(parents=True, exist_ok=True)
        argv = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(home), RSS_PARSER]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            pytest.skip(f"{RSS_PARSER} could not be installed: {done.stderr[-500:]}")
    return home


def test_every_document_reads_in_nodes_rss_parser_as_it_was_published(tmp_path: Path) -> None:
    """Every document reads in Node's rss-parser as it was published.

    A Node application that reads the feed with rss-parser shows JSON content as the JSON text.
    It shows text and HTML as the text sent, and every entry with its title.
    """
    home = rss_parser()
    with every_kind_published(tmp_path) as (s, events):
        urls = [s.url(f"/{p}") for p in RECENT_AND_PAGES]
        done = subprocess.run(
            ["node", "-e", READ_WITH_RSS_PARSER, *urls],
            cwd=home,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    read = {item["id"]: item for d in json.loads(done.stdout) for item in d["items"]}
    assert sorted(read) == sorted(e["id"] for e in events)
    for event in events:
        item = read[event["id"]]
        assert item["title"] == event["title"]
        kind, value = expected(event)
        if kind == "none":
            assert "content" not in item, item
        elif kind == "json":
            assert json.loads(item["content"]) == value, item
        elif kind == "text":
            assert item["content"] == value, item

"""End to end against a real uWSGI: the shipped CLI, uwsgi.ini and several worker processes.

Each module runs one server per database (``uwsgi_server``). The database is a temporary SQLite
file, and PostgreSQL when ``SIMPLEFEED_TEST_POSTGRES_URL`` is set. ``simplefeed db upgrade``
migrates it, and ``simplefeed serve`` runs on a free 127.0.0.1 port. Everything goes over real
HTTP with one httpx client. Raw sockets serve where a HEAD's missing body must be seen.
Consumers take every URL from the documents. Only the entry point and the producers' POST
targets are built here.

For the whole module, the default feed holds exactly the 250 events ``feed250`` publishes.
Pages 1-2 are archived and page 3 is the working page. Tests that must publish more use named
feeds of their own. Refused requests are checked to store nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import feedparser
import httpx
import pytest
from lxml import etree
from sqlalchemy import Engine, create_engine, text

from bench.servers import HOST, UwsgiServer, scratch_postgres_database
from tests.conftest import page_files_reopened

pytestmark = pytest.mark.e2e

PG_ENV = "SIMPLEFEED_TEST_POSTGRES_URL"
PAGE_SIZE = 100
PROCESSES = 3
RECENT_MAX_AGE = 7
MAX_BODY_BYTES = 20_000
DEFAULT_FEED = "events"

ATOM_CONTENT_TYPE = "application/atom+xml; charset=utf-8"
ARCHIVE_CACHE_CONTROL = "public, max-age=31536000, immutable"
LIVE_CACHE_CONTROL = f"public, max-age={RECENT_MAX_AGE}"
SF_NS = "https://simplefeed.dev/ns/1.0"
FH_NS = "http://purl.org/syndication/history/1.0"


# -- servers ----------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def uwsgi_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UwsgiServer]:
    """Run ``simplefeed serve`` with PROCESSES workers on a freshly migrated database."""
    workdir = tmp_path_factory.mktemp(f"e2e-{request.param}")
    if request.param == "sqlite":
        yield from _serve(f"sqlite:///{workdir / 'simplefeed.sqlite3'}", workdir)
        return
    # A fresh database on the configured server. The CLI migrates it, and it is dropped after.
    with scratch_postgres_database("sf_e2e") as url:
        yield from _serve(url, workdir)


def _serve(database_url: str, workdir: Path) -> Iterator[UwsgiServer]:
    server = UwsgiServer(
        database_url,
        workdir / "archive",
        workdir,
        page_size=PAGE_SIZE,
        processes=PROCESSES,
        extra_env={
            "SIMPLEFEED_RECENT_MAX_AGE": str(RECENT_MAX_AGE),
            "SIMPLEFEED_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
            "SIMPLEFEED_DEFAULT_FEED": DEFAULT_FEED,
        },
    )
    with server:  # Stopped however the module ends: SIGTERM, then SIGKILL of its group.
        yield server
    # Never a 5xx, never a traceback, over the whole module. uwsgi.ini logs 4xx and 5xx.
    problems = server.problems()
    if problems:
        pytest.fail(
            "uWSGI log of the module shows server errors:\n"
            + "\n".join(problems)
            + f"\n--- full log: {server.log_path}",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def http(uwsgi_server: UwsgiServer) -> Iterator[httpx.Client]:
    # A pooled client, because uWSGI's HTTP router keeps its connections alive between
    # requests. The producer token goes with every request. GETs ignore it, because reading is
    # public. The client asks for identity, because these tests compare bytes, lengths and
    # validators with the files and the database. tests/test_routes.py and
    # tests/test_compression.py cover compressed answers.
    headers = {"Authorization": f"Bearer {uwsgi_server.token}", "Accept-Encoding": "identity"}
    with httpx.Client(timeout=30.0, follow_redirects=False, headers=headers) as client:
        yield client


@pytest.fixture(scope="module")
def db(uwsgi_server: UwsgiServer) -> Iterator[Engine]:
    """Yield the server's database, for inspection only. Nothing here writes to it."""
    engine = create_engine(uwsgi_server.database_url)
    yield engine
    engine.dispose()


# -- publishing -------------------------------------------------------------------------------


def event(i: int, tag: str = "event") -> dict[str, Any]:
    """Return a varied event, with producer ids on even numbers.

    JSON, HTML and categories come now and then.
    """
    ev: dict[str, Any] = {"title": f"{tag} {i}", "content": f"payload {i} <&>"}
    if i % 2 == 0:
        ev["id"] = f"tag:e2e.simplefeed.test,2027:{tag}-{i}"
    if i % 5 == 0:
        ev["content"] = {"n": i, "kind": "json"}
    if i % 7 == 0:
        ev["content"] = f"<p>{tag} <b>{i}</b></p>"
        ev["content_type"] = "html"
    if i % 11 == 0:
        ev["categories"] = ["e2e", {"term": f"c{i}", "label": "eleven"}]
    return ev


@dataclass
class Published:
    """Hold what the producer was told, in sequence order."""

    ids: list[str] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)
    singles: list[httpx.Response] = field(default_factory=list)
    batches: list[httpx.Response] = field(default_factory=list)
    replies: list[dict[str, Any]] = field(default_factory=list)


def publish(
    http: httpx.Client,
    url: str,
    plan: list[tuple[int, int]],
    out: Published,
    tag: str = "event",
) -> Published:
    """POST events ``first..last`` of each (first, last) range.

    A single event goes alone, and a longer range goes as a batch.
    """
    for first, last in plan:
        events = [event(i, tag) for i in range(first, last + 1)]
        if first == last:
            r = http.post(url, json=events[0])
            assert r.status_code == 201, r.text
            out.singles.append(r)
            replies = [r.json()]
        else:
            r = http.post(url, json=events)
            assert r.status_code == 201, r.text
            out.batches.append(r)
            replies = r.json()["entries"]
        assert len(replies) == len(events)
        out.replies.extend(replies)
        out.ids.extend(reply["id"] for reply in replies)
        out.titles.extend(ev["title"] for ev in events)
    return out


def singles(first: int, last: int) -> list[tuple[int, int]]:
    return [(i, i) for i in range(first, last + 1)]


#: 250 events, in single POSTs and batches. Batches end on page boundaries, and across them.
PLAN_250 = [
    *singles(1, 5),
    (6, 100),
    *singles(101, 108),
    (109, 200),
    (201, 240),
    *singles(241, 250),
]


@pytest.fixture(scope="module")
def feed250(uwsgi_server: UwsgiServer, http: httpx.Client) -> Published:
    """Return the default feed with 250 events, published over HTTP by a producer."""
    return publish(http, uwsgi_server.url("/entries"), PLAN_250, Published())


def create_feed(server: UwsgiServer, name: str) -> None:
    server.cli("feed", "create", name, "--page-size", str(PAGE_SIZE))


# -- reading ----------------------------------------------------------------------------------


@dataclass
class Doc:
    url: str
    response: httpx.Response
    parsed: Any
    links: dict[str, str]
    archived: bool

    @property
    def entries(self) -> list[Any]:
        return list(self.parsed.entries)

    @property
    def seqs(self) -> list[int]:
        return [int(e["sf_seq"]) for e in self.parsed.entries]


def has_archive_marker(body: bytes) -> bool:
    root = etree.fromstring(body)
    return root.find(f"{{{FH_NS}}}archive") is not None


def fetch_doc(http: httpx.Client, url: str) -> Doc:
    r = http.get(url)
    assert r.status_code == 200, f"GET {url}: {r.status_code} {r.text[:300]}"
    assert r.headers.get_list("content-type") == [ATOM_CONTENT_TYPE], url
    parsed = feedparser.parse(r.content)
    assert not parsed.bozo, f"{url}: {parsed.get('bozo_exception')!r}"
    assert parsed.version == "atom10", url
    links: dict[str, str] = {}
    for link in parsed.feed.get("links", []):
        assert link["rel"] not in links, f"{url}: two {link['rel']} links"
        links[link["rel"]] = link["href"]
    seqs = [int(e["sf_seq"]) for e in parsed.entries]
    assert seqs == sorted(seqs, reverse=True), f"{url}: entries not newest first"
    updated = [e["updated"] for e in parsed.entries]
    assert len(set(updated)) == len(updated), f"{url}: entries share an updated value"
    return Doc(url, r, parsed, links, has_archive_marker(r.content))


@dataclass
class Walk:
    recent: Doc
    archived: list[Doc]  # Oldest first, as reached through next-archive.
    working: Doc
    back: list[str]  # Archived page URLs in the order prev-archive reached them.

    def entries(self) -> list[Any]:
        """Return every entry, oldest first.

        Each page is reversed, because documents list the newest first.
        """
        out: list[Any] = []
        for doc in [*self.archived, self.working]:
            out.extend(reversed(doc.entries))
        return out


def walk(http: httpx.Client, recent_url: str) -> Walk:
    """Walk the feed by its links only, and build no URL.

    Go back from the entry point through prev-archive to page 1. Then go forward through
    next-archive to the working page and its ``current`` link.
    """
    recent = fetch_doc(http, recent_url)
    assert recent.links["self"] == recent_url
    assert not recent.archived
    back: list[str] = []
    url = recent.links.get("prev-archive")
    while url is not None:
        assert url not in back, f"link loop at {url}"
        doc = fetch_doc(http, url)
        assert doc.archived, f"{url} is reached through prev-archive but lacks fh:archive"
        assert doc.links["self"] == url
        assert doc.links["current"] == recent_url
        back.append(url)
        url = doc.links.get("prev-archive")
    archived: list[Doc] = []
    url = back[-1] if back else recent.links["via"]
    while True:
        doc = fetch_doc(http, url)
        assert doc.links["self"] == url
        if not doc.archived:
            break
        archived.append(doc)
        url = doc.links["next-archive"]
        assert url not in [d.url for d in archived], f"link loop at {url}"
    working = doc
    assert "next-archive" not in working.links
    assert working.url == recent.links["via"], "next-archive chain ends elsewhere than via"
    assert working.links["current"] == recent_url
    if archived:
        assert working.links["prev-archive"] == archived[-1].url
    # Following `current` from the working page lands on the entry point again.
    again = fetch_doc(http, working.links["current"])
    assert again.links == recent.links
    assert [d.url for d in archived] == list(reversed(back))
    return Walk(recent, archived, working, back)


def urlpath(url: str) -> str:
    return urlsplit(url).path


def page_number(url: str) -> int:
    return int(urlpath(url).rsplit("/", 1)[1])


def archive_file(server: UwsgiServer, url: str) -> Path:
    """Return the static file of an archived page.

    The archive directory mirrors the URL path.
    """
    return server.archive_dir / urlpath(url).lstrip("/")


def http_date(seconds: int) -> str:
    return formatdate(seconds, usegmt=True)


@dataclass(frozen=True)
class StoredPage:
    """What the database records of a page: its digest and freeze time."""

    sha256: str
    frozen_us: int

    @property
    def etag(self) -> str:
        return f'"{self.sha256}"'


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def stored_page(db: Engine, feed: str, number: int) -> StoredPage:
    with db.connect() as conn:
        row = conn.execute(
            text(
                "SELECT p.sha256, p.frozen_us FROM pages p JOIN feeds f ON f.id = p.feed_id"
                " WHERE f.name = :feed AND p.number = :n"
            ),
            {"feed": feed, "n": number},
        ).one()
    return StoredPage(row[0], int(row[1]))


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: httpx.Headers
    body: bytes


def raw_request(
    server: UwsgiServer, method: str, path: str, headers: tuple[str, ...] = ()
) -> RawResponse:
    """Send one request on a plain socket and read to EOF.

    This shows exactly what came after the headers.
    """
    request = [f"{method} {path} HTTP/1.1", f"Host: {HOST}:{server.port}", *headers]
    request.append("Connection: close")
    with socket.create_connection((HOST, server.port), timeout=10) as sock:
        sock.sendall(("\r\n".join(request) + "\r\n\r\n").encode("latin-1"))
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    raw = b"".join(chunks)
    head, sep, body = raw.partition(b"\r\n\r\n")
    assert sep, f"no end of headers in {raw[:300]!r}"
    status_line, *lines = head.decode("latin-1").split("\r\n")
    pairs = []
    for line in lines:
        name, _, value = line.partition(":")
        pairs.append((name.strip(), value.strip()))
    return RawResponse(int(status_line.split()[1]), httpx.Headers(pairs), body)


class MovedAway:
    """Move an archived page's static file aside, so that the app serves the database's bytes.

    Afterwards the file must be back, because the app rewrites it. Otherwise this puts the
    original back and says so.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.aside = path.with_name(f".{path.name}.aside")
        self.rewritten: bytes | None = None
        self.mtime_ns: int | None = None

    def __enter__(self) -> MovedAway:
        self.path.rename(self.aside)
        page_files_reopened()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.path.exists():
            self.rewritten = self.path.read_bytes()
            self.mtime_ns = self.path.stat().st_mtime_ns
            self.aside.unlink()
        else:
            self.aside.rename(self.path)


def wait_for_last_modified(http: httpx.Client, url: str) -> httpx.Response:
    """Wait for a live document's Last-Modified, for up to about 2 s.

    Live documents carry Last-Modified once its second is over.
    """
    deadline = time.monotonic() + 3
    while True:
        r = http.get(url)
        if "last-modified" in r.headers or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


@dataclass(frozen=True)
class Snapshot:
    recent_etag: str
    heads: dict[str, int]
    entries: int
    pages: int
    files: dict[str, str]


def snapshot(server: UwsgiServer, http: httpx.Client, db: Engine) -> Snapshot:
    recent = http.get(server.url("/recent"))
    assert recent.status_code == 200
    with db.connect() as conn:
        heads = {str(n): int(h) for n, h in conn.execute(text("SELECT name, head_seq FROM feeds"))}
        entries = int(conn.execute(text("SELECT count(*) FROM entries")).scalar_one())
        pages = int(conn.execute(text("SELECT count(*) FROM pages")).scalar_one())
    files = {
        str(p.relative_to(server.archive_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(server.archive_dir.rglob("*"))
        if p.is_file()
    }
    return Snapshot(recent.headers["etag"], heads, entries, pages, files)


def assert_json_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, f"expected {status}, got {r.status_code}: {r.text[:500]}"
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = r.json()
    assert isinstance(body, dict), body
    assert isinstance(body.get("error"), str) and body["error"], body
    assert isinstance(body.get("message"), str) and body["message"], body
    return body


# -- publishing and the walk ------------------------------------------------------------------


def test_publish_replies(uwsgi_server: UwsgiServer, feed250: Published) -> None:
    base = uwsgi_server.base_url
    replies = feed250.replies
    assert [r["seq"] for r in replies] == list(range(1, 251))
    for i, reply in enumerate(replies, start=1):
        assert reply["created"] is True
        assert reply["page"] == (i - 1) // PAGE_SIZE + 1
        assert reply["url"] == f"{base}/pages/{reply['page']}"
        expected = event(i)
        if "id" in expected:
            assert reply["id"] == expected["id"]
        else:
            assert re.fullmatch(r"urn:uuid:[0-9a-f-]{36}", reply["id"]), reply
    assert len(set(feed250.ids)) == 250
    assert len(feed250.singles) == 23 and len(feed250.batches) == 3
    for r in feed250.singles:
        assert r.status_code == 201
        assert r.headers["location"] == r.json()["url"]
        assert r.headers["content-type"].startswith("application/json")
    for r in feed250.batches:
        assert r.status_code == 201
        assert all(e["created"] for e in r.json()["entries"])


def test_entry_locator_through_uwsgi(
    uwsgi_server: UwsgiServer, http: httpx.Client, feed250: Published
) -> None:
    """The entry locator works through uWSGI.

    uWSGI decodes the path before the app routes it, even a '/' sent as %2F. Every id, the
    producer's or server-made, must still lead to its page.
    """
    from urllib.parse import quote

    create_feed(uwsgi_server, "locator")
    odd = "https://example.com/a/b?x=1&y=%2F#f"
    r = http.post(uwsgi_server.url("/feeds/locator/entries"), json={"title": "odd", "id": odd})
    assert r.status_code == 201, r.text
    r = http.get(uwsgi_server.url(f"/feeds/locator/entries/{quote(odd, safe='')}"))
    assert r.status_code == 303, r.text
    assert r.headers["location"] == uwsgi_server.url("/feeds/locator/pages/1")
    for reply in feed250.replies[::17]:
        url = uwsgi_server.url(f"/entries/{quote(str(reply['id']), safe='')}")
        r = http.get(url, follow_redirects=False)
        assert r.status_code == 303, (url, r.text)
        assert r.headers["location"] == reply["url"]
        assert r.headers["simplefeed-seq"] == str(reply["seq"])
    missing = http.get(uwsgi_server.url("/entries/urn%3Aexample%3Anone"), follow_redirects=False)
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


def test_walk_prev_archive_then_next_archive(
    uwsgi_server: UwsgiServer, http: httpx.Client, feed250: Published
) -> None:
    recent_url = uwsgi_server.url("/recent")
    w = walk(http, recent_url)
    base = uwsgi_server.base_url
    every_link = [*w.recent.links.values(), *(h for d in w.archived for h in d.links.values())]
    assert all(h.startswith(base + "/") for h in every_link), every_link

    assert len(w.back) == 2, w.back
    assert [len(d.entries) for d in w.archived] == [100, 100]
    assert len(w.working.entries) == 50
    assert "prev-archive" not in w.archived[0].links  # Page 1.
    assert w.archived[1].links["prev-archive"] == w.archived[0].url
    assert w.working.links["prev-archive"] == w.archived[1].url
    assert w.recent.links["prev-archive"] == w.archived[1].url

    entries = w.entries()
    ids = [e["id"] for e in entries]
    assert len(ids) == 250 and len(set(ids)) == 250, "an entry is missing or repeated"
    assert ids == feed250.ids, "entries are not in publishing order"
    assert [int(e["sf_seq"]) for e in entries] == list(range(1, 251))
    assert [e["title"] for e in entries] == feed250.titles

    # /recent carries the working page's 50 entries, the same ones in the same order.
    assert [e["id"] for e in w.recent.entries] == [e["id"] for e in w.working.entries]
    assert w.recent.seqs == w.working.seqs == list(range(250, 200, -1))

    # Archived pages have their static files; the working page is live and has none.
    for doc in w.archived:
        assert doc.response.headers["cache-control"] == ARCHIVE_CACHE_CONTROL
        assert archive_file(uwsgi_server, doc.url).is_file()
    for doc in (w.working, w.recent):
        assert doc.response.headers["cache-control"] == LIVE_CACHE_CONTROL
        assert doc.response.headers["etag"]
    assert not archive_file(uwsgi_server, w.working.url).exists()  # Not archived: the app's.


# -- archived pages: from the file and from the database ---------------------------------------


def archived_urls(http: httpx.Client, recent_url: str) -> list[str]:
    """Return archived page URLs, newest first, as a consumer finds them.

    A consumer follows prev-archive from recent.
    """
    urls = []
    url = fetch_doc(http, recent_url).links.get("prev-archive")
    while url is not None:
        urls.append(url)
        url = fetch_doc(http, url).links.get("prev-archive")
    return urls


def test_archived_pages_file_and_database_answers_are_the_same(
    uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine, feed250: Published
) -> None:
    urls = archived_urls(http, uwsgi_server.url("/recent"))
    assert len(urls) == 2
    for url in urls:
        path = archive_file(uwsgi_server, url)
        on_disk = path.read_bytes()
        stored = stored_page(db, DEFAULT_FEED, page_number(url))
        frozen_s = stored.frozen_us // 1_000_000
        assert path.stat().st_mtime_ns // 1_000_000_000 == frozen_s

        # Every worker sends the file itself, by uWSGI's static route, without the app.
        for _ in range(PROCESSES * 2):
            static = http.get(url)
            assert static.status_code == 200
            assert static.content == on_disk and digest(on_disk) == stored.sha256
            assert static.headers.get_list("content-type") == [ATOM_CONTENT_TYPE]
            assert static.headers.get_list("cache-control") == [ARCHIVE_CACHE_CONTROL]
            assert static.headers["last-modified"] == http_date(frozen_s)
            assert int(static.headers["content-length"]) == len(on_disk)
            assert "x-request-id" not in static.headers, "the app answered"
            assert len(static.headers.get_list("date")) == 1

        # The same page from the app. With the file away, the app serves the database's bytes.
        # It writes the file back, byte for byte, with the time of archiving as its mtime.
        with MovedAway(path) as moved:
            app = http.get(url)
        assert app.status_code == 200
        assert app.content == on_disk and digest(on_disk) == stored.sha256
        assert app.headers.get_list("content-type") == [ATOM_CONTENT_TYPE]
        assert app.headers.get_list("cache-control") == [ARCHIVE_CACHE_CONTROL]
        assert app.headers["last-modified"] == static.headers["last-modified"]
        assert app.headers["etag"] == stored.etag
        assert not app.headers["etag"].startswith("W/"), "an archived page's ETag is strong"
        assert moved.rewritten is not None, f"the app did not write {path} back"
        assert moved.rewritten == on_disk
        assert moved.mtime_ns is not None and moved.mtime_ns // 1_000_000_000 == frozen_s

        # And the rewritten file serves the same bytes again, without the app.
        again = http.get(url)
        assert again.content == on_disk and "x-request-id" not in again.headers


def test_head_everywhere(uwsgi_server: UwsgiServer, http: httpx.Client, feed250: Published) -> None:
    recent_url = uwsgi_server.url("/recent")
    recent = wait_for_last_modified(http, recent_url)
    working_url = fetch_doc(http, recent_url).links["via"]
    archived_url = fetch_doc(http, recent_url).links["prev-archive"]
    compared = ("content-type", "cache-control", "etag", "last-modified", "content-length")

    def check_head(url: str, get: httpx.Response) -> RawResponse:
        head = raw_request(uwsgi_server, "HEAD", urlpath(url))
        assert head.status == 200, url
        assert head.body == b"", f"HEAD {url} sent a body"
        assert int(head.headers["content-length"]) == len(get.content)
        for name in compared:
            assert head.headers.get_list(name) == get.headers.get_list(name), (url, name)
        return head

    check_head(recent_url, recent)
    assert "last-modified" in recent.headers
    check_head(working_url, wait_for_last_modified(http, working_url))

    # This is uWSGI's static route. A raw request says Connection: close, which the app
    # answers.
    static_get = http.get(archived_url)
    static_head = http.head(archived_url)
    assert static_head.status_code == 200
    for name in ("content-type", "cache-control", "last-modified", "content-length"):
        assert static_head.headers.get_list(name) == static_get.headers.get_list(name), name
    assert "x-request-id" not in static_head.headers, "the app answered"

    path = archive_file(uwsgi_server, archived_url)
    with MovedAway(path):
        app_get = http.get(archived_url)
    with MovedAway(path) as moved:
        app_head = check_head(archived_url, app_get)
    assert moved.rewritten == static_get.content, "HEAD via the app did not rewrite the file"
    assert app_head.headers["etag"] == app_get.headers["etag"]
    for name in ("content-type", "cache-control", "last-modified", "content-length"):
        assert app_head.headers[name] == static_head.headers[name], name


# -- conditional requests ---------------------------------------------------------------------


def test_recent_if_none_match_304_and_cache_control(
    uwsgi_server: UwsgiServer, http: httpx.Client, feed250: Published
) -> None:
    url = uwsgi_server.url("/recent")
    first = http.get(url)
    etag = first.headers["etag"]
    assert first.headers["cache-control"] == LIVE_CACHE_CONTROL
    for _ in range(PROCESSES * 2):  # Whichever worker answers.
        r = http.get(url, headers={"If-None-Match": etag})
        assert r.status_code == 304, r.text
        assert r.content == b""
        assert r.headers["etag"] == etag
        assert r.headers["cache-control"] == LIVE_CACHE_CONTROL
    other = http.get(url, headers={"If-None-Match": '"something-else"'})
    assert other.status_code == 200 and other.content == first.content


def test_etag_changes_exactly_when_a_feed_changes(
    uwsgi_server: UwsgiServer, http: httpx.Client
) -> None:
    create_feed(uwsgi_server, "cond")
    post_url = uwsgi_server.url("/feeds/cond/entries")
    first = http.post(post_url, json={"title": "one"})
    assert first.status_code == 201
    recent_url = fetch_doc(http, first.json()["url"]).links["current"]
    before = http.get(recent_url)
    etag = before.headers["etag"]
    assert http.get(recent_url, headers={"If-None-Match": etag}).status_code == 304

    assert http.post(post_url, json={"title": "two"}).status_code == 201
    for _ in range(PROCESSES * 2):  # Every worker sees the change. No copy goes stale.
        r = http.get(recent_url, headers={"If-None-Match": etag})
        assert r.status_code == 200
        assert r.headers["etag"] != etag
        assert [e["title"] for e in feedparser.parse(r.content).entries] == ["two", "one"]
    new = r.headers["etag"]
    assert http.get(recent_url, headers={"If-None-Match": new}).status_code == 304


def test_archived_page_conditional_requests(
    uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine, feed250: Published
) -> None:
    url = fetch_doc(http, uwsgi_server.url("/recent")).links["prev-archive"]
    path = archive_file(uwsgi_server, url)
    body = path.read_bytes()
    stored = stored_page(db, DEFAULT_FEED, page_number(url))

    # The app serves while the file is away. If-None-Match with its strong ETag gives 304,
    # with headers and no body.
    with MovedAway(path) as moved:
        r = http.get(url, headers={"If-None-Match": stored.etag})
    assert r.status_code == 304, r.text
    assert r.content == b""
    assert r.headers["etag"] == stored.etag
    assert r.headers["cache-control"] == ARCHIVE_CACHE_CONTROL
    assert moved.rewritten == body
    last_modified = http_date(stored.frozen_us // 1_000_000)
    with MovedAway(path):
        r = http.get(url, headers={"If-Modified-Since": last_modified})
    assert r.status_code == 304 and r.content == b""

    # With the file present again, uWSGI's static route serves it. Last-Modified is its
    # validator.
    for _ in range(PROCESSES * 2):
        r = http.get(url)
        assert r.headers["last-modified"] == last_modified and "etag" not in r.headers
        r = http.get(url, headers={"If-Modified-Since": last_modified})
        assert r.status_code == 304, r.headers
        assert r.content == b""
        assert r.headers["cache-control"] == ARCHIVE_CACHE_CONTROL
        assert "x-request-id" not in r.headers, "the app answered"
    older = http_date(stored.frozen_us // 1_000_000 - 3600)
    r = http.get(url, headers={"If-Modified-Since": older})
    assert r.status_code == 200 and r.content == body


# -- bad input --------------------------------------------------------------------------------

JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Bad:
    method: str
    path: str
    status: int
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON))
    index: int | None = None


BAD_INPUTS = {
    "malformed-json": Bad("POST", "/entries", 400, b'{"title": "x",'),
    "invalid-utf8": Bad("POST", "/entries", 400, b'{"title": "caf\xe9 \xff"}'),
    "text-plain": Bad("POST", "/entries", 415, b'{"title": "x"}', {"Content-Type": "text/plain"}),
    "no-content-type": Bad("POST", "/entries", 415, b'{"title": "x"}', {}),
    "json-latin1": Bad(
        "POST",
        "/entries",
        415,
        b'{"title": "x"}',
        {"Content-Type": "application/json; charset=latin-1"},
    ),
    "missing-title": Bad("POST", "/entries", 422, b'{"content": "no title"}'),
    "title-wrong-type": Bad("POST", "/entries", 422, b'{"title": 5}'),
    "unknown-field": Bad("POST", "/entries", 422, b'{"title": "x", "colour": "red"}'),
    "too-large": Bad(
        "POST",
        "/entries",
        413,
        json.dumps({"title": "big", "content": "a" * (MAX_BODY_BYTES + 1000)}).encode(),
    ),
    "control-char": Bad("POST", "/entries", 422, b'{"title": "bell \\u0001 here"}'),
    "lone-surrogate": Bad("POST", "/entries", 422, b'{"title": "half \\ud800 a pair"}'),
    "nul": Bad("POST", "/entries", 422, b'{"title": "nul \\u0000 here"}'),
    "id-not-an-iri": Bad("POST", "/entries", 422, b'{"title": "x", "id": "not an iri"}'),
    "json-scalar": Bad("POST", "/entries", 422, b'"just a string"'),
    "empty-batch": Bad("POST", "/entries", 422, b"[]"),
    "batch-bad-middle": Bad(
        "POST",
        "/entries",
        422,
        json.dumps(
            [
                {"title": "good 0", "id": "tag:e2e.simplefeed.test,2027:batch-good-0"},
                {"title": "good 1"},
                {"title": 5},
                {"title": "good 3", "id": "tag:e2e.simplefeed.test,2027:batch-good-3"},
            ]
        ).encode(),
        index=2,
    ),
    "unknown-feed-post": Bad("POST", "/feeds/nope/entries", 404, b'{"title": "x"}'),
    "page-beyond-working": Bad("GET", "/pages/4", 404),
    "page-zero": Bad("GET", "/pages/0", 404),
    "page-not-a-number": Bad("GET", "/pages/two", 404),
    "unknown-feed-recent": Bad("GET", "/feeds/nope/recent", 404),
    "unknown-feed-page": Bad("GET", "/feeds/nope/pages/1", 404),
    "post-to-recent": Bad("POST", "/recent", 405, b'{"title": "x"}'),
    "post-to-archived-page": Bad("POST", "/pages/1", 405, b'{"title": "x"}'),
    "delete-archived-page": Bad("DELETE", "/pages/1", 405),
    # RFC 9110 15.6.2: a method the server does not know is not implemented, so 501, not 400.
    "unknown-method": Bad("BREW", "/recent", 501),
    "unknown-method-unknown-path": Bad("BREW", "/coffee", 501),
    "unknown-method-on-entries": Bad("BREW", "/entries", 501, b'{"title": "x"}'),
}


@pytest.mark.parametrize("case", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_refused_and_stores_nothing(
    uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine, feed250: Published, case: Bad
) -> None:
    before = snapshot(uwsgi_server, http, db)
    assert before.heads[DEFAULT_FEED] == 250
    r = http.request(
        case.method, uwsgi_server.url(case.path), content=case.body, headers=case.headers
    )
    body = assert_json_error(r, case.status)
    if case.index is not None:
        assert body.get("index") == case.index, body
        assert f"[{case.index}]" in body["message"], body
    if case.status == 405:
        assert "GET" in r.headers.get("allow", ""), r.headers
    after = snapshot(uwsgi_server, http, db)
    assert after == before, "a refused request changed the feed, the database or the archive"


def test_replays_and_conflicts(uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine) -> None:
    create_feed(uwsgi_server, "replays")
    url = uwsgi_server.url("/feeds/replays/entries")
    ev = {"id": "tag:e2e.simplefeed.test,2027:replay-1", "title": "first", "content": "x"}
    first = http.post(url, json=ev)
    assert first.status_code == 201
    assert first.json()["seq"] == 1 and first.json()["created"] is True

    replay = http.post(url, json=ev)
    assert replay.status_code == 200, replay.text
    assert replay.json()["created"] is False
    assert replay.json()["seq"] == 1 and replay.json()["id"] == ev["id"]

    before = snapshot(uwsgi_server, http, db)
    conflict = http.post(url, json={**ev, "content": "different"})
    body = assert_json_error(conflict, 409)
    assert body.get("id") == ev["id"], body
    # A batch of a new event, a replay and a conflict is refused as a whole. The refusal
    # names the conflicting index.
    batch = [{"title": "new in batch"}, ev, {**ev, "title": "changed"}]
    body = assert_json_error(http.post(url, json=batch), 409)
    assert body.get("index") == 2, body
    assert snapshot(uwsgi_server, http, db) == before

    all_replays = http.post(url, json=[ev, ev])
    assert all_replays.status_code == 200, all_replays.text
    assert [(e["seq"], e["created"]) for e in all_replays.json()["entries"]] == [
        (1, False),
        (1, False),
    ]
    mixed = http.post(url, json=[ev, {"title": "second"}])
    assert mixed.status_code == 201
    assert [(e["seq"], e["created"]) for e in mixed.json()["entries"]] == [(1, False), (2, True)]


def test_chunked_request_body_is_read_or_refused_honestly(
    uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine
) -> None:
    """A chunked request body is read, or refused honestly.

    httpx and requests stream the body of an iterable with Transfer-Encoding: chunked, and no
    Content-Length. Such a producer must get its event stored, or a clear 411 Length Required.
    It must not get a 400 saying its valid JSON is not JSON.
    """
    create_feed(uwsgi_server, "chunked")
    payload = json.dumps({"title": "streamed"}).encode()
    r = http.post(
        uwsgi_server.url("/feeds/chunked/entries"),
        content=iter([payload[:5], payload[5:]]),
        headers=JSON,
    )
    assert r.request.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in r.request.headers
    assert r.status_code in (201, 411), f"{r.status_code} {r.text}"
    if r.status_code == 411:
        assert_json_error(r, 411)
    else:
        assert r.json()["seq"] == 1


# -- the archive after later publishing -------------------------------------------------------


def test_archive_unchanged_after_later_publishing(
    uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine
) -> None:
    create_feed(uwsgi_server, "later")
    post_url = uwsgi_server.url("/feeds/later/entries")
    published = publish(http, post_url, [(1, 100), (101, 200), (201, 250)], Published(), "later")
    recent_url = fetch_doc(http, published.replies[0]["url"]).links["current"]

    w1 = walk(http, recent_url)
    assert [len(d.entries) for d in w1.archived] == [100, 100]
    before = {}
    for doc in w1.archived:
        path = archive_file(uwsgi_server, doc.url)
        assert digest(doc.response.content) == stored_page(db, "later", page_number(doc.url)).sha256
        assert doc.response.content == path.read_bytes()
        before[doc.url] = (doc.response.content, path.stat().st_mtime_ns)
    old_working = w1.working
    recent_before = http.get(recent_url)

    publish(http, post_url, [(251, 310), (311, 370)], published, "later")

    for url, (body, mtime_ns) in before.items():
        path = archive_file(uwsgi_server, url)
        assert http.get(url).content == body, f"{url} changed after later publishing"
        assert path.read_bytes() == body and path.stat().st_mtime_ns == mtime_ns
        assert stored_page(db, "later", page_number(url)).sha256 == digest(body)
        with MovedAway(path) as moved:
            assert http.get(url).content == body, f"the app's {url} changed"
        assert moved.rewritten == body

    w2 = walk(http, recent_url)
    assert [d.url for d in w2.archived[:2]] == list(before)
    assert [len(d.entries) for d in w2.archived] == [100, 100, 100]
    assert len(w2.working.entries) == 70
    # The old working page is archived. It keeps its URL, and has its own static file now.
    page3 = w2.archived[2]
    assert page3.url == old_working.url
    assert page3.response.content != old_working.response.content
    assert page3.response.content == archive_file(uwsgi_server, page3.url).read_bytes()
    assert digest(page3.response.content) == stored_page(db, "later", 3).sha256
    assert page3.response.headers["cache-control"] == ARCHIVE_CACHE_CONTROL
    assert page3.links["next-archive"] == w2.working.url != old_working.url
    # The entry point moved on.
    recent_after = http.get(recent_url, headers={"If-None-Match": recent_before.headers["etag"]})
    assert recent_after.status_code == 200
    assert recent_after.headers["etag"] != recent_before.headers["etag"]
    assert w2.recent.links["via"] == w2.working.url
    ids = [e["id"] for e in w2.entries()]
    assert ids == published.ids and len(set(ids)) == 370
    assert [int(e["sf_seq"]) for e in w2.entries()] == list(range(1, 371))


# -- archive rebuild --------------------------------------------------------------------------


def test_archive_rebuild_restores_missing_and_damaged_files(
    uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine, feed250: Published
) -> None:
    urls = archived_urls(http, uwsgi_server.url("/recent"))
    assert len(urls) == 2
    missing, damaged = (archive_file(uwsgi_server, u) for u in urls)
    originals = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (missing, damaged)}
    try:
        missing.unlink()
        body = bytearray(originals[damaged][0])
        body[len(body) // 2 : len(body) // 2 + 8] = b"XXXXXXXX"
        damaged.write_bytes(bytes(body))

        run = uwsgi_server.cli("archive", "rebuild")
        lines = run.stdout.splitlines()
        assert f"restored {missing}" in lines, run.stdout
        assert f"restored {damaged}" in lines, run.stdout
        assert sum(line.startswith("restored /") for line in lines) == 2, run.stdout
        assert re.search(r"^checked \d+ archived pages, restored 2$", run.stdout, re.M), run.stdout
        for path, (original, mtime_ns) in originals.items():
            assert path.read_bytes() == original, f"{path} not restored byte-identically"
            assert path.stat().st_mtime_ns // 10**9 == mtime_ns // 10**9
            assert digest(path.read_bytes()) == stored_page(db, DEFAULT_FEED, int(path.name)).sha256
        page_files_reopened()
        for url in urls:
            assert http.get(url).content == originals[archive_file(uwsgi_server, url)][0]

        second = uwsgi_server.cli("archive", "rebuild")
        assert "restored /" not in second.stdout, second.stdout
        assert re.search(r"restored 0$", second.stdout, re.M), second.stdout
    finally:
        for path, (original, _) in originals.items():
            if not path.exists() or path.read_bytes() != original:
                path.write_bytes(original)


def test_archive_files_are_readable_by_another_static_server(
    uwsgi_server: UwsgiServer, http: httpx.Client, feed250: Published
) -> None:
    """Archive files are readable by another static server.

    nginx or a CDN origin may serve archive/, as DESIGN says: "so a CDN or nginx can do the
    same". It usually runs as another user. So an archived page's file gets the mode that any
    new file gets under the umask, 0644 under the usual 022. It does not get a private 0600.
    """
    umask = os.umask(0)
    os.umask(umask)  # The server inherited this umask from the test process.
    expected = 0o666 & ~umask
    for url in archived_urls(http, uwsgi_server.url("/recent")):
        path = archive_file(uwsgi_server, url)
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == expected, (
            f"{path} has mode {mode:o}; under umask {umask:03o} expected {expected:o}"
        )


# -- producers: tokens and concurrent retries -------------------------------------------------


def test_tokens_over_real_http(uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine) -> None:
    create_feed(uwsgi_server, "tokens")
    feed_token = uwsgi_server.create_token("--feed", "tokens")
    url = uwsgi_server.url("/feeds/tokens/entries")
    before = snapshot(uwsgi_server, http, db)
    for authorization in ("", "Bearer nonsense", f"Bearer {feed_token[:-1]}x"):
        r = http.post(url, json={"title": "x"}, headers={"Authorization": authorization})
        assert_json_error(r, 401)
        assert r.headers["www-authenticate"].startswith("Bearer"), r.headers
    other = http.post(
        uwsgi_server.url("/entries"),
        json={"title": "x"},
        headers={"Authorization": f"Bearer {feed_token}"},
    )
    assert_json_error(other, 403)
    assert snapshot(uwsgi_server, http, db) == before
    ok = http.post(url, json={"title": "x"}, headers={"Authorization": f"Bearer {feed_token}"})
    assert ok.status_code == 201, ok.text
    # GETs stay public.
    assert httpx.get(uwsgi_server.url("/feeds/tokens/recent"), timeout=10).status_code == 200
    token_id = feed_token.split("_")[1]
    assert "revoked" in uwsgi_server.cli("token", "revoke", token_id).stdout
    listing = uwsgi_server.cli("token", "list").stdout
    # Secrets are never shown again. A token is sft_<id>_<secret>, and the secret may itself
    # hold "_".
    assert feed_token.split("_", 2)[2] not in listing
    again = http.post(url, json={"title": "y"}, headers={"Authorization": f"Bearer {feed_token}"})
    assert_json_error(again, 401)


def test_concurrent_retries_of_one_id_store_it_once(
    uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine
) -> None:
    """Concurrent retries of one id store it once.

    Many producers retry the same events at once, on several uWSGI processes. Each id is
    stored once, and every reply names the same sequence number.
    """
    from concurrent.futures import ThreadPoolExecutor

    create_feed(uwsgi_server, "retries")
    url = uwsgi_server.url("/feeds/retries/entries")
    ids = [f"tag:e2e.simplefeed.test,2027:retry-{i}" for i in range(5)]
    headers = {"Authorization": f"Bearer {uwsgi_server.token}"}

    def producer(n: int) -> list[tuple[str, int, bool]]:
        out = []
        with httpx.Client(timeout=30, headers=headers) as c:
            for i, entry_id in enumerate(ids):
                body: Any = {"id": entry_id, "title": f"retried {i}"}
                if n % 2:
                    body = [body]  # Half the producers send batches.
                r = c.post(url, json=body)
                assert r.status_code in (200, 201), r.text
                reply = r.json()["entries"][0] if n % 2 else r.json()
                out.append((reply["id"], reply["seq"], reply["created"]))
        return out

    with ThreadPoolExecutor(max_workers=8) as pool:
        replies = [r for rs in pool.map(producer, range(8)) for r in rs]
    seqs = {entry_id: {seq for i, seq, _ in replies if i == entry_id} for entry_id in ids}
    assert all(len(s) == 1 for s in seqs.values()), seqs
    assert sorted(next(iter(s)) for s in seqs.values()) == [1, 2, 3, 4, 5]
    created = [i for i, _, c in replies if c]
    assert sorted(created) == sorted(ids)  # Exactly one producer created each entry.
    with db.connect() as conn:
        stored = conn.execute(
            text(
                "SELECT count(*) FROM entries e JOIN feeds f ON f.id = e.feed_id "
                "WHERE f.name = 'retries'"
            )
        ).scalar_one()
    assert stored == 5

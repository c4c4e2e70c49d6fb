"""Scale-out and crash safety, end to end: real uWSGI, real producer processes, kill -9.

* ``test_concurrent_producers``: 8 producer processes x 100 events against one uWSGI with 4
  worker processes, page size 20, on SQLite and on PostgreSQL.
* ``test_two_nodes_share_postgres``: two uWSGI instances (two "nodes", 2 processes each, one
  public base URL) sharing one PostgreSQL database, 8 producers x 60 events spread over both;
  each node with its own archive directory in one variant, one shared directory in the other.
* ``test_kill_9_while_publishing``: the uWSGI master and its workers killed with SIGKILL while
  producers publish and pages freeze (page size 5), then restarted.

Producers are separate processes (``python -c PRODUCER``, each with its own httpx client and
connections) that log every request before sending it and every answer as it arrives (JSON
lines, flushed), so what was acknowledged (a 2xx) and what was in doubt (sent, never answered)
is known exactly even when the server dies under them. Checks read the database directly with
SQLAlchemy (read only) and walk the documents over HTTP following links only.

While producers run, a watcher polls the database (one statement, one snapshot: the number of
entries must equal the highest sequence number, i.e. no reader can ever see a hole behind a
later commit) and ``/recent`` (entries contiguous, head never going back, archived pages never
changing bytes).

PostgreSQL halves need ``SIMPLEFEED_TEST_POSTGRES_URL`` (each test gets a migrated database of
its own, see tests/conftest.py) and are skipped, with that reason, without it. No timing
assertions anywhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import feedparser
import httpx
import pytest
from lxml import etree
from sqlalchemy import create_engine, text

from bench.servers import UwsgiServer
from simplefeed import archive
from simplefeed.errors import DatabaseNotReady, FeedExists
from simplefeed.model import Author, Category, Event, Link
from simplefeed.rules.appending import pending_entries
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from simplefeed.store import check_ready
from tests.atomcheck import check_atom

pytestmark = pytest.mark.e2e

FEED = "events"
PRODUCERS = 8
#: 100 events each still give every producer some 40 requests among the others', and 40 pages
#: that freeze while other producers append. More events add checking time, not new cases,
#: because every page is rendered again, validated and walked.
EVENTS_EACH = 100
TOTAL = PRODUCERS * EVENTS_EACH
PAGE_SIZE = 20
#: The two-node test runs twice (own and shared archive directories): 24 pages each, frozen
#: on both nodes.
TWO_NODE_EACH = 60
TWO_NODE_TOTAL = PRODUCERS * TWO_NODE_EACH
PUBLIC_BASE = "http://feeds.scale.test"  # the two nodes' shared base URL (a load balancer's)
SF_NS = "https://simplefeed.dev/ns/1.0"
FH_NS = "http://purl.org/syndication/history/1.0"
ATOM = "{http://www.w3.org/2005/Atom}"

# -- producers --------------------------------------------------------------------------------

#: One producer process. argv[1]: JSON configuration. Writes JSON lines to cfg["out"]:
#: {"op": "send", ...} before each request, then "ack" (2xx), "fail" (other status) or "error"
#: (no answer: in doubt); "replay" for deliberate re-sends of an acknowledged event.
PRODUCER = r"""
import json, os, sys, time
import httpx

cfg = json.loads(sys.argv[1])
p, tag = cfg["producer"], cfg["tag"]
sizes, urls = cfg["sizes"], cfg["urls"]
out = open(cfg["out"], "a", buffering=1)

def log(**record):
    out.write(json.dumps(record) + "\n")

def event(j):
    ev = {"title": f"{tag} p{p} e{j}", "content": f"producer {p} event {j} <&>"}
    if cfg["all_ids"] or j % 4 != 3:
        ev["id"] = f"tag:scale.simplefeed.test,2027:{tag}-p{p}-e{j}"
    if j % 9 == 0:
        ev["content"] = {"producer": p, "event": j}
    return ev

headers = {"Authorization": "Bearer " + cfg["token"]}
deadline = time.monotonic() + cfg["seconds"]
last_single = None
with httpx.Client(timeout=60.0, headers=headers) as client:
    j = k = 0
    while j < cfg["count"] and time.monotonic() < deadline:
        if cfg["stop"] and os.path.exists(cfg["stop"]):
            break
        size = min(sizes[k % len(sizes)], cfg["count"] - j)
        events = [event(i) for i in range(j, j + size)]
        url = urls[k % len(urls)]
        k += 1
        body = events[0] if size == 1 else events
        titles = [e["title"] for e in events]
        log(op="send", req=k, url=url, titles=titles, ids=[e.get("id") for e in events],
            batch=size > 1)
        try:
            r = client.post(url, json=body)
        except httpx.HTTPError as exc:
            log(op="error", req=k, error=repr(exc))
            if cfg["stop_on_error"]:
                break
            time.sleep(0.05)
            continue
        if r.status_code // 100 != 2:
            log(op="fail", req=k, status=r.status_code, body=r.text[:500])
            j += size
            continue
        data = r.json()
        entries = data["entries"] if size > 1 else [data]
        log(op="ack", req=k, status=r.status_code, titles=titles, entries=entries)
        if size == 1 and "id" in events[0]:
            last_single = (url, events[0], entries[0])
        j += size
        if cfg["replay_every"] and k % cfg["replay_every"] == 0 and last_single:
            url0, ev0, entry0 = last_single
            try:
                again = client.post(url0, json=ev0)
            except httpx.HTTPError as exc:
                log(op="error", req=-k, error=repr(exc))
                if cfg["stop_on_error"]:
                    break
                continue
            log(op="replay", status=again.status_code, expected=entry0,
                got=again.json() if again.status_code // 100 == 2 else again.text[:500])
"""


@dataclass
class Sent:
    producer: int
    req: int
    titles: list[str]
    ids: list[str | None]
    batch: bool
    answer: str = "none"  # "ack", "fail", "error" or "none" (in doubt)
    status: int = 0
    entries: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Outcome:
    """Everything the producers did, as they logged it."""

    requests: list[Sent]
    replays: list[dict[str, Any]]
    failures: list[str]

    @property
    def acked(self) -> list[tuple[str, dict[str, Any]]]:
        """(title, reply entry) of every acknowledged event, replays excluded."""
        return [
            (title, entry)
            for sent in self.requests
            if sent.answer == "ack"
            for title, entry in zip(sent.titles, sent.entries, strict=True)
        ]

    @property
    def in_doubt(self) -> list[Sent]:
        return [s for s in self.requests if s.answer in ("error", "none")]


def start_producers(
    workdir: Path,
    urls_of: Callable[[int], list[str]],
    token: str,
    *,
    producers: int = PRODUCERS,
    count: int = EVENTS_EACH,
    tag: str = "run",
    sizes: tuple[int, ...] = (1, 1, 3, 1, 2, 7, 1, 4, 1, 1, 5, 1),
    all_ids: bool = False,
    replay_every: int = 10,
    seconds: float = 120.0,
    stop: Path | None = None,
    stop_on_error: bool = False,
) -> list[tuple[subprocess.Popen[bytes], Path]]:
    started = []
    for p in range(producers):
        out = workdir / f"producer-{tag}-{p}.jsonl"
        cfg = {
            "producer": p,
            "tag": tag,
            "urls": urls_of(p),
            "token": token,
            "count": count,
            # Each producer starts at another point of the pattern: batches interleave.
            "sizes": list(sizes[p % len(sizes) :] + sizes[: p % len(sizes)]),
            "all_ids": all_ids,
            "replay_every": replay_every,
            "seconds": seconds,
            "stop": str(stop) if stop else None,
            "stop_on_error": stop_on_error,
            "out": str(out),
        }
        proc = subprocess.Popen(
            [sys.executable, "-c", PRODUCER, json.dumps(cfg)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        started.append((proc, out))
    return started


def acks_so_far(started: list[tuple[subprocess.Popen[bytes], Path]]) -> int:
    """How many requests the running producers have had acknowledged so far."""
    return sum(out.read_text().count('"op": "ack"') for _, out in started if out.exists())


def finish_producers(
    started: list[tuple[subprocess.Popen[bytes], Path]], timeout: float = 120.0
) -> Outcome:
    deadline = time.monotonic() + timeout
    failures = []
    try:
        for proc, _ in started:
            try:
                _, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                failures.append(f"producer {proc.pid} did not finish in {timeout} s")
            if proc.returncode != 0:
                failures.append(f"producer exited {proc.returncode}: {err.decode()[-2000:]}")
    finally:
        for proc, _ in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return read_outcome([out for _, out in started], failures)


def read_outcome(paths: list[Path], failures: list[str]) -> Outcome:
    requests: list[Sent] = []
    replays: list[dict[str, Any]] = []
    for p, path in enumerate(paths):
        by_req: dict[int, Sent] = {}
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            if not line.endswith("}"):
                continue  # a line cut short by a killed producer
            rec = json.loads(line)
            if rec["op"] == "send":
                by_req[rec["req"]] = Sent(p, rec["req"], rec["titles"], rec["ids"], rec["batch"])
            elif rec["op"] == "replay":
                replays.append(rec)
            elif rec["req"] in by_req:
                sent = by_req[rec["req"]]
                sent.answer = rec["op"]
                sent.status = rec.get("status", 0)
                sent.entries = rec.get("entries", [])
                if rec["op"] == "fail":
                    failures.append(f"producer {p}: {rec['status']} {rec['body']}")
        requests += by_req.values()
    return Outcome(requests, replays, failures)


# -- the database, read only -----------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    head: int
    page_size: int
    entries: list[tuple[int, str, str]]  # (seq, entry id, title), by seq
    records: dict[int, tuple[int, int, str, int]]  # number -> (first, last, sha256, us)
    #: number -> (first, last, body, etag, us), the bodies rendered from the rows and checked
    #: against the digests (check_database).
    pages: dict[int, tuple[int, int, bytes, str, int]] = dataclasses.field(default_factory=dict)


def stored(url: str, feed: str = FEED) -> Stored:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            feed_id, head, page_size = conn.execute(
                text("SELECT id, head_seq, page_size FROM feeds WHERE name = :n"), {"n": feed}
            ).one()
            rows = conn.execute(
                text("SELECT seq, entry_id, data FROM entries WHERE feed_id = :f ORDER BY seq"),
                {"f": feed_id},
            ).all()
            pages = conn.execute(
                text(
                    "SELECT number, first_seq, last_seq, sha256, frozen_us FROM pages"
                    " WHERE feed_id = :f ORDER BY number"
                ),
                {"f": feed_id},
            ).all()
    finally:
        engine.dispose()
    return Stored(
        head=int(head),
        page_size=int(page_size),
        entries=[(int(s), str(i), json.loads(d)["title"]) for s, i, d in rows],
        records={int(n): (int(a), int(b), str(d), int(us)) for n, a, b, d, us in pages},
    )


def check_database(url: str, base_url: str, expected: int | None = None) -> Stored:
    """The feed's promises, from its rows: contiguous sequence, unique ids, every full page
    frozen exactly once with the right range, valid, and byte-identical to a fresh render."""
    st = stored(url)
    seqs = [s for s, _, _ in st.entries]
    assert seqs == list(range(1, st.head + 1)), "sequence is not 1..head without gaps"
    if expected is not None:
        assert st.head == expected
    ids = [i for _, i, _ in st.entries]
    assert len(set(ids)) == len(ids), "an entry id appears twice"
    full = st.head // st.page_size
    assert sorted(st.records) == list(range(1, full + 1)), "archived pages are not 1..full"
    core = Simplefeed(Settings(database_url=url, base_url=base_url, default_feed=FEED))
    pages = {}
    try:
        feed = core.feed(FEED)
        for number, (first, last, sha256, us) in st.records.items():
            assert (first, last) == (
                (number - 1) * st.page_size + 1,
                number * st.page_size,
            ), f"page {number} range"
            body = core.rerender(feed, number)
            assert hashlib.sha256(body).hexdigest() == sha256, f"page {number} is not a render"
            assert page_seqs(body) == list(range(last, first - 1, -1)), f"page {number} entries"
            problems = check_atom(body, kind="archive")
            assert problems == [], f"page {number}: {problems}"
            pages[number] = (first, last, body, archive.strong_etag(body), us)
    finally:
        core.store.close()
    return dataclasses.replace(st, pages=pages)


def check_acknowledged(st: Stored, outcome: Outcome) -> None:
    """Every acknowledged event is in the feed exactly once, where its reply said."""
    by_seq = {s: (i, t) for s, i, t in st.entries}
    acked = outcome.acked
    assert acked, "nothing was acknowledged"
    for title, entry in acked:
        assert entry["created"], f"{title}: first send answered as a replay"
        assert by_seq.get(entry["seq"]) == (entry["id"], title), f"{title} not at {entry['seq']}"
        assert entry["page"] == (entry["seq"] - 1) // st.page_size + 1
    titles = [t for _, _, t in st.entries]
    assert len(set(titles)) == len(titles), "an event was stored twice"


def check_producer_order(outcome: Outcome) -> None:
    """A producer waits for each answer before sending again, so its later events must have
    later sequence numbers: commit order is the sequence order."""
    seqs: dict[int, list[int]] = {}
    for sent in sorted(outcome.requests, key=lambda s: (s.producer, s.req)):
        if sent.answer == "ack":
            seqs.setdefault(sent.producer, []).extend(e["seq"] for e in sent.entries)
    for producer, values in seqs.items():
        assert values == sorted(values), f"producer {producer}: sequence went backwards"


def check_replays(outcome: Outcome) -> None:
    assert outcome.replays, "no replay was sent"
    for rec in outcome.replays:
        assert rec["status"] == 200, rec
        assert rec["got"]["seq"] == rec["expected"]["seq"], rec
        assert rec["got"]["id"] == rec["expected"]["id"], rec
        assert rec["got"]["created"] is False, rec


def page_seqs(body: bytes) -> list[int]:
    root = etree.fromstring(body)
    return [int(e.findtext(f"{{{SF_NS}}}seq") or 0) for e in root.iter(f"{ATOM}entry")]


# -- reading over HTTP ------------------------------------------------------------------------


def fetch(client: httpx.Client, url: str, nodes: list[UwsgiServer], public: str | None) -> bytes:
    """GET a document by its link. With a public base URL, the request goes to one of the
    nodes (as a load balancer would send it), chosen by the URL so each node serves some."""
    target = url
    if public is not None:
        path = url.removeprefix(public)
        node = nodes[sum(map(ord, path)) % len(nodes)]
        target = node.url(path)
    r = client.get(target)
    assert r.status_code == 200, f"GET {url} via {target}: {r.status_code} {r.text[:300]}"
    return r.content


def links(body: bytes) -> dict[str, str]:
    root = etree.fromstring(body)
    out: dict[str, str] = {}
    for link in root.findall(f"{ATOM}link"):
        rel = link.get("rel") or "alternate"
        assert rel not in out, f"two {rel} links"
        out[rel] = link.get("href") or ""
    return out


def is_archived(body: bytes) -> bool:
    return etree.fromstring(body).find(f"{{{FH_NS}}}archive") is not None


def walk_and_consume(
    nodes: list[UwsgiServer], recent_url: str, public: str | None = None
) -> list[tuple[int, str]]:
    """Walk back from the entry point to page 1 through prev-archive, then forward through
    next-archive to the working page and back to ``current``; return every entry (seq, id) in
    the order a consumer processes them (oldest first). Links only: no URL is built."""
    with httpx.Client(timeout=30.0) as client:
        recent = fetch(client, recent_url, nodes, public)
        recent_links = links(recent)
        assert not is_archived(recent)
        back: list[str] = []
        url = recent_links.get("prev-archive")
        while url is not None:
            assert url not in back, f"link loop at {url}"
            body = fetch(client, url, nodes, public)
            assert is_archived(body), f"{url} lacks fh:archive"
            page_links = links(body)
            assert page_links["self"] == url
            assert page_links["current"] == recent_url
            back.append(url)
            url = page_links.get("prev-archive")
        consumed: list[tuple[int, str]] = []
        url = back[-1] if back else recent_links["via"]
        forward: list[str] = []
        while True:
            body = fetch(client, url, nodes, public)
            page_links = links(body)
            assert page_links["self"] == url
            parsed = feedparser.parse(body)
            assert not parsed.bozo, f"{url}: {parsed.get('bozo_exception')!r}"
            consumed += [(int(e["sf_seq"]), e["id"]) for e in reversed(parsed.entries)]
            if not is_archived(body):
                break
            forward.append(url)
            url = page_links["next-archive"]
            assert url not in forward, f"link loop at {url}"
        assert forward == list(reversed(back)), "next-archive does not retrace prev-archive"
        assert url == recent_links["via"], "the chain does not end at the working page"
        assert "next-archive" not in page_links
        again = links(fetch(client, page_links["current"], nodes, public))
        assert again["self"] == recent_url
    return consumed


class Watcher:
    """Polls, while producers run, what a reader can see, and records every broken promise:

    * the database, in one statement (one snapshot): entries = highest sequence number, so no
      commit ever becomes visible behind a reader with a lower number than one it could see;
    * ``/recent`` over HTTP: its entries contiguous up to the head, the head never going back;
    * archived pages it has seen: the same bytes on every later read.
    """

    def __init__(self, database_url: str, servers: list[UwsgiServer]) -> None:
        self.database_url = database_url
        self.servers = servers
        self.problems: list[str] = []
        self.polls = 0
        self.max_seen = 0
        self.pages: dict[str, bytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        engine = create_engine(self.database_url)
        query = text(
            "SELECT count(*), coalesce(max(seq), 0) FROM entries"
            " WHERE feed_id = (SELECT id FROM feeds WHERE name = :n)"
        )
        try:
            with httpx.Client(timeout=30.0) as client:
                while not self._stop.is_set():
                    with engine.connect() as conn:
                        count, high = conn.execute(query, {"n": FEED}).one()
                    if count != high:
                        self.problems.append(f"snapshot with {count} entries, highest {high}")
                    self._poll_recent(client)
                    self.polls += 1
                    self._stop.wait(0.02)
        except Exception as exc:  # pragma: no cover - reported by the test
            self.problems.append(f"watcher failed: {exc!r}")
        finally:
            engine.dispose()

    def _poll_recent(self, client: httpx.Client) -> None:
        server = self.servers[self.polls % len(self.servers)]
        r = client.get(server.url("/recent"))
        if r.status_code != 200:
            self.problems.append(f"/recent answered {r.status_code}")
            return
        seqs = page_seqs(r.content)
        if seqs:
            if seqs != list(range(seqs[0], seqs[0] - len(seqs), -1)):
                self.problems.append(f"/recent entries not contiguous: {seqs}")
            if seqs[0] < self.max_seen:
                self.problems.append(f"/recent went back from {self.max_seen} to {seqs[0]}")
            self.max_seen = max(self.max_seen, seqs[0])
        prev = links(r.content).get("prev-archive")
        if prev is not None:
            path = urlsplit(prev).path
            page = client.get(server.url(path))
            if page.status_code != 200:
                self.problems.append(f"{path} answered {page.status_code}")
            elif self.pages.setdefault(path, page.content) != page.content:
                self.problems.append(f"{path} changed bytes")


# -- servers and databases --------------------------------------------------------------------


@pytest.fixture
def database(database_url: str) -> str:
    """The test's migrated database (tests/conftest.py): a SQLite file, or one on PostgreSQL.

    The servers find it at the newest schema, so none runs ``simplefeed db upgrade``. That
    command costs a process and about a second of CPU; tests/test_operators_cli.py tests it.
    """
    return database_url


#: The PostgreSQL half of ``database`` only.
POSTGRES_ONLY = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


def server(
    database_url: str,
    workdir: Path,
    archive_dir: Path,
    *,
    processes: int,
    page_size: int,
    public: str | None = None,
) -> UwsgiServer:
    env = {"SIMPLEFEED_DEFAULT_FEED": FEED}
    if public is not None:
        env["SIMPLEFEED_BASE_URL"] = public
    make_feed(database_url, page_size)
    return UwsgiServer(
        database_url,
        archive_dir,
        workdir,
        page_size=page_size,
        processes=processes,
        extra_env=env,
        startup_timeout=60.0,
    )


def make_feed(database_url: str, page_size: int) -> None:
    """Create the feed the servers serve, as ``simplefeed db upgrade`` does, unless it is there.

    An empty database, as tests/test_pg_crash.py gives, is left to the server: it migrates it
    with that command, which creates the feed.
    """
    try:
        check_ready(database_url)
    except DatabaseNotReady:
        return
    core = Simplefeed(Settings(database_url=database_url, default_feed=FEED))
    try:
        with contextlib.suppress(FeedExists):
            core.create_feed(FEED, page_size=page_size)
    finally:
        core.close()


def archive_files(archive_dir: Path) -> dict[int, bytes]:
    pages = archive_dir / "pages"
    if not pages.is_dir():
        return {}
    return {int(p.name): p.read_bytes() for p in pages.iterdir() if p.name.isdigit()}


# -- the tests --------------------------------------------------------------------------------


def test_concurrent_producers(database: str, tmp_path: Path) -> None:
    """8 producer processes x 100 events, uWSGI with 4 processes, page size 20."""
    with server(database, tmp_path, tmp_path / "archive", processes=4, page_size=PAGE_SIZE) as srv:
        url = srv.url("/entries")
        with Watcher(database, [srv]) as watcher:
            outcome = finish_producers(start_producers(tmp_path, lambda p: [url], srv.token))
        assert outcome.failures == []
        assert not outcome.in_doubt
        st = check_database(database, srv.base_url, expected=TOTAL)
        check_acknowledged(st, outcome)
        assert len(outcome.acked) == TOTAL
        check_producer_order(outcome)
        check_replays(outcome)
        assert watcher.problems == [], watcher.problems[:10]
        assert watcher.polls > 0
        # Every archived page's static file was written, with the database's bytes.
        files = archive_files(srv.archive_dir)
        assert sorted(files) == sorted(st.pages)
        for number, body in files.items():
            assert body == st.pages[number][2], f"file of page {number}"
        consumed = walk_and_consume([srv], srv.url("/recent"))
        assert consumed == [(s, i) for s, i, _ in st.entries]
        assert [s for s, _ in consumed] == list(range(1, TOTAL + 1))
        for path, body in watcher.pages.items():
            number = int(path.rsplit("/", 1)[1])
            assert body == st.pages[number][2], f"{path} served other bytes than frozen"
    assert srv.problems() == []


@POSTGRES_ONLY
@pytest.mark.parametrize("archives", ["own-archive-dirs", "shared-archive-dir"])
def test_two_nodes_share_postgres(database: str, tmp_path: Path, archives: str) -> None:
    """Two uWSGI nodes, one PostgreSQL database, one public base URL; producers spread over
    both. A node without an archived page's file serves it from the database and writes it."""
    shared = tmp_path / "archive"
    dirs = (
        [shared, shared]
        if archives == "shared-archive-dir"
        else [tmp_path / "archive-a", tmp_path / "archive-b"]
    )
    nodes = [
        server(
            database,
            tmp_path / name,
            dirs[i],
            processes=2,
            page_size=PAGE_SIZE,
            public=PUBLIC_BASE,
        )
        for i, name in enumerate(("node-a", "node-b"))
    ]
    try:
        for node in nodes:
            node.start()
        a, b = nodes
        # Producers alternate between the nodes request by request, starting on either.
        posts = [a.url("/entries"), b.url("/entries")]
        with Watcher(database, nodes) as watcher:
            outcome = finish_producers(
                start_producers(
                    tmp_path,
                    lambda p: posts[p % 2 :] + posts[: p % 2],
                    a.token,
                    count=TWO_NODE_EACH,
                )
            )
        assert outcome.failures == []
        assert not outcome.in_doubt
        st = check_database(database, PUBLIC_BASE, expected=TWO_NODE_TOTAL)
        check_acknowledged(st, outcome)
        check_producer_order(outcome)
        check_replays(outcome)
        assert watcher.problems == [], watcher.problems[:10]
        # Freezing happened on both nodes, each page once: together the nodes' files are
        # exactly the archived pages, with the database's bytes.
        files = [archive_files(d) for d in dirs]
        union = {**files[0], **files[1]}
        assert sorted(union) == sorted(st.pages)
        for number, body in union.items():
            assert body == st.pages[number][2], f"file of page {number}"
        if archives == "own-archive-dirs":
            # Each node writes the pages it froze (and those it was asked for: the watcher
            # reads pages through both), so neither has them all.
            assert files[0] and files[1], "one node froze every page"
            missing = sorted(set(st.pages) - set(files[1]))[:5]
            assert missing, "node B has every page's file"
            identity = {"Accept-Encoding": "identity"}  # the page's own ETag
            for number in missing:
                r = httpx.get(b.url(f"/pages/{number}"), headers=identity, timeout=30)
                assert r.status_code == 200
                assert r.content == st.pages[number][2]
                assert r.headers["etag"] == st.pages[number][3]  # the app answered
                assert (dirs[1] / "pages" / str(number)).read_bytes() == st.pages[number][2]
                r = httpx.get(b.url(f"/pages/{number}"), timeout=30)
                assert r.status_code == 200
                assert r.content == st.pages[number][2]  # now from node B's own file
        consumed = walk_and_consume(nodes, f"{PUBLIC_BASE}/recent", PUBLIC_BASE)
        assert [s for s, _ in consumed] == list(range(1, TWO_NODE_TOTAL + 1))
        assert consumed == [(s, i) for s, i, _ in st.entries]
        # Every node serves every archived page with the same bytes.
        with httpx.Client(timeout=30) as client:
            for number in (1, len(st.pages) // 2, len(st.pages)):
                bodies = {client.get(n.url(f"/pages/{number}")).content for n in nodes}
                assert bodies == {st.pages[number][2]}
    finally:
        for node in nodes:
            node.stop()
    for node in nodes:
        assert node.problems() == []


def test_kill_9_while_publishing(database: str, tmp_path: Path) -> None:
    """SIGKILL to the uWSGI master and all its workers mid-publish (page size 5: most commits
    freeze a page), then a restart: nothing acknowledged is lost, nothing in doubt is half
    there, archived bytes never changed, the archive is restored byte-identically, and
    publishing goes on with the next sequence number."""
    size = 5
    archive_dir = tmp_path / "archive"
    # A fixed public base URL: the restarted server listens on another port, and archived pages
    # (whose links come from the base URL) must render the same after the restart.
    srv = server(database, tmp_path, archive_dir, processes=4, page_size=size, public=PUBLIC_BASE)
    stop = tmp_path / "stop"
    try:
        srv.start()
        url = srv.url("/entries")
        started = start_producers(
            tmp_path,
            lambda p: [url],
            srv.token,
            producers=4,
            count=100_000,
            tag="crash",
            sizes=(1, 3, 1, 7, 2, 1, 11, 1, 4),
            all_ids=True,
            replay_every=0,
            seconds=60.0,
            stop=stop,
            stop_on_error=True,
        )
        # Let them publish (and pages freeze) for a while, reading archived pages meanwhile.
        # 60 answers are some 200 events, 40 pages: the kill comes amid appends and freezes as
        # it would later, and each page is checked twice and walked once after it.
        before: dict[int, bytes] = {}
        deadline = time.monotonic() + 30
        with httpx.Client(timeout=10) as client:
            while time.monotonic() < deadline:
                if acks_so_far(started) >= 60:
                    break
                for number in range(1, 4):
                    r = client.get(srv.url(f"/pages/{number}"))
                    if r.status_code == 200 and is_archived(r.content):
                        before.setdefault(number, r.content)
                time.sleep(0.05)
        assert srv.process is not None
        os.killpg(srv.process.pid, signal.SIGKILL)  # the master and every worker, at once
        srv.stop()  # reaps the master
        stop.touch()
        outcome = finish_producers(started, timeout=60)
    finally:
        stop.touch()
        srv.stop()
    assert [f for f in outcome.failures if "exited" in f or "did not" in f] == []
    assert outcome.acked, "nothing was acknowledged before the kill"

    # What is on disk after the crash: files either absent or with the frozen bytes.
    st = check_database(database, PUBLIC_BASE)
    files = archive_files(archive_dir)
    for number, body in files.items():
        assert number in st.pages, f"a file for page {number}, which is not frozen"
        assert body == st.pages[number][2], f"page {number}'s file has other bytes"
    for number, body in before.items():
        assert body == st.pages[number][2], f"page {number} changed bytes across the crash"

    # Nothing acknowledged lost; nothing that was not sent; in-doubt requests all or nothing.
    check_acknowledged(st, outcome)
    check_producer_order(outcome)
    stored_titles = {t for _, _, t in st.entries}
    sent_titles = {t for s in outcome.requests for t in s.titles}
    assert stored_titles <= sent_titles, "entries nobody sent"
    for sent in outcome.in_doubt:
        present = [t in stored_titles for t in sent.titles]
        assert all(present) or not any(present), f"request {sent.req} is half there"
    acked_titles = {t for t, _ in outcome.acked}
    unacked_stored = stored_titles - acked_titles
    in_doubt_titles = {t for s in outcome.in_doubt for t in s.titles}
    assert unacked_stored <= in_doubt_titles

    print(
        f"\ncrash: {len(outcome.acked)} acknowledged, {len(outcome.in_doubt)} requests in doubt"
        f" ({len(unacked_stored)} of their events stored), {len(st.pages)} pages frozen,"
        f" {len(set(st.pages) - set(files))} files missing after the kill"
    )

    # Damage the archive on purpose too (a lost file, a corrupted one), then rebuild.
    frozen = sorted(st.pages)
    assert len(frozen) >= 3
    victims = {frozen[0]: "missing", frozen[-1]: "corrupt"}
    (archive_dir / "pages" / str(frozen[0])).unlink(missing_ok=True)
    (archive_dir / "pages").mkdir(parents=True, exist_ok=True)
    (archive_dir / "pages" / str(frozen[-1])).write_bytes(b"<feed>damaged</feed>")
    rebuild = srv.cli("archive", "rebuild")
    # (Page files, and precompressed copies a kill left unwritten: "<n>.br", "<n>.gz".)
    restored = {
        int(Path(p).name.partition(".")[0])
        for p in re.findall(r"^restored (\S+)$", rebuild.stdout, re.M)
    }
    assert set(victims) <= restored, rebuild.stdout
    assert f"checked {len(frozen)} archived pages" in rebuild.stdout
    after = archive_files(archive_dir)
    assert sorted(after) == frozen
    for number, body in after.items():
        assert body == st.pages[number][2], f"page {number} not restored byte-identically"
    again = srv.cli("archive", "rebuild")
    assert again.stdout.strip().endswith("restored 0"), again.stdout

    # Restart: retries of the in-doubt requests are replays or first appends, never doubles;
    # then publishing resumes with the next sequence number.
    try:
        srv.start()
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {srv.token}"}) as client:
            for sent in outcome.in_doubt:
                events = [
                    _crash_event(sent.producer, title, event_id)
                    for title, event_id in zip(sent.titles, sent.ids, strict=True)
                ]
                r = client.post(srv.url("/entries"), json=events if sent.batch else events[0])
                was_in = sent.titles[0] in stored_titles
                assert r.status_code == (200 if was_in else 201), r.text
            head = stored(database).head
            r = client.post(srv.url("/entries"), json={"title": "after the crash"})
            assert r.status_code == 201, r.text
            assert r.json()["seq"] == head + 1
        final = check_database(database, PUBLIC_BASE, expected=head + 1)
        # Everything that was stored, plus the retried in-doubt requests, plus the new event.
        assert {t for _, _, t in final.entries} == (
            stored_titles | in_doubt_titles | {"after the crash"}
        )
        consumed = walk_and_consume([srv], f"{PUBLIC_BASE}/recent", PUBLIC_BASE)
        assert [s for s, _ in consumed] == list(range(1, head + 2))
    finally:
        srv.stop()


def _append_commits(client: httpx.Client, srv: UwsgiServer) -> tuple[float, float]:
    """(commits, publishes) of append transactions so far, summed over the server's workers."""
    text_ = client.get(srv.url("/metrics")).text
    found = dict(
        re.findall(r'^simplefeed_append_publishes_(count|sum)\{feed="events"\} (\S+)$', text_, re.M)
    )
    return float(found.get("count", 0)), float(found.get("sum", 0))


def test_kill_9_in_the_middle_of_group_commits(database: str, tmp_path: Path) -> None:
    """Many producers of single events at once, so that publishes are committed in groups
    (the server's metrics show fewer commits than publishes), then SIGKILL to the master and
    every worker: every event answered 2xx is in the feed after a restart, once, where its
    answer said; nothing is stored that was not sent."""
    srv = server(
        database, tmp_path, tmp_path / "archive", processes=2, page_size=5, public=PUBLIC_BASE
    )
    stop = tmp_path / "stop"
    try:
        srv.start()
        url = srv.url("/entries")
        started = start_producers(
            tmp_path,
            lambda p: [url],
            srv.token,
            producers=12,
            count=100_000,
            tag="group",
            sizes=(1,),
            all_ids=True,
            replay_every=0,
            seconds=60.0,
            stop=stop,
            stop_on_error=True,
        )
        # Kill once groups have formed and 100 events are acknowledged: more would add pages to
        # check, and no new case.
        grouped = False
        deadline = time.monotonic() + 45
        with httpx.Client(timeout=10) as client:
            while time.monotonic() < deadline and not (grouped and acks_so_far(started) >= 100):
                commits, publishes = _append_commits(client, srv)
                grouped = 0 < commits < publishes
                time.sleep(0.05)
        assert grouped, "no group formed: as many commits as publishes"
        assert srv.process is not None
        os.killpg(srv.process.pid, signal.SIGKILL)  # the master and every worker, at once
        srv.stop()
        stop.touch()
        outcome = finish_producers(started, timeout=60)
    finally:
        stop.touch()
        srv.stop()
    assert [f for f in outcome.failures if "exited" in f or "did not" in f] == []
    st = check_database(database, PUBLIC_BASE)
    check_acknowledged(st, outcome)
    check_producer_order(outcome)
    stored_titles = {t for _, _, t in st.entries}
    assert stored_titles <= {t for s in outcome.requests for t in s.titles}, "never sent"
    try:
        srv.start()
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {srv.token}"}) as client:
            r = client.post(srv.url("/entries"), json={"title": "after the crash"})
            assert r.status_code == 201, r.text
            assert r.json()["seq"] == st.head + 1
    finally:
        srv.stop()
    print(f"\ngroup crash: {len(outcome.acked)} acknowledged, {len(outcome.in_doubt)} in doubt")


def _crash_event(producer: int, title: str, event_id: str | None) -> dict[str, Any]:
    """The event the producer script sent with this title (see PRODUCER's ``event``)."""
    j = int(title.rsplit(" e", 1)[1])
    ev: dict[str, Any] = {"title": title, "content": f"producer {producer} event {j} <&>"}
    if event_id is not None:
        ev["id"] = event_id
    if j % 9 == 0:
        ev["content"] = {"producer": producer, "event": j}
    return ev


# -- the fast paths compute exactly what the model does ---------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        Event(title="t"),
        Event(title="", content="", content_type="text", summary=""),
        Event(
            title="Ünïcødé ✓ \U0001f600",
            content='{"a": [1, 2, {"b": null}]}',
            content_type="application/json",
            summary="s",
            author=Author("A", "a@example.com", "https://example.com/"),
            categories=(Category("x"), Category("y", "https://s.example/", "Y")),
            links=(
                Link("https://example.com/1"),
                Link("https://e.example/", "related", "text/html", "en", "T", 12),
            ),
            id="tag:example.com,2027:1",
            updated_us=1_800_000_000_000_001,
        ),
        Event(title="no author", author=Author("only a name")),
    ],
)
def test_prepared_event_matches_the_model(event: Event) -> None:
    """The publish path's fingerprint and stored JSON (computed without dataclasses.asdict)
    are byte-for-byte Event.fingerprint() and the JSON of Event.to_json()."""
    (prepared,) = pending_entries([event], 0, lambda: "urn:x:made")
    # The fast canonical form equals what dataclasses.asdict and json.dumps give.
    slow = json.dumps(dataclasses.asdict(event), sort_keys=True, separators=(",", ":"))
    assert prepared.fingerprint == hashlib.sha256(slow.encode()).hexdigest()
    stored = {
        k: v for k, v in dataclasses.asdict(event).items() if v not in (None, (), []) and k != "id"
    }
    assert prepared.data == json.dumps(stored, ensure_ascii=False, separators=(",", ":"))
    assert Event.from_json(json.loads(prepared.data), event.id) == dataclasses.replace(event)


# -- the store's append path -----------------------------------------------------------------


def test_a_second_freeze_or_a_duplicate_is_refused_whole(core: Simplefeed) -> None:
    """The append's writes (pipelined on PostgreSQL) fail as the store's error and roll back
    together: a page frozen twice, an entry id twice."""
    from simplefeed.errors import StoreError
    from simplefeed.model import Entry, PendingEntry

    core.publish(FEED, [Event(title=f"e{i}", id=f"urn:example:{i}") for i in range(5)])
    feed = core.feed(FEED)
    assert feed.head_seq == 5
    page = core.page(feed, 1)

    def entry(entry_id: str) -> tuple[Entry, PendingEntry]:
        event = Event(title="x")
        (pending,) = pending_entries([event], feed.modified_us + 1, lambda: entry_id)
        return pending.entry(6, feed.modified_us + 1), pending

    for new, pages in (
        (entry("urn:example:new"), [page]),  # page 1 again
        (entry("urn:example:0"), []),  # an id the feed holds
    ):
        with pytest.raises(StoreError), core.store.append(FEED, []) as append:
            modified = append.feed.modified_us + 1
            append.write([new], modified_us=modified, pages=pages, base_url=None)
        after = core.feed(FEED)
        assert after.head_seq == 5
        assert len(core.store.entries_between(feed.id, 1, 10)) == 5


@POSTGRES_ONLY
def test_a_pooled_connection_dropped_while_idle_is_replaced(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ping on every checkout (a round trip per transaction), but one after an idle spell:
    a connection the server dropped meanwhile is replaced, the caller sees nothing."""
    from simplefeed.store import postgres as dbmodule

    database_url = database
    database = dbmodule.PostgresStore(database_url)
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        with database.read_one() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        monkeypatch.setattr(dbmodule, "PING_AFTER_IDLE_S", 0.0)
        with database.read_one() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid
        with database.write() as conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        admin.dispose()
        database.close()


def test_rebuild_removes_stale_temporary_files_only(core: Simplefeed) -> None:
    """A crash in the middle of writing a page file leaves its temporary file behind;
    ``archive rebuild`` removes it once it is clearly not a write in progress."""
    core.publish(FEED, [Event(title=f"e{i}") for i in range(12)])  # pages 1 and 2 frozen
    pages_dir = core.page_path(FEED, 1).parent
    stale = pages_dir / ".3.abcd1234.tmp"
    fresh = pages_dir / ".3.efgh5678.tmp"
    stale.write_bytes(b"<feed>half a page")
    fresh.write_bytes(b"<feed>being written")
    old = time.time() - archive.STALE_TEMP_S - 60
    os.utime(stale, (old, old))
    report = core.rebuild_archive()
    assert report.checked == 2
    assert report.restored == []
    assert report.removed == [stale]
    assert not stale.exists()
    assert fresh.exists()


def test_a_sqlite_writer_waits_for_the_write_lock_then_gets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writers wait for SQLite's write lock with short sleeps of their own: one gets in as soon
    as the holder commits, and one that waits past the busy timeout fails (nothing written)."""
    import sqlite3

    from simplefeed.errors import StoreUnavailable
    from simplefeed.store import sqlite as dbmodule

    path = tmp_path / "w.sqlite3"
    sqlite3.connect(path).close()  # a store never makes its file (migrations do)
    database = dbmodule.SQLiteStore(f"sqlite:///{path}")
    try:
        with database.write() as conn:
            conn.execute(text("CREATE TABLE t (x INTEGER)"))
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        committing = threading.Event()

        def commit() -> None:
            committing.set()
            holder.execute("COMMIT")

        released = threading.Timer(0.3, commit)
        released.start()
        with database.write() as conn:
            conn.execute(text("INSERT INTO t VALUES (1)"))
        assert committing.is_set()  # it got in once the holder let go, not before
        released.join()
        holder.execute("BEGIN IMMEDIATE")
        monkeypatch.setattr(dbmodule, "SQLITE_BUSY_TIMEOUT_S", 0.2)
        with pytest.raises(StoreUnavailable, match="locked"), database.write() as conn:
            conn.execute(text("INSERT INTO t VALUES (2)"))
        holder.execute("ROLLBACK")
        holder.close()
        with database.read() as conn:
            assert conn.execute(text("SELECT x FROM t")).scalars().all() == [1]
            # The connection is back to SQLite's own busy timeout for everything else.
            timeout = conn.execute(text("PRAGMA busy_timeout")).scalar_one()
            assert timeout == int(dbmodule.SQLITE_BUSY_TIMEOUT_S * 1000)
    finally:
        database.close()


def test_server_made_ids_are_version_7_uuids_in_time_order() -> None:
    import uuid as uuidlib

    from simplefeed.service import random_uuid

    first = [random_uuid() for _ in range(1000)]
    time.sleep(0.002)
    later = random_uuid()
    assert len(set(first)) == len(first)
    for value in [*first, later]:
        parsed = uuidlib.UUID(value)
        assert str(parsed) == value
        assert parsed.version == 7
        assert parsed.variant == uuidlib.RFC_4122
    assert all(later > value for value in first)  # a later millisecond sorts after

"""The consumer holds against servers that misbehave on purpose.

The real app runs behind WSGI middleware that fails, rewrites or breaks its answers. A small
hand-made feed has a link loop.

Each fault stops the consumer with its own error. The checkpoint stays on the last entry that
was really processed. 5xx answers are retried with backoff and jitter, then given up.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from simplefeed import codings
from simplefeed.app import create_app
from simplefeed.client import (
    Checkpoint,
    FeedEntry,
    LastEntryVanished,
    LinkLoop,
    MalformedPage,
    NotAtom,
    RetriesExhausted,
    RetryPolicy,
    SequenceGap,
    StateFile,
    UnexpectedStatus,
)
from simplefeed.service import Simplefeed
from tests.conftest import FakeClock
from tests.test_client import (
    BASE,
    CountingApp,
    Sleeper,
    WSGIApp,
    consume,
    make_consumer,
    publish,
    stored_checkpoint,
)


@pytest.fixture
def database_url(tmp_path: Path, sqlite_template: Path) -> str:
    """Return a SQLite database only, because these tests are about the consumer and the wire.

    tests/test_client.py runs the consumer on both databases.
    """
    path = tmp_path / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


StartResponse = Callable[..., Any]


class Failing:
    """Answers ``status`` to the first ``times`` requests, then lets the real app answer.

    With ``path``, it counts only the requests that match it.
    """

    def __init__(
        self,
        app: WSGIApp,
        times: int,
        status: str = "500 Internal Server Error",
        path: str | None = None,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        self.app = app
        self.left = times
        self.status = status
        self.path = path
        self.headers = headers or []

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if self.left > 0 and self.path in (None, environ["PATH_INFO"]):
            self.left -= 1
            body = b'{"title": "oops"}'
            start_response(
                self.status,
                [
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(body))),
                    *self.headers,
                ],
            )
            return [body]
        return self.app(environ, start_response)


class Rewriting:
    """Passes requests to the real app, and rewrites the bodies of 200 answers with ``edit``."""

    def __init__(
        self, app: WSGIApp, edit: Callable[[str, bytes], bytes], *, digests: bool = False
    ) -> None:
        self.app = app
        self.edit = edit
        self.digests = digests

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured["status"], captured["headers"] = status, headers
            return lambda data: None

        chunks = self.app(environ, capture)
        try:
            body = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        status: str = captured["status"]
        headers = [(k, v) for k, v in captured["headers"] if k.lower() != "content-length"]
        if status.startswith("200"):
            # The edits are of the text. It is decoded, edited, and encoded again as the app
            # sent it.
            coding = dict((k.lower(), v) for k, v in headers).get("content-encoding")
            text = codings.decode(body, coding) if coding else body
            # A server that edits pages gives no digests for them, because these tests are
            # about the edits. The walk checks the digests, sf:sha256
            # (tests/test_client_integrity.py). With ``digests``, the edited pages keep the
            # digests of the pages as they were.
            text = self.edit(environ["PATH_INFO"], text)
            if not self.digests:
                text = _DIGEST.sub(b"", text)
            body = codings.encode(text, coding) if coding else text
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [body]


_DIGEST = re.compile(rb' sf:sha256="[0-9a-f]*"')


def without_seq(seq: int) -> Callable[[str, bytes], bytes]:
    """Return an edit that drops the entry with sequence number ``seq`` from every document."""
    pattern = re.compile(rb"<entry>(?:(?!<entry>).)*?<sf:seq>%d</sf:seq></entry>" % seq, re.S)
    return lambda path, body: pattern.sub(b"", body)


@pytest.fixture
def server(core: Simplefeed) -> CountingApp:
    return CountingApp(create_app(core.settings, core=core))


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    return tmp_path / "consumer.sqlite3"


# -- retries -------------------------------------------------------------------------------


def test_500s_then_recovery(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    ids = publish(core, 12)
    sleeper = Sleeper(clock)
    failing = CountingApp(Failing(server, times=3))
    got = consume(failing, state_path, clock, sleep=sleeper)
    assert [e.id for e in got] == ids
    assert [h.status for h in failing.hits[:4]] == [500, 500, 500, 200]
    # Exponential backoff (0.5 s, 1 s, 2 s) plus up to 0.5 s of jitter each.
    assert len(sleeper.waits) == 3
    for wait, base in zip(sleeper.waits, [0.5, 1.0, 2.0], strict=True):
        assert base <= wait <= base + 0.5


def test_gives_up_with_a_clear_error_after_the_limit(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 3)
    consume(server, state_path, clock)
    before = stored_checkpoint(state_path)
    publish(core, 3)
    clock.advance(11)
    down = CountingApp(Failing(server, times=1000, status="503 Service Unavailable"))
    with pytest.raises(RetriesExhausted) as info:
        consume(down, state_path, clock, retry=RetryPolicy(attempts=3))
    assert info.value.attempts == 3
    assert info.value.url == f"{BASE}/recent"
    assert "gave up after 3 attempts" in str(info.value) and "HTTP 503" in str(info.value)
    assert len(down.hits) == 3
    assert stored_checkpoint(state_path) == before


def test_429_waits_as_long_as_retry_after_says(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 2)
    sleeper = Sleeper(clock)
    busy = Failing(server, times=1, status="429 Too Many Requests", headers=[("Retry-After", "7")])
    assert len(consume(busy, state_path, clock, sleep=sleeper)) == 2
    assert sleeper.waits == [7.0]


def test_a_404_is_not_retried(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    gone = CountingApp(Failing(server, times=1000, status="404 Not Found"))
    with pytest.raises(UnexpectedStatus) as info:
        consume(gone, state_path, clock)
    assert info.value.status == 404 and len(gone.hits) == 1


# -- pages that are not what they should be ------------------------------------------------


def test_a_page_that_is_not_xml_stops_the_walk_and_is_not_cached(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 17)

    def break_page_2(path: str, body: bytes) -> bytes:
        return b"<html><body>502 Bad Gateway" if path == "/pages/2" else body

    with pytest.raises(NotAtom) as info:
        consume(Rewriting(server, break_page_2), state_path, clock)
    assert info.value.url == f"{BASE}/pages/2"
    assert stored_checkpoint(state_path) is None  # Nothing processed, nothing stored.
    server.reset()
    clock.advance(11)
    assert [e.seq for e in consume(server, state_path, clock)] == list(range(1, 18))
    assert server.paths() == ["/recent", "/pages/2", "/pages/1"]  # 3 and 4 were cached.


@pytest.mark.parametrize("parser", ["feedparser", "lxml"])
def test_an_archived_page_that_fails_its_full_parse_is_not_kept_in_the_cache(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path, parser: str
) -> None:
    """An archived page that fails its full parse is not kept in the cache.

    Walking back reads outlines, with no entry checked, and pins archived pages. The full
    parse on the way forward finds the entry without an id. So the page is dropped from the
    cache, and the next run asks the server again.
    """
    publish(core, 12)

    def drop_an_id(path: str, body: bytes) -> bytes:
        return (
            re.sub(rb"<entry><id>[^<]*</id>", b"<entry>", body, count=1)
            if path == "/pages/1"
            else body
        )

    with pytest.raises(MalformedPage, match="has no id"):
        consume(Rewriting(server, drop_an_id), state_path, clock, parser=parser)
    assert stored_checkpoint(state_path) is None
    with StateFile(state_path) as state:
        assert state.get_document(f"{BASE}/pages/1") is None
        assert state.get_document(f"{BASE}/pages/2") is not None  # Fine, and pinned.
    server.reset()
    clock.advance(11)
    assert [e.seq for e in consume(server, state_path, clock, parser=parser)] == list(range(1, 13))
    assert server.paths() == ["/recent", "/pages/1"]


def test_truncated_xml_while_resuming_keeps_the_checkpoint(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 3)
    consume(server, state_path, clock)
    before = stored_checkpoint(state_path)
    publish(core, 9)
    clock.advance(11)

    def truncate(path: str, body: bytes) -> bytes:
        return body[: len(body) // 2] if path == "/pages/1" else body

    with pytest.raises(NotAtom):
        consume(Rewriting(server, truncate), state_path, clock)
    assert stored_checkpoint(state_path) == before
    assert [e.seq for e in consume(server, state_path, clock)] == list(range(4, 13))


def test_the_last_processed_entry_removed(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    ids = publish(core, 7)  # 6 and 7 on the working page 2.
    consume(server, state_path, clock)
    assert stored_checkpoint(state_path) == Checkpoint(ids[6], 7, f"{BASE}/pages/2")
    publish(core, 10)
    clock.advance(11)
    with pytest.raises(LastEntryVanished) as info:
        consume(Rewriting(server, without_seq(7)), state_path, clock)
    assert info.value.entry_id == ids[6]
    assert stored_checkpoint(state_path) == Checkpoint(ids[6], 7, f"{BASE}/pages/2")


def test_a_sequence_gap_stops_before_the_entry_after_it(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    ids = publish(core, 14)
    handled: list[int] = []
    broken = Rewriting(server, without_seq(9))
    with (
        pytest.raises(SequenceGap) as info,
        make_consumer(broken, state_path, clock) as consumer,
    ):
        consumer.run(lambda e: handled.append(e.seq))
    assert (info.value.expected, info.value.found) == (9, 10)
    assert handled == list(range(1, 9))
    assert stored_checkpoint(state_path) == Checkpoint(ids[7], 8, f"{BASE}/pages/2")


# -- a hand-made feed whose links go round in circles --------------------------------------


def atom(url: str, links: dict[str, str], seqs: list[int], *, archive: bool = False) -> bytes:
    entries = "".join(
        f"<entry><id>urn:loop:{s}</id><title>e{s}</title>"
        f"<updated>2027-01-01T00:00:{s:02d}Z</updated><sf:seq>{s}</sf:seq></entry>"
        for s in reversed(seqs)
    )
    link_xml = "".join(f'<link rel="{rel}" href="{href}"/>' for rel, href in links.items())
    return (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<feed xmlns="http://www.w3.org/2005/Atom" xmlns:sf="https://simplefeed.dev/ns/1.0" '
        'xmlns:fh="http://purl.org/syndication/history/1.0">'
        f"<id>urn:loop</id><title>loop</title><updated>2027-01-01T00:00:00Z</updated>"
        f"{link_xml}{'<fh:archive/>' if archive else ''}{entries}</feed>"
    ).encode()


class Documents:
    """A WSGI app that serves fixed documents by path."""

    def __init__(self, docs: dict[str, bytes]) -> None:
        self.docs = docs

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        body = self.docs.get(environ["PATH_INFO"])
        if body is None:
            start_response("404 Not Found", [("Content-Length", "0")])
            return [b""]
        start_response(
            "200 OK",
            [("Content-Type", "application/atom+xml"), ("Content-Length", str(len(body)))],
        )
        return [body]


def loop_feed(*, forward_loop: bool = False) -> Documents:
    u = {n: f"{BASE}/p/{n}" for n in (1, 2, 3)}
    recent = f"{BASE}/recent"
    p1_prev = {} if forward_loop else {"prev-archive": u[2]}  # A loop back from 1 to 2.
    p2_next = u[1] if forward_loop else u[3]  # A loop forward from 2 to 1.
    return Documents(
        {
            "/recent": atom(recent, {"self": recent, "via": u[3], "prev-archive": u[2]}, [7]),
            "/p/3": atom(u[3], {"self": u[3], "prev-archive": u[2]}, [7]),
            "/p/2": atom(
                u[2],
                {"self": u[2], "prev-archive": u[1], "next-archive": p2_next},
                [4, 5, 6],
                archive=True,
            ),
            "/p/1": atom(
                u[1], {"self": u[1], "next-archive": u[2], **p1_prev}, [1, 2, 3], archive=True
            ),
        }
    )


def test_a_prev_archive_loop(clock: FakeClock, tmp_path: Path) -> None:
    state = tmp_path / "state.sqlite3"
    handled: list[FeedEntry] = []
    with pytest.raises(LinkLoop) as info, make_consumer(loop_feed(), state, clock) as consumer:
        consumer.run(handled.append)
    assert handled == []
    assert info.value.url == f"{BASE}/p/2"
    assert info.value.chain == (f"{BASE}/recent", f"{BASE}/p/2", f"{BASE}/p/1")
    assert stored_checkpoint(state) is None


def test_a_next_archive_loop_while_resuming(clock: FakeClock, tmp_path: Path) -> None:
    state = tmp_path / "state.sqlite3"
    with StateFile(state) as file:
        file.save_checkpoint(f"{BASE}/recent", Checkpoint("urn:loop:2", 2, f"{BASE}/p/1"), 0)
    handled: list[int] = []
    with (
        make_consumer(loop_feed(forward_loop=True), state, clock) as consumer,
        pytest.raises(LinkLoop),
    ):
        consumer.run(lambda e: handled.append(e.seq))
    # The next page is read before a page's entries are handed over, because its prev-archive
    # link vouches for the page. So the loop past p/2 stops the walk before p/2's entries.
    assert handled == [3]
    assert stored_checkpoint(state) == Checkpoint("urn:loop:3", 3, f"{BASE}/p/1")

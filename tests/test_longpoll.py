"""Long-poll (issue #15): ``Prefer: wait=N`` (RFC 7240) with a current ``If-None-Match`` holds a
request on /recent, the working page or a named feed's forms until the feed changes or N
seconds pass. In-process on both databases (the real store and its real watcher), then through
real uWSGI: several processes, two nodes on one PostgreSQL, and no database connection held by
the waiting requests. Bounded in time: waits of a few seconds at most.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from uuid import uuid4

import brotli
import falcon.testing
import httpx
import pytest
from sqlalchemy import create_engine, text

from bench.servers import UwsgiServer, scratch_postgres_database
from simplefeed import codings as codings_module
from simplefeed.app import access, create_app
from simplefeed.app import answers as answers_module
from simplefeed.app import waiting as waiting_module
from simplefeed.app.preconditions import preferred_wait
from simplefeed.model import Feed
from simplefeed.service import Simplefeed, changes
from simplefeed.service.changes import Bell, NodeBell
from simplefeed.settings import Settings
from simplefeed.store import sqlite as sqlite_store
from simplefeed.store.interface import Pause

PG_ENV = "SIMPLEFEED_TEST_POSTGRES_URL"


@pytest.mark.parametrize(
    "header,cap,expected",
    [
        ("wait=10", 30, 10),
        ("WAIT = 10", 30, 10),
        ('wait="7"', 30, 7),
        ("respond-async, wait=100", 30, 30),
        ("return=minimal; foo=bar, wait=5; x=y", 30, 5),
        ("wait=0", 30, None),
        ("wait=5", 0, None),
        ("wait=-1", 30, None),
        ("wait=soon", 30, None),
        ("wait", 30, None),
        ("respond-async", 30, None),
        ("wait=3, wait=9", 30, 3),
        # delta-seconds past what a recipient represents count as 2^31 (RFC 9111 1.2.2), so
        # as the cap; leading zeros are still the number they write.
        ("wait=99999999999999999999", 30, 30),
        pytest.param("wait=" + "9" * 5000, 30, 30, id="wait=9...9 (5,000 digits)"),
        ("wait=0000000000000000007", 30, 7),
        ("wait=00000000000000000000", 30, None),
    ],
)
def test_the_wait_preference(header: str, cap: int, expected: int | None) -> None:
    assert preferred_wait(header, cap) == expected


# -- in-process, on both databases ------------------------------------------------------------


class Slots:
    """Waiting slots without a bound, so that /metrics counts the long-polls waiting."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def acquire(self) -> bool:
        with self.lock:
            self.count += 1
        return True

    def release(self) -> None:
        with self.lock:
            self.count -= 1

    def waiting(self) -> int:
        return self.count


@pytest.fixture
def app(core: Simplefeed) -> falcon.testing.TestClient:
    core.create_feed("other")
    return falcon.testing.TestClient(create_app(core.settings, core=core, waits=Slots()))


@pytest.fixture
def access_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level("INFO", logger="simplefeed.access")
    return caplog


def last_access(caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    """The fields of the last access line written, but for /metrics."""
    lines = [
        rec.fields  # type: ignore[attr-defined]
        for rec in caplog.records
        if rec.name == "simplefeed.access" and rec.fields["path"] != "/metrics"  # type: ignore[attr-defined]
    ]
    fields: dict[str, Any] = lines[-1]
    return fields


def polls_waiting(app: falcon.testing.TestClient) -> int:
    """The long-polls waiting now, as the server's /metrics says."""
    text = app.simulate_get("/metrics").text
    found = re.search(r"^simplefeed_long_polls_waiting (\S+)$", text, re.MULTILINE)
    assert found is not None
    return int(float(found.group(1)))


def publish(core: Simplefeed, feed: str = "events", n: int = 1) -> None:
    from simplefeed.model import Event

    core.publish(feed, [Event(title=f"t{i}") for i in range(n)])


def later(seconds: float, job: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(seconds), job()))
    thread.start()
    return thread


class JumpingClock:
    """``time`` for the request clock (``perf_counter``), which jumps ``offset`` when told."""

    def __init__(self) -> None:
        self.offset = 0.0

    def perf_counter(self) -> float:
        return time.perf_counter() + self.offset


def until_waiting(app: falcon.testing.TestClient, polls: int) -> None:
    """Return once the server shows ``polls`` long-polls waiting (a minute at most)."""
    deadline = time.monotonic() + 60
    while polls_waiting(app) < polls:
        assert time.monotonic() < deadline, f"{polls_waiting(app)} long-polls wait"
        time.sleep(0.01)


def when_waiting(
    app: falcon.testing.TestClient, job: Callable[[], None], polls: int = 1
) -> threading.Thread:
    """A thread that runs ``job`` once the server shows ``polls`` long-polls waiting.

    After a minute it runs ``job`` anyway, so that the test fails rather than hangs.
    """

    def run() -> None:
        deadline = time.monotonic() + 60
        while polls_waiting(app) < polls and time.monotonic() < deadline:
            time.sleep(0.01)
        job()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize(
    "path", ["/recent", "/pages/1", "/feeds/other/recent", "/feeds/other/pages/1"]
)
def test_a_waiting_request_is_answered_when_the_feed_changes(
    app: falcon.testing.TestClient,
    core: Simplefeed,
    path: str,
    access_log: pytest.LogCaptureFixture,
) -> None:
    feed = "other" if path.startswith("/feeds/") else "events"
    publish(core, feed)
    etag = app.simulate_get(path).headers["etag"]
    job = when_waiting(app, lambda: publish(core, feed))
    r = app.simulate_get(path, headers={"If-None-Match": etag, "Prefer": "wait=20"})
    job.join()
    assert r.status_code == 200
    assert r.headers["etag"] != etag
    assert r.text.count("<entry>") == 2
    assert r.headers["preference-applied"] == "wait=20"
    assert "Prefer" in r.headers["vary"]
    assert r.headers["cache-control"] == "public, max-age=10"  # as without Prefer
    assert last_access(access_log)["wait"] == "woken"  # by the publish, not its 20 s ending


def test_a_copy_in_another_coding_is_current_too(
    app: falcon.testing.TestClient, core: Simplefeed, access_log: pytest.LogCaptureFixture
) -> None:
    """A client holding the current version gzip-encoded (a cache in between fetched it so)
    that long-polls asking for br waits as well: answering at once would only make it ask
    again. When the feed changes it is answered in the coding it asked for."""
    publish(core)
    etag = app.simulate_get("/recent", headers={"Accept-Encoding": "gzip"}).headers["etag"]
    assert etag.endswith('-gzip"')
    job = when_waiting(app, lambda: publish(core))
    r = app.simulate_get(
        "/recent", headers={"If-None-Match": etag, "Prefer": "wait=10", "Accept-Encoding": "br"}
    )
    job.join()
    assert r.status_code == 200
    assert r.headers["preference-applied"] == "wait=10"
    assert r.headers["content-encoding"] == "br"
    assert brotli.decompress(r.content).count(b"<entry>") == 2  # the published entry too
    assert last_access(access_log)["wait"] == "woken"  # held until the publish


class Calls:
    """Counts the calls of a function (the real one is still called), for this test only."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, obj: Any, name: str) -> None:
        self.count = 0
        real = getattr(obj, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(obj, name, counted)


@pytest.mark.parametrize("coding", ["identity", "gzip"])
def test_waiters_woken_by_a_publish_share_one_lookup_and_one_rendering(
    app: falcon.testing.TestClient, core: Simplefeed, coding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 requests of one process wait on /recent; one publish wakes them all. Each is answered
    with the new version, and the process looked the feed up once for them (not once each:
    500 waiters made 500 lookups, queueing for a few connections) and rendered and encoded the
    new document once (not once per waiter that found it missing)."""
    publish(core)
    headers = {"Accept-Encoding": coding}
    etag = app.simulate_get("/recent", headers=headers).headers["etag"]
    waiting = {**headers, "If-None-Match": etag, "Prefer": "wait=20"}
    with ThreadPoolExecutor(30) as pool:
        answers = [pool.submit(app.simulate_get, "/recent", headers=waiting) for _ in range(30)]
        until_waiting(app, 30)  # All wait: a late one would find the new version at once.
        lookups = Calls(monkeypatch, core.store, "feed_head")
        renders = Calls(monkeypatch, core.store, "entries_between")
        encodes = Calls(monkeypatch, codings_module, "encode")
        publish(core)
        # Woken by the publish, not by their 20 s running out: each waiter woken wakes the
        # next (Changes), and a break in that chain would leave the rest waiting.
        results = [a.result(timeout=5) for a in answers]
    assert {r.status_code for r in results} == {200}
    assert len({r.headers["etag"] for r in results}) == 1
    assert len({r.content for r in results}) == 1
    assert lookups.count <= 2, lookups.count  # once per commit the watcher saw
    assert renders.count == 1
    assert encodes.count == (0 if coding == "identity" else 1)


def test_without_a_change_a_waiting_request_is_a_304_after_its_wait(
    app: falcon.testing.TestClient, access_log: pytest.LogCaptureFixture
) -> None:
    etag = app.simulate_get("/recent").headers["etag"]
    seen_waiting = threading.Event()
    answered = threading.Event()

    def watch() -> None:
        while not answered.is_set():
            if polls_waiting(app) >= 1:
                seen_waiting.set()
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    r = app.simulate_get("/recent", headers={"If-None-Match": etag, "Prefer": "wait=2"})
    answered.set()
    watcher.join()
    assert r.status_code == 304
    assert r.headers["preference-applied"] == "wait=2"
    assert r.headers["etag"] == etag
    assert seen_waiting.is_set()  # the server held it, not answered it at once
    assert last_access(access_log)["wait"] == "timeout"


def test_a_change_to_another_feed_does_not_end_the_wait(
    app: falcon.testing.TestClient, core: Simplefeed
) -> None:
    etag = app.simulate_get("/recent").headers["etag"]
    job = later(0.3, lambda: publish(core, "other"))
    r = app.simulate_get("/recent", headers={"If-None-Match": etag, "Prefer": "wait=2"})
    job.join()
    assert r.status_code == 304


def test_a_stale_copy_is_answered_at_once_and_no_prefer_changes_nothing(
    app: falcon.testing.TestClient, core: Simplefeed, access_log: pytest.LogCaptureFixture
) -> None:
    """A long-poll whose copy is already old is answered at once, saying the preference was
    applied: a consumer takes an answer without ``Preference-Applied`` for a server that does
    not hold long-polls, and polls at max-age (10 s) from then on; one publish between its
    answer and its next long-poll did that."""
    old = app.simulate_get("/recent").headers["etag"]
    publish(core)
    r = app.simulate_get("/recent", headers={"If-None-Match": old, "Prefer": "wait=20"})
    assert r.status_code == 200
    assert "wait" not in last_access(access_log)  # answered without waiting
    assert r.headers["preference-applied"] == "wait=20"
    assert "Prefer" in r.headers["vary"]
    plain = app.simulate_get("/recent", headers={"If-None-Match": r.headers["etag"]})
    assert plain.status_code == 304
    assert "preference-applied" not in plain.headers
    assert "Prefer" not in plain.headers.get("vary", "")


def test_the_wait_is_capped_by_configuration(core: Simplefeed) -> None:
    from dataclasses import replace

    core.settings = replace(core.settings, max_wait=1)  # SIMPLEFEED_MAX_WAIT=1
    app = falcon.testing.TestClient(create_app(core.settings, core=core))
    etag = app.simulate_get("/recent").headers["etag"]
    r = app.simulate_get("/recent", headers={"If-None-Match": etag, "Prefer": "wait=3600"})
    assert r.status_code == 304
    assert r.headers["preference-applied"] == "wait=1"


def test_an_archived_page_is_never_held(
    app: falcon.testing.TestClient, core: Simplefeed, access_log: pytest.LogCaptureFixture
) -> None:
    publish(core, n=7)  # page size 5: page 1 frozen
    etag = app.simulate_get("/pages/1").headers["etag"]
    r = app.simulate_get("/pages/1", headers={"If-None-Match": etag, "Prefer": "wait=20"})
    assert r.status_code == 304
    assert "wait" not in last_access(access_log)
    assert "preference-applied" not in r.headers


def test_a_working_page_that_freezes_while_waited_on_is_answered(
    app: falcon.testing.TestClient, core: Simplefeed
) -> None:
    publish(core, n=4)
    etag = app.simulate_get("/pages/1").headers["etag"]
    job = later(0.5, lambda: publish(core, n=1))  # the fifth entry freezes page 1
    r = app.simulate_get("/pages/1", headers={"If-None-Match": etag, "Prefer": "wait=20"})
    job.join()
    assert r.status_code == 200
    assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert r.text.count("<entry>") == 5


# -- the waiting room: long-polls held before the app ------------------------------------------


def teach_the_room(app: falcon.testing.TestClient, path: str = "/recent") -> str:
    """A long-poll the app holds itself (1 s, no change): from then on the room knows that
    ``path``'s current ETags are current. Returns the identity ETag."""
    etag: str = app.simulate_get(path).headers["etag"]
    r = app.simulate_get(path, headers={"If-None-Match": etag, "Prefer": "wait=1"})
    assert r.status_code == 304
    return etag


def test_long_polls_held_in_the_room_are_answered_as_the_app_answers_them(
    app: falcon.testing.TestClient,
    core: Simplefeed,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Eight clients long-poll a document the app has already held a request for: they wait
    in front of the app, and a publish answers them with what the app answers (the same
    status, body and headers but ``Date`` and their own ``X-Request-Id``), asked of the app
    once for all of them; each request has its own access line, whose duration counts the
    wait. The request clock jumps an hour while they wait, so a duration that counts the
    wait is over an hour."""
    publish(core)
    etag = teach_the_room(app)
    into_app: list[str] = []  # The /recent requests that reached the app.
    behind = app.app.app

    def counted(env: dict[str, Any], start_response: Any) -> Any:
        if env["PATH_INFO"] == "/recent":
            into_app.append(env["PATH_INFO"])
        return behind(env, start_response)

    monkeypatch.setattr(app.app, "app", counted)
    clock = JumpingClock()
    for module in (access, answers_module, waiting_module):
        monkeypatch.setattr(module, "time", clock)
    waiting = {"If-None-Match": etag, "Prefer": "wait=20", "Accept-Encoding": "gzip"}
    caplog.set_level("INFO", logger="simplefeed.access")
    with ThreadPoolExecutor(8) as pool:
        answers = [pool.submit(app.simulate_get, "/recent", headers=waiting) for _ in range(8)]
        until_waiting(app, 8)
        assert into_app == []  # all of them waiting in the room
        clock.offset = 3600.0
        publish(core)
        results = [a.result(timeout=60) for a in answers]
    assert len(into_app) == 1
    first = results[0]
    assert first.status_code == 200 and first.headers["preference-applied"] == "wait=20"
    assert first.headers["content-encoding"] == "gzip" and "Prefer" in first.headers["vary"]
    for r in results:
        assert r.status_code == 200 and r.content == first.content
        assert {k: v for k, v in r.headers.items() if k not in ("date", "x-request-id")} == {
            k: v for k, v in first.headers.items() if k not in ("date", "x-request-id")
        }
    assert len({r.headers["x-request-id"] for r in results}) == 8
    lines = [
        rec
        for rec in caplog.records
        if rec.name == "simplefeed.access" and rec.fields["path"] == "/recent"  # type: ignore[attr-defined]
    ]
    assert len(lines) == 8
    for rec in lines:
        fields = rec.fields  # type: ignore[attr-defined]
        assert fields["status"] == 200 and fields["path"] == "/recent"
        assert fields["feed"] == "events" and fields["bytes"] == len(first.content)
        assert fields["wait"] == "woken", fields
        assert fields["duration_ms"] >= 3_600_000, fields  # counted from the room


@pytest.mark.parametrize(
    "header", [{"If-Match": '"another"'}, {"If-Unmodified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"}]
)
def test_the_room_holds_only_what_the_app_would_hold(
    app: falcon.testing.TestClient,
    core: Simplefeed,
    header: dict[str, str],
    access_log: pytest.LogCaptureFixture,
) -> None:
    """A current If-None-Match beside a precondition that fails is a 412 at once, whether or
    not the room has learnt the document; a copy made stale by a publish is answered at once,
    though the room learnt its ETag."""
    publish(core)
    etag = teach_the_room(app)
    r = app.simulate_get("/recent", headers={"If-None-Match": etag, "Prefer": "wait=30", **header})
    assert r.status_code == 412
    assert "wait" not in last_access(access_log)  # neither the room nor the app held it
    publish(core)
    r = app.simulate_get("/recent", headers={"If-None-Match": etag, "Prefer": "wait=30"})
    assert r.status_code == 200
    # Within the watcher's interval the stale copy may wait until it sees the commit. It
    # never waits out its 30 s.
    assert last_access(access_log).get("wait") != "timeout"


def test_the_room_keeps_a_bounded_number_of_answers(
    app: falcon.testing.TestClient, core: Simplefeed
) -> None:
    """Clients choose how they ask (``Prefer``, ``Accept-Encoding``): the room keeps at most
    MAX_VARIANTS answers per document and version, and drops a version's answers with it."""
    from simplefeed.app.answers import MAX_VARIANTS

    publish(core)
    etag = teach_the_room(app)
    room = app.app
    asks = [{"If-None-Match": etag, "Prefer": f"wait=1, x={i}"} for i in range(MAX_VARIANTS + 8)]
    with ThreadPoolExecutor(len(asks)) as pool:
        answers = list(pool.map(lambda h: app.simulate_get("/recent", headers=h), asks))
    assert {r.status_code for r in answers} == {304}
    assert room.answers.ways("/recent") == MAX_VARIANTS
    publish(core)
    r = app.simulate_get("/recent", headers={"If-None-Match": etag, "Prefer": "wait=1"})
    assert r.status_code == 200
    etag = r.headers["etag"]
    r = app.simulate_get("/recent", headers={"If-None-Match": etag, "Prefer": "wait=1"})
    assert r.status_code == 304  # the app held it, and taught the room the new version
    r = app.simulate_get("/recent", headers={"If-None-Match": etag, "Prefer": "wait=1"})
    assert r.status_code == 304  # held in the room: its answer kept, the old ones gone
    feed = room.answers.feed("/recent")
    assert feed is not None and feed.head_seq == core.feed_head("events").head_seq
    assert room.answers.ways("/recent") <= 2  # (the stale 200 too)


# -- the bell: a publish wakes the node's watchers at once ---------------------------------------


def fresh_node() -> str:
    """A node name no other test (or test process) uses: bells' names are machine-wide."""
    return f"test-{os.getpid()}-{uuid4().hex[:8]}"


def test_a_node_bell_rings_for_every_member_and_a_ring_waits_to_be_heard() -> None:
    node = fresh_node()
    one, two = NodeBell(node, 1, 3), NodeBell(node, 2, 3)  # member 3 is not listening
    try:
        assert not two.wait(0.05)
        one.ring()
        assert two.wait(5) and one.wait(5)  # its own member too
        assert not two.wait(0.05)  # heard once
        one.ring()
        one.ring()
        assert two.wait(5)  # rung before anyone waited
        assert not two.wait(0.05)  # both rings heard at once
        with pytest.raises(OSError):
            NodeBell(node, 2, 3)  # the name is taken: the worker falls back to its own bell
        two.close()
        one.ring()  # a member gone: nothing raised
    finally:
        one.close()
        two.close()


class StoppedClock:
    """``time`` for the bell: its clock moves only when it sleeps. Sleeps are recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_a_flood_of_rings_is_heard_at_a_bounded_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any local process can send to the bell's name: ring it as fast as possible, and the
    watcher hears it at most once per RING_GAP_S, not once per ring. The bell's clock stands
    still but for its own sleeps, so each hearing after the first must sleep out the gap."""
    node = fresh_node()
    bell, flooder = NodeBell(node, 1, 1), NodeBell(node, 2, 1)  # 2 rings member 1 only
    clock = StoppedClock()
    monkeypatch.setattr(changes, "time", clock)
    rings = 0
    stop = threading.Event()

    def flood() -> None:
        nonlocal rings
        while not stop.is_set():
            flooder.ring()
            rings += 1

    thread = threading.Thread(target=flood)
    heard = 0
    try:
        thread.start()
        for _ in range(50):
            heard += bell.wait(10)
    finally:
        stop.set()
        thread.join()
        bell.close()
        flooder.close()
    assert rings > heard >= 2
    # Each hearing after the first slept out the gap since the one before.
    assert len(clock.sleeps) >= heard - 1
    assert clock.sleeps == pytest.approx([changes.RING_GAP_S] * len(clock.sleeps))


def test_the_node_bell_is_kept_only_where_the_watcher_polls(settings: Settings) -> None:
    """SQLite's watcher looks every few ms: a ring makes it look now. PostgreSQL's is told of
    every commit (NOTIFY): the bell is closed, not left filling a socket nobody reads."""
    node = fresh_node()
    core = Simplefeed(settings, bell=NodeBell(node, 1, 1))
    try:
        assert core.store.watch_polls == (core.store.backend == "sqlite")
        if core.store.watch_polls:
            with pytest.raises(OSError):
                NodeBell(node, 1, 1)  # still bound: the core hears it
        else:
            NodeBell(node, 1, 1).close()  # closed: its name is free again
    finally:
        core.close()


def waiting_for_a_change(core: Simplefeed) -> tuple[threading.Thread, Feed, list[Feed]]:
    """A thread waiting (20 s at most) for ``core``'s feed "events" to change, already waiting
    and its process's watcher started: the thread, the feed before, and the feed it saw when
    woken (in the list, once it is)."""
    before = core.changes.seen("events")
    woken: list[Feed] = []

    def unchanged() -> bool:
        woken[:] = [core.changes.seen("events")]
        return woken[0] == before

    waiter = threading.Thread(target=lambda: core.changes.wait(unchanged, 20))
    waiter.start()
    time.sleep(0.5)
    return waiter, before, woken


def _sqlite_core(template: Path, path: Path, bell: Bell | None) -> Simplefeed:
    if not path.exists():
        shutil.copyfile(template, path)
    settings = Settings(
        database_url=f"sqlite:///{path}",
        archive_dir=path.parent / "archive",
        base_url="http://feeds.example.test",
        page_size=5,
        default_feed="events",
    )
    return Simplefeed(settings, bell=bell)


@pytest.mark.parametrize("bells", ["node", "process"])
def test_a_publish_wakes_the_waiters_of_the_other_processes_of_the_node_at_once(
    sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bells: str
) -> None:
    """Two cores on one SQLite file stand for two uWSGI workers. The watchers' own look for a
    commit is put off to a minute: a waiter of one is woken by the other's publish only through
    the node's bell; with each process's own bell (another WSGI server), not before its look."""
    monkeypatch.setattr(sqlite_store, "WATCH_EVERY_S", 60.0)
    node = fresh_node()
    path = tmp_path / "db.sqlite3"
    worker_bells = [NodeBell(node, 1, 2), NodeBell(node, 2, 2)] if bells == "node" else [None] * 2
    one, two = (_sqlite_core(sqlite_template, path, bell) for bell in worker_bells)
    try:
        one.create_feed("events")
        publish(one)
        waiter, before, woken = waiting_for_a_change(two)
        publish(one)
        waiter.join(timeout=5 if bells == "node" else 2)
        if bells == "node":
            assert not waiter.is_alive()
            assert woken[0].head_seq == before.head_seq + 1
        else:
            assert waiter.is_alive()  # its watcher looks again in a minute
            two.changes.committed()  # (as its own publish would) the look that ends it
            waiter.join(timeout=5)
            assert not waiter.is_alive()
    finally:
        one.close()
        two.close()


@pytest.mark.parametrize("bell", ["node", "process"])
def test_where_the_node_announces_its_commits_the_watcher_looks_less_often(bell: str) -> None:
    """A watcher that polls looks every 10 ms (the store's interval, here a loop standing for
    SQLite's) when only its own process rings; when every commit of the node rings its bell,
    its own looks are for commits made elsewhere, UNANNOUNCED_LOOK_S apart (each look woken by
    a timer costs CPU whether anything changed or not). A ring still makes it look at once."""
    looks: list[float] = []

    def watch(changed: Callable[[], None], pause: Pause) -> None:
        while not pause.wait(0.01):
            looks.append(time.monotonic())

    node_bell = NodeBell(fresh_node(), 1, 1) if bell == "node" else None
    watcher = changes.Changes(watch, lambda name: pytest.fail("no lookup"), node_bell)
    try:
        watcher.version()  # starts the watcher
        time.sleep(1.0)
        counted = len(looks)
        watcher.committed()
        deadline = time.monotonic() + 5
        while len(looks) == counted and time.monotonic() < deadline:
            time.sleep(0.001)
        rung = time.monotonic()
    finally:
        watcher.stop()
    if bell == "node":
        assert counted <= 1.0 / changes.UNANNOUNCED_LOOK_S + 1, counted
    else:
        assert counted > 2 * (1.0 / changes.UNANNOUNCED_LOOK_S + 1), counted
    assert len(looks) > counted and rung - looks[counted] < 1.0  # the ring: a look at once


def test_a_commit_the_node_does_not_announce_is_still_seen(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """A ``simplefeed`` command (or another server on the file) publishes without ringing the
    node's bell: a waiter of the node learns of it from its watcher's own look."""
    path = tmp_path / "db.sqlite3"
    worker = _sqlite_core(sqlite_template, path, NodeBell(fresh_node(), 1, 1))
    command = _sqlite_core(sqlite_template, path, None)
    try:
        worker.create_feed("events")
        waiter, before, woken = waiting_for_a_change(worker)
        publish(command)
        waiter.join(timeout=10)
        assert not waiter.is_alive()
        assert woken[0].head_seq == before.head_seq + 1
    finally:
        worker.close()
        command.close()


# -- through uWSGI ----------------------------------------------------------------------------


def wait_for_entries(url: str, etag: str, count: int, seconds: int = 20) -> list[httpx.Response]:
    """``count`` clients waiting at once on ``url``, each on its own connection."""
    headers = {"If-None-Match": etag, "Prefer": f"wait={seconds}"}
    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(httpx.get, url, headers=headers, timeout=60) for _ in range(count)]
        return [f.result() for f in futures]


def run_waiters(
    url: str, etag: str, count: int, publish: Callable[[], None], after: float = 1.5
) -> tuple[list[httpx.Response], float]:
    """Start ``count`` waiters, publish after ``after`` seconds; their answers and the
    latest of them, in seconds after the publish was acknowledged."""
    acknowledged: list[float] = []

    def producer() -> None:
        time.sleep(after)
        publish()
        acknowledged.append(time.monotonic())

    thread = threading.Thread(target=producer)
    thread.start()
    replies = wait_for_entries(url, etag, count)
    done = time.monotonic()
    thread.join()
    return replies, done - acknowledged[0]


def wait_ends(log: str) -> list[str | None]:
    """How the wait ended, for each access line of ``log`` for GET /recent (None: no wait)."""
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [
        line.get("wait")
        for line in lines
        if line.get("logger") == "simplefeed.access" and line.get("path") == "/recent"
    ]


def post(server: UwsgiServer, title: str) -> None:
    r = httpx.post(
        server.url("/entries"),
        json={"title": title},
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=30,
    )
    assert r.status_code == 201, r.text


@pytest.mark.e2e
def test_waiters_in_every_uwsgi_process_are_woken_by_a_publish(tmp_path: Path) -> None:
    """40 waiting clients spread over 4 uWSGI processes (SQLite): a publish to any process
    wakes them all with the new entry."""
    with UwsgiServer.scratch(tmp_path, processes=4) as srv:
        post(srv, "first")
        etag = httpx.get(srv.url("/recent")).headers["etag"]
        replies, _ = run_waiters(
            srv.url("/recent"), etag, 40, lambda: post(srv, "second"), after=3.0
        )
        assert [r.status_code for r in replies] == [200] * 40
        assert all("<title>second</title>" in r.text for r in replies)
        # (On a busy machine a client may ask only after the publish: answered at once.)
        waited = [r for r in replies if "preference-applied" in r.headers]
        assert waited and all(r.headers["preference-applied"] == "wait=20" for r in waited)
        # Their access lines say the publish woke them, in the room or in the app, and none
        # waited out its time. Workers write their INFO lines a moment later.
        deadline = time.monotonic() + 60
        while len(ends := wait_ends(srv.log())) < 41:  # The first GET, then the 40 waiters.
            assert time.monotonic() < deadline, ends
            time.sleep(0.1)
        assert "woken" in ends and "timeout" not in ends, ends
        assert srv.problems() == []
        # Every worker heard the node's bell (simplefeed.runtime.wsgi.node_bell), none fell back.
        assert "learn of this worker's publishes" not in srv.log()


def backend_connections(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            return int(
                c.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


@pytest.mark.e2e
@pytest.mark.postgres
def test_two_nodes_on_postgres_wake_each_others_waiters_holding_no_connection(
    tmp_path: Path,
) -> None:
    """Two uWSGI nodes (2 processes each) on one PostgreSQL: 60 clients wait on node B, a
    producer publishes to node A (LISTEN/NOTIFY); the waiting requests hold no database
    connection (far fewer connections than waiters while they wait)."""
    if not os.environ.get(PG_ENV):
        pytest.skip(f"set {PG_ENV}")
    with scratch_postgres_database("sf_longpoll") as url:
        a = UwsgiServer(url, tmp_path / "archive", tmp_path / "a", processes=2)
        b = UwsgiServer(url, tmp_path / "archive", tmp_path / "b", processes=2)
        with a, b:
            post(a, "first")
            etag = httpx.get(b.url("/recent")).headers["etag"]
            counted: list[int] = []

            def publish() -> None:
                counted.append(backend_connections(url))
                post(a, "second")

            replies, _ = run_waiters(b.url("/recent"), etag, 60, publish, after=3.0)
            assert [r.status_code for r in replies] == [200] * 60
            assert all("<title>second</title>" in r.text for r in replies)
            # 4 processes: each at most its listener, a few direct and pooled connections.
            assert counted[0] < 30, counted
            assert a.problems() == [] and b.problems() == []

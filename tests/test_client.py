"""The consumer against the real app, over real HTTP semantics through ``httpx.WSGITransport``.

The app is falcon on a real database. The tests cover order, resumption, at-least-once,
conditional GET, caching and polling.

:class:`CountingApp` counts requests at the server. It is a WSGI middleware in front of the
real app, which still answers every request. Consumer and server share one fake clock. The
consumer's sleeps move it, so nothing here sleeps for real.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from simplefeed import codings
from simplefeed.app import create_app
from simplefeed.client import (
    Checkpoint,
    Consumer,
    FeedEntry,
    HandlerError,
    PollPolicy,
    RetryPolicy,
    StateFile,
)
from simplefeed.client.walk import Progress
from simplefeed.model import Event
from simplefeed.service import Simplefeed
from tests.conftest import FakeClock

BASE = "http://feeds.example.test"
RECENT = f"{BASE}/recent"

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class Hit:
    method: str
    path: str
    status: int
    conditional: bool


class CountingApp:
    """WSGI middleware that records every request and its status, and lets ``app`` answer."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app
        self.hits: list[Hit] = []

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        conditional = "HTTP_IF_NONE_MATCH" in environ or "HTTP_IF_MODIFIED_SINCE" in environ

        def record(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            self.hits.append(
                Hit(environ["REQUEST_METHOD"], environ["PATH_INFO"], int(status[:3]), conditional)
            )
            return start_response(status, headers, exc_info)

        return self.app(environ, record)

    def paths(self) -> list[str]:
        return [h.path for h in self.hits]

    def count(self, path: str, status: int | None = None) -> int:
        return sum(1 for h in self.hits if h.path == path and status in (None, h.status))

    def reset(self) -> None:
        self.hits.clear()


class Sleeper:
    """The consumer's injected sleep, which records each wait and moves the shared fake clock."""

    def __init__(self, clock: FakeClock, between: Callable[[int], None] | None = None) -> None:
        self.clock = clock
        self.waits: list[float] = []
        self.between = between

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(seconds)
        if self.between is not None:
            self.between(len(self.waits))


def publish(core: Simplefeed, n: int, prefix: str = "event") -> list[str]:
    """Publish ``n`` events and return their entry ids."""
    start = core.feed("events").head_seq
    events = [Event(title=f"{prefix} {start + i + 1}") for i in range(n)]
    return [r.entry_id for r in core.publish("events", events)]


def seconds(clock: FakeClock) -> Callable[[], float]:
    return lambda: clock.now / 1_000_000


@pytest.fixture
def server(core: Simplefeed) -> CountingApp:
    return CountingApp(create_app(core.settings, core=core))


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    return tmp_path / "consumer.sqlite3"


def make_consumer(
    app: WSGIApp,
    state: Path | StateFile,
    clock: FakeClock,
    *,
    sleep: Callable[[float], None] | None = None,
    **options: Any,
) -> Consumer:
    return Consumer(
        RECENT,
        state,
        transport=httpx.WSGITransport(app=app),
        clock=seconds(clock),
        sleep=sleep if sleep is not None else Sleeper(clock),
        **options,
    )


def consume(app: WSGIApp, state: Path, clock: FakeClock, **options: Any) -> list[FeedEntry]:
    """Run a fresh consumer process once, and return everything new until it caught up."""
    got: list[FeedEntry] = []
    with make_consumer(app, state, clock, **options) as consumer:
        consumer.run(got.append)
    return got


def stored_checkpoint(state_path: Path) -> Checkpoint | None:
    """Return the checkpoint as another process would read it from the file."""
    with StateFile(state_path) as state:
        return state.load_checkpoint(RECENT)


def forget_checkpoint(state_path: Path) -> None:
    with StateFile(state_path) as state:
        state.clear_checkpoint(RECENT)


# -- order and resumption ------------------------------------------------------------------


def test_first_run_reads_everything_once_in_order(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    ids = publish(core, 23)  # Pages 1-4 archived. 3 entries on the working page 5.
    got = consume(server, state_path, clock)
    assert [e.seq for e in got] == list(range(1, 24))
    assert [e.id for e in got] == ids
    assert [e.title for e in got] == [f"event {i}" for i in range(1, 24)]
    assert got[0].page_url == f"{BASE}/pages/1" and got[-1].page_url == f"{BASE}/pages/5"
    assert stored_checkpoint(state_path) == Checkpoint(ids[-1], 23, f"{BASE}/pages/5")
    # The entry point, then back through prev-archive. The forward pass reads from the cache.
    assert server.paths() == ["/recent", "/pages/4", "/pages/3", "/pages/2", "/pages/1"]


def test_second_run_yields_exactly_the_new_entries(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    first_ids = publish(core, 7)
    assert [e.id for e in consume(server, state_path, clock)] == first_ids
    new_ids = publish(core, 19)  # Archives the checkpoint's page 2, and pages 3-5.
    clock.advance(11)  # Past the entry point's max-age.
    server.reset()
    got = consume(server, state_path, clock)
    assert [e.id for e in got] == new_ids
    assert [e.seq for e in got] == list(range(8, 27))
    # Back to the checkpoint's page, one request a page, then forward from the cache.
    assert server.paths() == ["/recent", "/pages/5", "/pages/4", "/pages/3", "/pages/2"]
    assert consume(server, state_path, clock) == []


def test_a_run_with_nothing_new_yields_nothing(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    assert consume(server, state_path, clock) == []  # An empty feed.
    assert stored_checkpoint(state_path) is None
    publish(core, 5)  # Page 1 is archived, so the recent document is empty again.
    clock.advance(11)
    assert [e.seq for e in consume(server, state_path, clock)] == [1, 2, 3, 4, 5]
    clock.advance(11)
    server.reset()
    assert consume(server, state_path, clock) == []
    assert server.paths() == ["/recent"]  # Page 1 from the cache. Head stands in for page 2.


def test_start_from_now(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    ids = publish(core, 12)
    assert consume(server, state_path, clock, start="now") == []
    assert stored_checkpoint(state_path) == Checkpoint(ids[-1], 12, f"{BASE}/pages/3")
    new = publish(core, 4)
    clock.advance(11)
    assert [e.id for e in consume(server, state_path, clock, start="now")] == new


def test_start_from_now_on_an_empty_feed_then_everything_after(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    assert consume(server, state_path, clock, start="now") == []
    ids = publish(core, 6)
    clock.advance(11)
    assert [e.id for e in consume(server, state_path, clock, start="now")] == ids


# -- at least once -------------------------------------------------------------------------


class Killed(BaseException):
    """Stands for the process being killed while the handler runs, so it is no Exception."""


@pytest.mark.parametrize("every", ["entry", "page"])
def test_killed_mid_walk_then_restarted_neither_misses_nor_repeats_beyond_the_window(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path, every: str
) -> None:
    ids = publish(core, 23)
    handled: list[int] = []

    def dies_on_12(entry: FeedEntry) -> None:
        handled.append(entry.seq)
        if entry.seq == 12:
            raise Killed

    with (
        pytest.raises(Killed),
        make_consumer(server, state_path, clock, checkpoint_every=every) as consumer,
    ):
        consumer.run(dies_on_12)
    checkpoint = stored_checkpoint(state_path)
    assert checkpoint is not None
    if every == "entry":
        assert checkpoint.seq == 11  # 12 was being handled, so it is the window.
    else:
        assert checkpoint.seq in (10, 11)  # Page 2 done. Page 3 (11-15) in progress.
    restarted = consume(server, state_path, clock, checkpoint_every=every)
    handled += [e.seq for e in restarted]
    assert sorted(set(handled)) == list(range(1, 24))  # Nothing missed.
    repeated = sorted(s for s in set(handled) if handled.count(s) > 1)
    assert repeated == list(range(checkpoint.seq + 1, 13))  # Only the at-least-once window.
    assert [e.id for e in restarted] == ids[checkpoint.seq :]


def test_handler_error_stops_at_that_entry_with_the_checkpoint_before_it(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    ids = publish(core, 9)
    seen: list[int] = []

    def fails_on_7(entry: FeedEntry) -> None:
        if entry.seq == 7:
            raise ValueError("cannot handle 7")
        seen.append(entry.seq)

    for every in ("entry", "page"):
        with make_consumer(server, state_path, clock, checkpoint_every=every) as consumer:
            with pytest.raises(HandlerError) as info:
                consumer.run(fails_on_7)
            assert info.value.entry.seq == 7
            assert isinstance(info.value.__cause__, ValueError)
        assert stored_checkpoint(state_path) == Checkpoint(ids[5], 6, f"{BASE}/pages/2")
    assert seen == [1, 2, 3, 4, 5, 6]  # The second run started again at 7.
    assert [e.seq for e in consume(server, state_path, clock)] == [7, 8, 9]


def test_checkpoint_every_page_stores_at_page_ends(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 12)
    stored_while_handling: list[int | None] = []

    def look(entry: FeedEntry) -> None:
        cp = stored_checkpoint(state_path)
        stored_while_handling.append(cp.seq if cp else None)

    with make_consumer(server, state_path, clock, checkpoint_every="page") as consumer:
        consumer.run(look)
    assert stored_while_handling == [None] * 5 + [5] * 5 + [10] * 2
    final = stored_checkpoint(state_path)
    assert final is not None and final.seq == 12


def test_entries_iterator_counts_an_entry_processed_when_the_next_is_asked_for(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 8)
    with make_consumer(server, state_path, clock) as consumer:
        it = consumer.entries()
        assert next(it).seq == 1
        assert consumer.checkpoint is None
        assert next(it).seq == 2
        assert consumer.checkpoint is not None and consumer.checkpoint.seq == 1
        for entry in it:
            if entry.seq == 5:
                break  # 5 was handed out but not acknowledged.
    stopped = stored_checkpoint(state_path)
    assert stopped is not None and stopped.seq == 4
    assert [e.seq for e in consume(server, state_path, clock)] == [5, 6, 7, 8]


# -- HTTP: conditional GET, max-age, the archive cache --------------------------------------


def test_unchanged_polls_get_304_and_max_age_is_respected(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 3)
    consume(server, state_path, clock)
    assert server.count("/recent", 200) == 1
    consume(server, state_path, clock)  # Within max-age (10 s), so not even asked.
    assert server.count("/recent") == 1
    clock.advance(11)
    consume(server, state_path, clock)
    assert server.hits[-1] == Hit("GET", "/recent", 304, conditional=True)
    publish(core, 1)
    clock.advance(11)
    assert [e.seq for e in consume(server, state_path, clock)] == [4]
    assert server.hits[-1] == Hit("GET", "/recent", 200, conditional=True)


def cached_pages(state_path: Path) -> list[str]:
    """Return the archived pages that the state file holds, by path.

    Archived pages are immutable documents.
    """
    with sqlite3.connect(state_path) as db:
        rows = db.execute("SELECT url FROM documents WHERE immutable ORDER BY url").fetchall()
    db.close()
    return [url.removeprefix(BASE) for (url,) in rows]


def test_archived_pages_are_fetched_once_and_kept_until_the_checkpoint_leaves_them(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 21)  # Pages 1-4 archived. 1 entry on the working page 5.
    assert len(consume(server, state_path, clock)) == 21
    # Walked back once, and read forward from the cache. Each archived page is fetched once.
    archived = [f"/pages/{n}" for n in range(1, 5)]
    assert all(server.count(p) == 1 for p in archived), server.paths()
    # The checkpoint is on page 5, the working page. No archived page is needed again.
    assert cached_pages(state_path) == []
    # A consumer that follows its feed for long keeps no more than it needs to resume. Each run
    # leaves at most the checkpoint's page, whatever the history grows to. Keeping every page
    # would cost about 4 KB each.
    for _ in range(6):
        publish(core, 7)
        clock.advance(11)
        assert len(consume(server, state_path, clock, checkpoint_every="page")) == 7
        assert len(cached_pages(state_path)) <= 1, cached_pages(state_path)
    # A run stopped by its handler keeps the pages between its checkpoint and the head. The
    # next run reads them from the cache.
    publish(core, 15)
    clock.advance(11)
    server.reset()
    checkpoint = stored_checkpoint(state_path)
    assert checkpoint is not None and checkpoint.seq == 63

    def fails_on_65(entry: FeedEntry) -> None:
        if entry.seq == 65:
            raise ValueError("not now")

    with make_consumer(server, state_path, clock) as consumer, pytest.raises(HandlerError):
        consumer.run(fails_on_65)
    assert cached_pages(state_path) == ["/pages/13", "/pages/14", "/pages/15"]
    clock.advance(11)
    assert [e.seq for e in consume(server, state_path, clock)] == list(range(65, 79))
    assert all(server.count(f"/pages/{n}") == 1 for n in (13, 14, 15)), server.paths()
    # Starting over reads the history from the server again, each page once.
    forget_checkpoint(state_path)
    clock.advance(11)
    server.reset()
    assert len(consume(server, state_path, clock)) == 78
    assert all(server.count(f"/pages/{n}") == 1 for n in range(1, 16)), server.paths()


@pytest.mark.parametrize(("parser", "ahead"), [("lxml", False), ("feedparser", True)])
def test_pages_the_cache_keeps_are_read_ahead_only_for_feedparser_s_checks(
    core: Simplefeed,
    server: CountingApp,
    clock: FakeClock,
    state_path: Path,
    parser: str,
    ahead: bool,
) -> None:
    """Pages the cache keeps are read ahead only for feedparser's checks.

    Going forward through the pages it walked back, the lxml consumer reads each from the cache
    when asked. A read-ahead thread would only share the interpreter with the thread handling
    entries, which costs 8 % of a catch-up. With feedparser, the consumer still reads ahead,
    because its checks may run in another process meanwhile.
    """
    publish(core, 23)  # Pages 1-4 archived.
    with make_consumer(server, state_path, clock, parser=parser) as consumer:
        assert len(list(consumer.entries())) == 23
        assert (consumer._pages._ahead is not None) is ahead
    assert server.paths() == ["/recent", "/pages/4", "/pages/3", "/pages/2", "/pages/1"]


def test_the_cache_keeps_bodies_as_they_came_and_a_damaged_one_is_fetched_again(
    core: Simplefeed,
    server: CountingApp,
    clock: FakeClock,
    state_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    publish(core, 21)  # Pages 1-4 archived. 1 entry on the working page 5.

    def fails_on_8(entry: FeedEntry) -> None:
        if entry.seq == 8:
            raise ValueError("not now")

    # Stopped on page 2, so pages 2-4 stay cached for the next run.
    with make_consumer(server, state_path, clock) as consumer, pytest.raises(HandlerError):
        consumer.run(fails_on_8)
    with sqlite3.connect(state_path) as db:
        rows = db.execute("SELECT url, body, coding FROM documents").fetchall()
    db.close()
    assert sorted(url.removeprefix(BASE) for url, _, _ in rows) == [
        "/pages/2",
        "/pages/3",
        "/pages/4",
        "/recent",
    ]
    assert {coding for _, _, coding in rows} == {"br"}  # What the consumer asks for first.
    identity = {
        url: httpx.Client(transport=httpx.WSGITransport(app=server))
        .get(url, headers={"Accept-Encoding": "identity"})
        .content
        for url, _, _ in rows
    }
    for url, body, coding in rows:
        assert codings.decode(body, coding) == identity[url]
        assert len(body) < 0.5 * len(identity[url])
    # One archived page's stored bytes are damaged, by a disk fault or an editor. It is fetched
    # again, with a warning. The walk goes on as if it had not been cached.
    with sqlite3.connect(state_path) as db:
        db.execute("UPDATE documents SET body = x'00' WHERE url = ?", (f"{BASE}/pages/3",))
    db.close()
    server.reset()
    clock.advance(11)
    with caplog.at_level(logging.WARNING, logger="simplefeed.client.fetch"):
        assert [e.seq for e in consume(server, state_path, clock)] == list(range(8, 22))
    assert server.count("/pages/3") == 1 and server.count("/pages/2") == 0, server.paths()
    assert f"{BASE}/pages/3: the cached copy is not usable" in caplog.text


def test_follow_polls_adaptively_and_never_faster_than_max_age(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 2)
    script = {3: 1, 4: 6, 5: 1}  # After the n-th sleep, publish this many.

    def between(n: int) -> None:
        if n in script:
            publish(core, script[n])

    sleeper = Sleeper(clock, between)
    got: list[int] = []
    with make_consumer(
        server,
        state_path,
        clock,
        sleep=sleeper,
        poll=PollPolicy(min_interval=1, max_interval=80, factor=2),
        wait=0,  # Plain polling, because the app honours Prefer: wait (tests/test_longpoll.py).
    ) as consumer:
        consumer.run(lambda e: got.append(e.seq), follow=True, stop=lambda: len(sleeper.waits) >= 9)
    assert got == list(range(1, 11))
    # Never below max-age (10 s). Doubling while quiet, halving when entries appear.
    assert sleeper.waits == [10, 20, 40, 20, 10, 10, 20, 40, 80]
    assert server.count("/recent", 304) >= 4
    assert all(h.conditional for h in server.hits[1:] if h.path == "/recent")


def test_progress_is_reported_while_catching_up_over_many_pages(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 17)
    reports: list[Progress] = []
    consume(server, state_path, clock, progress=reports.append)
    locate = [r for r in reports if r.phase == "locate"]
    process = [r for r in reports if r.phase == "process"]
    assert locate and all(r.total == 17 for r in locate)
    assert [r.done for r in process] == list(range(1, 18))
    assert all(r.total == 17 for r in process)


def test_one_connection_pool_and_retry_settings_are_used(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 6)
    with make_consumer(server, state_path, clock, retry=RetryPolicy(attempts=2)) as consumer:
        consumer.run(lambda e: None)
        assert consumer.fetcher.retry.attempts == 2
        assert consumer.fetcher.stats.requests == 2  # The /recent and /pages/1 requests.
    with sqlite3.connect(state_path) as db:
        rows = db.execute("SELECT url, immutable FROM documents ORDER BY url").fetchall()
    db.close()
    # Page 1 was dropped when the checkpoint moved on to the working page.
    assert rows == [(f"{BASE}/recent", 0)]

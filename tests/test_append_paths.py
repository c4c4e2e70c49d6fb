"""The two ways an append runs on PostgreSQL give the same feed.

Most appends on PostgreSQL take the one-round-trip path
(``store.postgres.append_in_one_round_trip``). There the database numbers the events and
computes their ``updated`` under the feed's lock. Replays, conflicts and page fills go the
ordinary way, where Python does it (``Simplefeed.publish``). So do feeds this process has not
appended to yet. SQLite always goes that way.

The same script of publishes runs against a SQLite file and a PostgreSQL database, with the same
clock and id generator. Both must leave the same rows, the same head and byte-identical archived
pages. Both must answer every publish the same.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from simplefeed.errors import EntryConflict
from simplefeed.model import Event
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from simplefeed.store import postgres
from tests.conftest import PG_ENV, START_US, FakeClock, PostgresDatabases, SequentialIds, query

SECOND = 1_000_000

# Pairs of (label, events). `updated_us` is in seconds from START_US, or None for "now".
Script = list[tuple[str, list[Event]]]


def _at(seconds: float) -> int:
    return START_US + int(seconds * SECOND)


def _script() -> Script:
    e = Event
    return [
        ("one event, no time", [e("a")]),
        ("one event, its own time in the past", [e("b", updated_us=_at(-3600))]),
        ("one event, the same time as the head", [e("c", updated_us=_at(0))]),
        ("one event, in the future", [e("d", updated_us=_at(86_400))]),
        ("fills page 1", [e("e")]),
        ("batch, times out of order", [e("f", updated_us=_at(10)), e("g", updated_us=_at(5))]),
        ("explicit ids", [e("h", id="urn:x:1"), e("i", id="urn:x:2")]),
        ("a replay of one of them", [e("h", id="urn:x:1")]),
        ("a replay and a new one", [e("i", id="urn:x:2"), e("j", id="urn:x:3")]),
        ("fills page 2 with a batch", [e("k"), e("l")]),
        ("a duplicate id inside a batch", [e("m", id="urn:x:4"), e("m", id="urn:x:4")]),
        ("a batch larger than a page", [e(f"n{i}") for i in range(7)]),
        ("a batch in the far past", [e("o", updated_us=_at(-9e6)), e("p", updated_us=_at(-9e6))]),
        ("one more", [e("q", content="the end", content_type="text")]),
        ("an explicit id, new", [e("r", id="urn:x:5")]),
    ]


CONFLICT: list[Event] = [Event("h, changed", id="urn:x:1")]


def _core(url: str, archive: Path) -> Simplefeed:
    settings = Settings(
        database_url=url,
        archive_dir=archive,
        base_url="http://feeds.example.test",
        page_size=5,
        recent_max_age=10,
        default_feed="events",
    )
    # A clock that stands still, so `updated` and `modified_us` move by the rules alone.
    core = Simplefeed(settings, clock=FakeClock(step_us=0), new_uuid=SequentialIds())
    core.create_feed("events")
    return core


def _rows(core: Simplefeed, sql: str) -> list[tuple[Any, ...]]:
    return query(core.settings.database_url, sql)


def _snapshot(core: Simplefeed) -> dict[str, list[tuple[Any, ...]]]:
    return {
        "entries": _rows(
            core,
            "SELECT seq, entry_id, updated_us, published_us, fingerprint, data FROM entries"
            " ORDER BY seq",
        ),
        "feeds": _rows(core, "SELECT name, head_seq, head_updated_us, modified_us FROM feeds"),
        "pages": _rows(
            core,
            "SELECT number, first_seq, last_seq, frozen_us, sha256 FROM pages ORDER BY number",
        ),
    }


@pytest.fixture
def both(
    tmp_path: Path, sqlite_template: Path, postgres: PostgresDatabases | None
) -> Iterator[tuple[Simplefeed, Simplefeed]]:
    if postgres is None:
        pytest.skip(f"needs PostgreSQL: set {PG_ENV} to run it")
    path = tmp_path / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, path)
    pg_url = postgres.new_database()
    lite = _core(f"sqlite:///{path}", tmp_path / "archive-sqlite")
    pg = _core(pg_url, tmp_path / "archive-pg")
    try:
        yield lite, pg
    finally:
        lite.store.close()
        pg.store.close()
        postgres.release(pg_url)


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the one-round-trip appends that went through, and those that gave way."""
    counts = {"appended": 0, "gave way": 0}
    real: Callable[..., int | None] = postgres.append_in_one_round_trip

    def counted(*args: Any, **kwargs: Any) -> int | None:
        head = real(*args, **kwargs)
        counts["appended" if head is not None else "gave way"] += 1
        return head

    monkeypatch.setattr(postgres, "append_in_one_round_trip", counted)
    return counts


def test_both_append_paths_leave_the_same_feed(
    both: tuple[Simplefeed, Simplefeed], monkeypatch: pytest.MonkeyPatch
) -> None:
    lite, pg = both
    counts = _counting(monkeypatch)
    for label, events in _script():
        assert lite.publish("events", events) == pg.publish("events", events), label
    for core in (lite, pg):
        with pytest.raises(EntryConflict):
            core.publish("events", CONFLICT)
    # The PostgreSQL core took the one-round-trip path for most of the script. It gave way
    # where it must, for page fills and replays. The SQLite core never took it.
    assert counts["appended"] >= 7, counts
    assert counts["gave way"] >= 3, counts
    before, after = _snapshot(lite), _snapshot(pg)
    assert after["entries"] == before["entries"]
    assert after["feeds"] == before["feeds"]
    assert after["pages"] == before["pages"]
    # And what they hold keeps the feed's promises.
    entries = after["entries"]
    assert [row[0] for row in entries] == list(range(1, len(entries) + 1))
    updated = [row[2] for row in entries]
    assert updated == sorted(updated) and len(set(updated)) == len(updated)
    assert all(row[2] >= row[3] for row in entries)  # Updated never before published.
    assert after["feeds"][0][1:3] == (entries[-1][0], entries[-1][2])
    assert len(after["pages"]) == len(entries) // 5


def test_a_revoked_or_limited_token_is_refused_on_the_quick_path(
    both: tuple[Simplefeed, Simplefeed], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revoked or limited token is refused on the quick path.

    The quick path checks the token in the append itself. So once the process knows the feed,
    a revoked token still stores nothing. Nor does a token for another feed, or a wrong secret.
    """
    from simplefeed.errors import Forbidden, Unauthorized
    from simplefeed.rules import auth

    _, pg = both
    counts = _counting(monkeypatch)
    pg.create_feed("other")
    good = auth.parse_authorization(f"Bearer {pg.create_token()}")
    pg.publish("events", [Event("learn the feed")], credentials=good)
    pg.publish("events", [Event("quick")], credentials=good)
    assert counts == {"appended": 1, "gave way": 0}

    limited = auth.parse_authorization(f"Bearer {pg.create_token(feed='other')}")
    revoked_token = pg.create_token()
    revoked = auth.parse_authorization(f"Bearer {revoked_token}")
    (record,) = [t for t in pg.tokens() if t.id == revoked.token_id]
    pg.revoke_token(record.id)
    wrong = replace(good, secret="A" * 43)
    head = pg.feed("events").head_seq
    for credentials, error in (
        (limited, Forbidden),
        (revoked, Unauthorized),
        (wrong, Unauthorized),
    ):
        with pytest.raises(error):
            pg.publish("events", [Event("refused")], credentials=credentials)
    assert counts == {"appended": 1, "gave way": 3}
    assert pg.feed("events").head_seq == head


def test_both_append_paths_wait_for_the_feeds_advisory_lock(
    both: tuple[Simplefeed, Simplefeed], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both append paths wait for the feed's advisory lock.

    Appenders of a feed queue on pg_advisory_xact_lock(ADVISORY_LOCK_SPACE, feed id). That
    holds on every path, from every process and node. While another connection holds the lock,
    nothing is appended. Once it is released, the appends go through.
    """
    import threading

    from sqlalchemy import create_engine

    from simplefeed.store.postgres import ADVISORY_LOCK_SPACE

    _, pg = both
    counts = _counting(monkeypatch)
    pg.publish("events", [Event("learn the feed")])  # The ordinary path. The process learns it.
    feed = pg.feed("events")
    holder = create_engine(pg.settings.database_url)
    try:
        for label, events in (
            ("one round trip", [Event("quick")]),
            ("ordinary (fills the page)", [Event(f"fill {i}") for i in range(4)]),
        ):
            done = threading.Event()
            errors: list[BaseException] = []

            def publish(
                events: list[Event] = events,
                done: threading.Event = done,
                errors: list[BaseException] = errors,
            ) -> None:
                try:
                    pg.publish("events", events)
                except BaseException as exc:  # pragma: no cover - reported below.
                    errors.append(exc)
                done.set()

            with holder.begin() as conn:
                conn.execute(
                    text("SELECT pg_advisory_xact_lock(:space, :feed)"),
                    {"space": ADVISORY_LOCK_SPACE, "feed": feed.id},
                )
                worker = threading.Thread(target=publish)
                worker.start()
                assert not done.wait(0.5), f"{label}: appended while the lock was held"
                assert pg.feed("events").head_seq == feed.head_seq
            assert done.wait(10), f"{label}: still waiting after the lock was released"
            worker.join()
            assert not errors, errors
            feed = pg.feed("events")
    finally:
        holder.dispose()
    assert feed.head_seq == 6
    assert counts == {"appended": 1, "gave way": 1}


def test_appends_that_freeze_never_wait_for_the_pool_holding_the_lock(
    both: tuple[Simplefeed, Simplefeed], tmp_path: Path
) -> None:
    """Appends that archive a page never wait for the pool while they hold the lock.

    Archiving a page may read the digest of the page before it, when another process archived
    that page. It reads on the append's own connection. A second connection from the pool
    would be taken while holding the feed's lock. The appends waiting for that lock can hold
    every connection of the pool, 4 and 4 over. Then each side waits for the other, until the
    pool gives up after 30 s. In the publish benchmark, no batch of 100 would be answered on
    PostgreSQL.
    """
    import threading

    from sqlalchemy import create_engine

    from simplefeed.store.postgres import ADVISORY_LOCK_SPACE

    _, pg = both
    other = Simplefeed(replace(pg.settings, archive_dir=tmp_path / "archive-other"))
    try:
        other.publish("events", [Event(f"page 1, {i}", id=f"urn:other:{i}") for i in range(5)])
    finally:
        other.store.close()
    batches = 12  # More than the pool's 8 connections.
    errors: list[BaseException] = []

    def publish(batch: int) -> None:
        try:
            pg.publish("events", [Event(f"{batch}.{i}", id=f"urn:b:{batch}.{i}") for i in range(5)])
        except BaseException as exc:  # Reported below.
            errors.append(exc)

    feed = pg.feed("events")
    holder = create_engine(pg.settings.database_url)
    workers = [threading.Thread(target=publish, args=(b,)) for b in range(batches)]
    try:
        with holder.begin() as conn:
            conn.execute(
                text("SELECT pg_advisory_xact_lock(:space, :feed)"),
                {"space": ADVISORY_LOCK_SPACE, "feed": feed.id},
            )
            for worker in workers:
                worker.start()
            deadline = time.monotonic() + 10
            while _waiting_for_the_lock(conn) < 8 and time.monotonic() < deadline:
                time.sleep(0.05)
        for worker in workers:
            worker.join(120)
    finally:
        holder.dispose()
    assert not errors, errors[0]
    assert pg.feed("events").head_seq == 5 * (1 + batches)
    assert _rows(pg, "SELECT count(*) FROM pages") == [(1 + batches,)]


def _waiting_for_the_lock(conn: Any) -> int:
    return int(
        conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'"
                " AND datname = current_database()"
            )
        ).scalar_one()
    )


class _Worker:
    """A thread of its own, which runs what it is given, one call at a time.

    It has its own direct connection, because ``PostgresStore.direct`` is per thread.
    """

    def __init__(self, core: Simplefeed) -> None:
        import queue
        import threading

        self.jobs: queue.Queue[Callable[[], Any] | None] = queue.Queue()
        self.results: queue.Queue[tuple[bool, Any]] = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.backend_pid: int = self.call(lambda: _direct_pid(core))

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            try:
                self.results.put((True, job()))
            except BaseException as exc:  # pragma: no cover - raised by result().
                self.results.put((False, exc))

    def start(self, job: Callable[[], Any]) -> None:
        self.jobs.put(job)

    def result(self, timeout: float) -> Any:
        import queue

        try:
            ok, value = self.results.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("still running") from None
        if not ok:
            raise value
        return value

    def call(self, job: Callable[[], Any]) -> Any:
        self.start(job)
        return self.result(10)

    def stop(self) -> None:
        self.jobs.put(None)
        self.thread.join(10)


def _direct(core: Simplefeed) -> Any:
    assert isinstance(core.store, postgres.PostgresStore)
    return core.store.direct()


def _direct_pid(core: Simplefeed) -> int:
    with _direct(core) as conn:
        return int(conn.info.backend_pid)


def test_nothing_is_acknowledged_or_shown_before_its_flush_barrier(
    both: tuple[Simplefeed, Simplefeed], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is acknowledged or shown before its flush barrier.

    A one-round-trip append commits without waiting for its WAL flush, so the feed's lock is
    free at once. It is acknowledged only after the flush barrier has returned. The barrier is
    a synchronous commit of its own. Here another connection locks the backend's flush_marks
    row, which holds the append up at its barrier. The append is already visible, and the
    feed's next append can go on. But the publish has not returned. A replay of a stored entry
    waits for the barrier too, and so does a newly rendered live document.
    """
    from sqlalchemy import create_engine

    _, pg = both
    counts = _counting(monkeypatch)
    worker = _Worker(pg)
    holder = create_engine(pg.settings.database_url)
    lock_row = text("SELECT n FROM flush_marks WHERE backend_pid = :pid FOR UPDATE")

    def n_marks() -> int:
        rows = _rows(pg, f"SELECT n FROM flush_marks WHERE backend_pid = {worker.backend_pid}")
        return int(rows[0][0]) if rows else 0

    other = Simplefeed(pg.settings, new_uuid=lambda: str(uuid.uuid4()))  # another process
    try:
        worker.call(lambda: pg.publish("events", [Event("learn the feed")]))
        worker.call(lambda: pg.publish("events", [Event("quick", id="urn:x:quick")]))
        assert counts["appended"] == 1 and n_marks() == 1  # One barrier per quick append.
        # The barrier's transaction is not the append's. It commits with the connection's
        # synchronous_commit, because the append's own setting does not outlive the append.
        with _direct(pg) as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        assert worker.call(lambda: _show_sync_commit(pg)) == "on"

        # Each case is what it is, the job, and the head while the job waits at its barrier.
        cases: list[tuple[str, Callable[[], Any], int]] = [
            ("one-round-trip append", lambda: pg.publish("events", [Event("held")]), 3),
            # Twice in one batch, so it goes straight to the ordinary way, which finds it stored.
            ("replay", lambda: pg.publish("events", [Event("quick", id="urn:x:quick")] * 2), 4),
            ("new live document", lambda: pg.live_body(pg.live(pg.feed("events"), "recent")), 4),
        ]
        for label, job, head in cases:
            marks = n_marks()
            with holder.begin() as conn:
                conn.execute(lock_row, {"pid": worker.backend_pid})
                worker.start(job)
                with pytest.raises(TimeoutError):
                    worker.result(0.5)
                # The append itself is committed and visible, and the lock is free. So another
                # process appends meanwhile. In this process, publishes to the feed queue
                # behind the one under way, to be committed together (group commit).
                assert pg.feed("events").head_seq == head, label
                if label == "one-round-trip append":
                    other.publish("events", [Event("meanwhile")])
            result = worker.result(10)
            assert n_marks() == marks + 1, label
            if label == "one-round-trip append":
                assert [r.created for r in result] == [True]
            elif label == "replay":
                assert [(r.entry_id, r.created) for r in result] == [("urn:x:quick", False)] * 2
            else:
                assert b"meanwhile" in result
        # The rendered version is kept, so serving it again needs no barrier.
        worker.call(lambda: pg.live_body(pg.live(pg.feed("events"), "recent")))
        assert n_marks() == marks + 1
    finally:
        worker.stop()
        holder.dispose()
        other.close()


def _show_sync_commit(core: Simplefeed) -> str:
    with _direct(core) as conn:
        return str(conn.execute("SHOW synchronous_commit").fetchone()[0])


@pytest.mark.parametrize("appended_first", [True, False], ids=["after-commit", "before-append"])
def test_a_failed_quick_path_appends_each_event_exactly_once(
    both: tuple[Simplefeed, Simplefeed], monkeypatch: pytest.MonkeyPatch, appended_first: bool
) -> None:
    """A failed quick path appends each event exactly once.

    Here the quick path's connection is reported lost, after its append committed or before it
    ran. That is not an error for the producer. The ordinary path looks up every event's id,
    the ones made for this request included. It appends only what is not there. An id made for
    this request and found stored is this request's own append, so it counts as created. A
    producer's id found stored cannot be told from a replay.
    """
    import psycopg

    _, pg = both
    real: Callable[..., int | None] = postgres.append_in_one_round_trip
    pids: list[int] = []

    def failing(driver: Any, *args: Any, **kwargs: Any) -> int | None:
        pids.append(driver.info.backend_pid)
        if appended_first:
            real(driver, *args, **kwargs)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    pg.publish("events", [Event("learn the feed")])
    monkeypatch.setattr(postgres, "append_in_one_round_trip", failing)
    (generated,) = pg.publish("events", [Event("no id")])
    (explicit,) = pg.publish("events", [Event("an id", id="urn:x:failed")])
    assert (generated.seq, explicit.seq) == (2, 3)
    assert generated.created is True
    assert explicit.created is (not appended_first)
    entries = _snapshot(pg)["entries"]
    assert [row[0] for row in entries] == [1, 2, 3]
    assert [row[1] for row in entries][1:] == [generated.entry_id, "urn:x:failed"]
    assert pg.feed("events").head_seq == 3
    # The connection that failed was dropped, so the next attempt had a new one.
    assert len(pids) == 2 and pids[0] != pids[1]


def test_the_flush_barrier_survives_a_dropped_connection(
    both: tuple[Simplefeed, Simplefeed],
) -> None:
    """The flush barrier survives a dropped connection.

    A server restart or an idle timeout kills the thread's own connection. The barrier is
    idempotent, so it goes again on a new connection. It does not fail the read or the publish.
    """
    from sqlalchemy import create_engine

    _, pg = both
    pg.store.flush_barrier()
    old = _direct_pid(pg)
    killer = create_engine(pg.settings.database_url)
    try:
        with killer.begin() as conn:
            assert conn.execute(text(f"SELECT pg_terminate_backend({old})")).scalar() is True
    finally:
        killer.dispose()
    pg.store.flush_barrier()
    new = _direct_pid(pg)
    assert new != old
    assert _rows(pg, f"SELECT n FROM flush_marks WHERE backend_pid = {new}") == [(1,)]


def test_the_entries_table_is_analysed_when_a_first_page_freezes(
    both: tuple[Simplefeed, Simplefeed],
) -> None:
    """The entries table is analysed when a feed's first page is archived.

    Until the planner has statistics for ``entries``, a cached plan may look entries up by the
    primary key. It then scans the whole feed on every append. So the first archived page of a
    feed analyses the table, if it never was. That happens once, and not again for later pages.
    """
    lite, pg = both

    def reltuples() -> float:
        return float(_rows(pg, "SELECT reltuples FROM pg_class WHERE relname = 'entries'")[0][0])

    def analyze_count() -> int:
        sql = "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'entries'"
        return int(_rows(pg, sql)[0][0])

    assert reltuples() < 0  # Never analysed.
    pg.publish("events", [Event(f"e{i}") for i in range(4)])
    assert reltuples() < 0
    pg.publish("events", [Event("fills page 1")])  # Page size 5.
    assert reltuples() == 5
    pg.publish("events", [Event(f"f{i}") for i in range(5)])  # Page 2, with no second ANALYZE.
    assert reltuples() == 5
    assert analyze_count() <= 1  # At most once, because the statistics collector may lag.
    assert lite.store.analyze_entries_once() is False  # Nothing to do on SQLite.

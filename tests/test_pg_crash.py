"""PostgreSQL crashing under load: nothing acknowledged or shown is lost.

On PostgreSQL, an append in one round trip commits without waiting for its WAL flush. It is
acknowledged after a flush barrier. Replays and new versions of live documents wait for the
barrier too (``docs/explanation/decisions/durability.md``).

The test crashes a PostgreSQL server of its own with ``pg_ctl stop -m immediate``. Every
server process quits at once, and the WAL buffers in shared memory are lost. The next start
runs crash recovery. Meanwhile producers publish through uWSGI and a reader polls ``/recent``.
After the restart, every acknowledged event must be where its reply said. Every entry the
reader was shown must still be there, under the same number. The feed's promises must hold:
a contiguous sequence, and pages archived once and byte-identical to their rows. Nothing may
be stored that was not in doubt. Publishing must go on with the next number.

The server is a private cluster (``bench.servers.private_postgres``). It is never the shared
one of ``SIMPLEFEED_TEST_POSTGRES_URL``. Where one cannot be made, the test skips and says why.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import psycopg
import pytest
from lxml import etree

from bench.servers import private_postgres
from tests.test_scale import (
    ATOM,
    PUBLIC_BASE,
    SF_NS,
    acks_so_far,
    check_acknowledged,
    check_database,
    check_producer_order,
    finish_producers,
    server,
    start_producers,
    stored,
    walk_and_consume,
)

pytestmark = pytest.mark.e2e


class Reader:
    """Polls ``/recent`` as fast as it answers, and remembers every entry it was shown."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.shown: dict[int, str] = {}  # Maps seq to entry id.
        self.polls = 0
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Reader:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        with httpx.Client(timeout=10.0) as client:
            while not self._stop.is_set():
                try:
                    r = client.get(self.url)
                except httpx.HTTPError:
                    continue
                self.polls += 1
                if r.status_code != 200:
                    continue  # The database is down, so a 503.
                time.sleep(0.2)  # Each new version shown makes everything before it durable.
                for entry in etree.fromstring(r.content).iter(f"{ATOM}entry"):
                    seq = int(entry.findtext(f"{{{SF_NS}}}seq") or 0)
                    entry_id = entry.findtext(f"{ATOM}id") or ""
                    if self.shown.setdefault(seq, entry_id) != entry_id:
                        self.problems.append(f"seq {seq} shown as two entries")


def test_nothing_acknowledged_or_shown_is_lost_when_postgresql_crashes(tmp_path: Path) -> None:
    # What no commit has flushed when the server goes down is lost. So that a missing flush
    # barrier shows, little else flushes. The WAL writer runs every 10 s instead of every
    # 200 ms. A page is archived every 200 entries, with a synchronous commit. The reader polls
    # every 0.2 s, and each of its new versions is a barrier. Without the append's barrier,
    # this fails 4 runs of 4.
    with private_postgres("wal_writer_delay=10000") as pg:
        with psycopg.connect(pg.url().replace("+psycopg", ""), autocommit=True) as admin:
            admin.execute("CREATE DATABASE sf")
        database = pg.url("sf")
        archive_dir = tmp_path / "archive"
        srv = server(
            database, tmp_path, archive_dir, processes=4, page_size=200, public=PUBLIC_BASE
        )
        stop = tmp_path / "stop"
        try:
            srv.start()
            url = srv.url("/entries")
            started = start_producers(
                tmp_path,
                lambda p: [url],
                srv.token,
                producers=6,
                count=100_000,
                tag="pgcrash",
                # Mostly single events, on the one-round-trip path, and some batches.
                sizes=(1, 1, 1, 2, 1, 1, 1, 3, 1, 1),
                all_ids=True,
                replay_every=0,
                seconds=90.0,
                stop=stop,
            )
            with Reader(srv.url("/recent")) as reader:
                # Publish for a while, then crash the database in mid-flight.
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    if acks_so_far(started) >= 600 and reader.polls >= 10:
                        break
                    time.sleep(0.05)
                pg.crash()
                reader.stop()
            stop.touch()
            outcome = finish_producers(started, timeout=60)
            pg.start("wal_writer_delay=10000")  # Crash recovery.
            st = check_database(database, PUBLIC_BASE)

            # Every acknowledged event is there, where its reply said.
            check_acknowledged(st, outcome)
            check_producer_order(outcome)
            # Every entry a reader was shown is there, under the same number.
            by_seq = {seq: entry_id for seq, entry_id, _ in st.entries}
            lost = {s: i for s, i in reader.shown.items() if by_seq.get(s) != i}
            assert lost == {}, f"shown before the crash, gone after it: {sorted(lost)[:10]}"
            assert reader.problems == []
            # Nothing is stored that was not sent. Some requests were neither acknowledged
            # nor refused: those in doubt, or a 5xx while the server went down. Each of them
            # is all there or not at all.
            answered_5xx = [s for s in outcome.requests if s.answer == "fail" and s.status >= 500]
            unsure = outcome.in_doubt + answered_5xx
            stored_titles = {t for _, _, t in st.entries}
            acked_titles = {t for t, _ in outcome.acked}
            unsure_titles = {t for s in unsure for t in s.titles}
            assert stored_titles - acked_titles <= unsure_titles
            for sent in unsure:
                present = [t in stored_titles for t in sent.titles]
                assert all(present) or not any(present), f"request {sent.req} is half there"
            assert [f for f in outcome.failures if "exited" in f or "did not" in f] == []
            print(
                f"\npostgres crash: {len(outcome.acked)} acknowledged, {len(unsure)} requests"
                f" unanswered or 5xx ({len(stored_titles - acked_titles)} of their events"
                f" stored), {len(reader.shown)} entries shown to the reader in"
                f" {reader.polls} polls, head {st.head}"
            )

            # The service comes back by itself, and publishing goes on with the next number.
            head = stored(database).head
            with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {srv.token}"}) as c:
                deadline = time.monotonic() + 30
                while True:
                    r = c.post(srv.url("/entries"), json={"title": "after the crash"})
                    if r.status_code == 201 or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)  # Pooled connections to the old server are replaced.
            assert r.status_code == 201, r.text
            assert r.json()["seq"] == head + 1
            final = check_database(database, PUBLIC_BASE, expected=head + 1)
            consumed = walk_and_consume([srv], f"{PUBLIC_BASE}/recent", PUBLIC_BASE)
            assert [s for s, _ in consumed] == list(range(1, final.head + 1))
        finally:
            stop.touch()
            srv.stop()

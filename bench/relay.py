"""Relay benchmark: how fast a relay ships an outbox, and how soon follow mode delivers.

One command, from the checkout::

    .venv/bin/python bench/relay.py             # 20,000 events a round, three rounds
    .venv/bin/python bench/relay.py --quick     # 5,000 events, one round

The server is Simplefeed as shipped (``simplefeed serve``, ``uwsgi.ini``, 2 processes here)
on a SQLite file, on 127.0.0.1. The app's outbox is a SQLite file too, and a PostgreSQL
database when ``SIMPLEFEED_TEST_POSTGRES_URL`` names a server.

Throughput. Each round fills the outbox with N small events (one transaction), then times
``Relay.ship()`` until the outbox is empty. Beside it, in the same round, the baseline: the
same N events sent with ``Publisher.publish_many`` straight from memory, which is what the
relay does less reading and deleting its rows. Events a second, and the ratio.

Latency. A relay follows the outbox (a thread here), and a reader long-polls ``/recent``
(``Prefer: wait``). The app commits one event at a time; the latency is from the commit's
return to the reader having a ``/recent`` that holds it. p50 and p90 over the samples.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from sqlalchemy import Engine, create_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.servers import PG_ENV, UwsgiServer, scratch_postgres_database
from simplefeed.outbox import Outbox, Relay
from simplefeed.producer import Publisher


def fill(engine: Engine, outbox: Outbox, count: int, tag: str) -> None:
    with engine.begin() as c:
        for i in range(count):
            outbox.add(c, {"title": f"{tag} {i}", "content": {"n": i}})


def throughput(server: UwsgiServer, engine: Engine, count: int, tag: str) -> tuple[float, float]:
    """(relay events/s, publish_many events/s) for ``count`` events."""
    outbox = Outbox(feed="events")
    outbox.table.metadata.create_all(engine)
    fill(engine, outbox, count, f"{tag} relay")
    with Publisher(server.url("/entries"), server.token) as publisher:
        relay = Relay(outbox, engine, publisher)
        start = time.perf_counter()
        shipped = relay.ship()
        relay_s = time.perf_counter() - start
        assert shipped == count
        events = [{"title": f"{tag} direct {i}", "content": {"n": i}} for i in range(count)]
        start = time.perf_counter()
        publisher.publish_many(events)
        direct_s = time.perf_counter() - start
    return count / relay_s, count / direct_s


def latency(server: UwsgiServer, engine: Engine, samples: int) -> list[float]:
    """Seconds from an app's commit to a long-poll of /recent holding the event."""
    outbox = Outbox(feed="events")
    outbox.table.metadata.create_all(engine)
    found: list[float] = []
    stop = threading.Event()
    with Publisher(server.url("/entries"), server.token) as publisher:
        relay = Relay(outbox, engine, publisher)
        follower = threading.Thread(target=relay.follow, args=(stop,))
        follower.start()
        try:
            with httpx.Client(timeout=40) as reader:
                etag = reader.get(server.url("/recent")).headers["ETag"]
                for i in range(samples):
                    with engine.begin() as c:
                        entry_id = outbox.add(c, {"title": f"latency {i}"})
                    committed = time.perf_counter()
                    while True:
                        answer = reader.get(
                            server.url("/recent"),
                            headers={"If-None-Match": etag, "Prefer": "wait=30"},
                        )
                        if answer.status_code == 200:
                            etag = answer.headers["ETag"]
                            if entry_id in answer.text:
                                break
                    found.append(time.perf_counter() - committed)
                    time.sleep(0.02)  # apart, so that each sample starts from a quiet relay
        finally:
            stop.set()
            follower.join()
    return found


@contextmanager
def app_databases(workdir: Path) -> Iterator[list[tuple[str, Engine]]]:
    engines = [("SQLite", create_engine(f"sqlite:///{workdir / 'app.sqlite3'}"))]
    with scratch_postgres_database("sf_bench") if os.environ.get(PG_ENV) else _none() as url:
        if url:
            engines.append(("PostgreSQL", create_engine(url)))
        try:
            yield engines
        finally:
            for _, engine in engines:
                engine.dispose()


@contextmanager
def _none() -> Iterator[str]:
    yield ""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="5,000 events, one round")
    args = parser.parse_args()
    count, rounds, samples = (5_000, 1, 20) if args.quick else (20_000, 3, 50)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        with (
            UwsgiServer.scratch(workdir / "server", page_size=1000) as server,
            app_databases(workdir) as engines,
        ):
            print("| outbox | relay events/s | publish_many events/s | ratio |")
            print("|---|---|---|---|")
            for name, engine in engines:
                rates = [throughput(server, engine, count, f"{name} {n}") for n in range(rounds)]
                relay = statistics.median(r for r, _ in rates)
                direct = statistics.median(d for _, d in rates)
                print(f"| {name} | {relay:,.0f} | {direct:,.0f} | {relay / direct:.2f} |")
            print()
            print("| outbox | follow latency p50 | p90 |")
            print("|---|---|---|")
            for name, engine in engines:
                found = sorted(latency(server, engine, samples))
                p50 = statistics.median(found) * 1000
                p90 = found[int(len(found) * 0.9) - 1] * 1000
                print(f"| {name} | {p50:.1f} ms | {p90:.1f} ms |")


if __name__ == "__main__":
    main()

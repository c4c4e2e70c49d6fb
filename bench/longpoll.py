"""Long-poll benchmark (issue #15): how long after a publish's 2xx a following consumer has the
entry, with ``Prefer: wait`` against polling, and what 500 waiting consumers cost the reads.

One command, from the checkout (needs wrk: ``apt-get install -y wrk``)::

    .venv/bin/python bench/longpoll.py             # about 4 minutes
    .venv/bin/python bench/longpoll.py --quick     # fewer events, to try it out

It starts Simplefeed as shipped (``simplefeed serve``, ``uwsgi.ini``: 4 processes of 200
threads, SQLite) on 127.0.0.1 and, for 1, 100 and 500 consumers at once, runs each way of
following the feed for the same published events:

- ``wait``: each consumer holds a kept-alive connection and asks for /recent with its ETag and
  ``Prefer: wait=30``, again as soon as it is answered;
- ``poll max-age=10`` and ``poll max-age=1``: each consumer asks for /recent conditionally once
  per max-age (phases spread at random), as a consumer honouring the document's max-age does
  (a new connection per poll when it would idle past the server's 4 s socket timeout).

Consumers are threads of 4 processes (stdlib http.client, one connection each).

A producer publishes one event every ``--interval`` seconds; for every (consumer, event) the
latency is the time from the publish's 2xx (as the producer saw it) to that consumer having a
body with the entry (a consumer thread, in this process, reading the HTTP response; a consumer
may have it before the producer has its 2xx: those count as 0). p50 and p99 over all of them.

Capacity: with 500 consumers waiting (and the producer publishing), wrk asks for /recent (304
and 200) for a few seconds; the same wrk just before the consumers started and just after they
stopped is the baseline (their mean), in the same run. The figures are in docs/benchmarks.md
("Long-poll").
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import multiprocessing
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._read_servers import machine, wrk
from bench.servers import HOST, UwsgiServer

TITLE = re.compile(rb"<title>ev-(\d+)</title>")
ETAG = "etag"


#: uwsgi.ini's socket-timeout: a polling consumer idle for longer finds its connection closed,
#: so it opens one per poll (as httpx's pool does when it sees the connection closed).
SOCKET_TIMEOUT_S = 4.0


@dataclass
class Consumer:
    """One consumer on its own connection, in a thread of its own."""

    port: int
    mode: str  # "wait" or "poll"
    max_age: float
    stop: Any  # threading.Event or multiprocessing.Event
    received: dict[int, float] = field(default_factory=dict)
    errors: int = 0

    def run(self) -> None:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=60)
        etag = ""
        next_poll = time.monotonic() + random.uniform(0, self.max_age)
        while not self.stop.is_set():
            headers = {"If-None-Match": etag} if etag else {}
            if self.mode == "wait" and etag:
                headers["Prefer"] = "wait=30"
            elif self.mode == "poll":
                delay = next_poll - time.monotonic()
                if delay > 0 and self.stop.wait(delay):
                    break
            try:
                conn.request("GET", "/recent", headers=headers)
                response = conn.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException):
                self.errors += 1
                conn.close()
                conn = http.client.HTTPConnection(HOST, self.port, timeout=60)
                time.sleep(0.05)
                continue
            now = time.monotonic()
            if response.status == 200:
                etag = response.getheader(ETAG) or ""
                for match in TITLE.finditer(body):
                    self.received.setdefault(int(match[1]), now)
            if self.mode == "poll":
                next_poll += self.max_age
                if self.max_age > SOCKET_TIMEOUT_S:
                    conn.close()
        conn.close()


def crowd(port: int, mode: str, max_age: float, count: int, stop: Any, results: Any) -> None:
    """``count`` consumers in threads of this process, until ``stop``; their receipts (by
    event, the monotonic clock, which all processes share) and errors go to ``results``."""
    consumers = [Consumer(port, mode, max_age, stop) for _ in range(count)]
    threads = [threading.Thread(target=c.run, daemon=True) for c in consumers]
    for t in threads:
        t.start()
    stop.wait()
    for t in threads:
        t.join(timeout=40)
    results.send([(c.received, c.errors) for c in consumers])


#: Consumers run in this many processes (threads in each), so that reading 500 responses at
#: once is not one Python process's work under one GIL.
CONSUMER_PROCESSES = 4


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Run:
    mode: str
    consumers: int
    samples: list[float]
    missing: int
    errors: int

    def row(self) -> str:
        p50 = statistics.median(self.samples) * 1000 if self.samples else float("nan")
        p99 = percentile(self.samples, 0.99) * 1000 if self.samples else float("nan")
        return (
            f"| {self.mode} | {self.consumers} | {len(self.samples)} | {p50:,.0f} | {p99:,.0f} |"
            f" {self.missing} | {self.errors} |"
        )


def publish(server: UwsgiServer, client: httpx.Client, i: int) -> float:
    r = client.post(server.url("/entries"), json={"title": f"ev-{i}"})
    r.raise_for_status()
    return time.monotonic()


def follow(
    server: UwsgiServer,
    mode: str,
    max_age: float,
    consumers: int,
    events: int,
    interval: float,
    first: int,
    during: Callable[[], None] | None = None,
) -> Run:
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    kind = "wait" if mode == "wait" else "poll"
    groups = min(CONSUMER_PROCESSES, consumers)
    pipes = []
    children = []
    for g in range(groups):
        mine, theirs = context.Pipe(duplex=False)
        count = consumers // groups + (1 if g < consumers % groups else 0)
        child = context.Process(
            target=crowd, args=(server.port, kind, max_age, count, stop, theirs), daemon=True
        )
        child.start()
        pipes.append(mine)
        children.append(child)
    time.sleep(2.0 + (max_age if mode != "wait" else 0))  # every consumer has the document
    acked: dict[int, float] = {}
    headers = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(headers=headers, timeout=30) as client:
        for i in range(first, first + events):
            acked[i] = publish(server, client, i)
            if during is not None and i == first + events // 2:
                during()
            time.sleep(interval * random.uniform(0.5, 1.5))
    time.sleep((max_age if mode != "wait" else 0) + 2.0)  # the last event reaches everyone
    stop.set()
    # Waiting consumers end with their next answer: one more event ends every wait.
    with httpx.Client(headers=headers, timeout=30) as client:
        publish(server, client, first + events)
    reports = [(received, errors) for pipe in pipes for received, errors in pipe.recv()]
    for child in children:
        child.join(timeout=40)
    samples = []
    missing = 0
    for received, _ in reports:
        for i, at in acked.items():
            got = received.get(i)
            if got is None:
                missing += 1
            else:
                samples.append(max(0.0, got - at))
    return Run(
        mode if mode == "wait" else f"poll max-age={max_age:g}",
        consumers,
        samples,
        missing,
        sum(errors for _, errors in reports),
    )


def capacity(server: UwsgiServer, seconds: float) -> dict[str, float]:
    """/recent 304 and 200 rates (wrk, 16 connections) at this moment."""
    etag = httpx.get(server.url("/recent")).headers["etag"]
    pgid = server.process.pid if server.process else 0
    r304 = wrk(
        server.url("/recent"),
        duration=seconds,
        connections=16,
        headers={"If-None-Match": etag},
        pgids=(pgid,),
    )
    r200 = wrk(server.url("/recent"), duration=seconds, connections=16, pgids=(pgid,))
    return {"304": r304.requests / r304.seconds, "200": r200.requests / r200.seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--consumers", default="1,100,500")
    parser.add_argument("--events", type=int, default=10, help="events per run")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between events")
    parser.add_argument("--modes", default="wait,poll10,poll1")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.events = 4
    counts = [int(c) for c in args.consumers.split(",")]
    modes = {"wait": 0.0, "poll10": 10.0, "poll1": 1.0}
    with tempfile.TemporaryDirectory(prefix="sf-longpoll-") as tmp:
        work = Path(tmp)
        server = UwsgiServer(
            f"sqlite:///{work / 'db.sqlite3'}", work / "archive", work, processes=4
        )
        with server:
            for key, value in machine().items():
                print(f"{key}: {value}")
            print()
            print("| following | consumers | samples | p50 ms | p99 ms | missed | errors |")
            print("|---|---|---|---|---|---|---|")
            first = 1
            held: dict[str, dict[str, float]] = {}
            for count in counts:
                for mode in args.modes.split(","):
                    during = None
                    if mode == "wait" and count == max(counts):
                        held["before"] = capacity(server, 4)

                        def during() -> None:
                            held["during"] = capacity(server, 4)

                    run = follow(
                        server, mode, modes[mode], count, args.events, args.interval, first, during
                    )
                    if during is not None:
                        held["after"] = capacity(server, 4)
                    first += args.events + 1
                    print(run.row(), flush=True)
            if held:
                print()
                print(
                    "| /recent | req/s before | req/s with the consumers waiting | req/s after"
                    " | ratio to before and after |"
                )
                print("|---|---|---|---|---|")
                for status in ("304", "200"):
                    before, during_, after = (
                        held[k][status] for k in ("before", "during", "after")
                    )
                    ratio = during_ / ((before + after) / 2)
                    cells = [status, f"{before:,.0f}", f"{during_:,.0f}", f"{after:,.0f}"]
                    print("| " + " | ".join(cells) + f" | {ratio:.0%} |")
            problems = server.problems()
            if problems:
                print("\nserver problems:", *problems[:5], sep="\n")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()

"""Long-poll benchmark (issue #15), for the delay to a consumer and the cost to reads.

It measures how long after a publish's 2xx a following consumer has the entry. It compares
``Prefer: wait`` with polling. It measures what 500 waiting consumers cost the reads.

One command, from the checkout (needs wrk: ``apt-get install -y wrk``)::

    .venv/bin/python bench/longpoll.py             # about 7 minutes
    .venv/bin/python bench/longpoll.py --quick     # fewer events, to try it out

The rows. For 1, 100 and 500 consumers at once, it runs each way of following the feed. Each
row runs on a fresh Simplefeed as shipped, on 127.0.0.1. That is ``simplefeed serve`` with
``uwsgi.ini``, 4 processes of 200 threads, and SQLite. Its /recent holds 50 entries before the
row's first event. That is half the shipped page size, so it is what a consumer of a shipped
feed sees on average. Pages hold 1,000 here, so that no page is archived under consumers that
read /recent only. One server for all the rows would make each row's documents larger than the
last's. A 500-consumer row would serve a /recent of 126-147 entries, more than a shipped page
ever holds. Then rows could not be compared.

The ways of following. With ``wait``, each consumer holds a kept-alive connection. It asks for
/recent with its ETag and ``Prefer: wait=30``, and asks again as soon as it is answered. With
``poll max-age=10`` and ``poll max-age=1``, each consumer asks for /recent conditionally once
per max-age. Their phases are spread at random. That is what a consumer honouring the
document's max-age does. It opens a new connection per poll when it would idle past the
server's 4 s socket timeout.

The consumers. They are asyncio tasks in 4 processes, with one connection each. Each asks for
gzip as the Simplefeed consumer does, and decompresses what it reads. They are light clients,
so that the figures are the server's more than theirs. The two cores are shared by both.

The latency. A producer publishes one event every ``--interval`` seconds. For every consumer
and event, the latency runs from the publish's 2xx, as the producer saw it, to that consumer
having a body with the entry. The body is read by a consumer task, in its process, from the HTTP
response. A consumer may have it before the producer has its 2xx, and those count as 0. The
table gives p50 and p99 over all of them.

The columns. The column "declined" counts long-polls answered at once without
``Preference-Applied``. The consumer then asks again after max-age, as the Simplefeed consumer
does. The column "server CPU ms per event" is the CPU time of the server's processes, from
/proc. It runs from the first event to two seconds after the last, divided by the events. It
covers delivering each event to every consumer. It covers the watchers' own polling meanwhile
too, which is the same whether anyone waits or not. The column "consumers' CPU ms per event" is
the same for the consumers' processes. They run on the same two cores, so what they take the
server cannot have.

Holding them. After those rows, 1, 100 and 500 consumers wait on a fresh server, and nothing is
published. The table gives the server's CPU per second over ``--idle-seconds``. The watchers'
own looks for a commit are among it. It is what a node pays for its long-polls while its feeds
are quiet.

Capacity. It comes in a run of its own after those. Then 500 consumers wait, and the producer
publishes from the middle event on, until wrk is done. Meanwhile wrk asks for /recent, 304 and
200 in turn. It runs five times 2 s each on 64 connections, and the median of each counts. The
304 requests name the ETag of the last 200 wrk had, as a polling consumer does. The same just
before the consumers started and just after they stopped is the baseline, by their mean. It is
taken in the same run.

Each wrk run on Simplefeed is paired with one on the read benchmark's baseline. That is the
minimal falcon app of bench/read.py, under the same uWSGI options. It answers with the bytes of
Simplefeed's /recent when the run began. The pair's runs go right after each other, in
alternate order. The read benchmark's ratio is Simplefeed's rate over the minimal app's. The
figure is the median of the five pairs' ratios, before, during and after. That is the issue's
measure. It takes out what the machine's other load takes from both. The machine's speed may
change from one pair to the next. The minimal app has given 37,000 and 48,000 304s a second ten
seconds apart. Such a change moves both rates of a pair alike. The latencies of that run are
shown too, on a line of their own. The figures are in docs/benchmarks.md ("Long-poll").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._read_servers import Child, group_cpu, machine, minimal_falcon, process_cpu, wrk
from bench.servers import HOST, UwsgiServer

TITLE = re.compile(rb"<title>ev-(\d+)</title>")
ETAG = "etag"


#: The socket-timeout of uwsgi.ini. A polling consumer idle for longer finds its connection
#: closed. So it opens one per poll, as httpx's pool does when it sees the connection closed.
SOCKET_TIMEOUT_S = 4.0


@dataclass
class Consumer:
    """One consumer on its own connection, a task of its process's event loop."""

    port: int
    mode: str  # "wait" or "poll".
    max_age: float
    received: dict[int, float] = field(default_factory=dict)
    errors: int = 0
    declined: int = 0
    stopping: bool = False

    async def run(self) -> None:
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        etag = ""
        next_poll = time.monotonic() + random.uniform(0, self.max_age)
        while not self.stopping:
            headers = f"If-None-Match: {etag}\r\n" if etag else ""
            asks_to_wait = self.mode == "wait" and bool(etag)
            if asks_to_wait:
                headers += "Prefer: wait=30\r\n"
            elif self.mode == "poll":
                delay = next_poll - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                    if self.stopping:
                        break
            try:
                if connection is None:
                    connection = await asyncio.open_connection(HOST, self.port)
                reader, writer = connection
                writer.write(REQUEST.format(headers=headers).encode())
                status, etag_seen, body, held = await read_response(reader)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                self.errors += 1
                if connection is not None:
                    connection[1].close()
                connection = None
                await asyncio.sleep(0.05)
                continue
            now = time.monotonic()
            if status == 200:
                etag = etag_seen
                for match in TITLE.finditer(body):
                    self.received.setdefault(int(match[1]), now)
            if asks_to_wait and not held:
                # Not held, since a server may ignore the preference. Ask again after the
                # document's max-age, as the Simplefeed consumer does.
                self.declined += 1
                await asyncio.sleep(DECLINED_WAIT_S)
            if self.mode == "poll":
                next_poll += self.max_age
                if self.max_age > SOCKET_TIMEOUT_S:
                    connection[1].close()
                    connection = None
        if connection is not None:
            connection[1].close()


#: What every consumer asks, which is /recent, compressed as the Simplefeed consumer asks it.
#: Here it is gzip, decompressed with zlib to find the entries. So the consumer's own cost
#: stays small.
REQUEST = "GET /recent HTTP/1.1\r\nHost: bench\r\nAccept-Encoding: gzip\r\n{headers}\r\n"


#: The service's max-age for /recent, the default of SIMPLEFEED_RECENT_MAX_AGE. A consumer
#: whose long-poll was not held waits this long before asking again.
DECLINED_WAIT_S = 10.0


async def read_response(reader: asyncio.StreamReader) -> tuple[int, str, bytes, bool]:
    """Read the status, ETag and decoded body of one response.

    The response is framed by Content-Length, as the service sends it. Also return whether the
    server held it (``Preference-Applied``).
    """
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(fields.get("content-length", "0")))
    if fields.get("content-encoding") == "gzip":
        body = zlib.decompress(body, wbits=31)
    return status, fields.get(ETAG, ""), body, "preference-applied" in fields


def crowd_process(
    port: int, mode: str, max_age: float, count: int, stop: Any, results: Any
) -> None:
    """Run ``count`` consumers in one event loop of this process, until ``stop``.

    Their receipts and errors go to ``results``. Receipts are by event, on the monotonic
    clock, which all processes share. It is an event loop, not threads. Take 125 threads of one
    process reading their responses at once. They would spend most of the time handing the GIL
    to each other, on the two cores the server uses.
    """

    async def main() -> None:
        consumers = [Consumer(port, mode, max_age) for _ in range(count)]
        tasks = [asyncio.create_task(c.run()) for c in consumers]
        while not stop.is_set():
            await asyncio.sleep(0.05)
        for c in consumers:
            c.stopping = True
        # A waiting consumer ends with its next answer, so the caller publishes once more.
        await asyncio.wait(tasks, timeout=40)
        results.send([(c.received, c.errors, c.declined) for c in consumers])

    asyncio.run(main())


#: Consumers run in this many processes, with an event loop in each. So reading 500 responses
#: at once is not one Python process's work.
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
    #: Long-polls the server answered at once, without ``Preference-Applied``. The consumer
    #: then asked again after max-age.
    declined: int
    #: CPU seconds the server's processes spent from the first event to the last one's
    #: delivery, per event.
    cpu_per_event: float
    #: The same for the consumers' processes, reading each event and asking again.
    consumers_cpu_per_event: float

    def row(self) -> str:
        p50 = statistics.median(self.samples) * 1000 if self.samples else float("nan")
        p99 = percentile(self.samples, 0.99) * 1000 if self.samples else float("nan")
        return (
            f"| {self.mode} | {self.consumers} | {len(self.samples)} | {p50:,.0f} | {p99:,.0f} |"
            f" {self.missing} | {self.errors} | {self.declined} |"
            f" {self.cpu_per_event * 1000:,.0f} | {self.consumers_cpu_per_event * 1000:,.0f} |"
        )


class Server(Protocol):
    """What ``follow`` needs of a server, Simplefeed under uWSGI or bench/longpoll_floor.py's."""

    port: int
    token: str
    process: subprocess.Popen[bytes] | None

    def url(self, path: str) -> str: ...


def publish(server: Server, client: httpx.Client, i: int) -> float:
    r = client.post(server.url("/entries"), json={"title": f"ev-{i}"})
    r.raise_for_status()
    return time.monotonic()


class Crowd:
    """A number of ``consumers`` following ``server``, from now until :meth:`end`.

    ``kind`` is "wait" or "poll". They run in :data:`CONSUMER_PROCESSES` processes.
    """

    def __init__(self, server: Server, kind: str, max_age: float, consumers: int) -> None:
        self.server = server
        context = multiprocessing.get_context("fork")
        self.stop = context.Event()
        groups = min(CONSUMER_PROCESSES, consumers)
        self.pipes: list[Any] = []
        self.children: list[Any] = []
        for g in range(groups):
            mine, theirs = context.Pipe(duplex=False)
            count = consumers // groups + (1 if g < consumers % groups else 0)
            child = context.Process(
                target=crowd_process,
                args=(server.port, kind, max_age, count, self.stop, theirs),
                daemon=True,
            )
            child.start()
            self.pipes.append(mine)
            self.children.append(child)

    def cpu(self) -> float:
        """Return the CPU seconds of the consumers' processes so far."""
        return process_cpu(*(child.pid or 0 for child in self.children))

    def end(self, last: int) -> list[tuple[dict[int, float], int, int]]:
        """Stop every consumer, and return their receipts, errors and declined long-polls.

        It publishes event ``last``, because a waiting consumer ends with its next answer.
        """
        self.stop.set()
        headers = {"Authorization": f"Bearer {self.server.token}"}
        with httpx.Client(headers=headers, timeout=30) as client:
            publish(self.server, client, last)
        reports = [report for pipe in self.pipes for report in pipe.recv()]
        for child in self.children:
            child.join(timeout=40)
        return reports


def follow(
    server: Server,
    mode: str,
    max_age: float,
    consumers: int,
    events: int,
    interval: float,
    first: int,
    during: Callable[[], None] | None = None,
) -> Run:
    crowd = Crowd(server, "wait" if mode == "wait" else "poll", max_age, consumers)
    time.sleep(2.0 + (max_age if mode != "wait" else 0))  # Every consumer has the document.
    acked: dict[int, float] = {}
    headers = {"Authorization": f"Bearer {server.token}"}
    pgid = server.process.pid if server.process else 0
    cpu = group_cpu(pgid)
    consumers_cpu = crowd.cpu()
    meanwhile = threading.Thread(target=during or (lambda: None))
    i = first
    with httpx.Client(headers=headers, timeout=30) as client:
        # The ``during`` part runs from the middle event on, with the producer publishing
        # meanwhile. It goes past ``events`` if it takes longer.
        while i < first + events or meanwhile.is_alive():
            acked[i] = publish(server, client, i)
            if during is not None and i == first + events // 2:
                meanwhile.start()
            time.sleep(interval * random.uniform(0.5, 1.5))
            i += 1
    time.sleep((max_age if mode != "wait" else 0) + 2.0)  # The last event reaches everyone.
    cpu = group_cpu(pgid) - cpu
    consumers_cpu = crowd.cpu() - consumers_cpu
    reports = crowd.end(i)
    samples = []
    missing = 0
    for received, _, _ in reports:
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
        sum(errors for _, errors, _ in reports),
        sum(declined for _, _, declined in reports),
        cpu / len(acked),
        consumers_cpu / len(acked),
    )


def idle(server: Server, consumers: int, seconds: float) -> float:
    """Return the server's CPU seconds per second while ``consumers`` wait, with no publish.

    That is what holding them costs. The watchers' looks for a commit are among it.
    """
    crowd = Crowd(server, "wait", 0.0, consumers)
    time.sleep(2.0)  # Every consumer has the document and waits.
    pgid = server.process.pid if server.process else 0
    cpu, started = group_cpu(pgid), time.monotonic()
    time.sleep(seconds)
    cpu, elapsed = group_cpu(pgid) - cpu, time.monotonic() - started
    crowd.end(1)
    return cpu / elapsed


def print_head() -> None:
    """Print the machine, then the head of the table whose rows are :meth:`Run.row`."""
    for key, value in machine().items():
        print(f"{key}: {value}")
    print()
    print(
        "| following | consumers | samples | p50 ms | p99 ms | missed | errors"
        " | declined | server CPU ms per event | consumers' CPU ms per event |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")


#: The kept-alive connections of wrk in :func:`capacity`. Each stays with the uWSGI process
#: that accepted it. So 16 over 4 processes could land mostly on one. Then one server gives
#: 2,871-7,760 /recent 304s a second in six runs of 3 s. With 64 it gives 5,570-6,819 in four.
CAPACITY_CONNECTIONS = 64
FOLLOW_ETAG_LUA = Path(__file__).resolve().parent / "_follow_etag.lua"
CAPACITY_ROUNDS = 5
CAPACITY_SECONDS = 2.0


def capacity(server: UwsgiServer, minimal: tuple[Child, str], seconds: float) -> dict[str, float]:
    """Measure the /recent 304 and 200 rates now, of Simplefeed and of the baseline.

    The baseline is the read benchmark's, the minimal falcon app under the same uWSGI options
    (bench/minimal_falcon.py). Each rate is the median of :data:`CAPACITY_ROUNDS` runs of wrk.
    Each run takes ``seconds`` on :data:`CAPACITY_CONNECTIONS` connections. The read
    benchmark's ratio is the median of each round's Simplefeed rate over the minimal app's run
    right beside it. Which of the two goes first alternates by round. So a change in the
    machine's speed between rounds cancels out. The keys are "304", "200", "minimal 304",
    "minimal 200", "ratio 304" and "ratio 200".
    """
    rates: dict[str, list[float]] = {}
    ours = server.process.pid if server.process else 0
    minimal_pgid = minimal[0].process.pid
    minimal_url = minimal[1] + "/recent"
    minimal_etag = httpx.get(minimal_url).headers["etag"]
    for round_ in range(CAPACITY_ROUNDS):
        etag = httpx.get(server.url("/recent")).headers["etag"]
        for status in ("304", "200"):
            runs = [
                # The producer publishes meanwhile, so each request names the last ETag seen.
                (status, server.url("/recent"), etag, FOLLOW_ETAG_LUA, ours),
                (f"minimal {status}", minimal_url, minimal_etag, None, minimal_pgid),
            ]
            for key, url, tag, script, pgid in runs if round_ % 2 == 0 else runs[::-1]:
                r = wrk(
                    url,
                    duration=seconds,
                    connections=CAPACITY_CONNECTIONS,
                    headers={"If-None-Match": tag} if status == "304" else {},
                    pgids=(pgid,),
                    script=script if status == "304" else None,
                )
                rates.setdefault(key, []).append(r.requests / r.seconds)
            rates.setdefault(f"ratio {status}", []).append(
                rates[status][-1] / rates[f"minimal {status}"][-1]
            )
    return {key: statistics.median(values) for key, values in rates.items()}


@contextlib.contextmanager
def minimal_server(server: UwsgiServer) -> Iterator[tuple[Child, str]]:
    """Run the read benchmark's baseline beside ``server``.

    It is bench/minimal_falcon.py under the same uWSGI options and process count. It answers
    /recent with the bytes that ``server``'s /recent has now, as the identity document. That
    document grows by an entry an event on ``server``, but not here.
    """
    body = server.workdir / "minimal-recent.xml"
    body.write_bytes(httpx.get(server.url("/recent")).content)
    child, url = minimal_falcon("minimal", server.workdir, body, processes=SERVER_PROCESSES)
    try:
        yield child, url
    finally:
        child.stop()


#: Entries /recent holds before a row's first event. That is half the shipped page size
#: (SIMPLEFEED_PAGE_SIZE, 100), so what a consumer of a shipped feed sees on average. Pages hold
#: :data:`PAGE_SIZE` here, so that no page is archived under consumers that read /recent only.
PREFILL = 50
PAGE_SIZE = 1000
#: As shipped (uwsgi.ini).
SERVER_PROCESSES = 4


@contextlib.contextmanager
def fresh_server() -> Iterator[UwsgiServer]:
    """Run Simplefeed as shipped on a database of its own, /recent holding :data:`PREFILL` entries.

    So every row serves documents of the same sizes, whatever ran before it.
    """
    with tempfile.TemporaryDirectory(prefix="sf-longpoll-") as tmp:
        work = Path(tmp)
        server = UwsgiServer.scratch(
            work,
            processes=SERVER_PROCESSES,
            page_size=PAGE_SIZE,
        )
        with server:
            seed = [{"title": f"seed-{i}"} for i in range(PREFILL)]
            headers = {"Authorization": f"Bearer {server.token}"}
            httpx.post(server.url("/entries"), json=seed, headers=headers).raise_for_status()
            yield server
            problems = server.problems()
            if problems:
                print("\nserver problems:", *problems[:5], sep="\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--consumers", default="1,100,500")
    parser.add_argument("--events", type=int, default=10, help="events per run")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between events")
    parser.add_argument("--modes", default="wait,poll10,poll1")
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=10.0,
        help="how long to measure the server's CPU with consumers waiting and nothing"
        " published (0: not at all)",
    )
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.events = 4
        args.idle_seconds = min(args.idle_seconds, 3.0)
    counts = [int(c) for c in args.consumers.split(",")]
    modes = {"wait": 0.0, "poll10": 10.0, "poll1": 1.0}
    print_head()
    for count in counts:
        for mode in args.modes.split(","):
            with fresh_server() as server:
                run = follow(server, mode, modes[mode], count, args.events, args.interval, 1)
            print(run.row(), flush=True)
    if "wait" not in args.modes.split(","):
        return
    if args.idle_seconds > 0:
        print()
        print("| consumers waiting, nothing published | server CPU ms per second |")
        print("|---|---|")
        for count in counts:
            with fresh_server() as server:
                cost = idle(server, count, args.idle_seconds)
            print(f"| {count} | {cost * 1000:,.1f} |", flush=True)
    # Capacity runs apart. Wrk at full speed in the middle of a latency run would delay the
    # events published around it. The latency rows are the server's alone.
    run, held = capacity_run(max(counts), args.events, args.interval)
    print(run.row().replace("| wait |", "| wait, wrk on /recent meanwhile |"))
    print()
    print(capacity_report(held))


def capacity_run(
    consumers: int, events: int, interval: float
) -> tuple[Run, dict[str, dict[str, float]]]:
    """Run :func:`capacity` before, during and after ``consumers`` wait on a fresh server.

    During the wait the producer publishes. Also return the latencies of that run.
    """
    held: dict[str, dict[str, float]] = {}
    with fresh_server() as server, minimal_server(server) as minimal:
        held["before"] = capacity(server, minimal, CAPACITY_SECONDS)

        def during() -> None:
            held["during"] = capacity(server, minimal, CAPACITY_SECONDS)

        run = follow(server, "wait", 0.0, consumers, events, interval, 1, during)
        held["after"] = capacity(server, minimal, CAPACITY_SECONDS)
    return run, held


def capacity_report(held: dict[str, dict[str, float]]) -> str:
    """Format two tables, for before, during and after.

    The first gives Simplefeed's /recent rates. The second gives the read benchmark's ratios.
    Each is Simplefeed's rate over the minimal app's, measured alternately.
    """
    lines = [
        "| /recent | req/s before | req/s with the consumers waiting | req/s after"
        " | ratio to before and after |",
        "|---|---|---|---|---|",
    ]
    for status in ("304", "200"):
        before, during, after = (held[k][status] for k in ("before", "during", "after"))
        cells = [status, f"{before:,.0f}", f"{during:,.0f}", f"{after:,.0f}"]
        lines.append("| " + " | ".join(cells) + f" | {during / ((before + after) / 2):.0%} |")
    lines += [
        "",
        "| /recent, the read benchmark's ratio (Simplefeed / minimal falcon) | before"
        " | with the consumers waiting | after | ratio to before and after |",
        "|---|---|---|---|---|",
    ]
    for status in ("304", "200"):
        before, during, after = (held[k][f"ratio {status}"] for k in ("before", "during", "after"))
        cells = [status, f"{before:.0%}", f"{during:.0%}", f"{after:.0%}"]
        lines.append("| " + " | ".join(cells) + f" | {during / ((before + after) / 2):.0%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()

"""Measure the hot paths in one command, each beside its baseline and its target.

Run it from the checkout. It needs wrk. PostgreSQL rows need ``SIMPLEFEED_TEST_POSTGRES_URL``
or ``--postgres-url``::

    .venv/bin/python bench/hot_paths.py --quick     # under five minutes
    .venv/bin/python bench/hot_paths.py             # three rounds of 3 s a cell

Every server is started here on 127.0.0.1 and stopped at the end. Ours is Simplefeed as shipped
(``simplefeed serve``, ``uwsgi.ini``). Each baseline runs under the same uWSGI options: an ini
derived from ``uwsgi.ini``, with only ``module`` changed. Each round runs ours, then its
baseline, so that a slow moment on a shared machine hurts both. The table shows medians, the
ratio of ours to the baseline, and the target. CPU per request is the servers' own (user and
system time from /proc). It is steadier than rates when other work runs beside.

Reading uses ``bench/read.py``'s servers. It runs ``/recent`` 304 and 200 against the minimal
falcon app answering the same bytes (``bench/minimal_falcon.py``), at 1 and 4 processes. It
runs a client that closes its connection after each request against one that keeps it. Both
of those are ours.

Publishing uses ``bench/publish.py``'s servers. It runs single events and batches of 100, on
SQLite and PostgreSQL. The baseline is a falcon app that inserts one row per event
(``bench/_publish_baseline.py``).

Consuming runs a cold-start catch-up (``Consumer(parser="lxml", checkpoint_every="page")``).
The script ``bench/_consume_run.py`` runs it. The baseline is a reader that only extracts every
field of the same pages with lxml.

Long-polls use ``bench/longpoll.py``. Then 500 consumers wait on ``/recent``, and the row times
publish to delivery.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from lxml import etree

from bench import consume, longpoll, publish
from bench._consume_run import feed_documents
from bench._read_servers import group_cpu, machine, minimal_falcon, wrk
from bench.servers import UwsgiServer

PAGE_SIZE = 100
READ_ENTRIES = 250
READ_CONNECTIONS = 16
BASE_URL = "http://feeds.example.test"


@dataclass
class Row:
    name: str
    processes: str
    unit: str
    baseline: str
    target: str
    #: Whether ``ratio`` (ours / baseline) and ``ours`` meet the target.
    meets: Callable[[float, float], bool] | None = None
    ours: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    ours_cpu: list[float] = field(default_factory=list)
    base_cpu: list[float] = field(default_factory=list)
    #: (p50, p99) latencies in ms, a pair per round.
    ours_ms: list[tuple[float, float]] = field(default_factory=list)
    base_ms: list[tuple[float, float]] = field(default_factory=list)

    @staticmethod
    def median(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    @property
    def ratio(self) -> float:
        return self.median(self.ours) / self.median(self.base) if self.base else float("nan")

    def cells(self) -> list[str]:
        ours, base = self.median(self.ours), self.median(self.base)
        met = ""
        if self.meets is not None and self.base:
            met = "met" if self.meets(ours, self.ratio) else "MISSED"
        cpu = ""
        if self.ours_cpu:
            cpu = f"{self.median(self.ours_cpu):,.0f}"
            if self.base_cpu:
                cpu += f" / {self.median(self.base_cpu):,.0f}"
                cpu += f" ({self.median(self.ours_cpu) / self.median(self.base_cpu):.2f}x)"
        return [
            self.name,
            self.processes,
            f"{ours:,.0f} {self.unit}",
            f"{base:,.0f} ({self.baseline})" if self.base else "",
            f"{self.ratio:.2f}" if self.base else "",
            self.target,
            met,
            cpu,
        ]


HEADER = (
    "| path | processes | ours | baseline | ratio | target | | CPU us a request, ours / base |\n"
    "|---|---|---|---|---|---|---|---|"
)


def show(row: Row) -> None:
    print("| " + " | ".join(row.cells()) + " |", flush=True)


def show_latency(row: Row) -> None:
    """A row of latencies: the median p50 and p99 of the rounds, ours and the baseline's."""

    def pair(values: list[tuple[float, float]]) -> str:
        p50 = Row.median([v[0] for v in values])
        p99 = Row.median([v[1] for v in values])
        return f"{p50:.2f} / {p99:.2f} ms"

    cells = row.cells()
    cells[2] = pair(row.ours_ms)
    cells[3] = f"{pair(row.base_ms)} ({row.baseline})"
    cells[4] = cells[6] = ""
    print("| " + " | ".join(cells) + " |", flush=True)


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path, stack: contextlib.ExitStack):
        self.args = args
        self.workdir = workdir
        self.stack = stack
        self.rows: list[Row] = []

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def wrk(
        self, pgid: int, url: str, headers: dict[str, str], connections: int
    ) -> tuple[float, float]:
        load = wrk(
            url,
            duration=self.args.duration,
            connections=connections,
            headers={"Accept-Encoding": "identity", **headers},
            pgids=(pgid,),
        )
        if load.errors:
            print(f"  wrk errors on {url}: {load.errors}", file=sys.stderr, flush=True)
        return load.rate, load.cpu_us

    # -- reading ------------------------------------------------------------------------------

    def reading(self) -> None:
        database = f"sqlite:///{self.workdir / 'read.sqlite3'}"
        body = self.workdir / "recent.xml"
        for processes in (1, 4):
            with contextlib.ExitStack() as stack:
                ours = stack.enter_context(
                    UwsgiServer(
                        database,
                        self.workdir / "read-archive",
                        self.workdir / f"read-{processes}",
                        page_size=PAGE_SIZE,
                        processes=processes,
                        extra_env={"SIMPLEFEED_BASE_URL": BASE_URL},
                    )
                )
                if processes == 1:
                    self.seed_reads(ours)
                    body.write_bytes(httpx.get(ours.url("/recent"), headers=IDENTITY).content)
                ours.wait_all_workers()
                mini, base = minimal_falcon(
                    f"minimal-{processes}", self.workdir, body, processes=processes
                )
                stack.callback(mini.stop)
                self.read_rows(ours, mini.process.pid, base + "/recent", processes)

    def seed_reads(self, server: UwsgiServer) -> None:
        events = [
            {
                "title": f"order {i} shipped",
                "content": {"order": i, "items": list(range(i % 7)), "note": "x" * 80},
                "categories": [{"term": "orders"}],
            }
            for i in range(READ_ENTRIES)
        ]
        server.publish(events)
        time.sleep(1.1)  # Last-Modified settles, so the answers are final.

    def read_rows(self, ours: UwsgiServer, base_pgid: int, base: str, processes: int) -> None:
        assert ours.process is not None
        pgid, recent = ours.process.pid, ours.url("/recent")
        etag = httpx.get(recent, headers=IDENTITY).headers["etag"]
        base_etag = httpx.get(base, headers=IDENTITY).headers["etag"]
        assert (
            httpx.get(recent, headers=IDENTITY).content == httpx.get(base, headers=IDENTITY).content
        )
        p = str(processes)
        r304 = self.add(
            Row("/recent 304", p, "req/s", "minimal falcon 304", ">= 0.80", _ratio(0.8))
        )
        r200 = self.add(
            Row(
                "/recent 200, unchanged",
                p,
                "req/s",
                "minimal falcon, same bytes",
                ">= 0.70",
                _ratio(0.7),
            )
        )
        close = self.add(
            Row(
                "/recent 304, a connection per request",
                p,
                "req/s",
                "ours, kept alive",
                ">= 0.50",
                _ratio(0.5),
            )
        )
        # Warm both up. A worker's first answers cost more, and so does each way's first in ours.
        for target in ((pgid, recent, etag), (base_pgid, base, base_etag)):
            wrk(
                target[1],
                duration=1,
                connections=READ_CONNECTIONS,
                headers={**IDENTITY, "If-None-Match": target[2]},
            )
        for _ in range(self.args.rounds):
            for row, mine, theirs in (
                (r304, ({"If-None-Match": etag}, recent), ({"If-None-Match": base_etag}, base)),
                (r200, ({}, recent), ({}, base)),
            ):
                rate, cpu = self.wrk(pgid, mine[1], mine[0], READ_CONNECTIONS)
                row.ours.append(rate)
                row.ours_cpu.append(cpu)
                rate, cpu = self.wrk(base_pgid, theirs[1], theirs[0], READ_CONNECTIONS)
                row.base.append(rate)
                row.base_cpu.append(cpu)
            inm = {"If-None-Match": etag}
            rate, cpu = self.wrk(pgid, recent, {**inm, "Connection": "close"}, READ_CONNECTIONS)
            close.ours.append(rate)
            close.ours_cpu.append(cpu)
            rate, cpu = self.wrk(pgid, recent, inm, READ_CONNECTIONS)
            close.base.append(rate)
            close.base_cpu.append(cpu)
        for row in (r304, r200, close):
            show(row)
        if processes == 1:
            cpu_row = self.add(
                Row(
                    "CPU per /recent 304",
                    p,
                    "us",
                    "minimal falcon's",
                    "<= 1.25x",
                    lambda o, r: r <= 1.25,
                )
            )
            cpu_row.ours, cpu_row.base = r304.ours_cpu, r304.base_cpu
            show(cpu_row)

    # -- publishing ---------------------------------------------------------------------------

    def publishing(self) -> None:
        kinds = ["sqlite"] + (["postgres"] if self.args.postgres_url else [])
        databases = publish.Databases(self.workdir, self.args.postgres_url)
        self.stack.callback(databases.close)
        for kind in kinds:
            for processes in (1, 4):
                with contextlib.ExitStack() as stack:
                    servers = {}
                    for app in ("simplefeed", "baseline"):
                        label = f"{kind}-{app}-{processes}"
                        url = databases.new(kind, label)
                        stack.callback(databases.drop, url)
                        servers[app] = stack.enter_context(
                            publish.serve(app, url, self.workdir / label, processes)
                        )
                    self.publish_rows(kind, processes, servers)

    def publish_rows(self, kind: str, processes: int, servers: dict[str, UwsgiServer]) -> None:
        db = "SQLite" if kind == "sqlite" else "PostgreSQL"
        p = str(processes)
        cells = [
            (
                Row(
                    f"single event, {db}, 8 producers",
                    p,
                    "events/s",
                    "one-insert app",
                    ">= 0.85",
                    _ratio(0.85),
                ),
                "single",
                8,
            )
        ]
        if processes == 4:
            cells.append(
                (
                    Row(
                        f"single event, {db}, 1 producer: p50 / p99 latency",
                        p,
                        "ms",
                        "one-insert app",
                        "no longer than before group commit",
                    ),
                    "single",
                    1,
                )
            )
            cells.append(
                (
                    Row(
                        f"single event, {db}, 64 producers",
                        p,
                        "events/s",
                        "one-insert app at 64",
                        ">= 2.0 (group commit)",
                        _ratio(2.0),
                    ),
                    "single",
                    64,
                )
            )
            if kind == "sqlite":
                batch_target = (">= 30,000 and >= 0.40", lambda o, r: o >= 30_000 and r >= 0.4)
            else:
                batch_target = (">= 0.40", _ratio(0.4))
            cells.append(
                (
                    Row(
                        f"batch of 100, {db}",
                        p,
                        "events/s",
                        "one-insert app",
                        batch_target[0],
                        batch_target[1],
                    ),
                    "batch",
                    8,
                )
            )
        for row, mode, connections in cells:
            self.add(row)
            for round_ in range(self.args.rounds):
                for app in ("simplefeed", "baseline"):
                    server = servers[app]
                    assert server.process is not None
                    token = server.token if app == "simplefeed" else None
                    url = server.url("/entries")
                    if round_ == 0:
                        publish.run_wrk(
                            url, publish.body(mode), token, 1, connections, self.workdir
                        )
                    before = group_cpu(server.process.pid)
                    result = publish.run_wrk(
                        url,
                        publish.body(mode),
                        token,
                        self.args.duration,
                        connections,
                        self.workdir,
                    )
                    cpu = group_cpu(server.process.pid) - before
                    if result.non_2xx:
                        print(
                            f"  {app}: {result.non_2xx} answers not 2xx",
                            file=sys.stderr,
                            flush=True,
                        )
                    events = result.rps * publish.events_per_request(mode)
                    cpu_us = cpu * 1e6 / max(1, result.requests)
                    (row.ours if app == "simplefeed" else row.base).append(events)
                    (row.ours_cpu if app == "simplefeed" else row.base_cpu).append(cpu_us)
                    latency = (result.p50_ms, result.p99_ms)
                    (row.ours_ms if app == "simplefeed" else row.base_ms).append(latency)
            if connections == 1:
                show_latency(row)
            else:
                show(row)
        publish.check_feed(servers["simplefeed"].database_url)

    # -- consuming ----------------------------------------------------------------------------

    def consuming(self) -> None:
        row = self.add(
            Row(
                'catch-up, Consumer(parser="lxml", checkpoint_every="page")',
                "2",
                "entries/s",
                "lxml extracting every field",
                "keeps its speed (0.25)",
                _ratio(0.25),
            )
        )
        with consume.seeded(self.args.entries) as (server, workdir):
            for round_ in range(self.args.rounds):
                state = workdir / f"state-{round_}.sqlite3"
                argv = [sys.executable, str(consume.CHILD), server.url("/recent"), str(state)]
                done = subprocess.run(
                    [*argv, "--parser", "lxml", "--checkpoint", "page", "--freeze-gc"],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                result = json.loads(done.stdout.strip().splitlines()[-1])
                if result["entries"] != self.args.entries:
                    raise SystemExit(f"read {result['entries']} entries of {self.args.entries}")
                row.ours.append(result["entries"] / result["seconds"])
                row.base.append(extract_rate(server.url("/recent")))
        show(row)

    # -- long-polls ---------------------------------------------------------------------------

    def long_polls(self) -> None:
        with longpoll.fresh_server() as server:
            run = longpoll.follow(server, "wait", 0.0, 500, self.args.events, 1.0, 1)
        p50 = statistics.median(run.samples) * 1000
        p99 = longpoll.percentile(run.samples, 0.99) * 1000
        row = self.add(
            Row(
                "long-poll, 500 consumers waiting: publish to delivery, p50 / p99",
                "4",
                "ms",
                "",
                "p50 <= 50, p99 <= 250, none missed",
            )
        )
        row.ours = [p50]
        cells = row.cells()
        cells[2] = f"{p50:,.0f} / {p99:,.0f} ms ({len(run.samples)} samples, {run.missing} missed)"
        cells[6] = "met" if p50 <= 50 and p99 <= 250 and not run.missing else "MISSED"
        print("| " + " | ".join(cells) + " |", flush=True)
        self.longpoll_cells = cells


IDENTITY = {"Accept-Encoding": "identity"}


def _ratio(target: float) -> Callable[[float, float], bool]:
    return lambda ours, ratio: ratio >= target


def extract_rate(url: str) -> float:
    """Return the entries per second of a reader that only extracts every field with lxml.

    It reads each element's text and attributes, with no checks. It runs over every document of
    the feed held in memory.
    """
    documents = feed_documents(url)
    started = time.perf_counter()
    entries = fields = 0
    for _, body in documents:
        root = etree.fromstring(body)
        for entry in root.iterfind("{http://www.w3.org/2005/Atom}entry"):
            entries += 1
            for element in entry.iter():
                fields += len(element.attrib) + (element.text is not None)
    return entries / (time.perf_counter() - started)


@contextlib.contextmanager
def timed(what: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    print(f"  ({what}: {time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two rounds of 2 s a cell")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per wrk run")
    parser.add_argument("--entries", type=int, default=20_000, help="in the consumer's feed")
    parser.add_argument("--events", type=int, default=8, help="published to 500 waiting consumers")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("SIMPLEFEED_BENCH_POSTGRES_URL")
        or os.environ.get("SIMPLEFEED_TEST_POSTGRES_URL"),
    )
    parser.add_argument("--only", default="read,publish,consume,longpoll")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.duration, args.entries, args.events = 2, 2.0, 20_000, 4
    publish.ensure_wrk()
    started = time.monotonic()
    info = machine()
    for key, value in info.items():
        print(f"{key}: {value}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if not args.postgres_url:
        print("PostgreSQL rows skipped: set SIMPLEFEED_TEST_POSTGRES_URL or --postgres-url")
    print()
    print(HEADER, flush=True)
    only = args.only.split(",")
    with tempfile.TemporaryDirectory(prefix="sf-hot-") as tmp, contextlib.ExitStack() as stack:
        bench = Bench(args, Path(tmp), stack)
        for name, job in (
            ("read", bench.reading),
            ("publish", bench.publishing),
            ("consume", bench.consuming),
            ("longpoll", bench.long_polls),
        ):
            if name in only:
                with timed(name):
                    job()
    print(f"\n({time.monotonic() - started:.0f} s; load average now {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Publish throughput of Simplefeed under uWSGI, against the ceiling of this machine.

    .venv/bin/python bench/publish.py                 # everything (about 8 minutes)
    .venv/bin/python bench/publish.py --quick         # shorter runs, no 1,000,000-entry phase
    .venv/bin/python bench/publish.py --help

It runs all on 127.0.0.1. Every server is started here and stopped at the end. It has two
phases.

1. Throughput. It runs for each database and each uWSGI process count (1 and 4). The databases
   are a SQLite file and PostgreSQL at ``--postgres-url``. That URL defaults to
   ``$SIMPLEFEED_BENCH_POSTGRES_URL``, else ``$SIMPLEFEED_TEST_POSTGRES_URL``, else the
   database is skipped. It runs ``simplefeed serve``, with the shipped ``uwsgi.ini``, on a
   fresh database. Against it runs the baseline app (``bench/_publish_baseline.py``). That app
   is falcon. It parses the JSON and inserts one row per event with SQLAlchemy, in its own
   transaction, on the same engine settings. It runs under the *same* ``uwsgi.ini``, with only
   its ``module`` line swapped. Wrk POSTs single events and batches of 100, for ``--duration``
   seconds each, after a short warm-up. The table gives absolute rates, and Simplefeed /
   baseline in the same run.
2. Size. A feed seeded directly in the database with 1,000,000 entries runs against an empty
   feed. The entries are bulk-inserted, and the feed head is moved to 1,000,000. Every one of
   its 10,000 pages is archived for real. Each is rendered by Simplefeed's renderer and stored
   with its ETag. Some are spot-checked against ``Simplefeed.rerender``. Their static files are
   not written. The phase gives the append rate. It samples the RSS of every uWSGI worker
   (``/proc/<pid>/status``) across each run.

The load generator is wrk (``apt-get install -y wrk``). It is installed here if missing, when
run as root. Wrk is a separate C process with a static Lua-configured POST, holding the body,
Content-Type and producer token. Bodies carry no producer ids, so every request appends new
entries. After every Simplefeed run the database is checked. The head must equal the number of
entries. The sequence must be contiguous, and every full page archived.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from bench.servers import UwsgiServer  # noqa: E402

PAGE_SIZE = 100
BATCH = 100
SEEDED = 1_000_000
EVENT = {
    "title": "benchmark event",
    "content": "a benchmark event: a short text payload of about the size of a log line",
}


# -- machine ----------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")
    uwsgi = Path(sys.executable).with_name("uwsgi")
    uwsgi_version = subprocess.run([str(uwsgi), "--version"], capture_output=True, text=True)
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "uwsgi": uwsgi_version.stdout.strip(),
        "wrk": wrk_version[0].strip(),
        "kernel": platform.release(),
    }


def fsync_ms(directory: Path, count: int = 200) -> float:
    """Return the median latency of write + fsync of 100 bytes on ``directory``'s file system.

    Every durable commit pays it, as SQLite's WAL with synchronous=FULL or PostgreSQL's WAL
    flush. It varies with whatever else uses the disk. So it is measured at the start and at the
    end.
    """
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    times = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            os.write(fd, b"x" * 100)
            os.fsync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times) * 1000


def sqlite_commits_per_s(directory: Path, synchronous: str, seconds: float = 1.0) -> float:
    """Return the single-row write transactions per second SQLite makes on this disk.

    It uses one connection, WAL, and ``synchronous`` as given. That is SQLite's one-writer
    ceiling on this disk, without any Python web stack around it.
    """
    path = directory / f"commit-probe-{synchronous}.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, data TEXT)")
        count = 0
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()
        while time.perf_counter() < deadline:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (data) VALUES (?)", ("x" * 200,))
            conn.execute("COMMIT")
            count += 1
        return count / (time.perf_counter() - started)
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def ensure_wrk() -> None:
    if shutil.which("wrk"):
        return
    if os.geteuid() != 0:
        sys.exit("wrk is missing: install it with `apt-get install -y wrk` (as root)")
    print("installing wrk (apt-get install -y wrk) ...", flush=True)
    subprocess.run(["apt-get", "install", "-y", "wrk"], check=False, capture_output=True)
    if not shutil.which("wrk"):
        subprocess.run(["apt-get", "update"], check=True, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=True, capture_output=True)


# -- databases --------------------------------------------------------------------------------


class Databases:
    """Fresh databases, as SQLite files under ``workdir`` or PostgreSQL databases made here."""

    def __init__(self, workdir: Path, postgres_url: str | None) -> None:
        self.workdir = workdir
        self.postgres_url = postgres_url
        self.created: list[str] = []
        self.admin = (
            create_engine(postgres_url, isolation_level="AUTOCOMMIT") if postgres_url else None
        )

    def new(self, kind: str, label: str) -> str:
        if kind == "sqlite":
            path = self.workdir / label / "bench.sqlite3"
            path.parent.mkdir(parents=True, exist_ok=True)
            return f"sqlite:///{path}"
        assert self.admin is not None and self.postgres_url is not None
        name = f"sf_bench_{uuid.uuid4().hex[:10]}"
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        self.created.append(name)
        return make_url(self.postgres_url).set(database=name).render_as_string(hide_password=False)

    def drop(self, url: str) -> None:
        name = make_url(url).database
        if self.admin is None or name not in self.created:
            return
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self.created.remove(name)

    def close(self) -> None:
        for name in list(self.created):
            with contextlib.suppress(Exception), self.admin.connect() as conn:  # type: ignore[union-attr]
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        if self.admin is not None:
            self.admin.dispose()


def server_version(url: str) -> str:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                return "SQLite " + str(conn.execute(text("select sqlite_version()")).scalar())
            return str(conn.execute(text("show server_version")).scalar()).join(("PostgreSQL ", ""))
    finally:
        engine.dispose()


# -- servers ----------------------------------------------------------------------------------


def baseline_ini(workdir: Path) -> Path:
    """Write the project's uwsgi.ini with only the ``module`` line pointing at the baseline app."""
    source = (ROOT / "uwsgi.ini").read_text()
    swapped, count = re.subn(
        r"(?m)^module\s*=\s*simplefeed\.runtime\.wsgi:application\s*$",
        "module = bench._publish_baseline:application",
        source,
    )
    if count != 1:
        raise SystemExit(
            "uwsgi.ini has no `module = simplefeed.runtime.wsgi:application` line to swap"
        )
    path = workdir / "baseline-uwsgi.ini"
    path.write_text(swapped)
    return path


def create_baseline_table(url: str) -> None:
    from bench._publish_baseline import metadata

    engine = create_engine(url)
    try:
        metadata.create_all(engine)
    finally:
        engine.dispose()


@contextlib.contextmanager
def serve(app: str, url: str, workdir: Path, processes: int) -> Iterator[UwsgiServer]:
    workdir.mkdir(parents=True, exist_ok=True)
    ini = None
    if app == "baseline":
        create_baseline_table(url)
        ini = baseline_ini(workdir)
    server = UwsgiServer(
        url,
        workdir / "archive",
        workdir,
        page_size=PAGE_SIZE,
        processes=processes,
        ini=ini,
        startup_timeout=60.0,
    )
    with server:
        yield server


def workers(server: UwsgiServer) -> list[int]:
    assert server.process is not None
    master = server.process.pid
    try:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    except OSError:
        return []
    return [int(pid) for pid in children]


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class RssSampler:
    """Sample the VmRSS of every worker every ``interval`` seconds, in a thread."""

    def __init__(self, pids: list[int], interval: float = 0.5) -> None:
        self.pids = pids
        self.interval = interval
        self.samples: dict[int, list[int]] = {pid: [] for pid in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                break
        self.sample()

    def sample(self) -> None:
        for pid in self.pids:
            value = rss_kib(pid)
            if value is not None:
                self.samples[pid].append(value)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        """Return, in MiB, the largest worker's first and last sample, and the largest seen."""
        first = max((s[0] for s in self.samples.values() if s), default=0)
        last = max((s[-1] for s in self.samples.values() if s), default=0)
        peak = max((max(s) for s in self.samples.values() if s), default=0)
        return {"first_mib": first / 1024, "last_mib": last / 1024, "peak_mib": peak / 1024}


_last_stat: list[tuple[float, dict[int, int]]] = []


def proc_stat(pid: int) -> tuple[str, list[str]] | None:
    """Return a process's name and the fields after it in ``/proc/<pid>/stat``, or None."""
    try:
        head, _, tail = Path(f"/proc/{pid}/stat").read_text().rpartition(")")
    except OSError:
        return None
    return head.partition("(")[2], tail.split()


def cpu_ticks(fields: list[str]) -> int:
    """Return user plus system time, in clock ticks, from :func:`proc_stat`'s fields."""
    return int(fields[11]) + int(fields[12])


def background_cpu() -> float:
    """Return the share of the machine's CPU time that other processes used since the last call.

    The benchmark's processes are not counted. They are itself and its descendants, the
    servers, their workers and wrk. PostgreSQL's are not counted either, because it is shared
    and so counted as ours. Another job running meanwhile skews the figures.
    """
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = proc_stat(int(entry))
        if stat is None:
            continue
        pid = int(entry)
        names[pid], fields = stat
        parents[pid] = int(fields[1])
        ticks[pid] = cpu_ticks(fields)
    ours = {os.getpid()}
    changed = True
    while changed:
        changed = False
        for pid, parent in parents.items():
            if parent in ours and pid not in ours:
                ours.add(pid)
                changed = True
    others = {pid: t for pid, t in ticks.items() if pid not in ours and names[pid] != "postgres"}
    now = time.monotonic()
    share = 0.0
    if _last_stat:
        then, before = _last_stat[-1]
        used = sum(t - before.get(pid, t) for pid, t in others.items())
        hz = os.sysconf("SC_CLK_TCK")
        share = used / hz / max(1e-9, (now - then) * (os.cpu_count() or 1))
    _last_stat[:] = [(now, others)]
    return share


# -- load -------------------------------------------------------------------------------------


@dataclass
class WrkResult:
    requests: int
    seconds: float
    rps: float
    non_2xx: int
    socket_errors: str
    p50_ms: float
    p99_ms: float


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(value: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value)
    if match is None:
        return float("nan")
    return float(match.group(1)) * _UNITS[match.group(2)]


def run_wrk(
    url: str, body: str, token: str | None, seconds: float, connections: int, workdir: Path
) -> WrkResult:
    script = workdir / "post.lua"
    lines = [
        'wrk.method = "POST"',
        'wrk.headers["Content-Type"] = "application/json"',
        f"wrk.body = [==[{body}]==]",
    ]
    if token:
        lines.append(f'wrk.headers["Authorization"] = "Bearer {token}"')
    script.write_text("\n".join(lines) + "\n")
    command = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "30s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    requests_match = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m)", out)
    assert requests_match is not None, out
    requests = int(requests_match.group(1))
    elapsed = _ms(requests_match.group(2) + requests_match.group(3)) / 1000
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    # The latency distribution's own lines, since "89.50%" in the thread stats also ends in 50%.
    p50 = re.search(r"^\s*50%\s+(\S+)", out, re.M)
    p99 = re.search(r"^\s*99%\s+(\S+)", out, re.M)
    return WrkResult(
        requests=requests,
        seconds=elapsed,
        rps=requests / elapsed,
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=errors.group(1).strip() if errors else "none",
        p50_ms=_ms(p50.group(1)) if p50 else float("nan"),
        p99_ms=_ms(p99.group(1)) if p99 else float("nan"),
    )


def body(mode: str) -> str:
    if mode == "single":
        return json.dumps(EVENT)
    return json.dumps([EVENT] * BATCH)


def events_per_request(mode: str) -> int:
    return 1 if mode == "single" else BATCH


# -- checks -----------------------------------------------------------------------------------


def check_feed(url: str) -> dict[str, int]:
    """Check that head = entries, the sequence is 1..head, and every full page is archived once.

    It runs one statement, so one snapshot. Requests still in flight when wrk stops may commit
    meanwhile.
    """
    feed = "(SELECT id FROM feeds WHERE name = 'events')"
    query = (
        f"SELECT (SELECT head_seq FROM feeds WHERE name = 'events'),"
        f" (SELECT count(*) FROM entries WHERE feed_id = {feed}),"
        f" (SELECT min(seq) FROM entries WHERE feed_id = {feed}),"
        f" (SELECT max(seq) FROM entries WHERE feed_id = {feed}),"
        f" (SELECT count(*) FROM pages WHERE feed_id = {feed}),"
        f" (SELECT min(number) FROM pages WHERE feed_id = {feed}),"
        f" (SELECT max(number) FROM pages WHERE feed_id = {feed})"
    )
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            head, count, low, high, pages, first_page, last_page = conn.execute(text(query)).one()
    finally:
        engine.dispose()
    assert head == count, f"head {head} but {count} entries"
    if count:
        assert (low, high) == (1, head), f"sequence spans {low}..{high}, head {head}"
    assert pages == head // PAGE_SIZE, f"{pages} pages frozen for head {head}"
    if pages:
        assert (first_page, last_page) == (1, pages)
    return {"entries": int(count), "pages": int(pages)}


def count_baseline(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM baseline_events")).scalar_one())
    finally:
        engine.dispose()


# -- seeding ----------------------------------------------------------------------------------


def seed(url: str, workdir: Path, n: int) -> dict[str, float]:
    """Put ``n`` entries in the default feed, move its head, and archive every full page."""
    from simplefeed import archive, atom
    from simplefeed.model import ArchivedPage, Entry, Event
    from simplefeed.rules import paging
    from simplefeed.service import Simplefeed
    from simplefeed.settings import Settings
    from simplefeed.store.sql import page_row
    from simplefeed.store.tables import pages as pages_table

    started = time.monotonic()
    core = Simplefeed(Settings(database_url=url, archive_dir=workdir / "archive"))
    feed = core.feed("events")
    event = Event.from_json(dict(EVENT))
    fingerprint = event.fingerprint()
    data = json.dumps(event.to_json(), ensure_ascii=False, separators=(",", ":"))
    now = time.time_ns() // 1000
    base = now - 3_600_000_000 - n  # An hour ago, 1 µs apart, so updated strictly increases.
    ids = [f"urn:uuid:{uuid.uuid4()}" for _ in range(n)]
    rows = (
        (feed.id, seq, ids[seq - 1], base + seq, base + seq, fingerprint, data)
        for seq in range(1, n + 1)
    )
    engine = create_engine(url)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        if make_url(url).get_backend_name() == "postgresql":
            with cursor.copy(  # type: ignore[attr-defined]
                "COPY entries (feed_id, seq, entry_id, updated_us, published_us, fingerprint,"
                " data) FROM STDIN"
            ) as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            cursor.execute("BEGIN IMMEDIATE")
            cursor.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        cursor.execute(
            f"UPDATE feeds SET head_seq = {n}, head_updated_us = {base + n},"
            f" modified_us = {now} WHERE id = {feed.id}"
        )
        raw.commit()
    finally:
        raw.close()
    inserted = time.monotonic()
    feed = core.feed("events")
    pages = []
    for number in range(1, n // feed.page_size + 1):
        first, last = paging.seq_range(number, feed.page_size)
        entries = tuple(
            Entry(seq=s, id=ids[s - 1], updated_us=base + s, published_us=base + s, event=event)
            for s in range(last, first - 1, -1)
        )
        body_ = atom.render(core._chain.document(feed, "archive", number, entries))
        pages.append(ArchivedPage(feed.id, number, body_, archive.strong_etag(body_), now))
        if len(pages) == 500 or number == n // feed.page_size:
            with engine.begin() as conn:
                conn.execute(pages_table.insert(), [page_row(p, feed.page_size) for p in pages])
            pages = []
    engine.dispose()
    # The seeded pages are what archiving would store. Compare them with a render from the rows.
    for number in (1, n // feed.page_size // 2, n // feed.page_size):
        stored = core.store.page(feed.id, number)
        assert stored is not None and stored.body == core.rerender(feed, number), number
    core.store.close()
    return {"insert_s": inserted - started, "freeze_s": time.monotonic() - inserted}


# -- phases -----------------------------------------------------------------------------------


@dataclass
class Run:
    db: str
    processes: int
    mode: str
    app: str
    wrk: WrkResult
    events_per_s: float
    rss: dict[str, float] = field(default_factory=dict)
    feed: dict[str, int] = field(default_factory=dict)
    size: str = "empty"
    round: int = 1


def measure(
    server: UwsgiServer,
    app: str,
    kind: str,
    processes: int,
    mode: str,
    args: argparse.Namespace,
    workdir: Path,
    size: str = "empty",
    warmup: bool = True,
    round_: int = 1,
) -> Run:
    token = server.token if app == "simplefeed" else None
    url = server.url("/entries")
    if warmup:
        run_wrk(url, body(mode), token, args.warmup, args.connections, workdir)
    with RssSampler(workers(server)) as rss:
        result = run_wrk(url, body(mode), token, args.duration, args.connections, workdir)
    run = Run(
        kind,
        processes,
        mode,
        app,
        result,
        result.rps * events_per_request(mode),
        rss.summary(),
        size=size,
        round=round_,
    )
    if app == "simplefeed":
        run.feed = check_feed(server.database_url)
    print(
        f"  {kind:8} p={processes} {mode:6} {app:10} {size:5} r{round_} {result.rps:8.1f} req/s"
        f" {run.events_per_s:9.1f} ev/s  p50 {result.p50_ms:.2f} ms  p99 {result.p99_ms:.2f} ms"
        f"  non-2xx {result.non_2xx}  rss {rss.summary()['last_mib']:.1f} MiB"
        f"  background cpu {background_cpu():.0%}",
        flush=True,
    )
    return run


def throughput(dbs: Databases, kind: str, args: argparse.Namespace, workdir: Path) -> list[Run]:
    """Run both apps at once, and measure them in alternation, round after round.

    An idle app costs nothing. A disturbance from outside hits both. The median of the rounds
    is reported.
    """
    runs = []
    for processes in args.processes:
        with contextlib.ExitStack() as stack:
            servers: dict[str, UwsgiServer] = {}
            urls: dict[str, str] = {}
            for app in ("simplefeed", "baseline"):
                label = f"{kind}-{app}-{processes}"
                urls[app] = url = dbs.new(kind, label)
                stack.callback(dbs.drop, url)
                servers[app] = stack.enter_context(serve(app, url, workdir / label, processes))
            for round_ in range(1, args.rounds + 1):
                for mode in ("single", "batch"):
                    for app in ("simplefeed", "baseline"):
                        runs.append(
                            measure(
                                servers[app],
                                app,
                                kind,
                                processes,
                                mode,
                                args,
                                workdir,
                                warmup=round_ == 1,
                                round_=round_,
                            )
                        )
            stored = count_baseline(urls["baseline"])
            sent = sum(
                r.wrk.requests * events_per_request(r.mode)
                for r in runs
                if r.app == "baseline" and r.processes == processes
            )
            assert stored >= sent, f"baseline stored {stored} rows for {sent} acknowledged"
    return runs


def size_phase(dbs: Databases, kind: str, args: argparse.Namespace, workdir: Path) -> list[Run]:
    """Serve an empty feed and one seeded with 1,000,000 entries at once.

    They run with the most uWSGI processes asked for. They are measured in alternation, round
    after round.
    """
    runs = []
    processes = max(args.processes)
    with contextlib.ExitStack() as stack:
        servers: dict[str, UwsgiServer] = {}
        for size in ("empty", "1M"):
            url = dbs.new(kind, f"{kind}-size-{size}")
            stack.callback(dbs.drop, url)
            home = workdir / f"{kind}-size-{size}"
            home.mkdir(parents=True, exist_ok=True)
            if size == "1M":
                UwsgiServer(url, home / "archive", home, page_size=PAGE_SIZE).migrate()
                timing = seed(url, home, args.size_entries)
                print(
                    f"  seeded {args.size_entries:,} entries in {timing['insert_s']:.1f} s, froze"
                    f" {args.size_entries // PAGE_SIZE:,} pages in {timing['freeze_s']:.1f} s",
                    flush=True,
                )
            servers[size] = stack.enter_context(serve("simplefeed", url, home, processes))
        for round_ in range(1, args.rounds + 1):
            for mode in ("single", "batch"):
                for size in ("empty", "1M"):
                    runs.append(
                        measure(
                            servers[size],
                            "simplefeed",
                            kind,
                            processes,
                            mode,
                            args,
                            workdir,
                            size,
                            warmup=round_ == 1,
                            round_=round_,
                        )
                    )
    return runs


# -- report -----------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _label(mode: str) -> str:
    return "single event" if mode == "single" else f"batch of {BATCH}"


def report(info: dict[str, str], runs: list[Run], sizes: list[Run]) -> str:
    """Report medians over the rounds.

    A ratio is the median of the rounds' ratios. Each round measures both sides within seconds
    of each other.
    """
    out = [
        f"machine: {info['nproc']} CPUs, {info['cpu']}; Python {info['python']};"
        f" SQLite {info['sqlite']}; {info.get('postgres', 'PostgreSQL: not run')};"
        f" uWSGI {info['uwsgi']}; {info['wrk']}; Linux {info['kernel']};"
        f" fsync median {info.get('fsync_start', '?')} ms at the start,"
        f" {info.get('fsync_end', '?')} ms at the end; raw SQLite single-row write"
        f" transactions/s (WAL): {info.get('sqlite_full', '?')} with synchronous=FULL,"
        f" {info.get('sqlite_normal', '?')} with NORMAL",
        "",
        "| database | uWSGI processes | request | Simplefeed events/s | baseline events/s"
        " | Simplefeed / baseline (rounds) | Simplefeed p50 / p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    cells: dict[tuple[str, int, str], dict[str, dict[int, Run]]] = {}
    for r in runs:
        cells.setdefault((r.db, r.processes, r.mode), {}).setdefault(r.app, {})[r.round] = r
    for (db, processes, mode), apps in cells.items():
        ours = apps.get("simplefeed", {})
        base = apps.get("baseline", {})
        ratios = [ours[n].events_per_s / base[n].events_per_s for n in ours if n in base]
        rounds = ", ".join(f"{x:.0%}" for x in ratios)
        p50 = _median([r.wrk.p50_ms for r in ours.values()])
        p99 = _median([r.wrk.p99_ms for r in ours.values()])
        out.append(
            f"| {db} | {processes} | {_label(mode)}"
            f" | {_median([r.events_per_s for r in ours.values()]):,.0f}"
            f" | {_median([r.events_per_s for r in base.values()]):,.0f}"
            f" | {_median(ratios):.0%} ({rounds}) | {p50:.1f} / {p99:.1f} |"
        )
    if sizes:
        out += [
            "",
            "| database | request | empty feed events/s | seeded feed events/s"
            " | seeded / empty (rounds) | worker RSS MiB, empty: first / last / peak"
            " | worker RSS MiB, seeded: first / last / peak |",
            "|---|---|---|---|---|---|---|",
        ]
        grid: dict[tuple[str, str], dict[str, dict[int, Run]]] = {}
        for r in sizes:
            grid.setdefault((r.db, r.mode), {}).setdefault(r.size, {})[r.round] = r
        for (db, mode), by_size in grid.items():
            empty, big = by_size.get("empty", {}), by_size.get("1M", {})
            ratios = [big[n].events_per_s / empty[n].events_per_s for n in big if n in empty]
            rounds = ", ".join(f"{x:.0%}" for x in ratios)

            def mem(xs: dict[int, Run]) -> str:
                if not xs:
                    return "-"
                ordered = [xs[n] for n in sorted(xs)]
                first = ordered[0].rss["first_mib"]
                last = ordered[-1].rss["last_mib"]
                peak = max(x.rss["peak_mib"] for x in ordered)
                return f"{first:.1f} / {last:.1f} / {peak:.1f}"

            out.append(
                f"| {db} | {_label(mode)}"
                f" | {_median([r.events_per_s for r in empty.values()]):,.0f}"
                f" | {_median([r.events_per_s for r in big.values()]):,.0f}"
                f" | {_median(ratios):.0%} ({rounds}) | {mem(empty)} | {mem(big)} |"
            )
    errors = [r for r in [*runs, *sizes] if r.wrk.non_2xx]
    if errors:
        out.append("")
        out += [f"NON-2xx: {r.db} {r.app} {r.mode} {r.wrk.non_2xx}" for r in errors]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measured run")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds per cell (median reported)"
    )
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up per run")
    parser.add_argument("--connections", type=int, default=8, help="wrk connections")
    parser.add_argument(
        "--processes", default="1,4", help="uWSGI process counts, comma-separated (default 1,4)"
    )
    parser.add_argument("--databases", default="sqlite,postgres", help="sqlite,postgres")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("SIMPLEFEED_BENCH_POSTGRES_URL")
        or os.environ.get("SIMPLEFEED_TEST_POSTGRES_URL"),
        help="admin URL of a PostgreSQL server (databases are created and dropped on it)",
    )
    parser.add_argument("--no-size", action="store_true", help="skip the 1,000,000-entry phase")
    parser.add_argument(
        "--size-entries", type=int, default=SEEDED, help="entries seeded for the size phase"
    )
    parser.add_argument("--no-throughput", action="store_true", help="only the size phase")
    parser.add_argument("--quick", action="store_true", help="3 s runs, no size phase")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    if args.quick:
        args.duration, args.warmup, args.rounds, args.no_size = 3.0, 1.0, 1, True
    args.processes = [int(p) for p in args.processes.split(",")]
    kinds = [k.strip() for k in args.databases.split(",") if k.strip()]
    if "postgres" in kinds and not args.postgres_url:
        print("PostgreSQL skipped: set SIMPLEFEED_BENCH_POSTGRES_URL or --postgres-url")
        kinds.remove("postgres")
    # SIGTERM (timeout, kill) unwinds like Ctrl-C. Servers are stopped, databases dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ensure_wrk()
    info = machine()
    print(f"machine: {info['nproc']} CPUs, {info['cpu']}, Python {info['python']}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="sf-bench-publish-"))
    info["fsync_start"] = f"{fsync_ms(workdir):.2f}"
    info["sqlite_full"] = f"{sqlite_commits_per_s(workdir, 'FULL'):,.0f}"
    info["sqlite_normal"] = f"{sqlite_commits_per_s(workdir, 'NORMAL'):,.0f}"
    print(
        f"fsync: {info['fsync_start']} ms (median); raw SQLite single-row commits/s:"
        f" {info['sqlite_full']} with synchronous=FULL, {info['sqlite_normal']} with NORMAL",
        flush=True,
    )
    dbs = Databases(workdir, args.postgres_url if "postgres" in kinds else None)
    runs: list[Run] = []
    sizes: list[Run] = []
    started = time.monotonic()
    try:
        if "postgres" in kinds:
            info["postgres"] = server_version(args.postgres_url)
        for kind in kinds:
            if not args.no_throughput:
                runs += throughput(dbs, kind, args, workdir)
            if not args.no_size:
                sizes += size_phase(dbs, kind, args, workdir)
        info["fsync_end"] = f"{fsync_ms(workdir):.2f}"
    finally:
        dbs.close()
        shutil.rmtree(workdir, ignore_errors=True)
    table = report(info, runs, sizes)
    print(f"\n({time.monotonic() - started:.0f} s)\n")
    print(table)
    if args.json:
        args.json.write_text(
            json.dumps({"machine": info, "runs": [asdict(r) for r in runs + sizes]}, indent=2)
        )


if __name__ == "__main__":
    main()

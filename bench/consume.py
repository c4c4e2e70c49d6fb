"""Consumer benchmark, a cold-start catch-up over a long history against the parse rate.

One command, from the checkout::

    .venv/bin/python bench/consume.py            # about 4 minutes on a quiet machine
    .venv/bin/python bench/consume.py --quick    # 10,000 entries, about a minute

It starts Simplefeed as shipped on a temporary SQLite database. That is ``simplefeed serve``,
uWSGI with ``uwsgi.ini`` and two processes, via ``bench/servers.py``. It seeds the database
through the service's own publish path, over HTTP (``POST /entries``, batches of 1,000). The
default feed gets 100,000 entries, in 1,000 archived pages of 100. A second feed gets 10,000
entries, in 100 pages. Most are JSON events (85 %), with some text, HTML and XHTML ones. Then
come three steps.

1. **Parsing alone.** Every page's bytes are fetched once. Then ``feedparser.parse`` is timed
   over all of them, called as the consumer calls it. That gives the raw feedparser rate. The
   same goes for ``parse_page(..., parser="lxml")``, the strict lxml reading the consumer
   does. It reads every field and decodes JSON values. That gives the raw lxml rate.
2. **Cold-start catch-up.** A fresh process with a fresh state file reads the whole default
   feed, with a handler that counts. It walks back 1,000 pages, then forward again. It runs
   with feedparser (the default) and with ``--parser lxml``. It checkpoints after each page,
   and after each entry. Every check is on, for fidelity and digests. The step gives entries
   per second, and each consumer's rate against its raw rate. Feedparser's goes against
   ``feedparser.parse``. Lxml's goes against ``parse_page(..., parser="lxml")``. It runs once
   more with lxml and the garbage collector frozen before the catch-up (``gc.freeze()``), as
   ``simplefeed consume`` does. That shows what an application that does the same gets. The
   library leaves the collector to it.
3. **Memory.** The same catch-up runs over the short and the long feed (100 and 1,000 pages).
   It gives the process's peak RSS. It runs again under tracemalloc for its peak. Both should
   stay flat in pages walked.

Targets come from issue #13. The feedparser consumer must reach 85 % of the raw feedparser rate
or more. The lxml consumer must reach 80 % of the raw lxml rate or more. Both run with
checkpoints per page. Each goes against the raw rate its own process measures right after it,
over the same pages. That is the "paired" rate, because on a shared machine the load changes
between steps. The first-measured raw rate is shown too. The figures and the reading of them
are in docs/benchmarks.md, section "Consuming". The option ``--json FILE`` also writes them as
JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import feedparser
import httpx
from lxml import etree

from bench._consume_run import feed_documents
from bench.servers import UwsgiServer
from simplefeed.client.parse import parse_page

PAGE_SIZE = 100
BATCH = 1000
CHILD = Path(__file__).resolve().parent / "_consume_run.py"
RAW_TARGET = 0.85
FAST_TARGET = 0.80


def event(i: int) -> dict[str, Any]:
    """Return the i-th event of the corpus, mostly JSON orders, with text, HTML and XHTML ones."""
    kind = i % 20
    base: dict[str, Any] = {
        "title": f"order {i} placed",
        "categories": ["orders", f"region-{i % 7}"],
        "links": [{"href": f"https://shop.example/orders/{i}", "rel": "related"}],
    }
    if kind == 0:
        base["content"] = f"Order {i} was placed by customer {i % 977}; 3 lines, 29.70 EUR."
    elif kind == 1:
        base["content"] = f"<p>Order <b>{i}</b> placed &amp; paid</p>"
        base["content_type"] = "html"
    elif kind == 2:
        base["content"] = f'<p>Order <em>{i}</em> <a href="https://shop.example/o/{i}">open</a></p>'
        base["content_type"] = "xhtml"
    else:
        lines = [
            {"sku": f"SKU-{(i * 7 + n) % 1000:04d}", "qty": 1 + n % 3, "price": "9.90"}
            for n in range(1 + i % 4)
        ]
        base["content"] = {
            "order": i,
            "customer": {"id": i % 977, "name": f"Customer {i % 977}", "country": "FR"},
            "lines": lines,
            "total": f"{9.9 * len(lines):.2f}",
            "note": "café ☕" if i % 5 == 0 else None,
        }
    return base


# -- helpers -----------------------------------------------------------------------------


def machine() -> dict[str, str]:
    model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "lxml": ".".join(map(str, etree.LXML_VERSION)),
        "libxml2": ".".join(map(str, etree.LIBXML_VERSION)),
        "feedparser": feedparser.__version__,
        "httpx": httpx.__version__,
        "load average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


TICK = os.sysconf("SC_CLK_TCK")


def cpu_sample() -> tuple[int, int]:
    """Return all and busy CPU time since boot, in clock ticks, over every CPU and process."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    total = sum(fields[:8])  # Guest time is already counted in user.
    return total, total - fields[3] - fields[4]  # Minus idle and iowait.


def busy_fraction(seconds: float = 1.0) -> float:
    """Return how busy the CPUs were over ``seconds``, from 0 to 1.

    It counts all of them, and every process.
    """
    total0, busy0 = cpu_sample()
    time.sleep(seconds)
    total1, busy1 = cpu_sample()
    return (busy1 - busy0) / max(1, total1 - total0)


def wait_until_quiet(limit: float, max_wait: float) -> float:
    """Wait until the CPUs are less than ``limit`` busy for three seconds running.

    It waits up to ``max_wait`` seconds. Other benchmarks on a shared machine would skew every
    figure. Returns how busy the CPUs were when the wait ended.
    """
    deadline = time.monotonic() + max_wait
    quiet = 0
    busy = busy_fraction()
    while time.monotonic() < deadline:
        busy = busy_fraction()
        quiet = quiet + 1 if busy < limit else 0
        if quiet >= 3:
            return busy
    print(f"    the machine stayed busy ({busy:.0%}); measuring anyway", file=sys.stderr)
    return busy


@contextlib.contextmanager
def step(what: str) -> Iterator[None]:
    print(f"... {what}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    yield
    print(f"    {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)


def seed(server: UwsgiServer, path: str, count: int, start: int = 0) -> None:
    with httpx.Client(headers={"Authorization": f"Bearer {server.token}"}, timeout=120) as client:
        for first in range(start, start + count, BATCH):
            batch = [event(i) for i in range(first, min(start + count, first + BATCH))]
            response = client.post(server.url(path), json=batch)
            if response.status_code != 201:
                raise SystemExit(f"seeding failed: {response.status_code} {response.text}")


@contextlib.contextmanager
def shipped(processes: int = 2) -> Iterator[tuple[UwsgiServer, Path]]:
    """Run Simplefeed as shipped, with pages of :data:`PAGE_SIZE`.

    It runs on a SQLite database in a temporary directory. Yields the server and the directory,
    which holds state files.
    """
    with tempfile.TemporaryDirectory(prefix="sf-consume-") as tmp:
        workdir = Path(tmp)
        with UwsgiServer.scratch(
            workdir / "server",
            page_size=PAGE_SIZE,
            processes=processes,
        ) as server:
            yield server, workdir


@contextlib.contextmanager
def seeded(entries: int) -> Iterator[tuple[UwsgiServer, Path]]:
    """Run :func:`shipped`, with its default feed seeded with ``entries`` events.

    The events come from the corpus, through its publish path.
    """
    with shipped() as (server, workdir):
        seed(server, "/entries", entries)
        yield server, workdir


def raw_rates(pages: list[tuple[str, bytes]]) -> dict[str, float]:
    """Return the entries per second of parsing alone, over bytes held in memory."""
    rates: dict[str, float] = {}
    started = time.perf_counter()
    entries = 0
    for _, body in pages:
        parsed = feedparser.parse(
            io.BytesIO(body), sanitize_html=False, resolve_relative_uris=False
        )
        entries += len(parsed.entries)
    rates["feedparser.parse"] = entries / (time.perf_counter() - started)
    started = time.perf_counter()
    entries = 0
    for url, body in pages:
        entries += len(parse_page(url, body, parser="lxml").entries)
    rates["parse_page lxml"] = entries / (time.perf_counter() - started)
    return rates


@dataclass
class Run:
    feed: str
    pages: int
    parser: str
    checkpoint: str
    traced: bool
    results: list[dict[str, Any]] = field(default_factory=list)
    #: The collector frozen before the catch-up, as ``simplefeed consume`` does.
    frozen: bool = False

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def rates(self) -> list[float]:
        return [float(r["entries"]) / float(r["seconds"]) for r in self.results]

    @property
    def paired(self) -> float:
        """Return the median of each run's rate against its paired raw rate.

        The raw rate is what the run's own process measured right after it, over the same bytes.
        """
        return statistics.median(
            float(r["entries"]) / float(r["seconds"]) / float(r["raw_rate"]) for r in self.results
        )


def cold_start(url: str, workdir: Path, run: Run, expected: int, quiet: Quiet) -> None:
    state = (
        workdir / f"state-{run.feed}-{run.parser}-{run.checkpoint}-{run.frozen}-{len(run.results)}"
    )
    state = state.with_suffix(".traced.sqlite3" if run.traced else ".sqlite3")
    argv = [sys.executable, str(CHILD), url, str(state), "--parser", run.parser]
    argv += ["--checkpoint", run.checkpoint] + (["--tracemalloc"] if run.traced else [])
    argv += ["--freeze-gc"] if run.frozen else []
    busy_before = quiet.wait()
    total0, busy0 = cpu_sample()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    total1, busy1 = cpu_sample()
    if done.returncode != 0:
        raise SystemExit(f"consumer failed:\n{done.stdout}\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["entries"] != expected:
        raise SystemExit(f"read {result['entries']} entries, expected {expected}")
    result["busy_before"] = busy_before
    # CPU time the rest of the machine used meanwhile, the server included, as a share of all
    # the CPUs. A benchmark running beside this one shows up here.
    others = (busy1 - busy0) / TICK - result["cpu_seconds"]
    result["others_share"] = max(0.0, others) / max(1e-9, (total1 - total0) / TICK)
    run.results.append(result)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{state}{suffix}").unlink(missing_ok=True)


@dataclass
class Quiet:
    limit: float
    max_wait: float

    def wait(self) -> float:
        return wait_until_quiet(self.limit, self.max_wait)


# -- the report --------------------------------------------------------------------------


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def report(
    info: dict[str, str],
    corpus: dict[str, Any],
    raw: dict[str, float],
    timed: list[Run],
    memory: list[Run],
) -> str:
    out: list[str] = []
    out.append("Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    out.append(
        f"Feed: {corpus['entries']:,} entries, {corpus['pages']:,} pages of {PAGE_SIZE} "
        f"(85 % JSON, 5 % text, 5 % HTML, 5 % XHTML), {corpus['page_kib']:.0f} KiB a page; "
        f"uWSGI {corpus['processes']} processes; seeded in {corpus['seed_seconds']:.0f} s"
    )
    out.append("")
    out.append("Parsing alone, every page in memory           entries/s")
    for name, rate in raw.items():
        out.append(f"  {name:<44}{rate:>9,.0f}")
    out.append("")
    out.append(
        "Cold-start catch-up (fresh state file)  parser      checkpoint  entries/s  "
        "runs (entries/s)            vs its raw rate  paired  target                others"
    )
    for run in timed:
        own = "feedparser.parse" if run.parser == "feedparser" else "parse_page lxml"
        ratio = run.rate / raw[own]
        paired = run.paired
        goal = RAW_TARGET if run.parser == "feedparser" else FAST_TARGET
        target = ""
        if run.checkpoint == "page":
            target = f">= {goal:.2f}: {'met' if paired >= goal else 'MISSED'}"
        runs = ", ".join(f"{r:,.0f}" for r in run.rates)
        others = max(r["others_share"] for r in run.results)
        out.append(
            f"  {run.pages:>5} pages{' (gc frozen)' if run.frozen else '':<27}{run.parser:<12}"
            f"{run.checkpoint:<12}"
            f"{run.rate:>9,.0f}  {runs:<28}{ratio:>6.2f}{'':<10}{paired:>6.2f}  {target:<22}"
            f"{others:>5.0%}"
        )
    out.append(
        "  (vs its raw rate: against the rate measured first, above; paired: against the raw "
        "rate each run's own process measured right after it, over the pages it read)"
    )
    out.append("")
    out.append(
        "Memory of the consumer process          parser      pages  RSS, consumer open  "
        "peak RSS in the run  growth    tracemalloc peak"
    )
    for run in memory:
        if run.traced:
            continue
        result = run.results[0]
        traced = next(
            (
                m
                for m in memory
                if m.traced and m.feed == run.feed and m.parser == run.parser and m.results
            ),
            None,
        )
        peak = "" if traced is None else f"{traced.results[0]['traced_peak'] / 2**20:.2f} MiB"
        out.append(
            f"  {'':<38}{run.parser:<12}{run.pages:>5}  {mib(result['rss_open_kib']):>14} MiB"
            f"  {mib(result['rss_peak_kib']):>15} MiB"
            f"  {mib(result['rss_peak_kib'] - result['rss_open_kib']):>4} MiB"
            f"  {peak:>12}"
        )
    measured = [r for run in [*timed, *memory] for r in run.results]
    shares = [float(r["others_share"]) for r in measured]
    out.append("")
    out.append(
        f"Other processes (the server included) during the measured runs: at most "
        f"{max(shares):.0%} of the CPUs (median {statistics.median(shares):.0%}); busy before "
        f"a run: at most {max(float(r['busy_before']) for r in measured):.0%}"
    )
    return "\n".join(out)


def main() -> None:
    # A TERM or a Ctrl-C unwinds the stack, so that the server is stopped and the files go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=100_000, help="in the long feed")
    parser.add_argument("--quick", action="store_true", help="10,000 entries, one round")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of the fast path")
    parser.add_argument("--processes", type=int, default=2, help="uWSGI processes")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--quiet-limit",
        type=float,
        default=0.25,
        help="before each measured run, wait until the CPUs are less busy than this (0-1)",
    )
    parser.add_argument(
        "--max-wait", type=float, default=900, help="seconds to wait for that, at most"
    )
    args = parser.parse_args()
    quiet = Quiet(args.quiet_limit, args.max_wait)
    entries = 10_000 if args.quick else args.entries
    rounds = 1 if args.quick else args.rounds
    short = entries // 10
    info = machine()

    with shipped(args.processes) as (server, workdir):
        server.cli("feed", "create", "short", "--page-size", str(PAGE_SIZE))
        with step(f"seeding {entries:,} + {short:,} entries over HTTP"):
            started = time.perf_counter()
            seed(server, "/entries", entries)
            seed(server, "/feeds/short/entries", short, start=entries)
            seed_seconds = time.perf_counter() - started
        long_url, short_url = server.url("/recent"), server.url("/feeds/short/recent")

        with step("fetching every page once"):
            pages = feed_documents(long_url)
        corpus = {
            "entries": entries,
            "pages": entries // PAGE_SIZE,
            "page_kib": statistics.median(len(b) for _, b in pages[1:]) / 1024,
            "processes": args.processes,
            "seed_seconds": seed_seconds,
        }
        with step("parsing alone: feedparser.parse, then parse_page lxml"):
            quiet.wait()
            raw = raw_rates(pages)
        del pages

        timed = [
            Run("long", entries // PAGE_SIZE, "feedparser", "page", False),
            Run("long", entries // PAGE_SIZE, "lxml", "page", False),
            Run("long", entries // PAGE_SIZE, "feedparser", "entry", False),
            Run("long", entries // PAGE_SIZE, "lxml", "entry", False),
            Run("long", entries // PAGE_SIZE, "lxml", "page", False, frozen=True),
        ]
        for run in timed:
            times = rounds if (run.parser, run.checkpoint) == ("lxml", "page") else 1
            for _ in range(times):
                frozen = ", gc frozen" if run.frozen else ""
                with step(f"cold start, {run.parser}, checkpoint per {run.checkpoint}{frozen}"):
                    cold_start(long_url, workdir, run, entries, quiet)

        memory: list[Run] = []
        for parser_name in ("feedparser", "lxml"):
            for feed, url, count in (("short", short_url, short), ("long", long_url, entries)):
                for traced in (False, True):
                    if traced and feed == "long" and parser_name == "feedparser":
                        continue  # Feedparser under tracemalloc takes minutes, and RSS shows it.
                    if not traced and feed == "long":
                        # The timed run above is this one, so reuse its first result.
                        source = next(
                            r
                            for r in timed
                            if r.parser == parser_name and r.checkpoint == "page" and not r.frozen
                        )
                        memory.append(
                            Run(
                                feed,
                                count // PAGE_SIZE,
                                parser_name,
                                "page",
                                False,
                                source.results[:1],
                            )
                        )
                        continue
                    run = Run(feed, count // PAGE_SIZE, parser_name, "page", traced)
                    what = "tracemalloc" if traced else "RSS"
                    with step(f"memory ({what}), {parser_name}, {run.pages} pages"):
                        cold_start(url, workdir, run, count, quiet)
                    memory.append(run)

    text = report(info, corpus, raw, timed, memory)
    print(text)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "machine": info,
                    "corpus": corpus,
                    "raw": raw,
                    "timed": [asdict(r) | {"rate": r.rate, "paired": r.paired} for r in timed],
                    "memory": [asdict(r) for r in memory],
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()

"""One cold-start catch-up, in a process of its own (``bench/consume.py`` runs it).

::

    python bench/_consume_run.py URL STATE --parser lxml --checkpoint page [--tracemalloc]
        [--freeze-gc] [--checkout DIR]

It reads the feed at URL with a fresh state file, and handles each entry with a counter. It
prints one JSON object, with these fields.

It gives the entries, and the seconds from opening the state file to closing the consumer. Of
those it gives the opening (``open_seconds``). It gives the walk back (``back_seconds``), which
lasts until the first entry is handed over. It gives the CPU time of the main thread from there
on (``forward_main_cpu``).

It gives the resident set size at three points. The first is before the consumer. The second
is once the consumer is open, after its HTTP client loads the TLS trust store. The third is the
peak during the catch-up, sampled every 10 ms. It gives the tracemalloc peak when asked.
Tracing slows the run, so its seconds are not a throughput figure then.

It gives what the fetcher did, such as requests and cache hits. It gives the CPU time the
process used in all. Last, it gives the raw rate of the parser the consumer is compared with.
That is ``feedparser.parse`` for the feedparser consumer, and ``parse_page`` with lxml for the
lxml one. The rate is measured right after, in the same process, over the same bytes. Those are
every document of the feed, fetched again as identity. A shared machine's load changes by the
minute. So a ratio is only worth something with both rates taken in one process, one after the
other.

The option ``--freeze-gc`` freezes the garbage collector's view of everything loaded before
the catch-up (``gc.freeze()``). That is what ``simplefeed consume`` does.

The option ``--checkout DIR`` imports the consumer from another checkout. The script
``bench/consume_compare.py`` runs two that way, with this script's measures.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import resource
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from urllib.parse import urljoin

# The consumer under test, this checkout's or the one --checkout names. It is read before
# argparse runs, because the imports below depend on it.
sys.path.insert(
    0,
    sys.argv[sys.argv.index("--checkout") + 1]
    if "--checkout" in sys.argv
    else str(Path(__file__).resolve().parent.parent),
)

import feedparser
import httpx
from lxml import etree

from simplefeed.client import Consumer
from simplefeed.client.parse import parse_page
from simplefeed.model import ATOM_NS


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class RssSampler(threading.Thread):
    """Sample the peak of the resident set size every 10 ms while the catch-up runs.

    The ``ru_maxrss`` figure will not do. It is the peak of the whole process, which its imports
    reach first.
    """

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = rss_kib()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.01):
            self.peak = max(self.peak, rss_kib())

    def stop(self) -> int:
        self.done.set()
        self.join()
        return max(self.peak, rss_kib())


def feed_documents(url: str) -> list[tuple[str, bytes]]:
    """Fetch every document of the feed as served, as identity.

    That is the entry point, then each page back through ``prev-archive``. The consumer's cache
    keeps only the pages it may need again, so they are fetched here.
    """
    documents: list[tuple[str, bytes]] = []
    with httpx.Client(timeout=60, headers={"Accept-Encoding": "identity"}) as client:
        at: str | None = url
        while at is not None:
            body = client.get(at).raise_for_status().content
            documents.append((at, body))
            link = etree.fromstring(body).find(f"{{{ATOM_NS}}}link[@rel='prev-archive']")
            at = urljoin(at, link.get("href")) if link is not None else None
    return documents


def raw_rate(url: str, parser: str) -> float:
    """Return the entries per second of the raw parse over every document of the feed."""
    bodies = feed_documents(url)
    started = time.perf_counter()
    entries = 0
    for at, body in bodies:
        if parser == "feedparser":
            parsed = feedparser.parse(
                io.BytesIO(body), sanitize_html=False, resolve_relative_uris=False
            )
            entries += len(parsed.entries)
        else:
            entries += len(parse_page(at, body, parser="lxml").entries)
    return entries / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("state", type=Path)
    parser.add_argument("--parser", choices=["feedparser", "lxml"], required=True)
    parser.add_argument("--checkpoint", choices=["entry", "page"], required=True)
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--freeze-gc", action="store_true", help="as simplefeed consume does")
    parser.add_argument("--checkout", type=Path, help="import the consumer from there")
    args = parser.parse_args()
    if args.state.exists():
        raise SystemExit(f"{args.state} exists: a cold start needs a fresh state file")

    count = 0
    first: tuple[float, float] | None = None

    def handle(_: object) -> None:
        nonlocal count, first
        if not count:
            first = (time.perf_counter(), time.thread_time())
        count += 1

    if args.freeze_gc:
        gc.freeze()
    rss_before = rss_kib()
    if args.tracemalloc:
        tracemalloc.start()
    started = time.perf_counter()
    with Consumer(
        args.url, args.state, parser=args.parser, checkpoint_every=args.checkpoint, timeout=60
    ) as consumer:
        opened = time.perf_counter()
        rss_open = rss_kib()
        sampler = RssSampler()
        sampler.start()
        consumer.run(handle)
        forward_main_cpu = time.thread_time() - first[1] if first is not None else 0.0
        rss_peak = sampler.stop()
        stats = consumer.fetcher.stats
    seconds = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    traced_peak = tracemalloc.get_traced_memory()[1] if args.tracemalloc else None
    if args.tracemalloc:
        tracemalloc.stop()
    raw = raw_rate(args.url, args.parser)
    print(
        json.dumps(
            {
                "entries": count,
                "seconds": seconds,
                "open_seconds": opened - started,
                "back_seconds": (first[0] if first is not None else opened) - opened,
                "forward_main_cpu": forward_main_cpu,
                "rss_before_kib": rss_before,
                "rss_open_kib": rss_open,
                "rss_peak_kib": rss_peak,
                "maxrss_kib": usage.ru_maxrss,
                "cpu_seconds": usage.ru_utime + usage.ru_stime,
                "traced_peak": traced_peak,
                "requests": stats.requests,
                "cache_hits": stats.cache_hits,
                "raw_rate": raw,
            }
        )
    )


if __name__ == "__main__":
    main()

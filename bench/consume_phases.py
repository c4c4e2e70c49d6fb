"""Show where a cold-start catch-up's time goes, in one process.

It sets the walk back against the rest. It shows the most any consumer that walks back first
could reach.

::

    .venv/bin/python bench/consume_phases.py [--entries 10000] [--rounds 4]

It starts Simplefeed as shipped (``bench/servers.py``). It seeds the default feed through its
publish path, with ``bench/consume.py``'s corpus in pages of 100. Then each round runs three
measures in one process, one after the other.

First, ``parse_page(..., parser="lxml")`` runs over every page held in memory. It gives the raw
rate, in wall clock and CPU time. Its time a page is *parse*.

Second, the lxml consumer makes a cold start with checkpoints per page, from a fresh state
file. It gives its rate against the raw rate of the same round. It gives how long it walked
back and went forward, each a page. The walk back lasts until it hands over its first entry.

Third comes the floor of a walk back. The same archived pages are fetched one after the other,
because each link is known only once the page before is read. They come over one kept-alive
connection with the standard library's ``http.client``. It has no bounds, retries or cache, so
it is the least a client can do. Each page is decoded and outlined as the consumer does, which
hashes it with SHA-256. Its time a page is *floor*.

Every entry of a cold start comes after its walk back. The chain of digests is anchored at the
entry point, and the first page is the last reached. Memory stays flat only if the pages are
parsed on the way forward. So a consumer in one interpreter spends at least *floor* + *parse* a
page. The round's line ends with two ratios. The ratio ``parse / (floor + parse)`` is the most
such a consumer could reach against the raw rate. The ratio ``parse / (walk back + parse)`` is
the most this consumer's walk back leaves room for. On a shared machine the load changes from
one minute to the next. So only figures of one round are compared with each other.
"""

from __future__ import annotations

import argparse
import http.client
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._consume_run import feed_documents
from bench.consume import seeded
from simplefeed import codings
from simplefeed.client import Consumer
from simplefeed.client.fetch import ACCEPT_ENCODING, Bounds
from simplefeed.client.parse import outline_page, parse_page
from simplefeed.client.walk import Progress


def floor_walk(urls: list[str]) -> float:
    """Return the seconds to fetch, decode and outline ``urls`` one after the other.

    They come over one connection with ``http.client``. Outlining hashes each page.
    """
    first = urlsplit(urls[0])
    connection = http.client.HTTPConnection(first.hostname or "127.0.0.1", first.port)
    started = time.perf_counter()
    try:
        for url in urls:
            connection.request(
                "GET", urlsplit(url).path, headers={"Accept-Encoding": ACCEPT_ENCODING}
            )
            response = connection.getresponse()
            raw = response.read()
            decoder = codings.Decoder(response.getheader("Content-Encoding"), Bounds().max_bytes)
            body = decoder.decode(raw) + decoder.end() if decoder.codings else raw
            outline_page(url, body)
    finally:
        connection.close()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with seeded(args.entries) as (server, workdir):
        url = server.url("/recent")
        pages = feed_documents(url)
        archived = [at for at, _ in pages[1:]]  # The entry point is read before any walk.
        for round_ in range(args.rounds):
            started, cpu = time.perf_counter(), time.process_time()
            parsed = sum(len(parse_page(u, b, parser="lxml").entries) for u, b in pages)
            parse_seconds = time.perf_counter() - started
            raw = parsed / parse_seconds
            raw_cpu = parsed / (time.process_time() - cpu)
            first_entry: list[float] = []

            def progress(p: Progress, marks: list[float] = first_entry) -> None:
                if p.phase == "process" and not marks:
                    marks.append(time.perf_counter())

            count = 0

            def handle(_: object) -> None:
                nonlocal count
                count += 1

            state = workdir / f"state-{round_}.sqlite3"
            started, cpu = time.perf_counter(), time.process_time()
            with Consumer(
                url, state, parser="lxml", checkpoint_every="page", progress=progress
            ) as consumer:
                consumer.run(handle)
            seconds = time.perf_counter() - started
            rate, rate_cpu = count / seconds, count / (time.process_time() - cpu)
            back = (first_entry[0] if first_entry else started) - started
            floor = floor_walk(archived)
            n = len(archived)
            per = {  # Milliseconds a page.
                "parse": parse_seconds / len(pages) * 1000,
                "back": back / n * 1000,
                "forward": (seconds - back) / n * 1000,
                "floor": floor / n * 1000,
            }
            print(
                f"round {round_ + 1}: raw {raw:,.0f}/s (CPU {raw_cpu:,.0f}/s); consumer "
                f"{rate:,.0f}/s = {rate / raw:.2f} of raw (CPU {rate_cpu:,.0f}/s = "
                f"{rate_cpu / raw_cpu:.2f}); walked back {back:.2f} s of {seconds:.2f} s; a page:"
                f" parse {per['parse']:.2f} ms, walk back {per['back']:.2f}, forward"
                f" {per['forward']:.2f}, floor of a walk back {per['floor']:.2f}; at most"
                f" {per['parse'] / (per['floor'] + per['parse']):.2f} of raw for any consumer"
                f" that walks back first, {per['parse'] / (per['back'] + per['parse']):.2f} with"
                " this walk back",
                flush=True,
            )


if __name__ == "__main__":
    main()

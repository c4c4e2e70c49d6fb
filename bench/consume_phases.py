"""Where a cold-start catch-up's time goes: the walk back against the rest, in one process.

::

    .venv/bin/python bench/consume_phases.py [--entries 10000] [--rounds 4]

Starts Simplefeed as shipped (``bench/servers.py``), seeds the default feed through its publish
path (``bench/consume.py``'s corpus, pages of 100), then, each round in one process and one
after the other: ``parse_page(..., parser="lxml")`` over every page held in memory (the raw
rate, wall clock and CPU time), and a cold start of the lxml consumer with checkpoints per page
(a fresh state file), its rate against the raw rate of the same round, and how long it walked
back (until it handed over its first entry). On a shared machine the load changes from one
minute to the next: only figures of one round are compared with each other.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._consume_run import feed_documents
from bench.consume import seeded
from simplefeed.client import Consumer
from simplefeed.client.parse import parse_page
from simplefeed.client.walk import Progress


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with seeded(args.entries) as (server, workdir):
        url = server.url("/recent")
        pages = feed_documents(url)
        for round_ in range(args.rounds):
            started, cpu = time.perf_counter(), time.process_time()
            parsed = sum(len(parse_page(u, b, parser="lxml").entries) for u, b in pages)
            raw = parsed / (time.perf_counter() - started)
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
            print(
                f"round {round_ + 1}: raw {raw:,.0f}/s (CPU {raw_cpu:,.0f}/s); consumer "
                f"{rate:,.0f}/s = {rate / raw:.2f} of raw (CPU {rate_cpu:,.0f}/s = "
                f"{rate_cpu / raw_cpu:.2f}); walked back {back:.2f} s of {seconds:.2f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()

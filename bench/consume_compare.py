"""Compare cold starts of two checkouts of the consumer, before and after, on one server.

::

    git -C /path/to/main archive HEAD | tar -x -C /tmp/before
    .venv/bin/python bench/consume_compare.py /tmp/before . [--entries 30000] [--rounds 4]

It starts Simplefeed as shipped, with this checkout's server (``bench/servers.py``). It seeds
the default feed with ``bench/consume.py``'s corpus, in pages of 100. The checkouts alternate.
Each round, for each parser, it runs one cold start of each checkout in turn, with checkpoints
per page. The parsers come from ``--parser``, by default lxml and feedparser. The order swaps
from one round to the next.

Each run is this checkout's ``bench/_consume_run.py``, importing the consumer from that
checkout. It is a fresh process and state file. Right after, that process measures the raw rate
over the same pages, the "paired" rate. Before each run the script waits until the machine is
quiet (``bench/consume.py``'s ``--quiet-limit``).

It prints one line per run. The line gives the rate, the paired ratio and the time to open the
consumer. It gives the walk back per page, and the main thread's CPU per page going forward.
Then it prints the medians per checkout and parser. Only runs of one invocation are compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.consume import PAGE_SIZE, seeded, wait_until_quiet

CHILD = Path(__file__).resolve().parent / "_consume_run.py"


def cold_start(checkout: Path, url: str, state: Path, parser: str) -> dict[str, float]:
    argv = [sys.executable, str(CHILD), url, str(state), "--checkout", str(checkout)]
    done = subprocess.run(
        [*argv, "--parser", parser, "--checkpoint", "page"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: the consumer failed:\n{done.stdout}\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path, help="a checkout (the consumer as it was)")
    parser.add_argument("after", type=Path, help="another checkout (the consumer as it is)")
    parser.add_argument("--entries", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--parser", choices=["lxml", "feedparser"], action="append")
    parser.add_argument("--quiet-limit", type=float, default=0.25)
    parser.add_argument("--max-wait", type=float, default=120)
    args = parser.parse_args()
    parsers = args.parser or ["lxml", "feedparser"]
    checkouts = {"before": args.before.resolve(), "after": args.after.resolve()}
    measures: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
    with seeded(args.entries) as (server, workdir):
        url = server.url("/recent")
        runs = 0
        for round_ in range(args.rounds):
            for parser_name in parsers:
                order = list(checkouts.items())
                if round_ % 2:
                    order.reverse()
                for name, checkout in order:
                    busy = wait_until_quiet(args.quiet_limit, args.max_wait)
                    runs += 1
                    state = workdir / f"state-{runs}.sqlite3"
                    result = cold_start(checkout, url, state, parser_name)
                    rate = result["entries"] / result["seconds"]
                    ratio = rate / result["raw_rate"]
                    pages = result["entries"] / PAGE_SIZE
                    measure = (
                        ratio,
                        result["open_seconds"] * 1000,
                        result["back_seconds"] / pages * 1000,
                        result["forward_main_cpu"] / pages * 1000,
                    )
                    measures.setdefault((name, parser_name), []).append(measure)
                    print(
                        f"round {round_ + 1} {parser_name:<10} {name:<6} {rate:>9,.0f}/s, "
                        f"raw {result['raw_rate']:>9,.0f}/s: paired {ratio:.2f}; open "
                        f"{measure[1]:.0f} ms, walk back {measure[2]:.2f} ms/page, main "
                        f"thread CPU forward {measure[3]:.2f} ms/page (busy before {busy:.0%})",
                        flush=True,
                    )
    for (name, parser_name), runs_of in sorted(measures.items()):
        ratio, opening, back, forward = (statistics.median(m[i] for m in runs_of) for i in range(4))
        print(
            f"{parser_name:<10} {name:<6} medians: paired {ratio:.2f}, open {opening:.0f} ms, "
            f"walk back {back:.2f} ms/page, main thread CPU forward {forward:.2f} ms/page"
        )


if __name__ == "__main__":
    main()

"""Measure the door's own cost, decoding and validating a publish's body in-process.

There is no HTTP and no database. This is the part of a publish that depends on what the
producer sent.

    .venv/bin/python bench/door.py                # a batch of 1,000 JSON events, 15 rounds
    .venv/bin/python bench/door.py --events 100 --rounds 30
    .venv/bin/python bench/door.py --content xhtml   # an order's note as XHTML (or html)
    .venv/bin/python bench/door.py --content text    # the common event: a title and a line
    .venv/bin/python bench/door.py --single text     # one event a body: a title, short text
    .venv/bin/python bench/door.py --single json --profile   # and where its calls go

It prints the median time per batch. Compare two checkouts by running this file with each
checkout's own venv, in turn, on the same machine. PYTHONPATH does not choose the package,
because the venv installs it in editable mode.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time

from simplefeed.door.events import parse_events, read_body
from simplefeed.settings import Limits

#: An order's note as markup, a paragraph with emphasis and a link, and a list.
NOTE = (
    "<p>Order <em>{i}</em> shipped: <a href='https://shop.example/o/{i}'>track it</a>.</p>"
    "<ul><li>one A-1</li><li>two B-2</li></ul>"
)


def batch(events: int, content: str = "json") -> bytes:
    """Return a batch of a shop's events.

    By default each has JSON content with integers, decimals, a list of objects and text.
    ``content`` text gives a line of plain text, and html or xhtml a note in markup.
    """
    return json.dumps(
        [
            {
                "title": f"order {i} paid",
                **(
                    {
                        "content": {
                            "order": i,
                            "total": 12.5 + i / 100,
                            "items": [{"sku": "A-1", "price": 3.25, "qty": 2}],
                            "note": "thanks",
                        }
                    }
                    if content == "json"
                    else {"content": f"Order {i} was paid."}
                    if content == "text"
                    else {"content": NOTE.format(i=i), "content_type": content}
                ),
                "id": f"tag:shop.example,2026:{i}",
            }
            for i in range(events)
        ]
    ).encode()


#: The common event: a title and a short text, or a small JSON object.
SINGLE = {
    "text": {
        "title": "benchmark event",
        "content": "a benchmark event: a short text payload of about the size of a log line",
    },
    "json": {
        "title": "order 7 paid",
        "content": {"order": 7, "total": 12.57, "items": [{"sku": "A-1", "qty": 2}], "note": "ok"},
    },
}


def single(kind: str, profile: bool, count: int = 20_000) -> None:
    """Microseconds of CPU per body of one event (the best of 5 runs), and the calls it makes."""
    body, limits = json.dumps(SINGLE[kind]).encode(), Limits()
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(count):
            parse_events(read_body(body), limits, 0)
        best = min(best, (time.process_time() - start) / count)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(1000):
        parse_events(read_body(body), limits, 0)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    print(f"{best * 1e6:.1f} us of CPU per {kind} event, {stats.total_calls / 1000:.0f} calls")
    if profile:
        stats.sort_stats("tottime").print_stats(15)
        print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--content", choices=["json", "text", "html", "xhtml"], default="json")
    parser.add_argument("--single", choices=sorted(SINGLE), help="one event a body instead")
    parser.add_argument("--profile", action="store_true", help="with --single: cProfile's top")
    args = parser.parse_args()
    if args.single:
        single(args.single, args.profile)
        return
    body, limits = batch(args.events, args.content), Limits()
    times = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        parse_events(read_body(body), limits, 0)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(
        f"{median * 1000:.2f} ms per batch of {args.events} {args.content} events"
        f" ({len(body)} bytes),"
        f" median of {args.rounds}"
    )


if __name__ == "__main__":
    main()

"""Measure the door's own cost, decoding and validating a publish's body in-process.

There is no HTTP and no database. This is the part of a publish that depends on what the
producer sent.

    .venv/bin/python bench/door.py                # a batch of 1,000 JSON events, 15 rounds
    .venv/bin/python bench/door.py --events 100 --rounds 30
    .venv/bin/python bench/door.py --content xhtml   # an order's note as XHTML (or html)
    .venv/bin/python bench/door.py --content text    # the common event: a title and a line

It prints the median time per batch. Compare two checkouts by running this file with each
checkout's own venv, in turn, on the same machine. PYTHONPATH does not choose the package,
because the venv installs it in editable mode.
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--content", choices=["json", "text", "html", "xhtml"], default="json")
    args = parser.parse_args()
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

"""Measure what the door's page-share rule costs a publish.

See docs/explanation/decisions/page-size.md.

    .venv/bin/python bench/page_share.py [--rounds 5]

It runs in-process, on a SQLite file in a temporary directory. It times ``Simplefeed.publish``
for one event and for a batch of 100. It sets that against the time of the rule alone on the
same entries. The rule is ``Publishing.refuse_too_large`` with the locator base it needs, as
``publish`` calls it. Each figure is the median of ``--rounds`` rounds. The events are
``bench/door.py``'s shop events. The rule runs before the feed's lock, on every publish. So its
share of one is its cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.door import batch
from simplefeed.door.events import parse_events, read_body
from simplefeed.rules import appending
from simplefeed.service import Simplefeed
from simplefeed.settings import Limits, Settings
from simplefeed.store import upgrade


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sf-share-") as tmp:
        url = f"sqlite:///{tmp}/simplefeed.sqlite3"
        upgrade(url)
        settings = replace(Settings(), database_url=url, archive_dir=Path(tmp) / "archive")
        core = Simplefeed(settings)
        core.create_feed(settings.default_feed)
        name = settings.default_feed
        for size in (1, 100):
            body = batch(size)
            events, _ = parse_events(read_body(body), Limits(), 0)
            core.publish(name, events)  # The feed is known to this process, as in a server.
            pending = appending.pending_entries(events, 0, lambda: "urn:uuid:x")
            publish, rule = [], []
            for _ in range(args.rounds):
                started = time.perf_counter()
                for _ in range(200 // size + 10):
                    core.publish(name, events)
                publish.append((time.perf_counter() - started) / (200 // size + 10))
                started = time.perf_counter()
                for _ in range(2000):
                    core._publishing.refuse_too_large(
                        name, pending, core.urls(name).locator_base, None
                    )
                rule.append((time.perf_counter() - started) / 2000)
            p, r = statistics.median(publish), statistics.median(rule)
            print(
                json.dumps(
                    {
                        "events": size,
                        "publish_us": round(p * 1e6, 1),
                        "rule_us": round(r * 1e6, 2),
                        "share": round(r / p, 5),
                    }
                )
            )
        core.close()


if __name__ == "__main__":
    main()

"""The cost of a freeze with the bucket on (SIMPLEFEED_ARCHIVE_URL), against the directory alone.

::

    .venv/bin/python bench/freeze_bucket.py [--pages 200] [--page-size 100] [--quick]

A feed on SQLite is published in batches of a page, so each publish freezes one page: once
with the archive directory alone, once with moto's S3 server on loopback as the bucket. Each
publish is timed (its median and 90th percentile). With the bucket on, a publish writes the
page's mark in ``.uploads/`` and a background thread puts the page and its copies in the
bucket, so the run also times how long after the last publish the bucket held every page.
A third run has the bucket down: no upload competes for the CPU, so it shows what the freeze
itself adds (the mark, fsynced).
moto is a Python server on the same cores, so the second figure shows its speed more than a
bucket's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.recover import BASE_URL, event
from bench.servers import S3Server
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from simplefeed.store import schema

BUCKET = "simplefeed-bench"


def run(
    settings: Settings, pages: int, page_size: int, *, drain: bool = True
) -> tuple[list[float], float]:
    """Publish ``pages`` pages; the seconds of each publish, and the seconds after the last
    one until no page waits for the bucket."""
    schema.upgrade(settings.database_url)
    core = Simplefeed(settings)
    try:
        core.create_feed(settings.default_feed)
        times = []
        for number in range(pages):
            batch = [event(number * page_size + i) for i in range(page_size)]
            started = time.perf_counter()
            core.publish(settings.default_feed, batch)
            times.append(time.perf_counter() - started)
        done = time.perf_counter()
        while drain and (waiting := core.uploads_waiting()) is not None and waiting[0]:
            time.sleep(0.01)
        return times, time.perf_counter() - done
    finally:
        core.close()


def row(name: str, times: list[float], drained: float | None, base: float | None) -> str:
    median = statistics.median(times) * 1000
    p90 = statistics.quantiles(times, n=10)[-1] * 1000
    ratio = "1.00" if base is None else f"{median / base:.2f}"
    after = "" if drained is None else f"{drained:.2f} s"
    return f"| {name} | {len(times)} | {median:.2f} ms | {p90:.2f} ms | {ratio} | {after} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="50 pages")
    args = parser.parse_args()
    pages = 50 if args.quick else args.pages
    print("| archive | publishes (one freeze each) | median | p90 | ratio | bucket full after |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plain = Settings(
            database_url=f"sqlite:///{root / 'plain.sqlite3'}",
            archive_dir=root / "plain",
            base_url=BASE_URL,
            page_size=args.page_size,
        )
        times, _ = run(plain, pages, args.page_size)
        base = statistics.median(times) * 1000
        print(row("directory alone", times, None, None), flush=True)
        with S3Server(root / "moto") as s3:
            s3.bucket(BUCKET)
            os.environ.update(s3.environ())
            bucket = replace(
                plain,
                database_url=f"sqlite:///{root / 'bucket.sqlite3'}",
                archive_dir=root / "bucket",
                archive_url=f"s3://{BUCKET}/bench",
            )
            times, drained = run(bucket, pages, args.page_size)
            print(row("directory and bucket (moto)", times, drained, base), flush=True)
            # The freeze's own share: the bucket down, so no upload competes for the CPU.
            s3.stop()
            down = replace(
                bucket,
                database_url=f"sqlite:///{root / 'down.sqlite3'}",
                archive_dir=root / "down",
            )
            times, _ = run(down, pages, args.page_size, drain=False)
            print(row("directory and bucket, the bucket down", times, None, base), flush=True)


if __name__ == "__main__":
    main()

"""Measure what one access-log line costs, by writing ``--lines`` lines to /dev/null.

The lines are like a /recent 304's. The cost is counted in instructions, which other load on
the machine does not disturb (docs/benchmarks.md, "An access line"). Run it under callgrind
with ``--lines 0`` and with ``--lines 4000``. Divide the difference by 4000.
"""

from __future__ import annotations

import argparse
import logging
import os

from simplefeed import logs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=4000)
    args = parser.parse_args()
    logs.configure("INFO")
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logs.LineHandler):
            handler.fd = os.open(os.devnull, os.O_WRONLY)  # Lives as long as the run.
    log = logging.getLogger("simplefeed.access")
    fields = {
        "method": "GET",
        "path": "/recent",
        "status": 304,
        "bytes": 0,
        "duration_ms": 0.123,
        "feed": "events",
    }
    for _ in range(args.lines):
        log.log(logging.INFO, "%s %s %d", "GET", "/recent", 304, extra={"fields": fields})


if __name__ == "__main__":
    main()

"""Time ``simplefeed archive recover`` on a restored SQLite database, and measure its memory.

::

    .venv/bin/python bench/recover.py [--pages 100 400] [--page-size 100] [--batch N]

For each page count it builds a feed of that many archived pages. Each event has a title, a
JSON object of about 300 bytes, an author and a category. They are published through the core,
in batches of a page. A backup of the SQLite file is made after the first page is archived.
The backup is restored beside the archive. Then the installed command ``simplefeed archive
recover`` runs in a child process. The script reports its wall time, its CPU time and its peak
resident memory (``ru_maxrss``). It reports the pages and entries a second it took back.

Pages are taken back 64 a transaction (``maintenance.RECOVERY_BATCH``). So the peak memory
should not grow with the page count. The option ``--batch N`` runs the same command with
another batch, through ``python -c`` with the module's constant replaced. That shows what the
batches bound.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.servers import clean_environ, simplefeed_command, sqlite_backup
from simplefeed.model import Author, Category, Event
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from simplefeed.store import schema

BASE_URL = "http://feeds.example.test"


def event(i: int) -> Event:
    content = {
        "order": i,
        "customer": f"c-{i % 977}",
        "lines": [{"sku": f"SKU-{j}", "qty": j + 1, "price": "9.50"} for j in range(3)],
        "note": "paid by card; shipping to the warehouse on the corner",
    }
    return Event(
        title=f"order {i} paid",
        content=json.dumps(content, separators=(",", ":")),
        content_type="application/json",
        author=Author("shop", "shop@example.com"),
        categories=(Category("orders"),),
    )


def recover_command(batch: int | None) -> list[str]:
    if batch is None:
        return [*simplefeed_command(), "archive", "recover"]
    program = (
        "import simplefeed.service.maintenance as maintenance\n"
        f"maintenance.RECOVERY_BATCH = {batch}\n"
        "from simplefeed.runtime.cli import main\nmain(['archive', 'recover'])\n"
    )
    return [sys.executable, "-c", program]


def recovery(directory: Path, pages: int, page_size: int, batch: int | None) -> dict[str, float]:
    database = directory / "simplefeed.sqlite3"
    settings = Settings(
        database_url=f"sqlite:///{database}",
        archive_dir=directory / "archive",
        base_url=BASE_URL,
        page_size=page_size,
        default_feed="events",
    )
    schema.upgrade(settings.database_url)
    core = Simplefeed(settings)
    try:
        core.create_feed("events")
        core.publish("events", [event(i) for i in range(page_size + page_size // 3)])
        backup = directory / "backup.sqlite3"
        sqlite_backup(database, backup)
        published = page_size + page_size // 3
        while published < pages * page_size:
            n = min(page_size, pages * page_size - published)
            core.publish("events", [event(i) for i in range(published, published + n)])
            published += n
    finally:
        core.close()
    for leftover in ("-wal", "-shm"):
        database.with_name(database.name + leftover).unlink(missing_ok=True)
    backup.replace(database)
    env = {
        **clean_environ(),
        "SIMPLEFEED_DATABASE_URL": settings.database_url,
        "SIMPLEFEED_ARCHIVE_DIR": str(settings.archive_dir),
        "SIMPLEFEED_BASE_URL": BASE_URL,
        "SIMPLEFEED_PAGE_SIZE": str(page_size),
    }
    # A fresh parent per run, so that its children's peak memory is this command's alone.
    measure = (
        "import json, resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps([done.returncode, done.stdout + done.stderr, wall,"
        " r.ru_utime + r.ru_stime, r.ru_maxrss]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", measure, *recover_command(batch)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    code, said, wall, cpu, maxrss_kib = json.loads(out.stdout)
    if code != 0:
        raise SystemExit(f"archive recover exited {code}\n{said}")
    taken = pages - 1
    return {
        "pages": taken,
        "entries": pages * page_size - (page_size + page_size // 3),
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mib": maxrss_kib / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, nargs="+", default=[100, 400])
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=None, help="pages a transaction")
    args = parser.parse_args()
    print("pages taken back  entries  wall s  CPU s  pages/s  entries/s  peak RSS MiB")
    for pages in args.pages:
        with tempfile.TemporaryDirectory(prefix="sf-recover-") as tmp:
            r = recovery(Path(tmp), pages, args.page_size, args.batch)
        print(
            f"{r['pages']:17.0f}  {r['entries']:7.0f}  {r['wall_s']:6.2f}  {r['cpu_s']:5.2f}"
            f"  {r['pages'] / r['wall_s']:7.0f}  {r['entries'] / r['wall_s']:9.0f}"
            f"  {r['peak_rss_mib']:12.0f}"
        )


if __name__ == "__main__":
    main()

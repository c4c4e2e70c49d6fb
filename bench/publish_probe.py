"""One publish configuration under load, looked at from the inside.

Its figures are in docs/benchmarks.md, "One publish from the inside".

The script bench/publish.py compares Simplefeed with its baseline. This one answers why a
figure is what it is. It starts one app (`simplefeed` or `baseline`) under the shipped
uwsgi.ini on a fresh database. It warms the app up and runs wrk for a few seconds. Then it
reports four things.

It reports events per second and wrk's median latency.

It reports CPU milliseconds per request, spent by the uWSGI processes and by the PostgreSQL
server processes. They come from /proc, so they include kernel time such as fsync's. It reports
how busy the whole machine was. A machine near 100% is CPU-bound. One well below it is waiting,
for a lock, a flush or the network.

On PostgreSQL, it reports what the app's server backends were doing. It samples
pg_stat_activity every 10 ms. For example, `Lock:advisory` means waiting for a feed's lock, and
`IO:WALSync` means flushing a commit. It gives the average number of backends in each state.

On PostgreSQL, it also reports the size and update counts of the feeds table. Dead row versions
pile up there when appenders fight over the feed's row.

    .venv/bin/python bench/publish_probe.py --app simplefeed --database postgres --processes 4
    .venv/bin/python bench/publish_probe.py --app baseline --mode batch --database sqlite

Like bench/publish.py it needs Debian's wrk. For PostgreSQL it needs an admin URL too, from
`--postgres-url`, `$SIMPLEFEED_BENCH_POSTGRES_URL` or `$SIMPLEFEED_TEST_POSTGRES_URL`. It
creates and drops its own database.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import publish


def machine_ticks() -> tuple[int, int]:
    """Return the machine's jiffies so far, all and idle + iowait."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]


def process_ticks(pgrep: list[str]) -> int:
    """Return the user + system clock ticks of the processes ``pgrep`` finds with these args."""
    pids = subprocess.run(["pgrep", *pgrep], capture_output=True, text=True).stdout.split()
    stats = (publish.proc_stat(int(pid)) for pid in pids)
    return sum(publish.cpu_ticks(stat[1]) for stat in stats if stat is not None)


# The servers' processes, by what they run. Those of uWSGI go by command line, because its
# workers are Python processes running the uwsgi entry point. Those of PostgreSQL go by process
# name. So this script, whose command line may say "postgres", is not counted. Nor is anything
# else that mentions it.
UWSGI = ["-f", "uwsgi --ini"]
POSTGRES = ["-x", "postgres"]


class WaitSampler:
    """Sample pg_stat_activity for one database every 10 ms, in a thread."""

    def __init__(self, admin_url: str, database: str) -> None:
        self.dsn = make_url(admin_url).set(drivername="postgresql").render_as_string(False)
        self.database = database
        self.counts: collections.Counter[str] = collections.Counter()
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                rows = conn.execute(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'on CPU'), state"
                    " FROM pg_stat_activity"
                    " WHERE datname = %s AND backend_type = 'client backend'",
                    (self.database,),
                )
                for wait, state in rows:
                    self.counts[f"{wait} ({state})"] += 1
                self.samples += 1
                time.sleep(0.01)

    def __enter__(self) -> WaitSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def feeds_table(admin_url: str, database: str) -> str:
    dsn = make_url(admin_url).set(drivername="postgresql", database=database)
    with psycopg.connect(dsn.render_as_string(False), autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_relation_size(relid), n_tup_upd, n_tup_hot_upd, n_dead_tup"
            " FROM pg_stat_user_tables WHERE relname = 'feeds'"
        ).fetchone()
    if row is None:
        return "feeds table: not found"
    size, updates, hot, dead = row
    return f"feeds table: {size:,} bytes, {updates:,} updates ({hot:,} HOT), {dead:,} dead rows"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--app", choices=["simplefeed", "baseline"], default="simplefeed")
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--mode", choices=["single", "batch"], default="single")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--postgres-url", default=None)
    args = parser.parse_args()
    admin_url = (
        args.postgres_url
        or os.environ.get("SIMPLEFEED_BENCH_POSTGRES_URL")
        or os.environ.get("SIMPLEFEED_TEST_POSTGRES_URL")
    )
    if args.database == "postgres" and not admin_url:
        raise SystemExit("PostgreSQL needs --postgres-url or $SIMPLEFEED_TEST_POSTGRES_URL")
    publish.ensure_wrk()
    with tempfile.TemporaryDirectory(prefix="sf-probe-") as tmp:
        workdir = Path(tmp)
        dbs = publish.Databases(workdir, admin_url if args.database == "postgres" else None)
        try:
            url = dbs.new(args.database, args.app)
            database = make_url(url).database or ""
            with publish.serve(args.app, url, workdir / args.app, args.processes) as server:
                token = server.token if args.app == "simplefeed" else None
                target = server.url("/entries")
                body = publish.body(args.mode)
                publish.run_wrk(target, body, token, 2, args.connections, workdir)  # Warm-up.
                sampler = (
                    WaitSampler(admin_url, database)
                    if admin_url and args.database == "postgres"
                    else None
                )
                uwsgi0, pg0 = process_ticks(UWSGI), process_ticks(POSTGRES)
                all0, idle0 = machine_ticks()
                if sampler is not None:
                    sampler.__enter__()
                try:
                    result = publish.run_wrk(
                        target, body, token, args.duration, args.connections, workdir
                    )
                finally:
                    if sampler is not None:
                        sampler.__exit__()
                all1, idle1 = machine_ticks()
                uwsgi1, pg1 = process_ticks(UWSGI), process_ticks(POSTGRES)
            ms_per_tick = 1000 / os.sysconf("SC_CLK_TCK")
            events = result.rps * publish.events_per_request(args.mode)
            busy = 1 - (idle1 - idle0) / max(1, all1 - all0)
            label = f"{args.app} {args.database} {args.mode} p={args.processes}"
            print(
                f"{label}: {events:,.0f} events/s,"
                f" p50 {result.p50_ms:.2f} ms, machine busy {busy:.0%}"
            )
            per_request = ms_per_tick / result.requests
            print(
                f"CPU ms per request: uWSGI {(uwsgi1 - uwsgi0) * per_request:.3f},"
                f" PostgreSQL {(pg1 - pg0) * per_request:.3f}"
            )
            if sampler is not None and sampler.samples:
                print("PostgreSQL backends of the app, on average:")
                for state, count in sampler.counts.most_common(8):
                    print(f"  {count / sampler.samples:5.2f}  {state}")
                print(feeds_table(admin_url or "", database))
        finally:
            dbs.close()


if __name__ == "__main__":
    main()

"""``consume --exec-stream``: entries per second through a trivial handler, against ``--jsonl``.

One command, from the checkout::

    .venv/bin/python bench/exec_stream.py            # 50,000 entries, 3 rounds
    .venv/bin/python bench/exec_stream.py --quick    # 20,000 entries, 1 round

It starts Simplefeed as shipped (``bench/consume.py``'s server: uWSGI, pages of 100, SQLite)
and seeds its default feed with ``bench/consume.py``'s corpus over HTTP. Then each round runs,
in turn, one fresh ``simplefeed consume URL --state NEW --parser lxml --checkpoint page``
process per row, over the whole feed:

- ``--jsonl``, its output to /dev/null: the baseline, a consumer with no handler to wait for;
- ``--exec-stream`` through a Python loop that answers ``ok`` to each line;
- ``--exec-stream`` through a shell loop (``sh -c 'while read -r line; do echo ok; done'``),
  and the same in bash;
- ``--exec-stream`` through a Node loop (skipped without ``node``);
- ``--exec true`` over the last 2,000 entries only (``--from``): a process per entry.

The package's bytecode is compiled first, as pip does when it installs a package. A checkout
run with ``PYTHONDONTWRITEBYTECODE`` set has none, so each start would compile every module
of the package again. A row's rate is the entries over the wall time of the command, start-up
included. Its CPU
cost is the CPU time of the consumer and its handler process together, per entry: on a shared
machine, where the wall time depends on the load, it is the steadier figure. The rows run in
turn in each round, so that the load falls on all of them alike; the medians and each rate
against the ``--jsonl`` one are printed, and written as JSON with ``--json FILE``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.consume import machine, seeded, wait_until_quiet

SIMPLEFEED = str(Path(sys.executable).with_name("simplefeed"))
PACKAGE = Path(__file__).resolve().parent.parent / "simplefeed"
PYTHON_LOOP = "import sys\nfor line in sys.stdin:\n    print('ok', flush=True)\n"
SHELL_LOOP = "while IFS= read -r line; do echo ok; done"
NODE_LOOP = (
    "const rl = require('readline').createInterface({input: process.stdin});"
    " rl.on('line', () => process.stdout.write('ok\\n'));"
)
#: How many entries the ``--exec`` row reads: a process per entry is slow.
EXEC_ENTRIES = 2000


def rows() -> dict[str, list[str]]:
    """Each row's handler options for ``simplefeed consume``."""
    found = {
        "--jsonl (baseline)": ["--jsonl"],
        "--exec-stream, Python loop": [
            "--exec-stream",
            f"{shlex.quote(sys.executable)} -c {shlex.quote(PYTHON_LOOP)}",
        ],
        "--exec-stream, shell loop (sh)": ["--exec-stream", f"sh -c {shlex.quote(SHELL_LOOP)}"],
        "--exec-stream, shell loop (bash)": [
            "--exec-stream",
            f"bash -c {shlex.quote(SHELL_LOOP)}",
        ],
    }
    if shutil.which("node") is not None:
        found["--exec-stream, Node loop"] = ["--exec-stream", f"node -e {shlex.quote(NODE_LOOP)}"]
    found["--exec true (a process per entry)"] = ["--exec", "true"]
    return found


def run_row(url: str, state: Path, options: list[str], entries: int) -> tuple[float, float]:
    """One fresh consumer process over the feed: its entries per second, and the CPU
    microseconds per entry of it and its handlers (which it waits for, so they count in its
    children's usage, and so in ours)."""
    argv = [SIMPLEFEED, "consume", url, "--state", str(state), "--parser", "lxml"]
    argv += ["--checkpoint", "page", *options]
    count = entries
    if options[0] == "--exec":
        count = min(entries, EXEC_ENTRIES)
        argv += ["--from", str(entries - count)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{options}: exit {done.returncode}: {done.stderr.decode()}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return count / seconds, cpu / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20,000 entries, 1 round")
    parser.add_argument("--quiet-limit", type=float, default=0.5)
    parser.add_argument("--max-wait", type=float, default=30)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    entries, rounds = (20_000, 1) if args.quick else (args.entries, args.rounds)
    table = rows()
    rates: dict[str, list[float]] = {name: [] for name in table}
    costs: dict[str, list[float]] = {name: [] for name in table}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(PACKAGE)], check=True)
    print(f"... seeding {entries:,} entries", file=sys.stderr, flush=True)
    with seeded(entries) as (server, workdir):
        url = server.url("/recent")
        for number in range(rounds):
            for name, options in table.items():
                wait_until_quiet(args.quiet_limit, args.max_wait)
                state = workdir / f"state-{number}-{len(rates[name])}-{abs(hash(name))}.sqlite3"
                rate, cost = run_row(url, state, options, entries)
                rates[name].append(rate)
                costs[name].append(cost)
                print(
                    f"round {number + 1}: {name}: {rate:,.0f} entries/s, {cost:.0f} CPU us each",
                    file=sys.stderr,
                )
    baseline = statistics.median(rates["--jsonl (baseline)"])
    print(
        f"\n| {entries:,} entries, pages of 100 | entries/s | against --jsonl"
        " | CPU per entry, consumer and handler |"
    )
    print("|---|---|---|---|")
    results = {}
    for name, found in rates.items():
        rate, cost = statistics.median(found), statistics.median(costs[name])
        results[name] = {"rate": rate, "ratio": rate / baseline, "rates": found, "cpu_us": cost}
        print(f"| {name} | {rate:,.0f} | {rate / baseline:.2f} | {cost:.0f} µs |")
    if args.json is not None:
        report = {"entries": entries, "rounds": rounds, "machine": machine(), "rows": results}
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

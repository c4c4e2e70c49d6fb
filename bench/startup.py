"""Time the start of a command and of a uWSGI worker's app, for two checkouts in turn.

::

    git -C /path/to/main archive HEAD~1 | tar -x -C /tmp/before
    .venv/bin/python bench/startup.py /tmp/before . [--runs 15]

Each run is a fresh interpreter with ``PYTHONPATH`` set to one checkout. All runs use one
migrated SQLite database. The ``cli`` case runs ``simplefeed feed list``, as an operator runs
it. The ``worker`` case does what each uWSGI worker does before its first request. It runs
``import simplefeed.runtime.wsgi``, which loads the settings, checks the database and builds the
app. The checkouts alternate run by run, so both see the same load on the machine. The script
prints the median CPU seconds (user + system, of the child) and wall seconds per case and
checkout. It prints the ratio after/before of the CPU medians too.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.servers import clean_environ

CASES = {
    "cli": "import sys\nfrom simplefeed.runtime.cli import main\nmain(['feed', 'list'])\n",
    "worker": "import simplefeed.runtime.wsgi\n",
}


def run_once(checkout: Path, program: str, env: dict[str, str]) -> tuple[float, float]:
    """Return the CPU seconds and wall seconds of one fresh interpreter running ``program``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", program],
        env={**env, "PYTHONPATH": str(checkout)},
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: failed\n{done.stdout}\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path, help="a checkout (as it was)")
    parser.add_argument("after", type=Path, help="another checkout (as it is)")
    parser.add_argument("--runs", type=int, default=15, help="runs per case and checkout")
    args = parser.parse_args()
    checkouts = {"before": args.before.resolve(), "after": args.after.resolve()}
    with tempfile.TemporaryDirectory() as workdir:
        env = clean_environ()
        env["SIMPLEFEED_DATABASE_URL"] = f"sqlite:///{workdir}/simplefeed.sqlite3"
        env["SIMPLEFEED_ARCHIVE_DIR"] = os.path.join(workdir, "archive")
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from simplefeed.runtime.cli import main\nmain(['db', 'upgrade'])",
            ],
            env={**env, "PYTHONPATH": str(checkouts["after"])},
            capture_output=True,
            check=False,
        )
        for case, program in CASES.items():
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in checkouts}
            for i in range(args.runs):
                order = list(checkouts) if i % 2 == 0 else list(reversed(checkouts))
                for name in order:
                    times[name].append(run_once(checkouts[name], program, env))
            medians = {
                name: (
                    statistics.median(cpu for cpu, _ in runs),
                    statistics.median(wall for _, wall in runs),
                )
                for name, runs in times.items()
            }
            for name, (cpu, wall) in medians.items():
                print(f"{case:7} {name:7} cpu {cpu:.3f} s  wall {wall:.3f} s  ({args.runs} runs)")
            ratio = medians["after"][0] / medians["before"][0]
            print(f"{case:7} after/before cpu {ratio:.2f}")


if __name__ == "__main__":
    main()

"""Measure what a long-poll costs the server's Python, without uWSGI, sockets or other processes.

The app is called in-process by ``--waiters`` threads. They long-poll ``/recent`` (gzip), and
ask again as soon as they are answered. So they act as uWSGI's threads of one worker serving a
publish's waiters.

    .venv/bin/python bench/longpoll_threads.py                  # 125 waiters, 20 publishes
    .venv/bin/python bench/longpoll_threads.py --floor          # a trivial app, same threads

It prints the waiting threads' own CPU time (``time.thread_time``) per answer over the
publishes. The machine's other load disturbs that figure far less than bench/longpoll.py's
latencies. So before/after pairs of a change to the long-poll path show in a few runs. The
option ``--floor`` runs the same threads against an app that only waits on a condition and
answers "x". That shows what the threads, the GIL and the condition cost by themselves. The
access log is on (INFO, written to /dev/null), as the shipped service has it. The results are
in docs/benchmarks.md ("Long-poll").
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.servers import simplefeed_command
from simplefeed import logs
from simplefeed.app import create_app
from simplefeed.model import Event
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def environ(etag: str | None) -> dict[str, Any]:
    env: dict[str, Any] = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/recent",
        "QUERY_STRING": "",
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(),
        "wsgi.errors": sys.stderr,
        "HTTP_HOST": "bench",
        "HTTP_ACCEPT_ENCODING": "gzip",
    }
    if etag is not None:
        env["HTTP_IF_NONE_MATCH"] = etag
        env["HTTP_PREFER"] = "wait=30"
    return env


def call(app: WsgiApp, env: dict[str, Any]) -> str:
    """Return the response's ETag."""
    headers: dict[str, str] = {}

    def start_response(status: str, head: list[tuple[str, str]], exc_info: Any = None) -> None:
        headers.update((k.lower(), v) for k, v in head)

    b"".join(app(env, start_response))
    return headers["etag"]


class Floor:
    """An app that holds a request while its If-None-Match is the current version, then answers.

    Each waiter woken wakes the next, as simplefeed.service.changes does.
    """

    def __init__(self) -> None:
        self.version = 0
        self.changed = threading.Condition()

    def __call__(self, env: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        asked = env.get("HTTP_IF_NONE_MATCH")
        with self.changed:
            while asked == f'"{self.version}"':
                self.changed.wait(30)
            self.changed.notify()
        start_response("200 OK", [("ETag", f'"{self.version}"')])
        return [b"x"]

    def publish(self) -> None:
        with self.changed:
            self.version += 1
            self.changed.notify()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiters", type=int, default=125)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between publishes")
    parser.add_argument("--floor", action="store_true", help="a trivial app instead")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="simplefeed-bench-"))
    os.environ.update(
        SIMPLEFEED_DATABASE_URL=f"sqlite:///{work / 'db.sqlite3'}",
        SIMPLEFEED_ARCHIVE_DIR=str(work / "archive"),
        SIMPLEFEED_BASE_URL="http://bench",
    )
    subprocess.run(
        [*simplefeed_command(), "db", "upgrade"],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    settings = Settings.from_env()
    core = Simplefeed(settings)
    core.publish("events", [Event(title="first")])
    floor = Floor() if args.floor else None
    app: WsgiApp = floor if floor is not None else create_app(settings, core=core)
    publish: Callable[[int], None] = (
        (lambda i: floor.publish())
        if floor is not None
        else (lambda i: core.publish("events", [Event(title=f"ev-{i}")]))
    )
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # The access lines, as uWSGI's log takes them.
    logs.configure("INFO")

    measuring = threading.Event()
    stopping = threading.Event()
    lock = threading.Lock()
    totals = {"answers": 0, "cpu": 0.0}

    def waiter() -> None:
        etag = call(app, environ(None))
        while not stopping.is_set():
            started = time.thread_time()
            etag = call(app, environ(etag))
            if measuring.is_set():
                with lock:
                    totals["answers"] += 1
                    totals["cpu"] += time.thread_time() - started

    threads = [threading.Thread(target=waiter, daemon=True) for _ in range(args.waiters)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # Every waiter is waiting.
    measuring.set()
    for i in range(args.events):
        publish(i)
        time.sleep(args.interval)
    measuring.clear()
    stopping.set()
    answers, cpu = totals["answers"], totals["cpu"]
    what = "floor (a trivial app)" if floor is not None else "Simplefeed's app"
    print(
        f"{what}: {args.waiters} waiters, {args.events} publishes, {answers} answers,"
        f" the waiting threads' CPU {cpu / max(answers, 1) * 1e6:,.0f} us per answer",
        flush=True,
    )
    os._exit(0)  # The waiters are still waiting.


if __name__ == "__main__":
    main()

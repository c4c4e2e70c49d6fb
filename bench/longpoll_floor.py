"""Measure the floor under bench/longpoll.py's latencies on this machine.

It runs the same consumers and the same producer against a server that does nothing but
long-polls, in one asyncio event loop.

    .venv/bin/python bench/longpoll_floor.py                   # 500 waiting consumers
    .venv/bin/python bench/longpoll_floor.py --consumers 1,100,500
    .venv/bin/python bench/longpoll_floor.py --uwsgi           # the same under uWSGI's threads

This is not Simplefeed. It stands in for the cheapest server imaginable. So it tells the
machine's share of a latency from the service's. It keeps one document, gzipped once per
version. The document is an Atom feed of the events published so far. Each entry is about as
long as Simplefeed renders an event with a title only.

It answers ``GET /recent`` with 200. When ``If-None-Match`` names the current version, it
answers 304. While ``Prefer: wait`` asks, it holds the request instead (``Preference-Applied``).
It holds it until a ``POST /entries`` (``{"title": ...}``) makes a new version. Every held
request is answered from the one gzipped body. There is no database, no durability, no
validation and no logging.

With ``--uwsgi`` a minimal WSGI app under uWSGI serves the same document
(bench/longpoll_floor_app.py). It has the shipped options that shape a long-poll. So it shows
what uWSGI's threads cost by themselves, without Simplefeed's app.

What the rows mean is in bench/longpoll.py. The figures are in docs/benchmarks.md
("Long-poll").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.longpoll import follow, print_head
from bench.servers import HOST

#: One entry, as Simplefeed renders ``{"title": "ev-N"}``. It has an id, title, updated,
#: summary, published, link and sequence number. It takes about 350 bytes, 40 gzipped.
ENTRY = (
    "<entry><id>urn:uuid:{uuid}</id><title>{title}</title>"
    "<updated>{now}</updated><summary>{title}</summary><published>{now}</published>"
    '<link href="http://127.0.0.1/entries/urn%3Auuid%3A{uuid}" rel="alternate"/>'
    "<sf:seq>{seq}</sf:seq></entry>"
)


class Document:
    def __init__(self) -> None:
        self.entries: list[str] = []
        self.version = 0
        self.changed = asyncio.Event()
        self._render()

    def add(self, title: str) -> None:
        seq = len(self.entries) + 1
        now = datetime.datetime.now(datetime.UTC).isoformat()
        entry = ENTRY.format(uuid=uuid.uuid4(), title=title, now=now, seq=seq)
        self.entries.insert(0, entry)
        self.version += 1
        self._render()
        self.changed.set()
        self.changed = asyncio.Event()

    def _render(self) -> None:
        body = (
            '<?xml version="1.0" encoding="utf-8"?>\n'
            '<feed xmlns="http://www.w3.org/2005/Atom" xmlns:sf="urn:x-floor">'
            f"<id>urn:x-floor</id><title>floor</title>{''.join(self.entries)}</feed>"
        ).encode()
        self.etag = f'"v{self.version}-gzip"'
        self.gzipped = gzip.compress(body, compresslevel=6, mtime=0)


def response(status: str, headers: list[tuple[str, str]], body: bytes = b"") -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}"]
    head += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def serve_connection(
    doc: Document, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method = lines[0].split(" ", 1)[0]
            fields = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                fields[name.strip().lower()] = value.strip()
            if method == "POST":
                body = await reader.readexactly(int(fields.get("content-length", "0")))
                doc.add(json.loads(body)["title"])
                writer.write(response("201 Created", [("Content-Type", "application/json")]))
                await writer.drain()
                continue
            held = False
            if fields.get("if-none-match") == doc.etag and "wait=" in fields.get("prefer", ""):
                changed = doc.changed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), 30)
                held = True
            headers = [("ETag", doc.etag), ("Vary", "Accept-Encoding, Prefer")]
            if held:
                headers.append(("Preference-Applied", "wait=30"))
            if fields.get("if-none-match") == doc.etag:
                writer.write(response("304 Not Modified", headers))
            else:
                headers += [("Content-Encoding", "gzip"), ("Content-Type", "application/atom+xml")]
                writer.write(response("200 OK", headers, doc.gzipped))
            await writer.drain()


async def run_server(port: int) -> None:
    doc = Document()
    server = await asyncio.start_server(
        lambda r, w: serve_connection(doc, r, w), HOST, port, backlog=1024
    )
    async with server:
        await server.serve_forever()


class FloorServer:
    """The floor server in a process and process group of its own.

    It has what bench/longpoll.py's ``follow`` expects of a server. That is ``port``,
    ``url()``, ``token`` and ``process``.
    """

    token = "none"

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind((HOST, 0))
            self.port = s.getsockname()[1]
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def __enter__(self) -> FloorServer:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(self.port)], start_new_session=True
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), 0.2):
                return self
            time.sleep(0.05)
        raise RuntimeError("the floor server did not start")

    def __exit__(self, *exc: Any) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(10)


class UwsgiFloorServer(FloorServer):
    """The app of bench/longpoll_floor_app.py under uWSGI.

    It runs 4 processes of 200 threads on an ``http11-socket``. It takes the other options of
    uwsgi.ini that shape a long-poll.
    """

    def __enter__(self) -> FloorServer:
        work = Path(tempfile.mkdtemp(prefix="simplefeed-floor-"))
        root = Path(__file__).resolve().parent.parent
        uwsgi = Path(sys.executable).with_name("uwsgi")
        # fmt: off
        options = [
            "--strict", "--master", "--lazy-apps", "--need-app", "--die-on-term",
            "--module", "bench.longpoll_floor_app:application",
            "--http11-socket", f"{HOST}:{self.port}", "--processes", "4", "--threads", "200",
            "--sharedarea", "1", "--thunder-lock", "--tcp-nodelay", "--listen", "1024",
            "--socket-timeout", "4", "--harakiri", "60", "--buffer-size", "65535",
            "--max-vars", "512", "--disable-logging",
        ]
        # fmt: on
        with (work / "uwsgi.log").open("wb") as log:
            self.process = subprocess.Popen(
                [str(uwsgi), *options],
                env={**os.environ, "PYTHONPATH": str(root), "FLOOR_TITLES": str(work / "titles")},
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url("/recent"), timeout=1).status_code == 200:
                    return self
            time.sleep(0.2)
        raise RuntimeError(f"the uWSGI floor server did not start: see {work / 'uwsgi.log'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--consumers", default="500")
    parser.add_argument("--events", type=int, default=20, help="events per run")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between events")
    parser.add_argument("--uwsgi", action="store_true", help="the floor under uWSGI's threads")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(run_server(args.serve))
        return
    print_head()
    first = 1
    label = "| wait, floor under uWSGI |" if args.uwsgi else "| wait, floor server |"
    with UwsgiFloorServer() if args.uwsgi else FloorServer() as server:
        for count in (int(c) for c in args.consumers.split(",")):
            run = follow(server, "wait", 0.0, count, args.events, args.interval, first)
            first += args.events + 1
            print(run.row().replace("| wait |", label), flush=True)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()

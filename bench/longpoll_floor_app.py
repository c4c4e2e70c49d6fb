"""Serve the floor server's document under uWSGI's threads (``bench/longpoll_floor.py --uwsgi``).

This is a minimal WSGI app. uWSGI loads it with the shipped options that shape a long-poll.
They are 4 processes of 200 threads, ``http11-socket``, ``tcp-nodelay``, ``thunder-lock`` and
``sharedarea``.

Each process holds its long-polls on one condition. Each waiter woken wakes the next, as
changes.py does. It answers them from one gzipped body, rendered once per version. A
``POST /entries`` appends the title to a file, and counts a version in uWSGI's shared area. A
thread per process looks at that count every 10 ms. Simplefeed's SQLite watcher looks at
``data_version`` the same way. There is no database, no validation and no logging. So it shows
what uWSGI's threads cost by themselves.
"""

from __future__ import annotations

import datetime
import gzip
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import uwsgi  # type: ignore[import-untyped]

from bench.longpoll_floor import ENTRY

TITLES = os.environ["FLOOR_TITLES"]

changed = threading.Condition()
state: dict[str, Any] = {"version": -1, "etag": "", "gzipped": b""}


def render(version: int) -> tuple[str, bytes]:
    try:
        with open(TITLES) as f:
            titles = f.read().splitlines()
    except FileNotFoundError:
        titles = []
    now = datetime.datetime.now(datetime.UTC).isoformat()
    entries = "".join(
        ENTRY.format(uuid=uuid.uuid4(), title=t, now=now, seq=i + 1)
        for i, t in reversed(list(enumerate(titles)))
    )
    body = (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<feed xmlns="http://www.w3.org/2005/Atom" xmlns:sf="urn:x-floor">'
        f"<id>urn:x-floor</id><title>floor</title>{entries}</feed>"
    ).encode()
    return f'"v{version}-gzip"', gzip.compress(body, compresslevel=6, mtime=0)


def watch() -> None:
    while True:
        version = uwsgi.sharedarea_read64(0, 0)
        if version != state["version"]:
            etag, gzipped = render(version)
            with changed:
                state.update(version=version, etag=etag, gzipped=gzipped)
                changed.notify()
        time.sleep(0.01)


threading.Thread(target=watch, daemon=True).start()
publishing = threading.Lock()


def application(env: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    if env["REQUEST_METHOD"] == "POST":
        event = json.loads(env["wsgi.input"].read(int(env.get("CONTENT_LENGTH") or 0)))
        with publishing:
            uwsgi.lock()
            try:
                with open(TITLES, "a") as f:
                    f.write(event["title"] + "\n")
                uwsgi.sharedarea_inc64(0, 0, 1)
            finally:
                uwsgi.unlock()
        start_response(
            "201 Created", [("Content-Type", "application/json"), ("Content-Length", "0")]
        )
        return [b""]
    asked = env.get("HTTP_IF_NONE_MATCH")
    held = False
    if asked is not None and asked == state["etag"] and "wait=" in env.get("HTTP_PREFER", ""):
        deadline = time.monotonic() + 30
        with changed:
            while state["etag"] == asked and time.monotonic() < deadline:
                changed.wait(deadline - time.monotonic())
            changed.notify()  # Pass the news on.
        held = True
    etag, gzipped = state["etag"], state["gzipped"]
    headers = [("ETag", etag), ("Vary", "Accept-Encoding, Prefer")]
    if held:
        headers.append(("Preference-Applied", "wait=30"))
    if asked == etag:
        start_response("304 Not Modified", headers)
        return [b""]
    headers += [
        ("Content-Encoding", "gzip"),
        ("Content-Type", "application/atom+xml"),
        ("Content-Length", str(len(gzipped))),
    ]
    start_response("200 OK", headers)
    return [gzipped]

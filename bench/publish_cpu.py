"""Measure the CPU a batch publish costs per event, in-process, through the whole app.

    .venv/bin/python bench/publish_cpu.py                   # batches of 100, pages of 100
    .venv/bin/python bench/publish_cpu.py --events 1000 --page-size 1000 --ids --json
    .venv/bin/python bench/publish_cpu.py --profile         # and cProfile's top functions

It builds the app as ``create_app`` does and calls it as a WSGI server would, with a producer
token, on a SQLite file in a temporary directory. So every part of a publish runs: the door,
the fingerprints, the entries' XML, the append, the commit, the pages each batch fills and
their files. There is no HTTP and no uWSGI. The default events are ``bench/publish.py``'s (a
title and a line of text). ``--json`` gives each a small JSON object and ``--ids`` an id of
the producer's, as the relay sends. It prints the process's user and system CPU time per
event over ``--requests`` batches, after 20 to warm up. Run it from each checkout in turn, a
few times, and compare the lowest figures: other work on the machine only adds.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import resource
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alembic import command
from bench.publish import EVENT
from simplefeed.app import create_app
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from simplefeed.store.schema import alembic_config

WARM_UP = 20


def bodies(count: int, events: int, *, ids: bool, json_content: bool) -> list[bytes]:
    """``count`` batch bodies of ``events`` events each, every event distinct."""
    out = []
    n = 0
    for _ in range(count):
        batch: list[dict[str, Any]] = []
        for _ in range(events):
            n += 1
            event: dict[str, Any] = (
                {"title": f"order {n} paid", "content": {"order": n, "total": "9.50"}}
                if json_content
                else dict(EVENT)
            )
            if ids:
                event["id"] = f"urn:uuid:{uuid.uuid4()}"
            batch.append(event)
        out.append(json.dumps(batch).encode())
    return out


def poster(app: Callable[..., Any], token: str) -> Callable[[bytes], None]:
    """A function that POSTs one body to ``/entries`` and checks that it was appended."""

    def post(body: bytes) -> None:
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/entries",
            "QUERY_STRING": "",
            "SERVER_NAME": "feeds.example.test",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "feeds.example.test",
            "HTTP_AUTHORIZATION": f"Bearer {token}",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.url_scheme": "http",
            "wsgi.version": (1, 0),
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        status: list[str] = []
        answer = b"".join(app(environ, lambda s, headers, exc=None: status.append(s)))
        if not status[0].startswith("201"):
            raise SystemExit(f"publish answered {status[0]}: {answer[:300]!r}")

    return post


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100, help="events a batch")
    parser.add_argument("--requests", type=int, default=200, help="batches measured")
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--ids", action="store_true", help="each event with the producer's id")
    parser.add_argument("--json", action="store_true", help="JSON content instead of text")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top 40")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sf-publish-cpu-") as tmp:
        url = f"sqlite:///{tmp}/simplefeed.db"
        command.upgrade(alembic_config(url), "head")
        settings = Settings(
            database_url=url,
            archive_dir=Path(tmp) / "archive",
            base_url="http://feeds.example.test",
            page_size=args.page_size,
        )
        core = Simplefeed(settings)
        core.create_feed(settings.default_feed)
        post = poster(create_app(settings, core=core), core.create_token(label="bench"))
        all_bodies = bodies(
            WARM_UP + args.requests, args.events, ids=args.ids, json_content=args.json
        )
        for body in all_bodies[:WARM_UP]:
            post(body)
        profile = cProfile.Profile() if args.profile else None
        before = resource.getrusage(resource.RUSAGE_SELF)
        if profile is not None:
            profile.enable()
        for body in all_bodies[WARM_UP:]:
            post(body)
        if profile is not None:
            profile.disable()
        after = resource.getrusage(resource.RUSAGE_SELF)
        core.close()
    events = args.requests * args.events
    user = (after.ru_utime - before.ru_utime) / events * 1e6
    system = (after.ru_stime - before.ru_stime) / events * 1e6
    print(
        f"{events:,} events in batches of {args.events}, pages of {args.page_size}:"
        f" {user + system:.1f} us of CPU an event ({user:.1f} user, {system:.1f} system)"
    )
    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(40)
        print(out.getvalue())


if __name__ == "__main__":
    main()

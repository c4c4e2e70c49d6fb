"""Measure the CPU per request of the app itself.

The WSGI callable is called in this process, with no server and no network. It covers the
reads that matter, identity and compressed. They are the /recent 304 and 200, and an archived
page. It serves before/after comparisons of hot-path changes. A loaded machine makes
bench/read.py's request rates useless for those::

    .venv/bin/python bench/wsgi_cpu.py
    PYTHONPATH=/path/to/an/older/checkout .venv/bin/python bench/wsgi_cpu.py   # the other side

Alternate the two a few times. The feed is on SQLite, with 250 entries in pages of 100, as
bench/read.py seeds it. Each figure takes 5,000 requests, and gives this process's CPU time per
request. Compressed rows are left out where the code under test does not compress.

A uWSGI worker also writes an access line for each request, and keeps its metrics in files.
``--access-log`` writes the lines, to /dev/null. Metrics go to files when
``PROMETHEUS_MULTIPROC_DIR`` names an empty directory, as ``simplefeed serve`` sets it::

    PROMETHEUS_MULTIPROC_DIR=$(mktemp -d) .venv/bin/python bench/wsgi_cpu.py --access-log
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import falcon.testing

import simplefeed
from simplefeed import logs
from simplefeed.app import create_app
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from simplefeed.store import upgrade

REQUESTS = 5000


def cpu_per_request(app: Any, path: str, headers: dict[str, str]) -> tuple[float, str]:
    template = falcon.testing.create_environ(path=path, headers=headers)
    status = ""

    def start_response(s: str, h: list[tuple[str, str]], exc_info: Any = None) -> Any:
        nonlocal status
        status = s

    start = time.process_time()
    for _ in range(REQUESTS):
        environ = dict(template)
        environ["wsgi.input"] = io.BytesIO(b"")
        body: Iterable[bytes] = app(environ, start_response)
        for _chunk in body:
            pass
        close = getattr(body, "close", None)
        if close is not None:
            close()
    return (time.process_time() - start) / REQUESTS * 1e6, status[:3]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--access-log", action="store_true", help="write access lines")
    args = parser.parse_args()
    if args.access_log:
        logs.configure("INFO")
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logs.LineHandler):
                handler.fd = os.open(os.devnull, os.O_WRONLY)  # Lives as long as the run.
    work = Path(tempfile.mkdtemp(prefix="sf-wsgi-cpu-"))
    try:
        url = f"sqlite:///{work / 'simplefeed.sqlite3'}"
        upgrade(url)
        settings = Settings(database_url=url, archive_dir=work / "archive", page_size=100)
        core = Simplefeed(settings)
        core.create_feed(settings.default_feed)
        token = core.create_token()
        app = create_app(settings, core=core)
        client = falcon.testing.TestClient(app)
        for first, last in ((0, 100), (100, 200), (200, 250)):
            batch = [
                {
                    "title": f"order {i} shipped",
                    "content": {"order": i, "items": list(range(i % 7)), "note": "x" * 80},
                    "categories": [{"term": "orders"}],
                }
                for i in range(first, last)
            ]
            r = client.simulate_post(
                "/entries", json=batch, headers={"Authorization": f"Bearer {token}"}
            )
            assert r.status_code == 201, r.text
        time.sleep(1.1)  # Last-Modified settles.
        etag = client.simulate_get("/recent").headers["etag"]
        rows = [
            ("/recent 304", "/recent", {"If-None-Match": etag}),
            ("/recent 200", "/recent", {}),
            ("archived page", "/pages/1", {}),
        ]
        compresses = (
            "Content-Encoding"
            in client.simulate_get("/recent", headers={"Accept-Encoding": "gzip"}).headers
        )
        if compresses:
            gz = {"Accept-Encoding": "gzip"}
            rows += [
                (
                    "/recent 304, gzip ETag",
                    "/recent",
                    {**gz, "If-None-Match": etag[:-1] + '-gzip"'},
                ),
                ("/recent 200 gzip", "/recent", gz),
                ("archived page gzip", "/pages/1", gz),
                ("archived page br", "/pages/1", {"Accept-Encoding": "br"}),
            ]
        print(f"simplefeed from {Path(simplefeed.__file__).parent.parent}")
        for label, path, headers in rows:
            us, status = cpu_per_request(app, path, headers)
            print(f"{label:<26} {status}  {us:6.1f} us CPU per request", flush=True)
        core.store.close()
    finally:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())

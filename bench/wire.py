"""Count bytes on the wire for a catch-up, per content coding.

A consumer reads a whole feed from the start. Issue #15 asks that compressed be at most 0.20 of
identity.

    .venv/bin/python bench/wire.py                      # 100,000 entries, pages of 100
    .venv/bin/python bench/wire.py --entries 10000      # quicker

It starts Simplefeed as shipped (``simplefeed serve``, ``uwsgi.ini``) on a SQLite database.
It publishes ``--entries`` events like bench/read.py's, in batches of 100. Each is an order,
with JSON content, a category, and about 250 bytes of JSON. Then it walks the feed as a
consumer does. It reads ``/recent``, then every ``prev-archive`` page down to page 1. It walks
once per Accept-Encoding: identity, gzip, br, and the consumer's own ``br, gzip``.

Each response counts the body as received. It adds the status line and header fields as sent,
as name, ": ", value and CRLF. The script also gives the time the walk took from this process.
It uses one connection per request, because the shipped http-socket closes each.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from lxml import etree

from bench._read_servers import machine
from bench.servers import UwsgiServer

ATOM = "{http://www.w3.org/2005/Atom}"
ENCODINGS = ["identity", "gzip", "br", "br, gzip"]


def publish(server: UwsgiServer, entries: int) -> float:
    start = time.perf_counter()
    headers = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(timeout=60, headers=headers) as client:
        for first in range(0, entries, 100):
            batch = [
                {
                    "title": f"order {i} shipped",
                    "content": {"order": i, "items": list(range(i % 7)), "note": "x" * 80},
                    "categories": [{"term": "orders"}],
                }
                for i in range(first, min(first + 100, entries))
            ]
            r = client.post(server.url("/entries"), json=batch)
            assert r.status_code == 201, r.text
    return time.perf_counter() - start


def walk(server: UwsgiServer, accept: str) -> dict[str, float]:
    """Read every document of the feed, newest first, as a catch-up reads them."""
    wire = decoded = requests = entries = 0
    start = time.perf_counter()
    with httpx.Client(timeout=60) as client:
        del client.headers["Accept-Encoding"]
        url: str | None = server.url("/recent")
        seen: set[str] = set()
        while url is not None:
            r = client.get(url, headers={"Accept-Encoding": accept})
            assert r.status_code == 200, (url, r.status_code)
            requests += 1
            head = len(f"HTTP/1.1 {r.status_code} {r.reason_phrase}\r\n") + 2
            head += sum(len(k) + len(v) + 4 for k, v in r.headers.raw)
            wire += head + r.num_bytes_downloaded
            decoded += len(r.content)
            feed = etree.fromstring(r.content)
            ids = [e.findtext(f"{ATOM}id") for e in feed.iterfind(f"{ATOM}entry")]
            entries += len([i for i in ids if i not in seen])
            seen.update(i for i in ids if i is not None)
            links = {lk.get("rel"): lk.get("href") for lk in feed.iterfind(f"{ATOM}link")}
            url = links.get("via") if url.endswith("/recent") else links.get("prev-archive")
    seconds = time.perf_counter() - start
    return {
        "requests": requests,
        "entries": entries,
        "wire_bytes": wire,
        "body_bytes_decoded": decoded,
        "wire_bytes_per_entry": wire / entries,
        "seconds": seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sf-wire-") as tmp:
        work = Path(tmp)
        server = UwsgiServer.scratch(
            work,
            page_size=100,
            processes=2,
        )
        with server:
            published = publish(server, args.entries)
            print(f"published {args.entries:,} entries in {published:.1f} s", flush=True)
            results = {accept: walk(server, accept) for accept in ENCODINGS}
    identity = results["identity"]["wire_bytes"]
    print(
        f"{'Accept-Encoding':<16}{'requests':>9}{'bytes/entry':>13}{'of identity':>13}{'walk s':>8}"
    )
    for accept, r in results.items():
        print(
            f"{accept:<16}{r['requests']:>9,.0f}{r['wire_bytes_per_entry']:>13.1f}"
            f"{r['wire_bytes'] / identity:>13.3f}{r['seconds']:>8.1f}"
        )
    info = machine()
    print("machine:", ", ".join(f"{k} {v}" for k, v in info.items()))
    if args.json is not None:
        args.json.write_text(json.dumps({"results": results, "machine": info}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

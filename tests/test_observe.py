"""The request id, the metrics switch and the log line format, in process."""

from __future__ import annotations

import json
import logging
import os
import select
import threading
from dataclasses import replace

import falcon.testing

from simplefeed import logs
from simplefeed.app import create_app
from simplefeed.core import Simplefeed


def test_metrics_off_leaves_the_route_out(core: Simplefeed) -> None:
    on = falcon.testing.TestClient(create_app(core.settings, core=core))
    assert on.simulate_get("/metrics").status_code == 200
    off = falcon.testing.TestClient(create_app(replace(core.settings, metrics=False), core=core))
    assert off.simulate_get("/metrics").status_code == 404


def test_every_answer_has_a_request_id(client: falcon.testing.TestClient) -> None:
    ids = set()
    for path in ("/recent", "/healthz", "/nope", "/feeds/missing/recent"):
        rid = client.simulate_get(path).headers["X-Request-Id"]
        assert len(rid) == 16
        ids.add(rid)
    assert len(ids) == 4
    # A proxy's well-formed id is kept; anything else is replaced.
    assert (
        client.simulate_get("/recent", headers={"X-Request-Id": "lb-1"}).headers["X-Request-Id"]
        == "lb-1"
    )
    odd = client.simulate_get("/recent", headers={"X-Request-Id": "x" * 65})
    assert odd.headers["X-Request-Id"] != "x" * 65


def test_log_line_is_one_bounded_json_object() -> None:
    record = logging.LogRecord(
        "simplefeed.access", logging.INFO, __file__, 1, "GET %s", ("/" + "p" * 5000,), None
    )
    record.fields = {"path": "/" + 'p\n"' * 5000, "status": 200}
    token = logs.request_id.set("abc")
    try:
        line = logs.JsonFormatter().format(record)
    finally:
        logs.request_id.reset(token)
    assert "\n" not in line and len(line) < 2 * 1024
    parsed = json.loads(line)
    assert parsed["request_id"] == "abc"
    assert parsed["status"] == 200
    assert parsed["path"].endswith("…")


def test_lines_written_at_once_by_many_threads_never_interleave() -> None:
    """LineHandler writes each line with one write and no lock, so every line fits in PIPE_BUF
    (a write that size is atomic on a pipe): 16 threads writing at once into one pipe, short
    lines and lines with long tracebacks or many long fields, leave every line whole."""
    read_end, write_end = os.pipe()
    handler = logs.LineHandler(write_end)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.Logger("simplefeed.test-lines")
    logger.addHandler(handler)
    chunks: list[bytes] = []
    reader = threading.Thread(
        target=lambda: chunks.extend(iter(lambda: os.read(read_end, 65536), b""))
    )
    reader.start()
    many = {f"field{i}": "\udc80" * 300 for i in range(10)}  # 10 x 256 chars x 6 bytes

    def write(n: int) -> None:
        for i in range(50):
            if i % 10 == 0:
                try:
                    raise ValueError("\u00e9" * 5000)
                except ValueError:
                    logger.exception("failed %d", n)
            elif i % 10 == 1:
                logger.info("many %d", n, extra={"fields": many})
            else:
                logger.info("line %d %d", n, i, extra={"fields": {"pad": "y" * 200}})

    threads = [threading.Thread(target=write, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.close(write_end)
    reader.join()
    os.close(read_end)
    lines = b"".join(chunks).splitlines()
    assert len(lines) == 16 * 50
    assert all(len(line) + 1 <= select.PIPE_BUF for line in lines)
    parsed = [json.loads(line) for line in lines]
    failed = [p for p in parsed if p["message"].startswith("failed")]
    assert len(failed) == 16 * 5
    assert all(p["exception"].endswith("…") and "ValueError" in p["exception"] for p in failed)
    clipped = [p for p in parsed if p["message"].startswith("many")]
    assert len(clipped) == 16 * 5 and all(p["clipped"] is True for p in clipped)

"""The request id, the metrics switch and the log line format, in process."""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import falcon.testing
import pytest

from simplefeed import logs, metrics
from simplefeed.app import create_app
from simplefeed.service import Simplefeed


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


def _lines_of(write: Callable[[logging.Logger], None]) -> list[dict[str, object]]:
    """The lines that ``write`` writes to a logger of its own, parsed."""
    read_end, write_end = os.pipe()
    handler = logs.LineHandler(write_end, batch_s=0)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.Logger("simplefeed.test-repeated")
    logger.addHandler(handler)
    write(logger)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as out:
        return [json.loads(line) for line in out.read().splitlines()]


@pytest.mark.parametrize(
    "path",
    ["/recent", "/" + 'p\n"\\\udc80\u2028' * 60, "/" + "x" * 5000],
    ids=["plain", "hostile", "long"],
)
def test_an_answer_given_again_logs_the_line_the_app_logs(path: str) -> None:
    """An answer given again writes a line encoded once but for its time, request id and
    duration (logs.RepeatedLine). It is the line info() writes, key for key, and valid JSON
    whatever the path."""
    fields = {"method": "GET", "path": path, "status": 304, "bytes": 0, "duration_ms": 0.0}
    fields |= {"feed": "default", "wait": "woken"}
    many = {**fields, **{f"pad{i}": "\udc80" * 300 for i in range(10)}}

    def write(logger: logging.Logger) -> None:
        for given in (fields, many):
            token = logs.request_id.set("rid-1")
            try:
                logs.info(logger, f"GET {path[:96]} 304", {**given, "duration_ms": 1.25})
            finally:
                logs.request_id.reset(token)
            repeated = logs.RepeatedLine(logger, f"GET {path[:96]} 304", given, "duration_ms")
            repeated.write(1.25, "rid-1")

    lines = _lines_of(write)
    assert len(lines) == 4
    for line in lines:
        line.pop("time")
    assert list(lines[1].items()) == list(lines[0].items())
    assert lines[1]["request_id"] == "rid-1" and lines[1]["duration_ms"] == 1.25
    assert lines[3] == lines[2] and lines[3]["clipped"] is True


def test_lines_written_at_once_by_many_threads_never_interleave() -> None:
    """Lines written at once by many threads never interleave.

    LineHandler writes whole lines in writes of at most PIPE_BUF bytes, which are atomic on a
    pipe. So every line fits in PIPE_BUF. Here 16 threads write at once into one pipe. They
    write short lines, and lines with long tracebacks or many long fields. Every line stays
    whole.
    """
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
    many = {f"field{i}": "\udc80" * 300 for i in range(10)}  # 10 x 256 chars x 6 bytes.

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
    handler.flush()
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


def pipe_handler(batch_s: float) -> tuple[logging.Logger, logs.LineHandler, int]:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    handler = logs.LineHandler(write_end, batch_s=batch_s)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.Logger("simplefeed.test-batch")
    logger.addHandler(handler)
    return logger, handler, read_end


def read_now(fd: int) -> list[str]:
    try:
        return [json.loads(line)["message"] for line in os.read(fd, 1 << 20).splitlines()]
    except BlockingIOError:
        return []


def test_access_lines_are_written_together_soon_and_warnings_at_once_in_order() -> None:
    """Access lines are written together soon, and warnings at once, in order.

    INFO lines, the access lines, wait a moment to be written with each other. That makes one
    system call for many, and each call lets another thread take the interpreter. A warning is
    written at once, after the lines waiting. So a process's lines stay in the order they were
    logged.
    """
    logger, handler, fd = pipe_handler(batch_s=0.3)
    try:
        logger.info("first")
        logger.info("second")
        assert read_now(fd) == []  # Waiting.
        logger.warning("trouble")
        assert read_now(fd) == ["first", "second", "trouble"]
        logger.info("third")
        deadline = time.monotonic() + 5
        seen: list[str] = []
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
            seen = read_now(fd)
        assert seen == ["third"]  # Written by the handler's thread, with no other line needed.
        logger.info("fourth")
        handler.flush()  # As at exit.
        assert read_now(fd) == ["fourth"]
    finally:
        handler.close()
        os.close(handler.fd)
        os.close(fd)


def test_a_log_that_takes_nothing_holds_the_lines_it_waits_for_to_a_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A log that takes nothing holds the lines it waits for, up to a bound.

    Lines do not pile up in memory. Past MAX_WAITING_LINES, the thread that adds one writes
    them all itself.
    """
    monkeypatch.setattr(logs, "MAX_WAITING_LINES", 10)
    logger, handler, fd = pipe_handler(batch_s=60)
    try:
        for i in range(11):
            logger.info("line %d", i)
        assert read_now(fd) == [f"line {i}" for i in range(11)]
    finally:
        handler.close()
        os.close(handler.fd)
        os.close(fd)


def test_a_forked_child_writes_its_own_lines_not_its_parents() -> None:
    logger, handler, fd = pipe_handler(batch_s=0.05)
    try:
        logger.info("parent's")
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's lines are read by the parent
            try:
                logger.info("child's")
                time.sleep(0.3)  # Its own writer thread writes it.
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        handler.flush()
        assert sorted(read_now(fd)) == ["child's", "parent's"]
    finally:
        handler.close()
        os.close(handler.fd)
        os.close(fd)


def test_a_run_s_metrics_directory_left_by_a_killed_server_is_removed_by_the_next(
    tmp_path: Path,
) -> None:
    """A run's metrics directory, left by a killed server, is removed by the next.

    uWSGI removes its run's directory when it exits, not when it is killed. So each `kill -9`
    leaves one in the temporary directory. The next `serve` removes the directories whose
    owner no longer runs, and only those.
    """
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # Its pid is now no process's.
    killed = metrics.new_run_directory(tmp_path)
    (killed / metrics.RUN_OWNER).write_text(f"{gone.pid}\n")
    (killed / "counter_123.db").write_bytes(b"\0" * 16)
    running = metrics.new_run_directory(tmp_path)  # Owned by this process, which runs.
    older = tmp_path / f"{metrics.RUN_DIRECTORY_PREFIX}older-release"  # No owner file.
    older.mkdir()
    mine = metrics.new_run_directory(tmp_path)
    assert not killed.exists()
    assert running.exists() and older.exists()
    assert (mine / metrics.RUN_OWNER).read_text() == f"{os.getpid()}\n"

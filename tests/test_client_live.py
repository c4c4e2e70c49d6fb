"""The consumer over real sockets: the real app behind a small threaded HTTP server on
127.0.0.1 (which can drop a connection mid-response or stall on purpose), the
``simplefeed consume`` command, and a real uWSGI process with a consumer killed mid-walk.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import httpx
import pytest
from click.testing import CliRunner, Result

from bench.servers import UwsgiServer
from simplefeed import archive
from simplefeed.app import create_app
from simplefeed.client import Checkpoint, Consumer, PollPolicy, RetryPolicy, StateFile, command
from simplefeed.client.command import consume
from simplefeed.client.parse import PARSERS
from simplefeed.model import Event
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from tests.conftest import SequentialIds, page_files_reopened
from tests.markdown import code_blocks, doc_text


@pytest.fixture
def database_url(tmp_path: Path, sqlite_template: Path) -> str:
    """SQLite only here: these tests are about the consumer and the wire, not the database
    (tests/test_client.py runs the consumer on both databases)."""
    path = tmp_path / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = False
    block_on_close = True  # server_close() joins every request thread

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.faults: list[str] = []
        self.connections = 0
        self.lock = threading.Lock()

    def next_fault(self) -> str | None:
        with self.lock:
            self.connections += 1
            return self.faults.pop(0) if self.faults else None


class _Handler(WSGIRequestHandler):
    server: _Server

    def handle(self) -> None:
        fault = self.server.next_fault()
        if fault is None:
            super().handle()
            return
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass  # the request line and headers
        if fault == "drop":
            # Promise a body, send a few bytes of it, then hang up.
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/atom+xml\r\n"
                b"Content-Length: 5000\r\n\r\n<?xml version='1.0'"
            )
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        elif fault == "stall":
            time.sleep(0.5)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class LiveServer:
    """The real app for ``settings`` (base URL set to where it listens) in a thread."""

    def __init__(
        self, settings: Settings, recent_max_age: int = 0, tls: ssl.SSLContext | None = None
    ) -> None:
        self.httpd = _Server()
        port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}"
        if tls is not None:  # HTTPS: each connection's handshake happens as it is accepted.
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
            self.base_url = f"https://127.0.0.1:{port}"
        self.settings = replace(settings, base_url=self.base_url, recent_max_age=recent_max_age)
        self.core = Simplefeed(self.settings, new_uuid=SequentialIds())
        self.core.create_feed(self.settings.default_feed)
        self.httpd.set_app(create_app(self.settings, core=self.core))
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}
        )
        self.thread.start()

    @property
    def recent(self) -> str:
        return f"{self.base_url}/recent"

    def publish(self, n: int) -> list[str]:
        start = self.core.feed("events").head_seq
        events = [Event(title=f"event {start + i + 1}") for i in range(n)]
        return [r.entry_id for r in self.core.publish("events", events)]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
        self.core.store.close()


@pytest.fixture
def live(settings: Settings) -> Iterator[LiveServer]:
    server = LiveServer(settings)
    try:
        yield server
    finally:
        server.close()


# -- dropped connections and timeouts over a real socket -----------------------------------


def test_a_dropped_connection_is_retried(live: LiveServer, tmp_path: Path) -> None:
    ids = live.publish(8)
    live.httpd.faults = ["drop", "drop"]
    waits: list[float] = []
    with Consumer(live.recent, tmp_path / "s.sqlite3", sleep=waits.append) as consumer:
        got = [e.id for e in consumer.entries()]
        assert consumer.fetcher.stats.retries == 2
    assert got == ids
    assert len(waits) == 2 and live.httpd.connections == 4  # 2 dropped, /recent, /pages/1


def test_a_stalled_server_times_out_and_is_retried(live: LiveServer, tmp_path: Path) -> None:
    ids = live.publish(3)
    live.httpd.faults = ["stall"]
    waits: list[float] = []
    with Consumer(live.recent, tmp_path / "s.sqlite3", timeout=0.2, sleep=waits.append) as consumer:
        assert [e.id for e in consumer.entries()] == ids
    assert len(waits) == 1


# -- the command ---------------------------------------------------------------------------


def run(*args: str) -> Result:
    return CliRunner().invoke(consume, list(args), catch_exceptions=False)


def test_jsonl_prints_each_new_entry_once_oldest_first(live: LiveServer, tmp_path: Path) -> None:
    state = str(tmp_path / "state.sqlite3")
    ids = live.publish(12)
    result = run(live.recent, "--state", state, "--jsonl")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["id"] for e in lines] == ids
    assert [e["seq"] for e in lines] == list(range(1, 13))
    assert set(lines[0]) >= {"id", "seq", "title", "updated", "content", "links"}
    assert lines[0]["title"] == "event 1"
    assert result.stderr == ""  # no progress bar: stderr is not a terminal
    more = live.publish(3)
    result = run(live.recent, "--state", state, "--jsonl")
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == more
    assert run(live.recent, "--state", state, "--jsonl").stdout == ""


def test_the_command_freezes_what_is_loaded_while_it_runs_and_gives_it_back(
    live: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live.publish(3)
    frozen: list[int] = []
    real = command._run

    def spy(*args: Any, **kwargs: Any) -> int:
        frozen.append(gc.get_freeze_count())
        return real(*args, **kwargs)

    monkeypatch.setattr(command, "_run", spy)
    assert gc.get_freeze_count() == 0
    result = run(live.recent, "--state", str(tmp_path / "state.sqlite3"), "--jsonl")
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3
    assert frozen and frozen[0] > 10_000  # the modules' objects, while the command ran
    assert gc.get_freeze_count() == 0  # and no more


def test_the_fast_parser_prints_the_same(live: LiveServer, tmp_path: Path) -> None:
    live.publish(12)
    outputs = {}
    for parser in ("feedparser", "lxml"):
        state = str(tmp_path / f"{parser}.sqlite3")
        result = run(live.recent, "--state", state, "--jsonl", "--parser", parser)
        assert result.exit_code == 0, result.stderr
        outputs[parser] = result.stdout
    assert outputs["lxml"] == outputs["feedparser"] != ""
    result = run(live.recent, "--state", str(tmp_path / "x.sqlite3"), "--parser", "sax")
    assert result.exit_code == 2 and "sax" in result.stderr


def test_default_output_and_from_now(live: LiveServer, tmp_path: Path) -> None:
    state = str(tmp_path / "state.sqlite3")
    live.publish(4)
    result = run(live.recent, "--state", state, "--from", "now")
    assert result.exit_code == 0 and result.stdout == ""
    (new,) = live.publish(1)
    result = run(live.recent, "--state", state)
    assert result.stdout == f"5\t{new}\tevent 5\n"


def test_exec_runs_per_entry_and_stops_on_a_non_zero_exit(live: LiveServer, tmp_path: Path) -> None:
    state = str(tmp_path / "state.sqlite3")
    out = tmp_path / "out.txt"
    live.publish(8)
    handler = tmp_path / "handler.py"
    handler.write_text(
        "import json, os, sys\n"
        "entry = json.load(sys.stdin)\n"
        "seq = os.environ['SIMPLEFEED_ENTRY_SEQ']\n"
        f"with open({str(out)!r}, 'a') as f:\n"
        "    f.write(f\"{entry['seq']} {seq}\\n\")\n"
        "sys.exit(7 if entry['seq'] == 5 and not os.environ.get('OK') else 0)\n"
    )
    command = f"{sys.executable} {handler}"
    result = run(live.recent, "--state", state, "--exec", command)
    assert result.exit_code == 3
    assert "exited with status 7" in result.stderr and "sequence 5" in result.stderr
    assert out.read_text().split("\n")[:-1] == [f"{i} {i}" for i in range(1, 6)]
    with StateFile(state) as file:
        checkpoint = file.load_checkpoint(live.recent)
    assert checkpoint is not None and checkpoint.seq == 4
    result = CliRunner(env={"OK": "1"}).invoke(
        consume, [live.recent, "--state", state, "--exec", command]
    )
    assert result.exit_code == 0
    assert [line.split()[0] for line in out.read_text().splitlines()] == [
        *map(str, range(1, 6)),
        *map(str, range(5, 9)),
    ]


def test_exit_codes(live: LiveServer, tmp_path: Path) -> None:
    state = str(tmp_path / "state.sqlite3")
    assert "Exit codes" in run("--help").stdout
    assert run(live.recent, "--state", state, "--jsonl", "--exec", "cat").exit_code == 2
    not_atom = run(f"{live.base_url}/healthz", "--state", state)
    assert not_atom.exit_code == 4 and "not an Atom feed" in not_atom.stderr
    missing = run(f"{live.base_url}/feeds/nope/recent", "--state", state)
    assert missing.exit_code == 5 and "404" in missing.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    refused = run(f"http://127.0.0.1:{closed_port}/recent", "--state", state, "--retries", "0")
    assert refused.exit_code == 5 and "gave up after 1 attempts" in refused.stderr
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not SQLite" * 64)
    assert run(live.recent, "--state", str(garbage)).exit_code == 6


def test_a_state_file_in_a_directory_that_does_not_exist_is_refused_before_any_request(
    live: LiveServer, tmp_path: Path
) -> None:
    """A mistyped directory was made, with a new state file in it: the whole history again."""
    live.publish(2)
    typo = tmp_path / "consmer" / "state"
    result = run(live.recent, "--state", str(typo / "c.sqlite3"))
    assert result.exit_code == 6 and result.stdout == ""
    assert result.stderr == (
        f"simplefeed consume: error: {typo}/c.sqlite3: no such directory: {typo} (a state file"
        " is created only in a directory that exists)\n"
    )
    assert not (tmp_path / "consmer").exists()
    assert live.httpd.connections == 0


def test_an_unexpected_status_says_what_the_server_said(live: LiveServer, tmp_path: Path) -> None:
    """`unexpected HTTP status 404` alone did not tell a mistyped feed name from a page gone;
    the server's JSON error body said it."""
    result = run(f"{live.base_url}/feeds/nosuch/recent", "--state", str(tmp_path / "s.sqlite3"))
    assert result.exit_code == 5
    assert result.stderr == (
        f"simplefeed consume: error: {live.base_url}/feeds/nosuch/recent: unexpected HTTP"
        " status 404; the server says: no feed named 'nosuch'\n"
    )


def test_a_web_page_is_not_an_atom_feed_of_its_content_type(
    live: LiveServer, tmp_path: Path
) -> None:
    """The parser's `SAXParseException: <unknown>:2:0: syntax error` did not tell that the URL
    was a web page's (the service's own HTML index here)."""
    for parser in PARSERS:
        result = run(
            f"{live.base_url}/", "--state", str(tmp_path / "s.sqlite3"), "--parser", parser
        )
        assert result.exit_code == 4, result.stderr
        assert f"{live.base_url}/: not an Atom feed (Content-Type text/html" in result.stderr
    json_reply = run(f"{live.base_url}/healthz", "--state", str(tmp_path / "s.sqlite3"))
    assert "not an Atom feed (Content-Type application/json): " in json_reply.stderr


def test_a_run_within_the_entry_point_s_max_age_asks_nothing_and_debug_says_so(
    settings: Settings, tmp_path: Path
) -> None:
    """A run within max-age of the last prints nothing and exits 0: the copy in the state file
    is fresh, no request goes out. A newcomer took it for a run that did nothing; --debug says
    why, and that the run is caught up."""
    server = LiveServer(settings, recent_max_age=300)
    try:
        state = str(tmp_path / "state.sqlite3")
        server.publish(2)
        first = run(server.recent, "--state", state)
        assert first.exit_code == 0 and first.stdout.count("\n") == 2, first.stderr
        connections = server.httpd.connections
        server.publish(1)  # not seen: the copy is fresh
        quiet = run(server.recent, "--state", state)
        assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")
        told = run(server.recent, "--state", state, "--debug")
        assert told.exit_code == 0 and told.stdout == "", told.stderr
        lines = told.stderr.splitlines()
        assert len(lines) == 2, told.stderr
        assert re.fullmatch(
            rf"simplefeed consume: {re.escape(server.recent)}: not fetched: the copy in the state"
            r" file is fresh for \d+ s more \(max-age 300 s\)",
            lines[0],
        ), lines[0]
        assert lines[1] == f"simplefeed consume: {server.recent}: 0 new entries; caught up"
        assert server.httpd.connections == connections
        # --debug is given back: a run after it says nothing again.
        assert run(server.recent, "--state", state).stderr == ""
    finally:
        server.close()


def test_an_entry_point_that_redirects_permanently_is_warned_of_once_per_run(
    live: LiveServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`/feeds/events/recent` answers 308 to `/recent`: a checkpoint kept under each spelling
    read the history again, silently. Checkpoints stay under the URL given; the run says so."""
    ids = live.publish(3)
    given = f"{live.base_url}/feeds/events/recent"
    state = tmp_path / "s.sqlite3"
    result = run(given, "--state", str(state))
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 3
    assert result.stderr == (
        f"simplefeed consume: {given} redirects permanently to {live.recent}; checkpoints are"
        " kept under the URL given, so another spelling of this feed starts over: give"
        f" {live.recent} to share them\n"
    )
    with StateFile(state) as file:
        assert set(file.checkpoints()) == {given}
    assert run(live.recent, "--state", str(state)).stderr == ""  # no redirect: no warning
    passes = itertools.count(1)
    caplog.clear()  # the runs' warnings so far
    with (
        caplog.at_level(logging.WARNING, logger="simplefeed.client"),
        Consumer(given, tmp_path / "f.sqlite3", wait=0, sleep=lambda _: None) as consumer,
    ):
        got = [e.id for e in consumer.entries(follow=True, stop=lambda: next(passes) == 3)]
        assert consumer.fetcher.stats.requests == 3  # each pass asked the entry point
    assert got == ids
    assert [r.getMessage() for r in caplog.records].count(result.stderr[20:-1]) == 1


def wait_for_lines(path: Path, n: int, timeout: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines()
        if len(lines) >= n:
            return lines
        time.sleep(0.02)
    raise AssertionError(f"{path} has {len(path.read_text().splitlines())} lines, not {n}")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_follow_prints_entries_as_they_come_and_exits_130_when_stopped(
    live: LiveServer, tmp_path: Path, stop: signal.Signals
) -> None:
    """Ctrl-C, or SIGTERM as a service manager sends it (SIGTERM ended the process at once:
    with checkpoints per page, the next run handled up to a page again)."""
    live.publish(3)
    out = tmp_path / "out.jsonl"
    with out.open("wb") as stdout:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "simplefeed.client.command",
                live.recent,
                "--state",
                str(tmp_path / "state.sqlite3"),
                "--jsonl",
                "--follow",
                "--checkpoint",
                "page",
                "--min-interval",
                "0.1",
                "--max-interval",
                "0.2",
                # Long polls of at most 1 s: the server's thread holding the last one when the
                # consumer is interrupted is free for the fixture's shutdown soon after.
                "--wait",
                "1",
            ],
            stdout=stdout,
            stderr=subprocess.PIPE,
        )
        try:
            wait_for_lines(out, 3)
            live.publish(2)
            lines = wait_for_lines(out, 5)
            process.send_signal(stop)
            _, stderr = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 130, stderr
    assert b"interrupted" in stderr
    assert [json.loads(line)["seq"] for line in lines] == [1, 2, 3, 4, 5]
    with StateFile(tmp_path / "state.sqlite3") as state:
        checkpoint = state.load_checkpoint(live.recent)
    assert checkpoint is not None and checkpoint.seq == 5


# -- a real uWSGI server, a consumer process killed mid-walk --------------------------------


@pytest.mark.e2e
def test_against_uwsgi_a_killed_consumer_resumes_without_missing(tmp_path: Path) -> None:
    server = UwsgiServer.scratch(
        tmp_path / "work",
        page_size=5,
        processes=2,
        extra_env={"SIMPLEFEED_RECENT_MAX_AGE": "0"},
    )
    with server, httpx.Client(timeout=30) as http:
        headers = {"Authorization": f"Bearer {server.token}"}

        def publish(n: int, first: int) -> None:
            batch = [{"title": f"event {first + i}"} for i in range(n)]
            response = http.post(server.url("/entries"), json=batch, headers=headers)
            assert response.status_code == 201, response.text

        publish(33, 1)
        recent = server.url("/recent")

        # The library, over the network: everything once, in order; archived pages once.
        state = tmp_path / "library.sqlite3"
        with Consumer(recent, state, retry=RetryPolicy(attempts=3)) as consumer:
            assert [e.seq for e in consumer.entries()] == list(range(1, 34))
            first_requests = consumer.fetcher.stats.requests
        assert first_requests == 7  # /recent and pages 6..1
        publish(12, 34)
        with Consumer(recent, state) as consumer:
            assert [e.seq for e in consumer.entries()] == list(range(34, 46))
            # /recent, the checkpoint's page 7 (frozen since), 8 and 9; 10 is /recent's via.
            assert consumer.fetcher.stats.requests == 4

        # The command in its own process, killed with SIGKILL in the middle of the history.
        out = tmp_path / "seen.txt"
        out.touch()
        cli_state = tmp_path / "cli.sqlite3"
        command = [
            sys.executable,
            "-m",
            "simplefeed.client.command",
            recent,
            "--state",
            str(cli_state),
            "--exec",
            f"sh -c 'cat >/dev/null; echo $SIMPLEFEED_ENTRY_SEQ >> {out}; sleep 0.02'",
        ]
        process = subprocess.Popen(command, start_new_session=True)
        try:
            deadline = time.monotonic() + 20
            while len(out.read_text().split()) < 17 and time.monotonic() < deadline:
                time.sleep(0.01)
            os.killpg(process.pid, signal.SIGKILL)
        finally:
            process.wait()
        first = [int(s) for s in out.read_text().split()]
        assert 17 <= len(first) < 45, "the consumer was not killed mid-walk"
        with StateFile(cli_state) as file:
            checkpoint = file.load_checkpoint(recent)
        assert isinstance(checkpoint, Checkpoint)
        assert checkpoint.seq in (first[-1], first[-1] - 1)

        finished = subprocess.run(command, timeout=60, check=False)
        assert finished.returncode == 0
        seen = [int(s) for s in out.read_text().split()]
        assert sorted(set(seen)) == list(range(1, 46))  # nothing missed
        assert seen == sorted(seen)  # in order
        repeated = {s for s in seen if seen.count(s) > 1}
        assert repeated <= {first[-1]}  # at most the entry being handled when killed


#: The real command in a process of its own, with a bug put into its progress report (a
#: stand-in for any bug of ours): once catching up has handled an entry, it divides by zero.
_BUGGY_CONSUME = """
import sys
from simplefeed.client import command

def report(self, progress):
    if progress.phase == "process" and progress.done >= 1:
        return 1 / 0

command._ProgressBars.__call__ = report
if sys.argv[1] == "consumer":
    from simplefeed.client.state import StateFile
    StateFile.parked = lambda self, *a: 1 / 0
    from simplefeed.client.state_commands import consumer_group
    consumer_group(sys.argv[2:], prog_name="simplefeed consumer")
command.consume(sys.argv[1:], prog_name="simplefeed consume")
"""


def test_an_internal_error_is_one_line_and_exit_70(live: LiveServer, tmp_path: Path) -> None:
    """A bug does not end in a raw traceback and exit 1: one line naming it, exit 70 (the
    traceback with --debug), the checkpoint where the last handled entry left it."""
    live.publish(12)  # pages of 5: two archived, the working page
    state = tmp_path / "state.sqlite3"

    def buggy(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _BUGGY_CONSUME, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    done = buggy(live.recent, "--state", str(state), "--parser", "lxml")
    assert done.returncode == 70, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("simplefeed consume: internal error (a bug, please report it): ")
    assert "ZeroDivisionError: division by zero; --debug shows the traceback" in line
    assert "Traceback" not in done.stderr
    with StateFile(state) as stored:
        (checkpoint,) = stored.checkpoints().values()
    assert checkpoint.seq == 1  # the one entry handled before the bug
    debug = buggy(live.recent, "--state", str(state), "--parser", "lxml", "--debug")
    assert debug.returncode == 70
    assert "Traceback (most recent call last)" in debug.stderr
    assert "in report" in debug.stderr
    assert debug.stderr.splitlines()[-1].startswith("simplefeed consume: internal error")
    status = buggy("consumer", "parked", "--state", str(state))
    assert status.returncode == 70, status.stderr
    assert status.stderr.startswith("simplefeed consumer: internal error")
    assert len(status.stderr.splitlines()) == 1


@pytest.mark.e2e
def test_against_uwsgi_digests_chain_the_archive_and_a_damaged_page_stops_the_consumer(
    tmp_path: Path,
) -> None:
    """The sf:sha256 chain through a real uWSGI: each archived page's bytes as served are the
    digest the newer document gives; the command verifies every page it reads; a page altered
    behind the service's back after its consumer last read it (the database's bytes and the
    files alike: the service serves a file only as the database has it) stops the walk (exit
    4, the digest named), nothing handled, the checkpoint where it was."""
    server = UwsgiServer.scratch(
        tmp_path / "work",
        page_size=5,
        # One worker: it has served page 3 (below), so it answers from the page's file from
        # then on (a worker's first answer for a page is the database's bytes).
        processes=1,
        extra_env={"SIMPLEFEED_RECENT_MAX_AGE": "0"},
    )
    state = tmp_path / "consumer.sqlite3"
    out = tmp_path / "seen.jsonl"

    def consume(*extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "simplefeed.client.command", server.url("/recent")]
        with out.open("a") as sink:
            return subprocess.run(
                [*command, "--state", str(state), "--jsonl", *extra],
                stdout=sink,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                check=False,
            )

    with server, httpx.Client(timeout=30) as http:
        headers = {"Authorization": f"Bearer {server.token}"}

        def publish(first: int, last: int) -> None:
            batch = [{"title": f"event {n}", "content": {"n": n}} for n in range(first, last + 1)]
            response = http.post(server.url("/entries"), json=batch, headers=headers)
            assert response.status_code == 201, response.text

        publish(1, 12)  # pages 1 and 2 frozen, 11 and 12 on the working page 3
        first = consume()
        assert first.returncode == 0, first.stderr
        publish(13, 23)  # pages 3 and 4 frozen, the working page 5
        # The chain as served: every prev-archive digest is the SHA-256 of the page it names.
        body = http.get(server.url("/recent")).content
        chained = 0
        while (link := _prev_archive(body)) is not None:
            href, digest = link
            body = http.get(href).content
            assert hashlib.sha256(body).hexdigest() == digest, href
            chained += 1
        assert chained == 4

        page_3 = server.archive_dir / "pages" / "3"
        mtime_us = page_3.stat().st_mtime_ns // 1000

        def alter_page_3(body: bytes) -> None:
            """Write the page file and its precompressed copies, which the consumer is sent."""
            archive.write_page(page_3, body, mtime_us)

        damaged = bytearray(page_3.read_bytes())
        at = damaged.index(b"event 13")
        damaged[at : at + 8] = b"event XX"  # same length: only the digest can tell
        alter_page_3(bytes(damaged))
        page_files_reopened()
        stopped = consume("--parser", "lxml")
        assert stopped.returncode == 4, stopped.stderr
        assert "SHA-256 mismatch" in stopped.stderr
        assert "/pages/3" in stopped.stderr and "checkpoint untouched" in stopped.stderr
        with StateFile(state) as file:
            checkpoint = file.load_checkpoint(server.url("/recent"))
        assert checkpoint is not None and checkpoint.seq == 12
        seen = [json.loads(line) for line in out.read_text().splitlines()]
        assert [e["seq"] for e in seen] == list(range(1, 13))  # nothing from the damaged page
        assert [e["content"] for e in seen] == [{"n": n} for n in range(1, 13)]

        alter_page_3(bytes(damaged).replace(b"event XX", b"event 13"))  # repaired
        page_files_reopened()
        resumed = consume()
        assert resumed.returncode == 0, resumed.stderr
        seen = [json.loads(line) for line in out.read_text().splitlines()]
        assert [e["seq"] for e in seen] == list(range(1, 24))


def _prev_archive(body: bytes) -> tuple[str, str] | None:
    from lxml import etree

    for link in etree.fromstring(body).iterfind("{http://www.w3.org/2005/Atom}link"):
        if link.get("rel") == "prev-archive":
            return link.get("href"), link.get("{https://simplefeed.dev/ns/1.0}sha256")
    return None


@pytest.mark.e2e
def test_against_uwsgi_documents_come_compressed_and_digests_hold(tmp_path: Path) -> None:
    """The consumer asks for compression; the server sends every page compressed; each page's
    SHA-256 (the digest the next page's prev-archive link gives) is checked on the decoded
    bytes, so the walk through every archived page passes."""
    server = UwsgiServer.scratch(
        tmp_path / "work",
        page_size=20,
        processes=1,
    )
    with server:
        server.publish([{"title": f"event {i}", "content": f"payload {i}"} for i in range(105)])
        with Consumer(server.url("/recent"), tmp_path / "state.sqlite3") as consumer:
            assert [e.seq for e in consumer.entries()] == list(range(1, 106))
            stats = consumer.fetcher.stats
        assert stats.requests == 6  # /recent and pages 5..1, each digest checked
        assert stats.bytes_received < 0.25 * stats.bytes_decoded, stats


def test_the_page_after_the_next_is_read_while_entries_are_handled(
    live: LiveServer, tmp_path: Path
) -> None:
    """Catching up over the network, the consumer reads ahead: while the first entry of page
    2 is being handled, page 4 is already asked for (page 3 was read to check page 2)."""
    requested: list[str] = []
    app = live.httpd.get_app()

    def recording(environ: dict[str, Any], start_response: Any) -> Any:
        requested.append(environ["PATH_INFO"])
        return app(environ, start_response)

    live.httpd.set_app(recording)
    live.publish(5)  # page 1 frozen
    state = tmp_path / "state.sqlite3"
    with Consumer(live.recent, state) as consumer:
        assert [e.seq for e in consumer.entries()] == [1, 2, 3, 4, 5]
    live.publish(17)  # pages 2, 3 and 4 frozen; 21 and 22 on the working page 5
    waited: dict[int, bool] = {}

    def handle(entry: Any) -> None:
        if entry.seq == 6:
            deadline = time.monotonic() + 10
            while "/pages/4" not in requested and time.monotonic() < deadline:
                time.sleep(0.01)
            waited[entry.seq] = "/pages/4" in requested

    with Consumer(live.recent, state) as consumer:
        consumer.run(handle)
        assert consumer.checkpoint is not None and consumer.checkpoint.seq == 22
    assert waited == {6: True}
    assert requested.count("/pages/4") == 1


# -- long polling (Prefer: wait, RFC 7240) --------------------------------------------------


def _long_polling(
    app: Any, log: list[tuple[str, str | None]], answered: list[str] | None = None
) -> Any:
    """The app behind a front that honours ``Prefer: wait=N`` on /recent as the protocol
    says: a conditional request whose copy is current is held until the document changes
    or N seconds pass, and the answer says ``Preference-Applied``. Every request is logged:
    (path, its Prefer). The status of each long-poll's answer goes to ``answered``."""

    def front(environ: dict[str, Any], start_response: Any) -> Any:
        prefer = environ.get("HTTP_PREFER")
        log.append((environ["PATH_INFO"], prefer))
        wait = re.fullmatch(r"\s*wait=(\d+)\s*", prefer or "")
        if wait is None or environ["PATH_INFO"] != "/recent":
            return app(environ, start_response)
        deadline = time.monotonic() + int(wait.group(1))
        answer: dict[str, Any] = {}

        def capture(status: str, headers: list[Any], exc_info: Any = None) -> Any:
            answer["status"], answer["headers"] = status, headers
            return lambda data: None

        while True:
            body = b"".join(app(environ, capture))
            if not answer["status"].startswith("304") or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        headers = [*answer["headers"], ("Preference-Applied", f"wait={wait.group(1)}")]
        if answered is not None:
            answered.append(answer["status"][:3])
        start_response(answer["status"], headers)
        return [body]

    return front


def following(
    live: LiveServer,
    tmp_path: Path,
    handle: Callable[[Any], None],
    wait: float,
    done: threading.Event,
) -> threading.Thread:
    """A consumer following ``live`` on a thread (started) with ``handle``, asking the server
    to hold its polls ``wait`` s, until ``done`` is set. Polling alone, it would ask once an
    hour. So an entry that arrives during a test came through a long-poll."""

    def follow() -> None:
        with Consumer(
            live.recent,
            tmp_path / "state.sqlite3",
            poll=PollPolicy(min_interval=3600, max_interval=3600),
            wait=wait,
        ) as consumer:
            # stop() also ends a pause between polls.
            def stop_when_done() -> None:
                done.wait()
                consumer.stop()

            stopper = threading.Thread(target=stop_when_done)
            stopper.start()
            try:
                consumer.run(handle, follow=True, stop=done.is_set)
            finally:
                done.set()
                stopper.join()

    thread = threading.Thread(target=follow)
    thread.start()
    return thread


def test_follow_long_polls_a_server_that_honours_prefer_wait(
    live: LiveServer, tmp_path: Path
) -> None:
    """With --follow the consumer asks the server to hold its polls (Prefer: wait); a server
    that does (Preference-Applied) is asked again at once, so a new entry arrives in well
    under the polling interval, and a quiet feed costs one request per wait."""
    log: list[tuple[str, str | None]] = []
    answered: list[str] = []
    live.httpd.set_app(_long_polling(live.httpd.get_app(), log, answered))
    live.publish(3)
    got: list[int] = []
    done = threading.Event()

    def until(ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 60
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.01)

    follower = following(live, tmp_path, lambda e: got.append(e.seq), 2, done)
    try:
        until(lambda: len(got) >= 3)
        assert got == [1, 2, 3]
        quiet_from = len(answered)
        until(lambda: answered[quiet_from:].count("304") >= 2)  # quiet: held polls
        quiet = answered[quiet_from:]
        live.publish(1)
        until(lambda: len(got) >= 4)
    finally:
        done.set()
        follower.join(timeout=10)
    assert not follower.is_alive()
    assert got == [1, 2, 3, 4]  # through a long-poll: polling alone asks once an hour
    polls = [prefer for path, prefer in log if path == "/recent"]
    assert polls[0] is None  # the first pass answers at once: no wait asked
    assert all(prefer == "wait=2" for prefer in polls[1:])
    # A quiet feed costs one request per wait, not a busy loop: each poll kept the current
    # copy, so the front held it until its wait ended.
    assert len(quiet) >= 2 and set(quiet) == {"304"}, quiet


def _silent_when_at_once(app: Any) -> Any:
    """The app, but answers that came at once say nothing of ``Prefer`` (as Simplefeed before
    session 13, and other servers, answer a long-poll whose copy is stale)."""

    def front(environ: dict[str, Any], start_response: Any) -> Any:
        started = time.monotonic()

        def respond(status: str, headers: list[Any], exc_info: Any = None) -> Any:
            if time.monotonic() - started < 0.2:
                headers = [(k, v) for k, v in headers if k.lower() != "preference-applied"]
            return start_response(status, headers, exc_info)

        return app(environ, respond)

    return front


@pytest.mark.parametrize("server", ["says-so", "silent-when-at-once"])
def test_follow_keeps_long_polling_when_a_publish_lands_between_two_polls(
    live: LiveServer, tmp_path: Path, server: str
) -> None:
    """The app's own long-poll: an entry published while the consumer handles the previous
    one makes its next long-poll's copy stale, answered at once. The answer says the
    preference was applied, or (another server) says nothing, but the server held the
    consumer's long-polls before and the answer has new entries: either way the consumer asks
    again at once rather than polling at its 30 s interval, and the entry after arrives as
    soon as it is published."""
    if server == "silent-when-at-once":
        live.httpd.set_app(_silent_when_at_once(live.httpd.get_app()))
    live.publish(1)
    got: list[int] = []
    done = threading.Event()

    def handle(entry: Any) -> None:
        if entry.seq == 2:
            live.publish(1)  # seq 3: the copy the next long-poll names is stale
        got.append(entry.seq)

    def until(count: int) -> None:
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            time.sleep(0.01)

    follower = following(live, tmp_path, handle, 5, done)
    try:
        until(1)
        time.sleep(0.5)  # long-polling
        live.publish(1)  # seq 2, whose handling publishes seq 3
        until(3)
        time.sleep(0.5)  # long-polling again, or polling at its interval
        live.publish(1)  # seq 4
        until(4)
    finally:
        done.set()
        follower.join(timeout=15)
    assert not follower.is_alive()
    assert got == [1, 2, 3, 4]  # through a long-poll: polling alone asks once an hour


@pytest.mark.parametrize(
    "claims,delay,max_age",
    [(False, 0.0, 1), (True, 0.0, 1), (False, 1.2, 3)],
    ids=["ignores", "claims-but-answers-at-once", "ignores-and-answers-slowly"],
)
def test_follow_without_a_held_poll_polls_no_faster_than_max_age(
    settings: Settings, tmp_path: Path, claims: bool, delay: float, max_age: int
) -> None:
    """A server that ignores Prefer: wait (no Preference-Applied), even one slow to answer,
    or one that says it applied it but answers at once, gets polled as without it: never
    faster than max-age. The consumer's pauses are recorded, not slept."""
    log: list[tuple[str, str | None]] = []
    pauses: list[float] = []
    server = LiveServer(settings, recent_max_age=max_age)
    app = server.httpd.get_app()

    def recording(environ: dict[str, Any], start_response: Any) -> Any:
        log.append((environ["PATH_INFO"], environ.get("HTTP_PREFER")))
        time.sleep(delay)
        # The app itself honours Prefer: wait; this server is one that does not.
        prefer = environ.pop("HTTP_PREFER", None)
        if not claims or prefer is None:
            return app(environ, start_response)

        def claiming(status: str, headers: list[Any], exc_info: Any = None) -> Any:
            return start_response(status, [*headers, ("Preference-Applied", "wait=5")])

        return app(environ, claiming)

    server.httpd.set_app(recording)
    try:
        server.publish(2)
        with Consumer(
            server.recent,
            tmp_path / "state.sqlite3",
            poll=PollPolicy(min_interval=0.1, max_interval=0.1),
            wait=5,
            sleep=pauses.append,
        ) as consumer:
            consumer.run(lambda e: None, follow=True, stop=lambda: len(log) >= 5)
    finally:
        server.close()
    prefers = [prefer for path, prefer in log if path == "/recent"]
    assert len(prefers) == 5, log
    # The first long poll goes out at once. Not held, each poll after it waits max-age, not
    # the 0.1 s interval, and never loops.
    assert len(pauses) == len(prefers) - 2, pauses
    assert min(pauses) >= max_age, pauses
    assert prefers[1:] == ["wait=5"] * (len(prefers) - 1)


@pytest.mark.parametrize(
    "how", ["stop, from a thread", "close, from a thread", "close, from a signal handler"]
)
def test_a_following_consumer_asked_to_stop_ends_within_moments_checkpoint_stored(
    live: LiveServer, tmp_path: Path, how: str
) -> None:
    """A service stopping its consumer (a thread, SIGTERM's handler) while it holds a long
    poll: `close()` from another thread raised "generator already executing", closed the state
    file under the loop, which then failed a minute later with StateError and left a socket
    open; a `stop()` flag was looked at only after the 30 s poll.
    Now the iteration ends within moments, its checkpoint stored, and the consumer can
    iterate again."""
    live.publish(3)
    state = tmp_path / "state.sqlite3"
    held, answered, asked = threading.Event(), threading.Event(), threading.Event()
    app = live.httpd.get_app()

    def front(environ: dict[str, Any], start_response: Any) -> Any:
        if "HTTP_PREFER" not in environ:
            return app(environ, start_response)
        held.set()
        try:
            return app(environ, start_response)
        finally:
            answered.set()

    live.httpd.set_app(front)
    previous = signal.getsignal(signal.SIGALRM)
    with Consumer(live.recent, state, parser="lxml") as consumer:  # long polls of 30 s
        if how.endswith("signal handler"):
            signal.signal(signal.SIGALRM, lambda *_: consumer.close())

        def ask_once_held() -> None:
            if not held.wait(60):
                return
            asked.set()
            if how.endswith("signal handler"):
                os.kill(os.getpid(), signal.SIGALRM)  # The handler runs in the main thread.
            elif how.startswith("stop"):
                consumer.stop()
            else:
                consumer.close()

        asker = threading.Thread(target=ask_once_held)
        asker.start()
        try:
            seen = [entry.seq for entry in consumer.entries(follow=True)]
        finally:
            asker.join()
            signal.signal(signal.SIGALRM, previous)
        assert seen == [1, 2, 3]
        assert asked.is_set()  # it ended because it was asked to
        assert not answered.is_set()  # it did not wait for the server's answer
        live.publish(2)
        assert [entry.seq for entry in consumer.entries()] == [4, 5]  # iterates again
    with StateFile(state) as file:
        checkpoint = file.load_checkpoint(live.recent)
    assert checkpoint is not None and checkpoint.seq == 5
    with Consumer(live.recent, state, wait=0) as again:  # the state file was let go of
        assert list(again.entries()) == []


@pytest.mark.parametrize("where", ["README.md", "docs/how-to/consume-python.md"])
def test_the_python_consumer_example_runs_as_written(
    where: str, live: LiveServer, tmp_path: Path
) -> None:
    """The Python example of the README and of the consumer guide, pointed at a live server:
    it defines the `handle` it calls, and prints each entry, oldest first."""
    (example,) = [
        block
        for block in code_blocks(doc_text(where), "python")
        if "Consumer(" in block and "def handle" in block
    ]
    assert "http://localhost:8080/recent" in example
    ids = live.publish(3)
    code = example.replace("http://localhost:8080/recent", live.recent)
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(" ")[:2] for line in lines] == [[str(n), i] for n, i in enumerate(ids, 1)]
    assert (tmp_path / "consumer.sqlite3").exists()

"""``simplefeed consume --exec-stream CMD``: one real handler process for every entry, over a
real socket (the app behind tests/test_client_live.py's threaded server).

The handlers are real programs: a Python loop, a shell ``while read`` loop, one that fails on
an entry, one that dies midway, one that never reads. Each records what it acknowledged in a
file, so that a test can tell what was handled from what was only written to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from simplefeed.client import Checkpoint, Consumer, FeedEntry, HandlerError, StateFile
from simplefeed.client.command import EXIT_HANDLER, consume
from simplefeed.model import Event
from simplefeed.settings import Settings
from tests.markdown import code_blocks, doc_text
from tests.test_client_live import LiveServer

# SQLite only: these tests are about the handler process, not the database.
pytestmark = pytest.mark.sqlite_only

#: A handler in Python: appends "seq id" to the file it is given for each entry it handles,
#: then acknowledges it. The entry whose title is FAIL gets an error line instead. With DIE,
#: it reads that many entries and one more, then exits 9 without acknowledging the last. Its
#: process id is in that file's name followed by ".pid".
HANDLER = """\
import json, os, sys

fail = os.environ.get("FAIL")
die = int(os.environ.get("DIE", "0"))
with open(sys.argv[1] + ".pid", "w") as pid:
    pid.write(str(os.getpid()))
with open(sys.argv[1], "a") as out:
    for n, line in enumerate(sys.stdin, 1):
        entry = json.loads(line)
        if die and n > die:
            sys.exit(9)
        if entry["title"] == fail:
            print("no stock for", entry["title"], flush=True)
            continue
        out.write(f"{entry['seq']} {entry['id']}\\n")
        out.flush()
        print("ok", flush=True)
"""


@pytest.fixture
def live(settings: Settings) -> Iterator[LiveServer]:
    """Pages of 50: the handler has many entries written ahead within a page."""
    server = LiveServer(replace(settings, page_size=50))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def handler(tmp_path: Path) -> Path:
    path = tmp_path / "handler.py"
    path.write_text(HANDLER)
    return path


def run(
    url: str, state: Path, command: str, *args: str, env: dict[str, str] | None = None
) -> Result:
    return CliRunner().invoke(
        consume,
        [url, "--state", str(state), "--exec-stream", command, *args],
        catch_exceptions=False,
        env=env,
    )


def handled(log: Path) -> list[int]:
    """The sequence numbers the handler acknowledged, in order."""
    if not log.exists():
        return []
    return [int(line.split(" ", 1)[0]) for line in log.read_text().splitlines()]


def checkpoint(state: Path, url: str) -> Checkpoint | None:
    with StateFile(state) as file:
        return file.load_checkpoint(url)


def wait_for_checkpoint(state: Path, url: str, seq: int, timeout: float = 60) -> None:
    """Wait until a running consumer has stored its checkpoint on entry ``seq``."""
    deadline = time.monotonic() + timeout
    while True:
        stored = checkpoint(state, url) if state.exists() else None
        if stored is not None and stored.seq >= seq:
            return
        assert time.monotonic() < deadline, f"no checkpoint on entry {seq}: {stored}"
        time.sleep(0.05)


@pytest.mark.parametrize("every", ["page", "entry"])
def test_a_python_handler_gets_each_entry_once_as_jsonl_prints_it(
    live: LiveServer, tmp_path: Path, handler: Path, every: str
) -> None:
    ids = live.publish(120)
    state, log = tmp_path / "s.sqlite3", tmp_path / "handled.txt"
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(handler))} {shlex.quote(str(log))}"
    result = run(live.recent, state, command, "--checkpoint", every)
    assert result.exit_code == 0, result.stderr
    assert handled(log) == list(range(1, 121))
    assert [line.split(" ", 1)[1] for line in log.read_text().splitlines()] == ids
    assert checkpoint(state, live.recent) == Checkpoint(ids[-1], 120, f"{live.base_url}/pages/3")
    ids += live.publish(3)
    assert run(live.recent, state, command).exit_code == 0
    assert handled(log) == list(range(1, 124))


def test_a_shell_loop_reads_the_lines_jsonl_prints(live: LiveServer, tmp_path: Path) -> None:
    live.publish(70)
    state, log = tmp_path / "s.sqlite3", tmp_path / "lines.jsonl"
    append = f'printf "%s\\n" "$line" >> {shlex.quote(str(log))}'
    loop = f"while IFS= read -r line; do {append}; echo ok; done"
    result = run(live.recent, state, f"sh -c {shlex.quote(loop)}", "--checkpoint", "page")
    assert result.exit_code == 0, result.stderr
    printed = CliRunner().invoke(
        consume, [live.recent, "--state", str(tmp_path / "other.sqlite3"), "--jsonl"]
    )
    assert log.read_text() == printed.stdout
    assert checkpoint(state, live.recent) is not None
    assert checkpoint(state, live.recent).seq == 70  # type: ignore[union-attr]


def test_an_error_line_stops_at_its_entry(live: LiveServer, tmp_path: Path, handler: Path) -> None:
    live.publish(80)
    state, log = tmp_path / "s.sqlite3", tmp_path / "handled.txt"
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(handler))} {shlex.quote(str(log))}"
    result = run(live.recent, state, command, "--checkpoint", "page", env={"FAIL": "event 63"})
    assert result.exit_code == EXIT_HANDLER
    assert "(sequence 63): no stock for event 63" in result.stderr
    assert checkpoint(state, live.recent).seq == 62  # type: ignore[union-attr]
    # Entries written after it may have been handled; they come again, after the failed one.
    first = handled(log)
    assert first[:62] == list(range(1, 63)) and 63 not in first
    again = run(live.recent, state, command, "--checkpoint", "page")
    assert again.exit_code == 0, again.stderr
    assert handled(log)[len(first) :] == list(range(63, 81))


def test_an_error_line_parks_its_entry_with_on_error_park(
    live: LiveServer, tmp_path: Path, handler: Path
) -> None:
    ids = live.publish(80)
    state, log = tmp_path / "s.sqlite3", tmp_path / "handled.txt"
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(handler))} {shlex.quote(str(log))}"
    result = run(
        live.recent, state, command, "--on-error", "park", "--checkpoint", "page",
        env={"FAIL": "event 63"},
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert handled(log) == [seq for seq in range(1, 81) if seq != 63]
    assert checkpoint(state, live.recent).seq == 80  # type: ignore[union-attr]
    with StateFile(state) as file:
        [parked] = file.parked(live.recent)
    assert (parked.entry_id, parked.seq) == (ids[62], 63)
    assert parked.error.endswith("no stock for event 63")


@pytest.mark.parametrize("every", ["page", "entry"])
def test_a_handler_that_dies_stops_the_consumer_on_its_last_acknowledgement(
    live: LiveServer, tmp_path: Path, handler: Path, every: str
) -> None:
    """It reads entry 38 and exits 9 without acknowledging it: exit 3, the checkpoint on 37
    (mid-page, entries written past it), and the next run hands over 38 to the end, each once."""
    live.publish(120)
    state, log = tmp_path / "s.sqlite3", tmp_path / "handled.txt"
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(handler))} {shlex.quote(str(log))}"
    result = run(live.recent, state, command, "--checkpoint", every, env={"DIE": "37"})
    assert result.exit_code == EXIT_HANDLER
    assert "exited with status 9, after acknowledging 37 of" in result.stderr
    assert "(sequence 38)" in result.stderr
    assert handled(log) == list(range(1, 38))
    assert checkpoint(state, live.recent).seq == 37  # type: ignore[union-attr]
    again = run(live.recent, state, command, "--checkpoint", every)
    assert again.exit_code == 0, again.stderr
    assert handled(log) == list(range(1, 121))


def test_a_handler_that_exits_without_reading_stops_the_consumer(
    live: LiveServer, tmp_path: Path
) -> None:
    live.publish(60)
    state = tmp_path / "s.sqlite3"
    result = run(live.recent, state, "true")
    assert result.exit_code == EXIT_HANDLER
    # It closed both pipes: which the consumer finds first depends on the scheduler.
    assert "'true' closed its standard output" in result.stderr or (
        "'true' stopped reading its standard input (Broken pipe)" in result.stderr
    )
    assert "and exited with status 0, after acknowledging 0 of" in result.stderr
    assert checkpoint(state, live.recent) is None


def test_a_handler_that_closes_its_input_unread_is_ended(live: LiveServer, tmp_path: Path) -> None:
    """It never reads and keeps its standard output open: the write fails, and the process is
    terminated rather than awaited.

    The entries' lines fill more than a pipe's 64 KiB, so a write fails whether the handler
    closes its input before the first write or after the pipe fills.
    """
    live.publish(600)
    state = tmp_path / "s.sqlite3"
    never = "import os, time; os.close(0); time.sleep(600)"
    result = run(live.recent, state, f"{shlex.quote(sys.executable)} -c {shlex.quote(never)}")
    assert result.exit_code == EXIT_HANDLER
    assert "stopped reading its standard input (Broken pipe) and was killed by signal 15" in (
        result.stderr
    )
    assert checkpoint(state, live.recent) is None


def test_a_handler_that_never_reads_nor_answers_is_ended_after_the_ack_timeout(
    live: LiveServer, tmp_path: Path
) -> None:
    """It leaves its standard input unread and open, and writes nothing: the pipe fills up,
    and the consumer waits for an acknowledgement no longer than --ack-timeout."""
    live.publish(400)
    state = tmp_path / "s.sqlite3"
    result = run(live.recent, state, "sleep 600", "--ack-timeout", "0.5")
    assert result.exit_code == EXIT_HANDLER
    assert "acknowledged nothing for 0.5 seconds (--ack-timeout)" in result.stderr
    assert checkpoint(state, live.recent) is None


def test_exec_stream_is_one_handler_among_the_others(live: LiveServer, tmp_path: Path) -> None:
    state = tmp_path / "s.sqlite3"
    for other in (["--jsonl"], ["--exec", "cat"]):
        result = run(live.recent, state, "cat", *other)
        assert result.exit_code == 2
        assert "mutually exclusive" in result.stderr
    assert run(live.recent, state, "./no-such-handler").exit_code == 2
    result = CliRunner().invoke(
        consume, [live.recent, "--state", str(state), "--jsonl", "--ack-timeout", "1"]
    )
    assert result.exit_code == 2 and "only with --exec-stream" in result.stderr


def test_an_acknowledgement_line_is_bounded(live: LiveServer, tmp_path: Path) -> None:
    live.publish(3)
    state = tmp_path / "s.sqlite3"
    endless = "import sys; sys.stdout.write('x' * 200_000); sys.stdout.flush(); sys.stdin.read()"
    result = run(live.recent, state, f"{shlex.quote(sys.executable)} -c {shlex.quote(endless)}")
    assert result.exit_code == EXIT_HANDLER
    assert "wrote an acknowledgement over 65536 bytes" in result.stderr


def test_what_the_handler_reads_is_what_jsonl_prints(live: LiveServer, tmp_path: Path) -> None:
    """``cat`` echoes each entry back: every echoed line is an error, parked with the line."""
    live.publish(2)
    state = tmp_path / "s.sqlite3"
    result = run(live.recent, state, "cat", "--on-error", "park")
    assert result.exit_code == 0, result.stderr
    with StateFile(state) as file:
        parked = file.parked(live.recent)
    assert [json.loads(p.error.split(": ", 1)[1]) for p in parked] == [p.entry for p in parked]


def test_the_node_example_runs_as_written(live: LiveServer, tmp_path: Path) -> None:
    """The how-to's handler, saved as it says and run as it says (without --follow): each order
    in orders.jsonl, oldest first; the entry without content parked with the error it wrote."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the Node example cannot run")
    text = doc_text("docs/how-to/consume-node.md")
    (example,) = code_blocks(text, "js")
    (command_line,) = [b for b in code_blocks(text, "sh") if "--exec-stream" in b]
    assert '--exec-stream "node handle-entries.mjs" --checkpoint page' in command_line
    (tmp_path / "handle-entries.mjs").write_text(example)
    events = [
        Event(title=f"order {n}", content=json.dumps({"sku": n}), content_type="application/json")
        for n in range(1, 61)
    ]
    events[40] = Event(title="a note, no order")
    ids = [r.entry_id for r in live.core.publish("events", events)]
    state = tmp_path / "consumer.sqlite3"
    argv = [
        str(Path(sys.executable).with_name("simplefeed")), "consume", live.recent,
        "--state", str(state), "--exec-stream", "node handle-entries.mjs",
        "--checkpoint", "page", "--on-error", "park",
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    orders = [json.loads(line) for line in (tmp_path / "orders.jsonl").read_text().splitlines()]
    assert [o["seq"] for o in orders] == [n for n in range(1, 61) if n != 41]
    assert orders[0] == {"seq": 1, "id": ids[0], "order": {"sku": 1}}
    with StateFile(state) as file:
        [parked] = file.parked(live.recent)
        assert file.load_checkpoint(live.recent).seq == 60  # type: ignore[union-attr]
    assert parked.seq == 41 and parked.error.endswith("entry 41 has no order")


class Recorder:
    """An acknowledging handler in the test's own process: records each send and each
    acknowledgement asked for, and answers an error for the entries of ``fail``. Given a state
    file, it reads the stored checkpoint each time, as another process would."""

    def __init__(self, fail: frozenset[int] = frozenset(), state: Path | None = None) -> None:
        self.fail = fail
        self.state = state
        self.log: list[tuple[str, int, str]] = []
        self.outstanding = 0
        self.most = 0
        self.acknowledged = 0
        self.passed: list[tuple[int, int]] = []  # (stored checkpoint, last acknowledged)

    def send(self, entry: FeedEntry) -> None:
        self.stored()
        self.log.append(("send", entry.seq, entry.page_url))
        self.outstanding += 1
        self.most = max(self.most, self.outstanding)

    def acknowledgement(self, entry: FeedEntry) -> Exception | None:
        self.stored()
        self.log.append(("ack", entry.seq, entry.page_url))
        self.outstanding -= 1
        self.acknowledged = entry.seq
        return ValueError(f"refused {entry.seq}") if entry.seq in self.fail else None

    def stored(self) -> None:
        """Note the checkpoint stored now when it is past the last acknowledged entry."""
        if self.state is None or not self.state.exists():
            return
        with contextlib.closing(sqlite3.connect(f"file:{self.state}?mode=ro", uri=True)) as db:
            row = db.execute("SELECT seq FROM checkpoints").fetchone()
        if row is not None and row[0] > self.acknowledged:
            self.passed.append((row[0], self.acknowledged))


@pytest.mark.parametrize("every", ["page", "entry"])
def test_entries_go_ahead_within_the_window_and_the_checkpoint_only_past_acknowledged_ones(
    live: LiveServer, tmp_path: Path, every: str
) -> None:
    """Pages of 50, a window of 20: entries of the next page go out while the last ones of the
    page before await their acknowledgements; the stored checkpoint, read as the run goes,
    never passes the last acknowledged entry."""
    live.publish(130)
    state = tmp_path / "s.sqlite3"
    recorder = Recorder(state=state)
    with Consumer(live.recent, state, checkpoint_every=every) as consumer:  # type: ignore[arg-type]
        assert consumer.run_acknowledged(recorder, window=20) == 130
    assert recorder.most == 20
    assert [seq for kind, seq, _ in recorder.log if kind == "send"] == list(range(1, 131))
    assert [seq for kind, seq, _ in recorder.log if kind == "ack"] == list(range(1, 131))
    assert recorder.passed == []
    outstanding: dict[int, str] = {}  # sent, not yet acknowledged: seq -> page
    overlapped = False
    for kind, seq, page in recorder.log:
        if kind == "send":
            overlapped = overlapped or any(other != page for other in outstanding.values())
            outstanding[seq] = page
        else:
            del outstanding[seq]
    assert overlapped  # no wait for a page's acknowledgements before the next page goes
    assert checkpoint(state, live.recent).seq == 130  # type: ignore[union-attr]


def test_an_acknowledged_error_stops_with_the_checkpoint_before_it(
    live: LiveServer, tmp_path: Path
) -> None:
    live.publish(45)
    state = tmp_path / "s.sqlite3"
    with (
        Consumer(live.recent, state, checkpoint_every="page") as consumer,
        pytest.raises(HandlerError, match="refused 33") as raised,
    ):
        consumer.run_acknowledged(Recorder(frozenset({33})), window=8)
    assert raised.value.entry.seq == 33
    assert checkpoint(state, live.recent).seq == 32  # type: ignore[union-attr]
    with Consumer(live.recent, state, on_error="park") as consumer:
        assert consumer.run_acknowledged(Recorder(frozenset({40})), window=8) == 13
        assert [p.seq for p in consumer.parked()] == [40]
    assert checkpoint(state, live.recent).seq == 45  # type: ignore[union-attr]


def test_an_answer_may_end_in_cr_lf(live: LiveServer, tmp_path: Path) -> None:
    live.publish(7)
    state = tmp_path / "s.sqlite3"
    loop = 'while IFS= read -r line; do printf "ok\\r\\n"; done'
    result = run(live.recent, state, f"sh -c {shlex.quote(loop)}")
    assert result.exit_code == 0, result.stderr
    assert checkpoint(state, live.recent).seq == 7  # type: ignore[union-attr]


def test_answers_to_entries_not_written_yet_stop_the_consumer(
    live: LiveServer, tmp_path: Path
) -> None:
    """``yes ok`` answers without reading: its answers cannot be any entry's."""
    live.publish(60)
    state = tmp_path / "s.sqlite3"
    result = run(live.recent, state, "yes ok")
    assert result.exit_code == EXIT_HANDLER
    assert "'yes ok' answered more lines than the entries written to it" in result.stderr
    assert checkpoint(state, live.recent) is None


def test_follow_hands_over_entries_as_they_come_and_ends_the_handler_when_stopped(
    live: LiveServer, tmp_path: Path, handler: Path
) -> None:
    """Each poll's entries are acknowledged before the next poll: the checkpoint stands on the
    last entry when SIGTERM stops the consumer (exit 130), and the handler has ended."""
    live.publish(3)
    state, log = tmp_path / "s.sqlite3", tmp_path / "handled.txt"
    log.touch()
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(handler))} {shlex.quote(str(log))}"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "simplefeed.client.command", live.recent,
            "--state", str(state), "--exec-stream", command, "--follow",
            "--checkpoint", "page", "--min-interval", "0.1", "--max-interval", "0.2",
            "--wait", "1",
        ],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for_checkpoint(state, live.recent, 3)
        live.publish(2)
        # The handler logs an entry before it answers "ok". So the consumer may not have read
        # the last answer when the log shows the entry: wait for the stored checkpoint instead.
        wait_for_checkpoint(state, live.recent, 5)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, stderr
    assert handled(log) == [1, 2, 3, 4, 5]
    assert checkpoint(state, live.recent).seq == 5  # type: ignore[union-attr]
    with pytest.raises(ProcessLookupError):  # ended and reaped
        os.kill(int(Path(f"{log}.pid").read_text()), 0)

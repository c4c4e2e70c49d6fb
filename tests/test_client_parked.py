"""Failed entries are parked with their error, never lost, and later retried or dropped.

The state file keeps each parked entry with its error. ``max_parked`` stops a consumer before
a broken handler parks the whole feed. A consumer's status shows the checkpoint, the head as
last seen, the lag and the parked count. The tests go through the library against the real
app in-process. They also go through ``simplefeed consume`` and ``simplefeed consumer``
against the real app on a socket.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from simplefeed.app import create_app
from simplefeed.client import Checkpoint, FeedEntry, StateError, StateFile, TooManyParked
from simplefeed.runtime.cli import main
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from tests.conftest import FakeClock
from tests.test_client import CountingApp, make_consumer, publish, stored_checkpoint
from tests.test_client_live import LiveServer

# SQLite only: parking is the state file's business, not the database's.
pytestmark = pytest.mark.sqlite_only


@pytest.fixture
def server(core: Simplefeed) -> CountingApp:
    return CountingApp(create_app(core.settings, core=core))


@pytest.fixture
def live(settings: Settings) -> Iterator[LiveServer]:
    server = LiveServer(settings)
    try:
        yield server
    finally:
        server.close()


def failing_on(*seqs: int) -> tuple[list[int], Callable[[FeedEntry], None]]:
    handled: list[int] = []

    def handler(entry: FeedEntry) -> None:
        if entry.seq in seqs:
            raise ValueError(f"cannot handle {entry.seq}")
        handled.append(entry.seq)

    return handled, handler


def test_parked_entries_are_kept_with_their_error_and_the_walk_goes_on(
    core: Simplefeed, server: CountingApp, clock: FakeClock, tmp_path: Path
) -> None:
    state = tmp_path / "state.sqlite3"
    ids = publish(core, 9)
    handled, handler = failing_on(3, 7)
    with make_consumer(server, state, clock, on_error="park") as consumer:
        assert consumer.run(handler) == 9
    assert handled == [1, 2, 4, 5, 6, 8, 9]
    assert stored_checkpoint(state) == Checkpoint(ids[8], 9, "http://feeds.example.test/pages/2")
    with make_consumer(server, state, clock, on_error="park") as consumer:  # A restart.
        parked = consumer.parked()
        assert [(p.seq, p.entry_id, p.attempts) for p in parked] == [(3, ids[2], 1), (7, ids[6], 1)]
        assert parked[0].error == "ValueError: cannot handle 3"
        assert FeedEntry.from_json(parked[0].entry).title == "event 3"
        # Retried, 3 now succeeds and is forgotten. 7 fails again and stays.
        retried: list[int] = []
        _, still_failing = failing_on(7)

        def again(entry: FeedEntry) -> None:
            still_failing(entry)
            retried.append(entry.seq)

        assert consumer.retry(again) == (1, 1)
        assert retried == [3]
        assert [(p.seq, p.attempts) for p in consumer.parked()] == [(7, 2)]
        assert consumer.drop(ids[6]) is True
        assert consumer.drop(ids[6]) is False
        assert consumer.parked() == []


def test_a_retry_holds_the_state_file_as_a_consumer_does(
    core: Simplefeed, server: CountingApp, clock: FakeClock, tmp_path: Path
) -> None:
    """A retry holds the state file as a consumer does.

    Two retries may run at once: two `simplefeed consumer retry`, or one beside a running
    consumer. Each would handle every parked entry, so 267 parked entries would take 533
    handler runs. So a retry takes the right to process, as a consumer does. It is refused
    while another holds it.
    """
    state = tmp_path / "state.sqlite3"
    publish(core, 4)
    _, handler = failing_on(2, 3)
    with make_consumer(server, state, clock, on_error="park") as consumer:
        assert consumer.run(handler) == 4
    with make_consumer(server, state, clock) as first, make_consumer(server, state, clock) as other:
        handled: list[int] = []

        def handle_and_retry_again(entry: FeedEntry) -> None:
            handled.append(entry.seq)
            with pytest.raises(StateError, match="is processing from this state file"):
                other.retry(handled.append)

        assert first.retry(handle_and_retry_again) == (2, 0)
        assert handled == [2, 3]
        publish(core, 1)
        clock.advance(60)  # Past the entry point's max-age.
        stream = other.entries()
        assert next(stream).seq == 5  # A consumer is running, so no retry meanwhile.
        with pytest.raises(StateError, match="is processing from this state file"):
            first.retry(handled.append)
        stream.close()
    assert handled == [2, 3]


def test_max_parked_stops_before_the_entry_that_would_pass_it(
    core: Simplefeed, server: CountingApp, clock: FakeClock, tmp_path: Path
) -> None:
    state = tmp_path / "state.sqlite3"
    ids = publish(core, 9)
    handled, handler = failing_on(3, 5, 7)
    with make_consumer(server, state, clock, on_error="park", max_parked=1) as consumer:
        with pytest.raises(TooManyParked) as info:
            consumer.run(handler)
        assert info.value.entry.seq == 5 and info.value.limit == 1
        # The library names its parameter, and the command its flag. See
        # test_the_commands_park_list_retry_drop_and_report.
        assert str(info.value).endswith("; 1 entry is parked already (max_parked)")
        assert [p.seq for p in consumer.parked()] == [3]
    assert handled == [1, 2, 4]
    assert stored_checkpoint(state) == Checkpoint(ids[3], 4, "http://feeds.example.test/pages/1")


def test_status_tells_checkpoint_head_lag_and_parked(
    core: Simplefeed, server: CountingApp, clock: FakeClock, tmp_path: Path
) -> None:
    state = tmp_path / "state.sqlite3"
    publish(core, 9)
    _, handler = failing_on(7)
    with make_consumer(server, state, clock) as consumer:
        assert consumer.status().head is None
        with pytest.raises(Exception, match="cannot handle 7"):
            consumer.run(handler)
        status = consumer.status()
    assert status.checkpoint is not None and status.checkpoint.seq == 6
    assert status.head is not None and status.head.seq == 9
    assert status.lag == 3 and status.parked == 0


def test_status_after_a_page_froze_shows_the_newest_entry_processed_as_the_head(
    core: Simplefeed, server: CountingApp, clock: FakeClock, tmp_path: Path
) -> None:
    """Status after a page is archived shows the newest entry processed as the head.

    Pages hold five. After 3 and then 2 more entries, the page is archived, and the entry point
    holds none. The head as last seen must not stay entry 3, behind the checkpoint on 5.
    """
    state = tmp_path / "state.sqlite3"
    publish(core, 3)
    with make_consumer(server, state, clock) as consumer:
        consumer.run(lambda entry: None)
    publish(core, 2)
    clock.advance(60)
    with make_consumer(server, state, clock) as consumer:
        assert consumer.run(lambda entry: None) == 2
        status = consumer.status()
    assert status.checkpoint is not None and status.checkpoint.seq == 5
    assert status.head is not None and status.head.seq == 5
    assert status.head.seen_at == clock() / 1_000_000
    assert status.lag == 0


# -- the command line, against the real app on a socket ------------------------------------


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_the_commands_park_list_retry_drop_and_report(live: LiveServer, tmp_path: Path) -> None:
    state = str(tmp_path / "state.sqlite3")
    ids = live.publish(6)
    handler = tmp_path / "handler.py"
    handler.write_text(
        "import json, os, sys\n"
        "entry = json.load(sys.stdin)\n"
        "sys.exit(9 if entry['seq'] in (2, 4) and not os.environ.get('OK') else 0)\n"
    )
    command = f"{sys.executable} {handler}"
    result = cli("consume", live.recent, "--state", state, "--exec", command, "--on-error", "park")
    assert result.exit_code == 0, result.stderr
    listed = cli("consumer", "parked", "--state", state)
    lines = listed.stdout.splitlines()
    assert [line.split("\t")[:3] for line in lines] == [["2", ids[1], "1"], ["4", ids[3], "1"]]
    assert "exited with status 9" in lines[0]
    listed = cli("consumer", "parked", "--state", state, "--json")
    as_json = [json.loads(line) for line in listed.stdout.splitlines()]
    assert as_json[0]["entry"]["title"] == "event 2" and as_json[0]["url"] == live.recent
    status = json.loads(cli("consumer", "status", "--state", state, "--json").stdout)
    assert status["checkpoint"]["seq"] == 6 and status["head"]["seq"] == 6
    assert status["lag"] == 0 and status["parked"] == 2
    text = cli("consumer", "status", "--state", state).stdout
    assert "lag         0" in text and "parked      2" in text
    # Retry fails again for both. Exit 3, still parked, and the attempts counted.
    failed = cli("consumer", "retry", "--state", state, "--exec", command)
    assert failed.exit_code == 3
    assert "0 succeeded, 2 failed" in failed.stderr
    # One is retried by id, with a handler that now works. The other is dropped.
    ok = CliRunner(env={"OK": "1"}).invoke(
        main, ["consumer", "retry", "--state", state, "--exec", command, ids[1]]
    )
    assert ok.exit_code == 0 and "1 succeeded, 0 failed" in ok.stderr
    assert cli("consumer", "drop", "--state", state, ids[3]).exit_code == 0
    assert cli("consumer", "drop", "--state", state, ids[3]).exit_code == 2
    none_left = cli("consumer", "parked", "--state", state)
    assert none_left.stdout == "" and none_left.stderr == "no parked entries\n"
    # With --max-parked 0, the first failure stops the run (exit 3). The checkpoint stays
    # before it.
    live.publish(2)
    failing = f"{sys.executable} -c 'import sys; sys.exit(1)'"
    stopped = cli(
        *("consume", live.recent, "--state", state, "--exec", failing),
        *("--on-error", "park", "--max-parked", "0"),
    )
    assert stopped.exit_code == 3, stopped.stderr
    assert "; 0 entries are parked already (--max-parked)" in stopped.stderr
    assert "max_parked" not in stopped.stderr  # The library's name, not the command's.
    with StateFile(state) as file:
        checkpoint = file.load_checkpoint(live.recent)
    assert checkpoint is not None and checkpoint.seq == 6
    assert cli("consumer", "status", "--state", str(tmp_path / "none.sqlite3")).exit_code == 2


def test_a_handler_that_cannot_be_run_parks_nothing(live: LiveServer, tmp_path: Path) -> None:
    """A handler that cannot be run parks nothing.

    A mistyped ``--exec ./handle-entyr --on-error park`` must not park every entry of the feed
    ("could not be run: No such file or directory") and exit 0. A program that is not there is
    a usage error before any request. One that is there but cannot be run stops at the first
    entry, with exit 3 and nothing parked. An executable file that is no program is such a
    case.
    """
    state = tmp_path / "state.sqlite3"
    live.publish(3)
    missing = cli(
        *("consume", live.recent, "--state", str(state)),
        *("--exec", str(tmp_path / "handle-entyr"), "--on-error", "park"),
    )
    assert missing.exit_code == 2
    assert "handle-entyr': no such program, or it is not executable" in missing.stderr
    not_on_path = cli("consume", live.recent, "--state", str(state), "--exec", "handle-entyr x")
    assert not_on_path.exit_code == 2
    assert "'handle-entyr': no such program on PATH" in not_on_path.stderr
    assert not state.exists()
    no_program = tmp_path / "not-a-program"
    no_program.write_bytes(b"\x00\x01 neither a script nor a binary\n")
    no_program.chmod(0o755)
    stopped = cli(
        *("consume", live.recent, "--state", str(state)),
        *("--exec", str(no_program), "--on-error", "park"),
    )
    assert stopped.exit_code == 3, stopped.stderr
    assert "could not be run: [Errno 8] Exec format error" in stopped.stderr
    with StateFile(state) as file:
        assert file.load_checkpoint(live.recent) is None
        assert file.parked(live.recent) == []


def test_status_and_parked_read_a_state_file_as_it_is(live: LiveServer, tmp_path: Path) -> None:
    """`status` and `parked` read a state file as it is.

    An operator may look with the new release at a consumer not yet upgraded. If `consumer
    status` upgraded that state file (schema 2) in place, the older consumer would refuse it:
    "schema 3 is newer than this version understands". So the two reading commands open the
    file read-only.
    """
    state = tmp_path / "state.sqlite3"
    live.publish(3)
    assert cli("consume", live.recent, "--state", str(state), "--jsonl").exit_code == 0
    with sqlite3.connect(state) as db:  # As a schema-2 file is: bodies decoded, no coding.
        db.execute("DELETE FROM documents")
        db.execute("ALTER TABLE documents DROP COLUMN coding")
        db.execute("PRAGMA user_version=2")
    db.close()
    before = state.read_bytes()
    status = json.loads(cli("consumer", "status", "--state", str(state), "--json").stdout)
    assert status["checkpoint"]["seq"] == 3
    assert cli("consumer", "parked", "--state", str(state)).stderr == "no parked entries\n"
    assert state.read_bytes() == before
    with contextlib.closing(sqlite3.connect(state)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (2,)


def test_status_of_a_state_file_no_consumer_has_run_on_says_so(tmp_path: Path) -> None:
    """Status of a state file that no consumer has run on says so.

    Printing nothing and exiting 0 reads as a command that did nothing. With --json, it
    prints an entry point's object with nothing known.
    """
    state = tmp_path / "state.sqlite3"
    StateFile(state).close()
    done = cli("consumer", "status", "--state", str(state))
    assert done.exit_code == 0
    assert done.output == "no entry point yet: no consumer has run on this state file\n"
    as_json = cli("consumer", "status", "--state", str(state), "--json")
    assert as_json.exit_code == 0 and as_json.stderr == ""
    assert as_json.stdout.count("\n") == 1
    assert json.loads(as_json.stdout) == {
        "url": None,
        "checkpoint": None,
        "head": None,
        "lag": None,
        "past_head": False,
        "parked": 0,
    }


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_parked_with_nothing_parked_says_so_on_stderr(tmp_path: Path, as_json: list[str]) -> None:
    """`parked` with nothing parked says so on stderr.

    Printing nothing at all reads as a command that did nothing. Standard output stays empty,
    because JSON lines of no entry are no lines. A `[]` would be a line that no reader of
    parked entries takes.
    """
    state = tmp_path / "state.sqlite3"
    StateFile(state).close()
    done = cli("consumer", "parked", "--state", str(state), *as_json)
    assert done.exit_code == 0
    assert done.stdout == "" and done.stderr == "no parked entries\n"


@pytest.mark.parametrize(
    "command", [["status"], ["parked"], ["retry", "--exec", "true"], ["drop", "urn:x:1"]]
)
def test_the_commands_never_create_a_state_file(tmp_path: Path, command: list[str]) -> None:
    """The commands never create a state file.

    A state file that does not exist is a usage error naming it, and it stays absent.
    """
    state = tmp_path / "none.sqlite3"
    name, *rest = command
    done = cli("consumer", name, "--state", str(state), *rest)
    assert done.exit_code == 2
    assert f"Invalid value for '--state': File '{state}' does not exist." in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("on_error", [[], ["--on-error", "stop"]])
def test_max_parked_without_park_is_a_usage_error(tmp_path: Path, on_error: list[str]) -> None:
    """--max-parked without park is a usage error.

    Taken silently, it would seem to bound failures that stop at the first anyway.
    """
    state = tmp_path / "state.sqlite3"
    done = cli(
        *("consume", "http://127.0.0.1:9/recent", "--state", str(state)),
        *("--max-parked", "3", *on_error),
    )
    assert done.exit_code == 2
    assert "Error: --max-parked applies only with --on-error park" in done.stderr
    assert not state.exists()


@pytest.mark.parametrize(
    ("damage", "commands"),
    [
        ("UPDATE checkpoints SET seq = 'abc'", ("status", "consume")),
        ("UPDATE heads SET seen_at = 'x'", ("status",)),
        ("UPDATE parked SET entry_json = 'not json'", ("parked", "status", "retry")),
        ("UPDATE parked SET entry_json = '[1, 2]'", ("parked", "retry")),
        ("UPDATE parked SET entry_json = '{}'", ("retry",)),
        ("UPDATE documents SET fetched_at = 'x'", ("consume",)),
    ],
)
def test_a_damaged_value_in_a_state_file_is_exit_6(
    live: LiveServer, tmp_path: Path, damage: str, commands: tuple[str, ...]
) -> None:
    """A damaged value in a state file is exit 6.

    A state file may be edited by hand or by another program. No command may then say "a bug"
    (exit 70) with a traceback of a ValueError, JSONDecodeError, KeyError or AttributeError.
    Each says what is damaged in one line, and exits 6.
    """
    state = str(tmp_path / "state.sqlite3")
    live.publish(3)
    handler = (
        f"{sys.executable} -c \"import json, sys; sys.exit(json.load(sys.stdin)['seq'] == 2)\""
    )
    run = cli("consume", live.recent, "--state", state, "--exec", handler, "--on-error", "park")
    assert run.exit_code == 0, run.stderr
    with contextlib.closing(sqlite3.connect(state)) as db, db:
        db.execute(damage)
    for command in commands:
        if command == "consume":
            args = ["consume", live.recent, "--state", state]
        elif command == "retry":
            args = ["consumer", "retry", "--state", state, "--exec", "true"]
        else:
            args = ["consumer", command, "--state", state]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 6, (command, result.exit_code, result.stderr, result.exception)
        assert "a damaged" in result.stderr and "Traceback" not in result.stderr


def _empty_sqlite_database(path: Path) -> None:
    """Make an SQLite database without a table, by creating one table and dropping it."""
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.executescript("CREATE TABLE t (x); DROP TABLE t;")


@pytest.mark.parametrize(
    "make",
    [lambda path: path.touch(), _empty_sqlite_database],
    ids=["a zero-byte file", "an SQLite database without a table"],
)
def test_an_empty_file_is_a_state_file_no_consumer_has_run_on(
    live: LiveServer, tmp_path: Path, make: Callable[[Path], None]
) -> None:
    """An empty file is a state file that no consumer has run on.

    After `touch consumer.sqlite3`, `consumer status` and `parked` must not say "read failed:
    no such table: checkpoints" (exit 6). SQLite takes an empty file as an empty database, and
    so does the consumer. The commands read it as a state file that no consumer has run on, and
    leave it as it is. `consume` makes it one.
    """
    state = tmp_path / "consumer.sqlite3"
    make(state)
    before = state.read_bytes()
    status = cli("consumer", "status", "--state", str(state))
    assert status.exit_code == 0, status.stderr
    assert status.stdout == "no entry point yet: no consumer has run on this state file\n"
    as_json = cli("consumer", "status", "--state", str(state), "--json")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["url"] is None, as_json.stderr
    parked = cli("consumer", "parked", "--state", str(state))
    assert parked.exit_code == 0 and parked.stderr == "no parked entries\n"
    assert state.read_bytes() == before
    ids = live.publish(2)
    run = cli("consume", live.recent, "--state", str(state), "--jsonl")
    assert run.exit_code == 0, run.stderr
    assert [json.loads(line)["id"] for line in run.stdout.splitlines()] == ids
    status = cli("consumer", "status", "--state", str(state))
    assert status.exit_code == 0 and "checkpoint  seq 2" in status.stdout, status.stdout


_NOT_SQLITE = (
    "not a simplefeed state file: not an SQLite database at all (give the consumer a file of its"
    " own, or a path where none is)"
)


def _another_database(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE notes (body TEXT)")


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (
            lambda path: path.write_bytes(b"checkpoint=3\n"),
            _NOT_SQLITE,
        ),
        (
            lambda path: path.write_bytes(b"\0" * 4096),
            _NOT_SQLITE,
        ),
        (
            _another_database,
            "not a simplefeed state file but another application's SQLite database"
            " (it holds notes): give the consumer a file of its own",
        ),
    ],
    ids=["text", "zeros", "another application's database"],
)
@pytest.mark.parametrize(
    "command",
    [
        ["consume", "http://127.0.0.1:9/recent", "--retries", "0"],
        ["consumer", "status"],
        ["consumer", "parked"],
        ["consumer", "retry", "--exec", "true"],
        ["consumer", "drop", "urn:x:1"],
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_a_file_that_is_not_a_state_file_is_one_line_and_exit_6(
    tmp_path: Path, make: Callable[[Path], None], says: str, command: list[str]
) -> None:
    """A file that is not a state file is one line and exit 6.

    Each command says what the file is not, on one line, before any request. It exits 6, and
    leaves the file as it was.
    """
    state = tmp_path / "consumer.sqlite3"
    make(state)
    before = state.read_bytes()
    name, *rest = command
    args = [name, *rest[:1], "--state", str(state), *rest[1:]]
    done = cli(*args)
    assert done.exit_code == 6, (done.exit_code, done.stderr)
    prog = "simplefeed consume" if name == "consume" else "simplefeed consumer"
    assert done.stderr == f"{prog}: error: {state}: {says}\n"
    assert done.stdout == ""
    assert state.read_bytes() == before

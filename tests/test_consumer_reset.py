"""Moving a consumer's checkpoint: ``Consumer.reset`` and ``simplefeed consumer reset``.

A reset is for a server's database restored from a backup that lost entries a consumer had
read. The consumer then stops with exit 4, because its last entry is gone. Reading everything
again is wrong, and so is skipping to the newest. The consumer goes on after the last entry
that the restore kept.

The tests run against the real app in-process, with the restore made on its SQLite file. They
run the commands against the real app on a socket. They also run end to end with uWSGI and
the backup of docs/how-to/backup.md.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from bench.servers import UwsgiServer, sqlite_backup
from simplefeed.app import create_app
from simplefeed.client import (
    Checkpoint,
    DigestMismatch,
    LastEntryVanished,
    NoSuchEntry,
    Parting,
    StateError,
    StateFile,
)
from simplefeed.runtime.cli import main
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from tests.conftest import FakeClock
from tests.test_client import (
    BASE,
    RECENT,
    CountingApp,
    consume,
    forget_checkpoint,
    make_consumer,
    publish,
    stored_checkpoint,
)
from tests.test_client_faults import Rewriting
from tests.test_client_live import LiveServer


@pytest.fixture
def database_url(tmp_path: Path, sqlite_template: Path) -> str:
    """Return a SQLite database only.

    The checkpoint is the business of the consumer's state file. A restore is made here by
    copying the server's file.
    """
    path = tmp_path / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def server(core: Simplefeed) -> CountingApp:
    return CountingApp(create_app(core.settings, core=core))


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    return tmp_path / "consumer.sqlite3"


def database_file(settings: Settings) -> Path:
    return Path(settings.database_url.removeprefix("sqlite:///"))


def restored(core: Simplefeed, backup: Path, clock: FakeClock) -> Simplefeed:
    """Stop the service, replace its database with ``backup``, and start it again.

    Entry ids are random from here on, so none of the lost entries' ids comes back.
    """
    core.close()
    database = database_file(core.settings)
    for leftover in ("-wal", "-shm"):
        database.with_name(database.name + leftover).unlink(missing_ok=True)
    shutil.copyfile(backup, database)
    return Simplefeed(core.settings, clock=clock)


def test_after_a_restore_lost_entries_read_the_consumer_goes_on_after_the_last_kept(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path, tmp_path: Path
) -> None:
    kept = publish(core, 7)  # Page 1 archived. 6 and 7 on the working page.
    backup = tmp_path / "backup.sqlite3"
    sqlite_backup(database_file(core.settings), backup)
    publish(core, 2)  # 8 and 9, only on the working page, which the restore loses.
    assert [e.seq for e in consume(server, state_path, clock)] == list(range(1, 10))
    core = restored(core, backup, clock)
    try:
        app = CountingApp(create_app(core.settings, core=core))
        clock.advance(11)  # Later, and past the entry point's max-age.
        since = publish(core, 2, prefix="since")  # 8 and 9 again, as other entries.
        with pytest.raises(LastEntryVanished):  # No 304 though the head number is the same.
            consume(app, state_path, clock)
        with make_consumer(app, state_path, clock) as consumer:
            assert consumer.reset(7) == Checkpoint(kept[6], 7, f"{BASE}/pages/2")
            head = consumer.status().head
            assert head is not None and head.seq == 9  # Not the 9 from before the restore.
        got = consume(app, state_path, clock)
        assert [(e.seq, e.id, e.title) for e in got] == [
            (8, since[0], "since 8"),
            (9, since[1], "since 9"),
        ]
    finally:
        core.close()


def test_a_checkpoint_past_the_restored_head_is_seen_in_the_status(
    core: Simplefeed,
    server: CountingApp,
    clock: FakeClock,
    state_path: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A checkpoint past the restored head is seen in the status.

    Restored to 7, the feed's head is behind the checkpoint at 9. Before anything is published
    to it, it holds what was read here. So there is nothing new, with a warning, as an older
    copy of the entry point would give. After one publish, its newest entry (8) is another
    than the one read at 8. The consumer stops at once, and says where the feed parts from
    what it read. It does not wait with warnings until the head passes the checkpoint. The
    status keeps the head as read and says the checkpoint is past it. It does not show the
    checkpoint as the head, with lag 0, as if all were well.
    """
    ids = publish(core, 7)
    backup = tmp_path / "backup.sqlite3"
    sqlite_backup(database_file(core.settings), backup)
    ids += publish(core, 2)
    consume(server, state_path, clock)
    core = restored(core, backup, clock)
    try:
        app = CountingApp(create_app(core.settings, core=core))
        clock.advance(11)
        assert consume(app, state_path, clock) == []
        assert "its newest entry (sequence 7) is older than the last processed (9)" in caplog.text
        clock.advance(11)
        publish(core, 1, prefix="since")
        with pytest.raises(LastEntryVanished) as info:
            consume(app, state_path, clock)
        assert info.value.parting == Parting(7, ((8, ids[7]), (9, ids[8])))
        assert str(info.value) == (
            f"{RECENT}: the last processed entry '{ids[8]}' is no longer in the feed; the feed"
            " holds the entries processed here up to sequence 7, not the 2 processed after it"
            f" (8 '{ids[7]}', 9 '{ids[8]}')"
        )
        with make_consumer(app, state_path, clock) as consumer:
            status = consumer.status()
            assert status.head is not None and status.head.seq == 8
            assert status.past_head and status.lag == 0
            text = cli("consumer", "status", "--state", str(state_path)).stdout
            assert "  warning     the checkpoint is past the head: an older copy" in text
            consumer.reset(7)
            assert not consumer.status().past_head
        assert [e.title for e in consume(app, state_path, clock)] == ["since 8"]
    finally:
        core.close()


@pytest.mark.parametrize("every", ["entry", "page"])
def test_the_consumer_remembers_what_it_read_to_tell_where_a_restored_feed_parts(
    core: Simplefeed,
    server: CountingApp,
    clock: FakeClock,
    state_path: Path,
    tmp_path: Path,
    every: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The consumer remembers what it read, to tell where a restored feed parts.

    Whether it checkpoints per entry or per page, the state file remembers the last
    PROCESSED_KEPT entries processed. A restore that lost fewer is told exactly. One that lost
    more is told, but not where the feed parts. A state file that remembers none, written by
    an earlier release, gets the older message.
    """
    monkeypatch.setattr("simplefeed.client.state.PROCESSED_KEPT", 4)
    ids = publish(core, 12)  # Pages 1 and 2 archived. 11 and 12 on the working page.
    backup = tmp_path / "backup.sqlite3"
    sqlite_backup(database_file(core.settings), backup)
    ids += publish(core, 2)  # 13 and 14, which the restore loses.
    consume(server, state_path, clock, checkpoint_every=every)
    with StateFile(state_path) as state:
        assert state.processed(RECENT) == {n: ids[n - 1] for n in range(11, 15)}
    core = restored(core, backup, clock)
    try:
        app = CountingApp(create_app(core.settings, core=core))
        clock.advance(11)
        publish(core, 5, prefix="since")  # Entries 13-17.
        with pytest.raises(LastEntryVanished) as info:
            consume(app, state_path, clock, checkpoint_every=every)
        lost = ((13, ids[12]), (14, ids[13]))
        assert info.value.parting == Parting(12, lost)
        assert f"not the 2 processed after it (13 '{ids[12]}', 14 '{ids[13]}')" in str(info.value)
        more = ((15, "urn:lost:15"), (16, "urn:lost:16"))
        with sqlite3.connect(state_path) as db:  # Two more lost, more than remembered.
            db.execute("DELETE FROM processed")
        db.close()
        with StateFile(state_path) as state:
            checkpoint = Checkpoint(more[1][1], 16, f"{BASE}/pages/4")
            state.save_checkpoint(RECENT, checkpoint, 1.0, (*lost, *more))
        with pytest.raises(LastEntryVanished) as info:
            consume(app, state_path, clock, checkpoint_every=every)
        assert info.value.parting == Parting(None, (*lost, *more))
        assert str(info.value).endswith(
            "is no longer in the feed; the feed parts from what was processed here before"
            " sequence 13, the oldest of the 4 entries remembered (where, is not known)"
        )
        with sqlite3.connect(state_path) as db:  # As an earlier release kept it.
            db.execute("DELETE FROM processed")
        db.close()
        with pytest.raises(LastEntryVanished) as info:
            consume(app, state_path, clock, checkpoint_every=every)
        assert info.value.parting is None
        assert str(info.value).endswith(
            "is no longer in the feed (walked back to where its sequence number would be)"
        )
    finally:
        core.close()


def test_reset_reads_the_entry_point_from_the_server_not_the_cache(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path, tmp_path: Path
) -> None:
    """Reset reads the entry point from the server, not the cache.

    A run cached the entry point a second before the restore. That copy is fresh for its
    max-age, 10 s here. The reset asks the server, so "now" is the restored feed's newest
    entry. It is not the lost one in the cache, which the next run would not find.
    """
    publish(core, 7)
    backup = tmp_path / "backup.sqlite3"
    sqlite_backup(database_file(core.settings), backup)
    lost = publish(core, 2)
    consume(server, state_path, clock)
    core = restored(core, backup, clock)
    try:
        app = CountingApp(create_app(core.settings, core=core))
        clock.advance(1)
        since = publish(core, 2, prefix="since")
        with make_consumer(app, state_path, clock) as consumer:
            now = consumer.reset("now")
        assert now == Checkpoint(since[1], 9, f"{BASE}/pages/2") and since[1] != lost[1]
        publish(core, 1, prefix="next")
        clock.advance(11)
        assert [e.title for e in consume(app, state_path, clock)] == ["next 10"]
    finally:
        core.close()


def test_cached_pages_of_the_history_before_a_restore_are_not_trusted(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path, tmp_path: Path
) -> None:
    """Cached pages of the history before a restore are not trusted.

    A page that could not be taken back is moved out of the archive (docs/how-to/backup.md).
    The restored service then archives another page under its URL. The reset forgets the
    consumer's cached copy of the old page. It walks back through the server's pages as they
    are now. Otherwise the reset would stop on the cached copy (DigestMismatch).
    """
    kept = publish(core, 7)
    backup = tmp_path / "backup.sqlite3"
    sqlite_backup(database_file(core.settings), backup)
    publish(core, 8)  # Pages 2 (6-10) and 3 (11-15) archived after the backup.
    assert [e.seq for e in consume(server, state_path, clock)] == list(range(1, 16))
    pages = core.settings.archive_dir / "pages"
    aside = tmp_path / "aside"
    aside.mkdir()
    for path in pages.iterdir():
        if path.name.split(".")[0] in ("2", "3"):
            path.rename(aside / path.name)
    core = restored(core, backup, clock)
    try:
        app = CountingApp(create_app(core.settings, core=core))
        since = publish(core, 8, prefix="since")  # Pages 2 and 3 again, with other entries.
        clock.advance(11)
        with make_consumer(app, state_path, clock) as consumer:
            assert consumer.reset(7) == Checkpoint(kept[6], 7, f"{BASE}/pages/2")
        assert app.count("/pages/2", 200) == 1  # Read from the server, not the cache.
        got = consume(app, state_path, clock)
        assert [(e.seq, e.id) for e in got] == list(zip(range(8, 16), since, strict=True))
    finally:
        core.close()


def test_reset_to_a_number_back_or_forward_to_start_and_to_now(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    ids = publish(core, 23)  # Pages 1-4 archived. 21-23 on the working page.
    consume(server, state_path, clock)
    with make_consumer(server, state_path, clock) as consumer:
        assert consumer.reset(12) == Checkpoint(ids[11], 12, f"{BASE}/pages/3")
    assert [e.seq for e in consume(server, state_path, clock)] == list(range(13, 24))
    with make_consumer(server, state_path, clock) as consumer:
        assert consumer.reset(22) == Checkpoint(ids[21], 22, f"{BASE}/pages/5")
    assert [e.seq for e in consume(server, state_path, clock)] == [23]
    with make_consumer(server, state_path, clock) as consumer:
        assert consumer.reset(5) == Checkpoint(ids[4], 5, f"{BASE}/pages/1")  # The oldest page.
    assert [e.seq for e in consume(server, state_path, clock)] == list(range(6, 24))
    for start in ("start", 0):
        with make_consumer(server, state_path, clock) as consumer:
            assert consumer.reset(start).seq == 0
        # A consumer that would start from now has a checkpoint, so it reads everything.
        got = consume(server, state_path, clock, start="now")
        assert [e.seq for e in got] == list(range(1, 24))
    with make_consumer(server, state_path, clock) as consumer:
        consumer.reset(3)
        assert consumer.reset("now") == Checkpoint(ids[22], 23, f"{BASE}/pages/5")
    assert consume(server, state_path, clock) == []
    publish(core, 2)
    clock.advance(11)
    assert [e.seq for e in consume(server, state_path, clock)] == [24, 25]


def test_a_new_consumer_starts_after_a_number(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    """A new consumer starts after a number.

    With ``start=SEQ``, a consumer without a checkpoint begins after entry SEQ. It need not
    take ``"now"`` and then a reset. A consumer with a checkpoint goes on from it.
    """
    ids = publish(core, 23)  # Pages 1-4 archived. 21-23 on the working page.
    with (
        make_consumer(server, state_path, clock, start=99) as consumer,
        pytest.raises(NoSuchEntry, match=r"no entry numbered 99 \(it holds entries 1 to 23\)"),
    ):
        consumer.run(lambda entry: None)
    assert stored_checkpoint(state_path) is None
    got = consume(server, state_path, clock, start=12)
    assert [(e.seq, e.id) for e in got] == list(zip(range(13, 24), ids[12:], strict=True))
    assert stored_checkpoint(state_path) == Checkpoint(ids[22], 23, f"{BASE}/pages/5")
    publish(core, 1)
    clock.advance(11)
    assert [e.seq for e in consume(server, state_path, clock, start=3)] == [24]
    forget_checkpoint(state_path)
    assert [e.seq for e in consume(server, state_path, clock, start=0)] == list(range(1, 25))
    forget_checkpoint(state_path)
    assert [e.seq for e in consume(server, state_path, clock, start=24)] == []
    for wrong in (-1, "later", True, 2.0, None):
        with pytest.raises(ValueError, match=r"start.*sequence number"):
            make_consumer(server, state_path, clock, start=wrong)


def test_a_number_the_feed_does_not_hold_moves_nothing(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    ids = publish(core, 10)  # Pages 1 and 2 archived. The working page is empty.
    consume(server, state_path, clock)
    before = Checkpoint(ids[9], 10, f"{BASE}/pages/2")
    with make_consumer(server, state_path, clock) as consumer:
        assert consumer.checkpoint == before
        with pytest.raises(NoSuchEntry) as info:
            consumer.reset(11)
        assert str(info.value) == (
            f"{RECENT}: the feed holds no entry numbered 11 (it holds entries 1 to 10)"
        )
        assert (info.value.seq, info.value.newest) == (11, 10)
        assert consumer.checkpoint == before
        # The newest entry is on the archived page behind the empty entry point.
        assert consumer.reset(10) == before
        for wrong in (-1, "later", True, 2.0):
            with pytest.raises(ValueError, match="sequence number"):
                consumer.reset(wrong)  # type: ignore[arg-type]
    with StateFile(state_path) as state:
        assert state.load_checkpoint(RECENT) == before


def test_reset_keeps_parked_entries_and_waits_for_no_running_consumer(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 6)

    def failing(entry: object) -> None:
        raise ValueError("cannot")

    with make_consumer(server, state_path, clock, on_error="park") as consumer:
        consumer.run(failing)
        assert len(consumer.parked()) == 6
    with make_consumer(server, state_path, clock) as consumer:
        consumer.reset(2)
        assert [p.seq for p in consumer.parked()] == [1, 2, 3, 4, 5, 6]
        with (
            make_consumer(server, state_path, clock) as other,
            pytest.raises(StateError, match="another consumer"),
        ):
            for _entry in consumer.entries():
                other.reset(0)
    with make_consumer(server, state_path, clock) as consumer:  # The other moved nothing.
        assert consumer.checkpoint is not None and consumer.checkpoint.seq == 2


def test_a_page_the_chain_does_not_vouch_for_stops_the_reset(
    core: Simplefeed, server: CountingApp, clock: FakeClock, state_path: Path
) -> None:
    publish(core, 12)
    consume(server, state_path, clock)
    with StateFile(state_path) as state:
        checkpoint = state.load_checkpoint(RECENT)

    def edit(path: str, body: bytes) -> bytes:
        return body.replace(b"event 3", b"event X") if path == "/pages/1" else body

    altered = Rewriting(server, edit, digests=True)
    with make_consumer(altered, state_path, clock) as consumer, pytest.raises(DigestMismatch):
        consumer.reset(2)
    with StateFile(state_path) as state:
        assert state.load_checkpoint(RECENT) == checkpoint


# -- the command ---------------------------------------------------------------------------


@pytest.fixture
def live(settings: Settings) -> Iterator[LiveServer]:
    server = LiveServer(settings)
    try:
        yield server
    finally:
        server.close()


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_the_command_moves_the_checkpoint_and_says_from_where_to_where(
    live: LiveServer, tmp_path: Path
) -> None:
    state = str(tmp_path / "state.sqlite3")
    ids = live.publish(12)
    assert cli("consume", live.recent, "--state", state).exit_code == 0
    moved = cli("consumer", "reset", "--state", state, "--to", "9")
    assert moved.exit_code == 0, moved.stderr
    assert moved.stdout == ""
    assert moved.stderr == (
        f"{live.recent}: the checkpoint moved from seq 12 ({ids[11]}) to seq 9 ({ids[8]});"
        " 0 parked entries kept\n"
    )
    again = cli("consume", live.recent, "--state", state)
    assert [line.split("\t")[0] for line in again.stdout.splitlines()] == ["10", "11", "12"]
    start = cli("consumer", "reset", "--state", state, "--to", "start")
    assert start.exit_code == 0
    assert "to before the first entry;" in start.stderr
    now = cli("consumer", "reset", "--state", state, "--to", "now", "--url", live.recent)
    assert now.exit_code == 0
    assert f"from before the first entry to seq 12 ({ids[11]});" in now.stderr
    status = json.loads(cli("consumer", "status", "--state", state, "--json").stdout)
    assert (status["lag"], status["past_head"]) == (0, False)


@pytest.mark.parametrize(
    ("to", "said"),
    [
        ("13", "the feed holds no entry numbered 13 (it holds entries 1 to 12)"),
        ("-1", "'-1': start, now, or a sequence number (0 or more)"),
        ("later", "'later': start, now, or a sequence number (0 or more)"),
        ("١٢", "start, now, or a sequence number (0 or more)"),  # Digits, but not ASCII ones.
    ],
)
def test_the_command_refuses_a_position_the_feed_does_not_have(
    live: LiveServer, tmp_path: Path, to: str, said: str
) -> None:
    state = tmp_path / "state.sqlite3"
    live.publish(12)
    assert cli("consume", live.recent, "--state", str(state)).exit_code == 0
    refused = cli("consumer", "reset", "--state", str(state), "--to", to)
    assert refused.exit_code == 2
    assert said in refused.stderr and "--to" in refused.stderr
    with StateFile(state) as file:
        checkpoint = file.load_checkpoint(live.recent)
    assert checkpoint is not None and checkpoint.seq == 12


@pytest.mark.parametrize(
    "args",
    [
        ["reset", "--to", "1"],
        ["reset", "--to", "1", "--url", "http://localhost:9/recent"],
        ["drop", "urn:x:1"],
        ["retry", "--exec", "true"],
    ],
)
def test_a_command_on_a_state_file_no_consumer_ran_on_says_so_and_changes_nothing(
    tmp_path: Path, args: list[str]
) -> None:
    """A command on a state file that no consumer ran on says so, and changes nothing.

    On an empty file made by `touch`, `reset` must not say "the state file holds 0 entry
    points; name one with --url". With --url, it must not say "... is not in the state file
    (it has: )". And the file must not become a state file of 40960 bytes.
    """
    state = tmp_path / "state.sqlite3"
    state.touch()
    refused = cli("consumer", args[0], "--state", str(state), *args[1:])
    assert refused.exit_code == 2
    assert "no consumer has run on this state file yet" in refused.stderr, refused.stderr
    assert "simplefeed consume URL --state FILE" in refused.stderr
    assert state.stat().st_size == 0


def test_consume_from_a_number(live: LiveServer, tmp_path: Path) -> None:
    state = tmp_path / "state.sqlite3"
    ids = live.publish(12)
    for refused, said in (
        (
            "13",
            f"--from 13: {live.recent}: the feed holds no entry numbered 13 (it holds"
            " entries 1 to 12)",
        ),
        ("later", "'later': start, now, or a sequence number (0 or more)"),
        ("-2", "'-2': start, now, or a sequence number (0 or more)"),
        ("\u0661\u0662", "start, now, or a sequence number (0 or more)"),  # Arabic-Indic 12.
    ):
        result = cli("consume", live.recent, "--state", str(state), "--from", refused)
        assert result.exit_code == 2, result.stderr
        assert said in result.stderr
        assert result.stdout == ""
    with StateFile(state) as file:
        assert file.load_checkpoint(live.recent) is None
    got = cli("consume", live.recent, "--state", str(state), "--from", "9", "--jsonl")
    assert got.exit_code == 0, got.stderr
    read = [json.loads(line) for line in got.stdout.splitlines()]
    assert [(r["seq"], r["id"]) for r in read] == [(10, ids[9]), (11, ids[10]), (12, ids[11])]


def test_the_command_exits_as_consume_does_when_the_server_cannot_be_read(
    settings: Settings, tmp_path: Path
) -> None:
    state = str(tmp_path / "state.sqlite3")
    server = LiveServer(settings)
    recent = server.recent
    try:
        server.publish(3)
        assert cli("consume", recent, "--state", state).exit_code == 0
    finally:
        server.close()
    gone = cli("consumer", "reset", "--state", state, "--to", "1", "--timeout", "0.5")
    assert gone.exit_code == 5, gone.stderr
    assert gone.stderr.startswith(f"simplefeed consumer: error: {recent}: gave up after")
    assert len(gone.stderr.splitlines()) == 1
    with StateFile(state) as file:
        checkpoint = file.load_checkpoint(recent)
    assert checkpoint is not None and checkpoint.seq == 3


@pytest.mark.e2e
def test_a_restore_that_lost_entries_read_with_the_real_commands(tmp_path: Path) -> None:
    """A restore that lost entries already read works out with the real commands.

    This follows the backup guide with real processes. It backs up the running service's
    SQLite file. Two more entries are published and read by `simplefeed consume`. The service
    stops and the backup is restored, so those two are lost, being in no file. New entries are
    published. The consumer stops with exit 4. It names the two lost entries, and `simplefeed
    consumer reset` to the last entry the restore kept. Reset there, it reads exactly the
    entries published since.
    """
    s = UwsgiServer.scratch(
        tmp_path / "service", page_size=5, extra_env={"SIMPLEFEED_RECENT_MAX_AGE": "0"}
    )
    state = tmp_path / "consumer.sqlite3"
    database = s.workdir / "simplefeed.sqlite3"

    def publish(first: int, n: int) -> None:
        s.publish([{"title": f"e{i}"} for i in range(first, first + n)])

    def consume(expect: int = 0) -> tuple[list[str], str]:
        done = s.cli("consume", s.url("/recent"), "--state", str(state), "--jsonl", check=False)
        assert done.returncode == expect, done.stderr
        return [json.loads(line)["title"] for line in done.stdout.splitlines()], done.stderr

    try:
        s.start()
        publish(1, 12)  # Pages 1 and 2 archived. 11 and 12 on the working page.
        backup = tmp_path / "backup.sqlite3"
        sqlite_backup(database, backup)
        publish(13, 2)  # On the working page only.
        assert consume()[0] == [f"e{i}" for i in range(1, 15)]
        port = s.port
        s.stop()
        for leftover in ("-wal", "-shm"):
            database.with_name(database.name + leftover).unlink(missing_ok=True)
        shutil.copyfile(backup, database)
        s.start(port=port)
        publish(100, 4)  # Sequence numbers 13-16 again, as other entries.
        stopped, said = consume(expect=4)
        assert stopped == []
        assert (
            "is no longer in the feed; the feed holds the entries processed here up to sequence"
            " 12, not the 2 processed after it (13 '"
        ) in said
        assert f"`simplefeed consumer reset --state {state} --to 12` goes on after" in said
        status = json.loads(s.cli("consumer", "status", "--state", str(state), "--json").stdout)
        assert status["checkpoint"]["seq"] == 14
        moved = s.cli("consumer", "reset", "--state", str(state), "--to", "12")
        assert "to seq 12 (" in moved.stderr
        assert consume()[0] == ["e100", "e101", "e102", "e103"]
        assert s.problems() == []
    finally:
        s.stop()

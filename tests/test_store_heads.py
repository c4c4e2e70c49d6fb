"""The SQLite store keeps feed heads per process until any process commits.

Every /recent 304 asks for the feed's head. A process keeps it while the WAL index header says
nothing was committed. It reads it again after any commit by any process.

The tests use real SQLite files. Other processes make the commits that must be seen: a child
Python publishes through its own core. That is what uWSGI's workers and the operators'
commands are to each other.
"""

from __future__ import annotations

import mmap
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from simplefeed.model import Event
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from simplefeed.store import database_file
from simplefeed.store.sqlite import SQLiteStore, WalIndex
from tests.conftest import open_fds

PUBLISHER = """
import sys
from pathlib import Path
from simplefeed.service import Simplefeed
from simplefeed.model import Event
from simplefeed.settings import Settings

settings = Settings(database_url=sys.argv[1], archive_dir=Path(sys.argv[2]),
                    base_url="http://feeds.example.test", page_size=5, default_feed="events")
core = Simplefeed(settings)
for line in sys.stdin:
    core.publish("events", [Event(title=line.strip())])
    print(core.feed_head("events").head_seq, flush=True)
core.close()
"""


@pytest.fixture
def sqlite_settings(tmp_path: Path, sqlite_template: Path) -> Settings:
    path = tmp_path / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, path)
    return Settings(
        database_url=f"sqlite:///{path}",
        archive_dir=tmp_path / "archive",
        base_url="http://feeds.example.test",
        page_size=5,
        default_feed="events",
    )


@pytest.fixture
def reader(sqlite_settings: Settings) -> Iterator[Simplefeed]:
    core = Simplefeed(sqlite_settings)
    core.create_feed("events")
    yield core
    core.close()


class Publisher:
    """A child process that publishes to the same database, one event per :meth:`publish`."""

    def __init__(self, settings: Settings) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", PUBLISHER, settings.database_url, str(settings.archive_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def publish(self, title: str) -> int:
        """Return the feed's head sequence once the child's publish has committed."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(title + "\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def close(self) -> None:
        self.process.communicate(timeout=30)
        assert self.process.returncode == 0


def test_a_commit_by_another_process_is_read_at_once(
    reader: Simplefeed, sqlite_settings: Settings
) -> None:
    """A commit by another process is read at once.

    Every commit another process makes is in the next head read here. That holds however
    often the head was read in between. Each read after the first comes from this process's
    cache.
    """
    assert reader.feed_head("events").head_seq == 0
    publisher = Publisher(sqlite_settings)
    try:
        for i in range(1, 13):  # Across page boundaries, with pages of 5.
            for _ in range(3):
                assert reader.feed_head("events").head_seq == i - 1
            assert publisher.publish(f"e{i}") == i
            assert reader.feed_head("events").head_seq == i
    finally:
        publisher.close()
    # The publisher closed its connections, yet the reader's WAL index is still the database's.
    publisher = Publisher(sqlite_settings)
    try:
        assert publisher.publish("after") == 13
    finally:
        publisher.close()
    assert reader.feed_head("events").head_seq == 13


def test_threads_reading_while_another_process_commits_never_go_back(
    reader: Simplefeed, sqlite_settings: Settings
) -> None:
    """Threads reading while another process commits never go back.

    Threads race to fill the cache, and a commit lands between them. No read after a commit
    returns the head from before it.
    """
    committed = 0
    stop = threading.Event()
    stale: list[tuple[int, int]] = []

    def read() -> None:
        while not stop.is_set():
            floor = committed
            seen = reader.feed_head("events").head_seq
            if seen < floor:
                stale.append((seen, floor))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    publisher = Publisher(sqlite_settings)
    try:
        for i in range(1, 31):
            committed = publisher.publish(f"e{i}")
    finally:
        stop.set()
        for t in threads:
            t.join()
        publisher.close()
    assert committed == 30
    assert stale == []


def test_while_nothing_is_committed_the_head_is_not_read_from_the_database(
    reader: Simplefeed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While nothing is committed, the head is not read from the database.

    That is the point of the WAL index. A head unchanged since this process read it costs no
    statement. Each statement would release the interpreter under uWSGI's threads.
    """
    store = reader.store
    assert isinstance(store, SQLiteStore)
    first = reader.feed_head("events")

    def no_lookup(*args: object, **kwargs: object) -> None:
        raise AssertionError("the head was read from the database")

    monkeypatch.setattr(store, "lookup", no_lookup)
    assert reader.feed_head("events") is first
    monkeypatch.undo()
    reader.publish("events", [Event(title="own commit")])  # This process's own commit too.
    monkeypatch.setattr(store, "lookup", no_lookup)
    with pytest.raises(AssertionError, match="read from the database"):
        reader.feed_head("events")


def crafted_index(path: Path, first: bytes, second: bytes) -> WalIndex:
    path.write_bytes(first + second + bytes(40))
    fd = os.open(path, os.O_RDONLY)
    mapped = mmap.mmap(fd, WalIndex.SIZE, access=mmap.ACCESS_READ)
    return WalIndex(sqlite3.connect(":memory:"), fd, mapped)


def test_a_header_being_rewritten_or_not_built_says_nothing(tmp_path: Path) -> None:
    header = bytearray(48)
    header[0:4] = (3007000).to_bytes(4, sys.byteorder)
    header[WalIndex.IS_INIT] = 1
    whole = bytes(header)
    assert crafted_index(tmp_path / "same", whole, whole).header() == whole
    changed = bytearray(header)
    changed[8] = 1  # The iChange field: a commit halfway through rewriting the copies.
    assert crafted_index(tmp_path / "torn", whole, bytes(changed)).header() is None
    unbuilt = bytearray(header)
    unbuilt[WalIndex.IS_INIT] = 0
    assert crafted_index(tmp_path / "new", bytes(unbuilt), bytes(unbuilt)).header() is None


def test_a_database_not_in_wal_mode_has_no_index_and_is_read_every_time(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rollback.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE t (x)")
    with pytest.raises(ValueError, match="journal_mode is delete"):
        WalIndex.open(conn, path)
    with pytest.raises(sqlite3.ProgrammingError):  # Closed, so it held nothing open.
        conn.execute("SELECT 1")


def test_the_process_keeps_sqlites_locks_on_the_wal_index(
    reader: Simplefeed, sqlite_settings: Settings
) -> None:
    """The process keeps SQLite's locks on the WAL index.

    SQLite's connections coordinate through POSIX locks on the -shm file. When the process
    closes any descriptor of that file, the kernel drops all of the process's locks on it. So
    the WAL index must not close the descriptor it mapped through. Otherwise the process loses
    the lock that says the file is in use, on its byte 128. Another process then rebuilds the
    file, and a uWSGI worker reading the mapping dies of SIGBUS. The lock stays held after the
    index is opened, and after other stores' connections come and go.
    """
    reader.feed_head("events")  # Opens the WAL index.
    database = Path(sqlite_settings.database_url.removeprefix("sqlite:///"))
    inode = Path(f"{database}-shm").stat().st_ino

    def dms_held() -> bool:
        mine = ["POSIX", "ADVISORY", "READ", str(os.getpid())]
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()  # As in "1: POSIX  ADVISORY  READ 1234 08:01:5678 128 128".
            if (
                fields[1:5] == mine
                and fields[5].endswith(f":{inode}")
                and fields[6:8]
                == [
                    "128",
                    "128",
                ]
            ):
                return True
        return False

    assert dms_held()
    other = Simplefeed(sqlite_settings)
    other.feed_head("events")
    other.close()
    assert dms_held()
    publisher = Publisher(sqlite_settings)
    try:
        assert publisher.publish("e") == 1
    finally:
        publisher.close()
    assert dms_held()
    assert reader.feed_head("events").head_seq == 1


def test_the_last_store_of_a_database_to_close_closes_its_index(
    sqlite_settings: Settings,
) -> None:
    """The last store of a database to close closes its index.

    The process's stores of a database share the index, and the last one closes it. So a
    process that opens many databases in turn keeps no descriptors. The tests and the
    commands do that.
    """

    first = Simplefeed(sqlite_settings)
    first.create_feed("events")
    first.close()
    database = database_file(sqlite_settings.database_url)
    assert database is not None
    database_directory = database.parent.resolve()
    before = open_fds(under=database_directory)
    for _ in range(3):
        first, second = Simplefeed(sqlite_settings), Simplefeed(sqlite_settings)
        first.feed_head("events")
        second.feed_head("events")
        assert first.store._wal[1] is second.store._wal[1] is not None  # type: ignore[attr-defined]
        first.close()
        assert second.feed_head("events").name == "events"  # Still read through it.
        second.close()
    assert open_fds(under=database_directory) == before

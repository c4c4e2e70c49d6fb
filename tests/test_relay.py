"""The relay: an outbox in an app's database (SQLite or PostgreSQL) shipped to uWSGI, in
commit order, each event once; the lock that lets one relay ship at a time; follow mode; and
``simplefeed relay`` as a command."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, create_engine, select

from bench.servers import (
    UwsgiServer,
    free_port,
    private_postgres,
    scratch_postgres_database,
    simplefeed_command,
)
from simplefeed.outbox import Outbox, Relay, RelayBusy, RelayRefused
from simplefeed.producer import Prepared, Publisher, PublishRefused
from tests.conftest import query


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UwsgiServer]:
    with UwsgiServer.scratch(tmp_path_factory.mktemp("relay"), processes=1) as s:
        yield s


@pytest.fixture(params=["sqlite", "postgres"])
def app_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of a producer app: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'app.sqlite3'}"
        return
    with scratch_postgres_database("sf_relay") as url:
        yield url


@pytest.fixture
def app_engine(app_url: str) -> Iterator[Engine]:
    engine = create_engine(app_url)
    yield engine
    engine.dispose()


@pytest.fixture
def outbox(app_engine: Engine) -> Outbox:
    made = Outbox(feed="events")
    made.table.metadata.create_all(app_engine)
    return made


@pytest.fixture
def publisher(server: UwsgiServer) -> Iterator[Publisher]:
    with Publisher(server.url("/entries"), server.token) as made:
        yield made


def feed_ids(server: UwsgiServer) -> list[str]:
    return [r[0] for r in query(server.database_url, "SELECT entry_id FROM entries ORDER BY seq")]


def add(engine: Engine, outbox: Outbox, titles: list[str], *, commit: bool = True) -> list[str]:
    with engine.connect() as c:
        ids = [outbox.add(c, {"title": title}) for title in titles]
        if commit:
            c.commit()
        else:
            c.rollback()
    return ids


def test_committed_rows_are_shipped_in_order_and_deleted(
    server: UwsgiServer, app_engine: Engine, outbox: Outbox, publisher: Publisher
) -> None:
    first = add(app_engine, outbox, [f"a{i}" for i in range(7)])
    add(app_engine, outbox, ["rolled back"], commit=False)
    second = add(app_engine, outbox, [f"b{i}" for i in range(5)])
    relay = Relay(outbox, app_engine, publisher, batch_size=4)
    assert relay.backlog().rows == 12
    assert relay.ship() == 12
    assert feed_ids(server)[-12:] == first + second
    assert relay.backlog().rows == 0
    assert relay.ship() == 0


def test_a_batch_shipped_twice_is_in_the_feed_once(
    server: UwsgiServer, app_engine: Engine, outbox: Outbox, publisher: Publisher
) -> None:
    """A relay killed after the server stored a batch and before it deleted the rows ships
    the batch again: the server takes the events as replays."""
    ids = add(app_engine, outbox, ["once", "only"])
    t = outbox.table
    with app_engine.connect() as c:
        rows = c.execute(t.select().order_by(t.c.id)).all()
    publisher.send([Prepared(id=r.entry_id, body=r.event) for r in rows])
    before = feed_ids(server)
    assert Relay(outbox, app_engine, publisher).ship() == 2
    assert feed_ids(server) == before
    assert before[-2:] == ids


def test_a_refused_event_stops_the_relay_and_keeps_its_rows(
    server: UwsgiServer, app_engine: Engine, outbox: Outbox, publisher: Publisher
) -> None:
    """The error names the row the server refused, and the server's answer. A batch is all or
    nothing, so the row before it in the batch stays too."""
    taken = publisher.publish({"title": "taken"})
    with app_engine.begin() as c:
        outbox.add(c, {"title": "fine"})
        outbox.add(c, {"title": "other content", "id": taken.id})
    t = outbox.table
    with app_engine.connect() as c:
        row_id = c.execute(select(t.c.id).where(t.c.entry_id == taken.id)).scalar_one()
    relay = Relay(outbox, app_engine, publisher)
    with pytest.raises(PublishRefused, match="409") as refused:
        relay.ship()
    assert isinstance(refused.value, RelayRefused)
    assert (refused.value.row_id, refused.value.entry_id) == (row_id, taken.id)
    assert f"outbox row {row_id} (entry {taken.id}): 409 conflict" in str(refused.value)
    assert relay.backlog().rows == 2


def test_a_refusal_of_the_whole_batch_names_its_first_row(
    server: UwsgiServer, app_engine: Engine, outbox: Outbox
) -> None:
    """A 401 points at no event, so the error names the batch, and gives no advice on rows."""
    ids = add(app_engine, outbox, ["first", "second"])
    with Publisher(server.url("/entries"), "sft_1_not-a-token") as stranger:
        relay = Relay(outbox, app_engine, stranger)
        with pytest.raises(RelayRefused, match="401") as refused:
            relay.ship()
    assert refused.value.entry_id == ids[0]
    assert f"refused the batch from outbox row {refused.value.row_id} " in str(refused.value)
    assert "Fix or delete" not in str(refused.value)
    assert relay.backlog().rows == 2


def test_one_relay_ships_at_a_time(
    app_engine: Engine, outbox: Outbox, publisher: Publisher
) -> None:
    holder = Relay(outbox, app_engine, publisher)
    other = Relay(outbox, create_engine(app_engine.url), publisher)
    try:
        with holder._locked(None) as held:
            assert held
            with pytest.raises(RelayBusy):
                other.ship()
        assert other.ship() == 0
    finally:
        other.close()
        other.engine.dispose()


def test_two_relays_following_one_outbox_ship_each_event_once_in_order(
    server: UwsgiServer, app_url: str, outbox: Outbox, publisher: Publisher
) -> None:
    """Two relays with engines of their own follow one outbox while the app commits: one
    ships, the other waits for the lock; the feed gets each event once, in commit order."""
    relays = [Relay(outbox, app_url, publisher, batch_size=3) for _ in range(2)]
    stop = threading.Event()
    followers = [threading.Thread(target=r.follow, args=(stop,)) for r in relays]
    for follower in followers:
        follower.start()
    engine = create_engine(app_url)
    try:
        committed: list[str] = []
        for n in range(10):
            committed += add(engine, outbox, [f"two relays {n}.{i}" for i in range(n % 4 + 1)])
        wait_for(lambda: feed_ids(server)[-len(committed) :] == committed, "the relays to ship")
    finally:
        stop.set()
        for follower in followers:
            follower.join(30)
        for r in relays:
            r.close()
        engine.dispose()
    assert [f.is_alive() for f in followers] == [False, False]
    assert len(set(feed_ids(server))) == len(feed_ids(server))


def wait_for(condition: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.01)


def test_follow_ships_rows_as_they_are_committed(
    server: UwsgiServer, app_engine: Engine, outbox: Outbox, publisher: Publisher
) -> None:
    relay = Relay(outbox, app_engine, publisher)
    stop = threading.Event()
    follower = threading.Thread(target=relay.follow, args=(stop,))
    follower.start()
    try:
        for round_ in range(3):
            ids = add(app_engine, outbox, [f"followed {round_}.{i}" for i in range(3)])
            wait_for(lambda ids=ids: feed_ids(server)[-3:] == ids, "the relay to ship them")
        add(app_engine, outbox, ["never committed"], commit=False)
    finally:
        stop.set()
        follower.join(30)
    assert not follower.is_alive()
    assert relay.backlog().rows == 0


@pytest.mark.postgres
def test_follow_goes_on_after_the_app_s_postgresql_restarts(
    server: UwsgiServer, publisher: Publisher
) -> None:
    """The app's PostgreSQL stops at once (crash recovery at the next start) while a relay
    follows its outbox: the relay takes its lock and its listener anew, and ships on."""
    with private_postgres() as pg:
        engine = create_engine(pg.url())
        outbox = Outbox(feed="events")
        outbox.table.metadata.create_all(engine)
        relay = Relay(outbox, pg.url(), publisher)
        stop = threading.Event()
        follower = threading.Thread(target=relay.follow, args=(stop,))
        follower.start()
        try:
            before = add(engine, outbox, ["before the crash"])
            wait_for(lambda: feed_ids(server)[-1:] == before, "the relay to ship it")
            pg.crash()
            engine.dispose()
            pg.start()
            after = add(engine, outbox, ["after the restart"])
            wait_for(lambda: feed_ids(server)[-1:] == after, "the relay to ship it")
        finally:
            stop.set()
            follower.join(30)
            relay.close()
            engine.dispose()
        assert not follower.is_alive()


def test_the_relay_command(tmp_path: Path, server: UwsgiServer, app_url: str) -> None:
    import subprocess

    outbox = Outbox(feed="events")
    engine = create_engine(app_url)
    try:
        outbox.table.metadata.create_all(engine)
        ids = add(engine, outbox, ["by the command 1", "by the command 2"])
    finally:
        engine.dispose()
    token = tmp_path / "token"
    token.write_text(server.token + "\n")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*simplefeed_command(), "relay", "--outbox", app_url, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=server.env(),
        )

    status = run("--feed", "events", "--status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["rows"] == 2
    shipped = run("--to", server.url("/entries"), "--feed", "events", "--token-file", str(token))
    assert (shipped.returncode, shipped.stdout) == (0, "shipped 2 events\n"), shipped.stderr
    assert feed_ids(server)[-2:] == ids
    assert run("--feed", "events", "--status").stdout.startswith("0 rows")
    for database, said in (
        ("nonsense", "is not a database URL"),
        (f"sqlite:///{tmp_path / 'other.sqlite3'}", "no such table"),
    ):
        failed = subprocess.run(
            [*simplefeed_command(), "relay", "--outbox", database, "--feed", "events", "--status"],
            capture_output=True,
            text=True,
            timeout=60,
            env=server.env(),
        )
        assert failed.returncode == 1
        assert said in failed.stderr and len(failed.stderr.splitlines()) == 1, failed.stderr
    unnamed = run("--to", server.url("/entries"), "--token-file", str(token))
    assert unnamed.returncode == 2
    assert "--feed" in unnamed.stderr
    assert httpx.get(server.url("/healthz")).status_code == 200


def test_the_relay_command_names_the_row_the_server_refused(
    tmp_path: Path, server: UwsgiServer
) -> None:
    """Its exit message and its log line name the row, its entry and the server's error. The
    rows stay, and the relay ships them once the operator has deleted the row."""
    import subprocess

    app_url = f"sqlite:///{tmp_path / 'app.sqlite3'}"
    outbox = Outbox(feed="events")
    engine = create_engine(app_url)
    outbox.table.metadata.create_all(engine)
    token = tmp_path / "token"
    token.write_text(server.token)
    with Publisher(server.url("/entries"), server.token) as publisher:
        taken = publisher.publish({"title": "taken"}).id
    before = add(engine, outbox, ["before it"])
    with engine.begin() as c:
        outbox.add(c, {"title": "other content", "id": taken})
    after = add(engine, outbox, ["after it"])
    ship = [*simplefeed_command(), "relay", "--outbox", app_url, "--to", server.url("/entries")]
    ship += ["--feed", "events", "--token-file", str(token)]
    done = subprocess.run(ship, capture_output=True, text=True, timeout=60, env=server.env())
    assert done.returncode == 1, done.stderr
    said = f"the server refused outbox row 2 (entry {taken}): 409 conflict: entry id"
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and all(said in line for line in lines), done.stderr
    assert lines[0].startswith("relay: ") and lines[1].startswith("Error: "), done.stderr
    assert lines[1].endswith("Fix or delete row 2, then start the relay again"), lines[1]
    assert taken == feed_ids(server)[-1]  # A batch is all or nothing.
    with engine.begin() as c:
        c.execute(outbox.table.delete().where(outbox.table.c.id == 2))
    done = subprocess.run(ship, capture_output=True, text=True, timeout=60, env=server.env())
    assert (done.returncode, done.stdout) == (0, "shipped 2 events\n"), done.stderr
    assert feed_ids(server)[-2:] == before + after
    engine.dispose()


def test_the_relay_command_follows_serves_its_metrics_and_stops_on_sigterm(
    tmp_path: Path, server: UwsgiServer
) -> None:
    import signal
    import subprocess

    app_url = f"sqlite:///{tmp_path / 'app.sqlite3'}"
    outbox = Outbox(feed="events")
    engine = create_engine(app_url)
    outbox.table.metadata.create_all(engine)
    token = tmp_path / "token"
    token.write_text(server.token)
    port = free_port()
    relay = subprocess.Popen(
        [
            *simplefeed_command(),
            "relay",
            "--outbox",
            app_url,
            "--to",
            server.url("/entries"),
            "--feed",
            "events",
            "--token-file",
            str(token),
            "--follow",
            "--metrics-port",
            str(port),
        ],
        env=server.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ids = add(engine, outbox, ["followed by the command"])
        wait_for(lambda: feed_ids(server)[-1:] == ids, "the relay to ship it")

        def scraped() -> str:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/metrics").text
            except httpx.TransportError:
                return ""

        wait_for(
            lambda: 'simplefeed_relay_shipped_events_total{feed="events"} 1.0' in scraped(),
            "the metrics to say so",
        )
        assert 'simplefeed_relay_backlog_rows{feed="events"} 0.0' in scraped()
        relay.send_signal(signal.SIGTERM)
        _, stderr = relay.communicate(timeout=30)
        assert relay.returncode == 0, stderr
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.communicate()
        engine.dispose()

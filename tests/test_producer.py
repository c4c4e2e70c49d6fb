"""The Python publisher against a real server: uWSGI on a SQLite file, or the app in-process
on a real HTTP client (httpx's WSGI transport) where a test needs a fault only the app shows.

The kill test stops uWSGI with SIGKILL while a publish call is under way, starts it again on
the same port, and checks that the call succeeds with the default settings and the feed holds
each event once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.servers import UwsgiServer, free_port
from simplefeed.app import create_app
from simplefeed.errors import InvalidEvent, MalformedRequest, PayloadTooLarge
from simplefeed.producer import (
    AsyncPublisher,
    Prepared,
    Publisher,
    PublishRefused,
    PublishUnavailable,
    _retry_after,
    prepare,
    uuid7,
)
from simplefeed.service import Simplefeed
from simplefeed.settings import Limits, Settings
from tests.conftest import query


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UwsgiServer]:
    with UwsgiServer.scratch(tmp_path_factory.mktemp("producer"), processes=1) as s:
        yield s


class Requests:
    """An httpx client that counts the requests it sends."""

    def __init__(self) -> None:
        self.sent = 0
        self.client = httpx.Client(timeout=10, event_hooks={"request": [self.count]})

    def count(self, request: httpx.Request) -> None:
        self.sent += 1


@pytest.fixture
def requests() -> Iterator[Requests]:
    made = Requests()
    yield made
    made.client.close()


def entry_ids(server: UwsgiServer) -> list[str]:
    """The feed's entry ids in sequence order, from the server's database."""
    return [
        row[0] for row in query(server.database_url, "SELECT entry_id FROM entries ORDER BY seq")
    ]


def test_uuid7_is_version_7_and_its_time_comes_first() -> None:
    before = time.time_ns() // 1_000_000
    made = uuid7()
    assert made.version == 7
    assert made.variant == uuid.RFC_4122
    assert before <= made.int >> 80 <= time.time_ns() // 1_000_000
    assert len({uuid7() for _ in range(1000)}) == 1000


def test_publish_answers_what_the_server_stored(server: UwsgiServer) -> None:
    with Publisher(server.url("/entries"), server.token) as publisher:
        published = publisher.publish({"title": "order paid", "content": {"order": 42}})
    assert published.id.startswith("urn:uuid:")
    assert uuid.UUID(published.id.removeprefix("urn:uuid:")).version == 7
    assert published.created is True
    assert published.url == server.url(f"/pages/{published.page}")
    located = httpx.get(server.url(f"/entries/{published.id.replace(':', '%3A')}"))
    assert located.status_code == 303
    assert located.headers["Simplefeed-Seq"] == str(published.seq)


def test_publish_many_keeps_the_order_across_batches(
    server: UwsgiServer, requests: Requests
) -> None:
    publisher = Publisher(
        server.url("/entries"), server.token, limits=Limits(max_batch=2), client=requests.client
    )
    events = [{"title": f"e{i}"} for i in range(5)]
    published = publisher.publish_many(events)
    assert requests.sent == 3
    seqs = [p.seq for p in published]
    assert seqs == list(range(seqs[0], seqs[0] + 5))
    assert entry_ids(server)[-5:] == [p.id for p in published]


def test_batches_keep_under_the_body_limit(server: UwsgiServer, requests: Requests) -> None:
    limits = Limits(max_body_bytes=2000)
    publisher = Publisher(
        server.url("/entries"), server.token, limits=limits, client=requests.client
    )
    published = publisher.publish_many([{"title": "x" * 500} for _ in range(6)])
    assert len(published) == 6
    assert requests.sent == 2  # three events of about 560 bytes fit in 2,000
    with pytest.raises(PayloadTooLarge):
        publisher.publish({"title": "x" * 2000})


def test_a_retry_of_the_same_events_is_a_replay(server: UwsgiServer) -> None:
    prepared = [prepare({"title": "once"}), prepare({"title": "twice"})]
    with Publisher(server.url("/entries"), server.token) as publisher:
        first = publisher.send(prepared)
        again = publisher.send(prepared)
    assert [p.created for p in first] == [True, True]
    assert [p.created for p in again] == [False, False]
    assert [p.seq for p in again] == [p.seq for p in first]
    assert entry_ids(server).count(prepared[0].id) == 1


@pytest.mark.parametrize(
    ("event", "error", "field"),
    [
        ({"title": ""}, InvalidEvent, "title"),
        ({"title": "t", "unknown": 1}, InvalidEvent, "unknown"),
        ({"title": "t", "id": "urn:uuid:6F1C2A4E-1D2B-4C3D-9E8F-0A1B2C3D4E5F"}, InvalidEvent, "id"),
        ({"title": "t", "content": {"n": 2**60}}, InvalidEvent, "content"),
        ({"title": "t", "content": {"n": math.nan}}, MalformedRequest, None),
        (
            {"title": "t", "content": "<script>x</script>", "content_type": "html"},
            InvalidEvent,
            "content",
        ),
    ],
)
def test_an_event_the_server_would_refuse_fails_before_any_request(
    server: UwsgiServer,
    requests: Requests,
    event: dict[str, object],
    error: type[Exception],
    field: str | None,
) -> None:
    publisher = Publisher(server.url("/entries"), server.token, client=requests.client)
    with pytest.raises(error) as raised:
        publisher.publish_many([{"title": "fine"}, event])
    assert requests.sent == 0
    if field is not None:
        assert isinstance(raised.value, InvalidEvent)
        assert (raised.value.index, raised.value.field) == (1, field)
    # The server says the same of it.
    answer = httpx.post(
        server.url("/entries"),
        content=json.dumps(event),
        headers={"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"},
    )
    assert answer.status_code in (400, 422)


def test_a_final_error_answer_is_not_retried(server: UwsgiServer, requests: Requests) -> None:
    publisher = Publisher(server.url("/entries"), "sf_1_nonsense", client=requests.client)
    with pytest.raises(PublishRefused) as raised:
        publisher.publish({"title": "t"})
    assert (raised.value.status, raised.value.error, requests.sent) == (401, "unauthorized", 1)

    publisher = Publisher(server.url("/entries"), server.token, client=requests.client)
    taken = publisher.publish({"title": "first"})
    with pytest.raises(PublishRefused) as raised:
        publisher.publish_many([{"title": "new"}, {"title": "other", "id": taken.id}])
    assert (raised.value.status, raised.value.index, requests.sent) == (409, 1, 3)


def test_an_unreachable_server_is_retried_until_retry_for_runs_out(requests: Requests) -> None:
    url = f"http://127.0.0.1:{free_port()}/entries"  # nothing listens there
    publisher = Publisher(url, "token", retry_for=0.5, client=requests.client)
    with pytest.raises(PublishUnavailable, match="ConnectError"):
        publisher.publish({"title": "t"})
    assert requests.sent > 1


def test_the_async_publisher_retries_an_unreachable_server_too() -> None:
    sent: list[httpx.Request] = []

    async def count(request: httpx.Request) -> None:
        sent.append(request)

    async def run() -> None:
        url = f"http://127.0.0.1:{free_port()}/entries"  # nothing listens there
        client = httpx.AsyncClient(event_hooks={"request": [count]})
        async with client, AsyncPublisher(url, "token", retry_for=0.5, client=client) as p:
            with pytest.raises(PublishUnavailable, match="ConnectError"):
                await p.publish({"title": "t"})

    asyncio.run(run())
    assert len(sent) > 1
    assert len({r.content for r in sent}) == 1  # every try sends the same bytes, its id fixed


def test_a_url_that_can_never_work_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="not an http or https URL"):
        Publisher("feeds.example/entries", "token")


def test_retry_after_is_read_in_seconds_and_as_a_date() -> None:
    assert _retry_after("3") == 3.0
    assert _retry_after(None) is None
    assert _retry_after("soon") is None
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 20 < (_retry_after(later) or 0) <= 30


def test_a_503_is_retried_after_its_retry_after(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SQLite write lock held past the busy timeout makes the app answer 503 with
    Retry-After: 1. The publisher waits that long and tries again, once the lock is gone."""
    from simplefeed.store import sqlite as dbmodule

    path = tmp_path / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, path)
    settings = Settings(
        database_url=f"sqlite:///{path}",
        archive_dir=tmp_path / "archive",
        base_url="http://feeds.example.test",
        default_feed="events",
    )
    core = Simplefeed(settings)
    core.create_feed("events")
    token = core.create_token()
    monkeypatch.setattr(dbmodule, "SQLITE_BUSY_TIMEOUT_S", 0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    answers: list[tuple[int, float]] = []

    def answered(response: httpx.Response) -> None:
        answers.append((response.status_code, time.monotonic()))
        if response.status_code == 503:
            holder.execute("ROLLBACK")

    client = httpx.Client(
        transport=httpx.WSGITransport(app=create_app(settings, core=core)),
        event_hooks={"response": [answered]},
    )
    try:
        published = Publisher("http://feeds.example.test/entries", token, client=client).publish(
            {"title": "waits for the lock"}
        )
    finally:
        client.close()
        holder.close()
        core.close()
    assert published.seq == 1
    assert [status for status, _ in answers] == [503, 201]
    assert answers[1][1] - answers[0][1] >= 1.0  # Retry-After: 1


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("count", "when"), [(1, "before it arrives"), (300, "while the server reads and stores it")]
)
def test_a_server_killed_during_a_publish_and_back_within_15_s(
    tmp_path: Path, count: int, when: str
) -> None:
    """SIGKILL to uWSGI's process group as the publisher sends its first request: in the
    request's hook itself (the request never arrives), or from another thread as the hook
    fires (a batch of 600 KB: the server is reading or storing it). The server starts again
    on the same port; the call succeeds with the default settings after retrying."""
    events = [{"title": f"killed {i}", "content": "x" * 2000} for i in range(count)]
    with UwsgiServer.scratch(tmp_path, processes=1) as server:
        port = server.port
        assert server.process is not None
        group = server.process.pid
        sent = threading.Event()

        def on_request(request: httpx.Request) -> None:
            if not sent.is_set() and count == 1:
                os.killpg(group, signal.SIGKILL)
            sent.set()

        requests = Requests()
        requests.client.event_hooks["request"].append(on_request)
        publisher = Publisher(server.url("/entries"), server.token, client=requests.client)
        done: list[object] = []
        worker = threading.Thread(target=lambda: done.append(publisher.publish_many(events)))
        worker.start()
        assert sent.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        server.stop()
        server.start(port=port)
        worker.join(60)
        requests.client.close()
        assert not worker.is_alive()
        assert requests.sent > 1  # the kill cut the first try short
        (published,) = done
        assert isinstance(published, list)
        ids = entry_ids(server)
        assert ids == [p.id for p in published]
        assert len(set(ids)) == count


def test_the_async_publisher(server: UwsgiServer) -> None:
    async def run() -> None:
        async with AsyncPublisher(server.url("/entries"), server.token) as publisher:
            one = await publisher.publish({"title": "async"})
            many = await publisher.publish_many([{"title": "a1"}, {"title": "a2"}])
            assert [p.seq for p in many] == [one.seq + 1, one.seq + 2]
            again = await publisher.send(
                [Prepared(id=one.id, body=json.dumps({"title": "async", "id": one.id}))]
            )
            assert again[0].created is False
            with pytest.raises(PublishRefused):
                await publisher.publish({"title": "other", "id": one.id})
            with pytest.raises(InvalidEvent):
                await publisher.publish({"title": ""})

    asyncio.run(run())

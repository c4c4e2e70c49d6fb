"""The archive in a bucket (SIMPLEFEED_ARCHIVE_URL) on a real S3 API: moto's server on
loopback, started here, stopped for an outage and started again.

Publishing puts each archived page and its copies in the bucket with their headers. While the
bucket does not answer, publishing goes on, the pages wait in the archive directory, and
``/healthz`` and ``/metrics`` say how many and since when. When the bucket answers again, the
pages arrive. ``archive verify`` and ``archive rebuild`` check and mend the bucket too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import falcon.testing
import httpx
import pytest

from bench.servers import S3Server, UwsgiServer
from simplefeed import codings
from simplefeed.app import create_app
from simplefeed.archive.store import ATOM_MEDIA_TYPE, CACHE_CONTROL
from simplefeed.errors import ArchiveUnavailable
from simplefeed.model import Event
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from tests.conftest import FakeClock, SequentialIds

BUCKET = "simplefeed-archive"
PREFIX = "feeds"
#: The longest a test waits for the pages to arrive (an event, not a pause).
ARRIVAL_S = 30.0


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    with S3Server(tmp_path / "moto") as server:
        server.bucket(BUCKET)
        for name, value in server.environ().items():
            monkeypatch.setenv(name, value)
        yield server


@pytest.fixture
def core(settings: Settings, clock: FakeClock, s3: S3Server) -> Iterator[Simplefeed]:
    c = Simplefeed(
        replace(settings, archive_url=f"s3://{BUCKET}/{PREFIX}"),
        clock=clock,
        new_uuid=SequentialIds(),
    )
    c.create_feed(c.settings.default_feed)
    yield c
    c.close()


def publish(core: Simplefeed, n: int) -> None:
    core.publish("events", [Event(title=f"e{i}") for i in range(n)])


def waiting(core: Simplefeed) -> int:
    found = core.uploads_waiting()
    assert found is not None
    return found[0]


def until_none_waits(core: Simplefeed) -> None:
    """Wait for the background thread to put every waiting page in the bucket."""
    deadline = time.monotonic() + ARRIVAL_S
    while waiting(core):
        assert time.monotonic() < deadline, f"{waiting(core)} pages still wait"
        core.health()  # (wakes the thread at once, as /healthz does)
        time.sleep(0.05)


def bucket_object(s3: S3Server, key: str) -> dict[str, object] | None:
    client = s3.client()
    try:
        answer = client.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{key}")
    except client.exceptions.NoSuchKey:
        return None
    return {
        "body": answer["Body"].read(),
        "type": answer.get("ContentType"),
        "cache": answer.get("CacheControl"),
        "encoding": answer.get("ContentEncoding"),
    }


def assert_in_bucket(core: Simplefeed, s3: S3Server, number: int) -> None:
    page = core.page_path("events", number).read_bytes()
    held = bucket_object(s3, f"pages/{number}")
    assert held == {"body": page, "type": ATOM_MEDIA_TYPE, "cache": CACHE_CONTROL, "encoding": None}
    for coding in codings.CODINGS:
        copy = bucket_object(s3, f"pages/{number}{codings.SUFFIXES[coding]}")
        assert copy is not None, coding
        assert codings.decode(copy["body"], coding) == page  # type: ignore[arg-type]
        assert (copy["type"], copy["cache"], copy["encoding"]) == (
            ATOM_MEDIA_TYPE,
            CACHE_CONTROL,
            coding,
        )


def test_frozen_pages_go_to_the_bucket_with_their_copies_and_headers(
    core: Simplefeed, s3: S3Server
) -> None:
    publish(core, 11)  # pages 1 and 2 freeze
    until_none_waits(core)
    for number in (1, 2):
        assert_in_bucket(core, s3, number)
    assert bucket_object(s3, "pages/3") is None  # the working page stays in the app
    assert core.verify_archive().problems == []


def test_a_bucket_outage_stops_no_publish_and_loses_no_page(
    core: Simplefeed, s3: S3Server, token: str
) -> None:
    client = falcon.testing.TestClient(create_app(core.settings, core=core))
    publish(core, 5)  # page 1
    until_none_waits(core)
    port = s3.port
    s3.stop()

    publish(core, 10)  # pages 2 and 3 freeze while the bucket is down
    assert core.feed("events").head_seq == 15
    assert waiting(core) == 2
    health = client.simulate_get("/healthz")
    assert health.status_code == 200  # a warning: publishing works
    assert health.json["archive_bucket"]["waiting_pages"] == 2
    assert health.json["archive_bucket"]["waiting_since"].endswith("Z")
    assert any("2 archived pages wait for the bucket" in w for w in health.json["warnings"])
    scraped = client.simulate_get("/metrics").text
    assert "simplefeed_archive_pages_waiting 2.0" in scraped
    assert "simplefeed_archive_pages_waiting_since_seconds " in scraped
    with pytest.raises(ArchiveUnavailable):
        core.verify_archive()
    for number in (2, 3):  # served from the archive directory meanwhile
        assert client.simulate_get(f"/pages/{number}").status_code == 200

    s3.start(port=port)  # back, and empty: moto keeps its buckets in memory
    s3.bucket(BUCKET)
    until_none_waits(core)
    for number in (2, 3):
        assert_in_bucket(core, s3, number)
    assert client.simulate_get("/healthz").json["archive_bucket"] == {
        "waiting_pages": 0,
        "waiting_since": None,
    }
    # Page 1 went with the old server's memory: verify names it, rebuild puts it back.
    problems = core.verify_archive().problems
    assert problems == [f"s3://{BUCKET}/{PREFIX}/pages/1: missing"], problems
    report = core.rebuild_archive()
    assert report.uploaded == [f"s3://{BUCKET}/{PREFIX}/pages/1"]
    assert report.unwritten == []
    assert_in_bucket(core, s3, 1)
    assert core.verify_archive().problems == []


def test_the_waiting_pages_outlive_the_process(
    core: Simplefeed, s3: S3Server, settings: Settings, clock: FakeClock
) -> None:
    port = s3.port
    s3.stop()
    publish(core, 5)
    assert waiting(core) == 1
    core.close()  # a restart during the outage: the marker stays on disk
    s3.start(port=port)
    s3.bucket(BUCKET)
    again = Simplefeed(replace(settings, archive_url=f"s3://{BUCKET}/{PREFIX}"), clock=clock)
    try:
        assert waiting(again) == 1
        assert again.put_waiting_pages() == (1, [])
        assert waiting(again) == 0
        assert_in_bucket(again, s3, 1)
    finally:
        again.close()


@pytest.mark.e2e
def test_the_served_service_puts_pages_in_the_bucket_across_an_outage(tmp_path: Path) -> None:
    """``simplefeed serve`` (uWSGI, its workers' threads) with SIMPLEFEED_ARCHIVE_URL: a page
    frozen while the bucket is down arrives once it is back, with the service restarted
    during the outage."""
    with S3Server(tmp_path / "moto") as s3:
        s3.bucket(BUCKET)
        env = {**s3.environ(), "SIMPLEFEED_ARCHIVE_URL": f"s3://{BUCKET}/{PREFIX}"}
        service = UwsgiServer.scratch(tmp_path / "service", page_size=5, extra_env=env)
        with service:
            auth = {"Authorization": f"Bearer {service.token}"}
            posted = httpx.post(
                service.url("/entries"), json=[{"title": f"e{i}"} for i in range(6)], headers=auth
            )
            assert posted.status_code == 201, posted.text
            arrived(s3, "pages/1")
            none_waits(service)
            port = s3.port
            s3.stop()
            posted = httpx.post(
                service.url("/entries"), json=[{"title": f"f{i}"} for i in range(5)], headers=auth
            )
            assert posted.status_code == 201, posted.text  # page 2 froze, the bucket down
            health = httpx.get(service.url("/healthz")).json()
            assert health["archive_bucket"]["waiting_pages"] == 1
        s3.start(port=port)
        s3.bucket(BUCKET)
        service.start(port=service.port)  # restarted: the page still waits, and goes
        try:
            httpx.get(service.url("/healthz"))  # (wakes a worker's thread)
            held = arrived(s3, "pages/2")
            assert held == (service.archive_dir / "pages" / "2").read_bytes()
            none_waits(service)
        finally:
            service.stop()


def none_waits(service: UwsgiServer) -> None:
    """Wait for /healthz to say that no page waits for the bucket."""
    deadline = time.monotonic() + ARRIVAL_S
    while httpx.get(service.url("/healthz")).json()["archive_bucket"]["waiting_pages"]:
        assert time.monotonic() < deadline, "pages still wait for the bucket"
        time.sleep(0.1)


def arrived(s3: S3Server, key: str) -> bytes:
    """The bucket's object at ``key`` once it is there (waiting for it)."""
    deadline = time.monotonic() + ARRIVAL_S
    while (found := bucket_object(s3, key)) is None:
        assert time.monotonic() < deadline, f"{key} never arrived in the bucket"
        time.sleep(0.1)
    body = found["body"]
    assert isinstance(body, bytes)
    return body

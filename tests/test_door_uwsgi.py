"""The door works through a real uWSGI (``simplefeed serve``), on SQLite and PostgreSQL.

The tests take one case of each rule of issue #11's input section, and of #12's producer
input. Each gets its status and JSON error, with field and index. The feed is unchanged
afterwards. The server's log holds no 5xx and no traceback, checked when the module's server
stops. ``tests/test_door.py`` has the rules in full.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, create_engine

from bench.servers import HOST, UwsgiServer, scratch_postgres_database
from tests.test_door import POISON
from tests.test_e2e_uwsgi import PROCESSES, _serve, assert_json_error, snapshot

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def uwsgi_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UwsgiServer]:
    workdir = tmp_path_factory.mktemp(f"door-{request.param}")
    if request.param == "sqlite":
        yield from _serve(f"sqlite:///{workdir / 'simplefeed.sqlite3'}", workdir)
        return
    with scratch_postgres_database("sf_door") as url:
        yield from _serve(url, workdir)


@pytest.fixture(scope="module")
def http(uwsgi_server: UwsgiServer) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {uwsgi_server.token}"}
    with httpx.Client(timeout=30.0, headers=headers) as client:
        # Something in the feed, so "unchanged" compares a real document.
        r = client.post(uwsgi_server.url("/entries"), json={"title": "already there"})
        assert r.status_code == 201, r.text
        yield client


@pytest.fixture(scope="module")
def db(uwsgi_server: UwsgiServer) -> Iterator[Engine]:
    engine = create_engine(uwsgi_server.database_url)
    yield engine
    engine.dispose()


@dataclass(frozen=True)
class Refusal:
    body: Any
    status: int
    field: str | None
    index: int | None = None
    raw: bytes | None = None
    word: str = ""


JSON = "application/json"
LATEST = "9999-12-31T23:59:59-01:00"  # It parses, but is past datetime's range in UTC.
EARLIEST = "0001-01-01T00:00:00+01:00"
SVG_ONLOAD = '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>'
WIDE_ID = "tag:example.com,2027:" + "\U0001f600" * 1000  # 4,021 bytes, over PostgreSQL's index.
REFUSALS = {
    "poison-xml": Refusal(POISON, 422, "content", word="purl.org/atom"),
    "poison-xml-in-batch": Refusal([{"title": "ok"}, POISON], 422, "content", index=1),
    "xhtml-as-xml": Refusal(
        {
            "title": "x",
            "content": '<p xmlns="http://www.w3.org/1999/xhtml">x</p>',
            "content_type": "application/xml",
        },
        422,
        "content",
        word="xhtml",
    ),
    "xhtml-media-type": Refusal(
        {
            "title": "x",
            "content": '<p xmlns="http://www.w3.org/1999/xhtml">x</p>',
            "content_type": "application/xhtml+xml",
        },
        422,
        "content_type",
        word="send XHTML as xhtml",
    ),
    "nan-in-body": Refusal(None, 400, None, raw=b'{"title": "x", "content": [NaN]}', word="NaN"),
    "overflow-in-body": Refusal(None, 400, None, raw=b'{"title": "x", "content": 1e999}'),
    "infinity-in-json-text": Refusal(
        [{"title": "ok"}, {"title": "x", "content": "[-Infinity]", "content_type": JSON}],
        422,
        "content",
        index=1,
    ),
    "updated-beyond-utc": Refusal({"title": "x", "updated": LATEST}, 422, "updated"),
    "updated-before-utc": Refusal({"title": "x", "updated": EARLIEST}, 422, "updated"),
    "id-too-many-bytes": Refusal({"title": "x", "id": WIDE_ID}, 422, "id", word="bytes"),
    "id-not-canonical": Refusal(
        {"title": "x", "id": "HTTP://Example.COM:80/a/%7e1"},
        422,
        "id",
        word="http://example.com/a/~1",
    ),
    "id-bad-uuid": Refusal({"title": "x", "id": "urn:uuid:not-a-uuid"}, 422, "id"),
    "id-bad-tag": Refusal({"title": "x", "id": "tag:nonsense"}, 422, "id"),
    "email-mailto": Refusal(
        {"title": "x", "author": {"name": "a", "email": "mailto:a@x.org"}}, 422, "author.email"
    ),
    "html-script": Refusal(
        {"title": "x", "content": '<img src="/x" onerror="alert(1)">', "content_type": "html"},
        422,
        "content",
        word="onerror",
    ),
    "svg-onload": Refusal(
        {"title": "x", "content": SVG_ONLOAD, "content_type": "image/svg+xml"}, 422, "content"
    ),
    "link-javascript": Refusal(
        [{"title": "ok"}, {"title": "x", "links": [{"href": "javascript:alert(1)"}]}],
        422,
        "links[0].href",
        index=1,
        word="javascript:",
    ),
    "email-angle": Refusal(
        {"title": "x", "author": {"name": "a", "email": "<a@example.com>"}}, 422, "author.email"
    ),
}


@pytest.mark.parametrize("case", REFUSALS.values(), ids=REFUSALS.keys())
def test_each_rule_is_enforced_before_anything_is_stored(
    uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine, case: Refusal
) -> None:
    before = snapshot(uwsgi_server, http, db)
    url = uwsgi_server.url("/entries")
    if case.raw is not None:
        r = http.post(url, content=case.raw, headers={"Content-Type": "application/json"})
    else:
        r = http.post(url, json=case.body)
    body = assert_json_error(r, case.status)
    assert body.get("field") == case.field, body
    assert body.get("index") == case.index, body
    assert case.word.lower() in body["message"].lower(), body
    assert snapshot(uwsgi_server, http, db) == before


def test_an_entry_over_its_share_of_a_page_is_refused_by_every_worker(
    uwsgi_server: UwsgiServer, http: httpx.Client
) -> None:
    """An entry over its share of a page is refused by every worker.

    Pages of 10,000 leave an entry 5,026 bytes. 1,000 characters written six bytes each are
    over it, in a body of 1 KB. That is ``<`` in JSON text. Each worker's first publish to the
    feed looks its page size up, and later ones know it.
    """
    uwsgi_server.cli("feed", "create", "wide", "--page-size", "10000")
    url = uwsgi_server.url("/feeds/wide/entries")
    heavy = {"title": "x", "content": '"' + "<" * 1000 + '"', "content_type": JSON}
    for _ in range(3 * PROCESSES):
        for body, index in ((heavy, None), ([{"title": "ok"}, heavy], 1)):
            reply = assert_json_error(http.post(url, json=body), 422)
            assert reply.get("index") == index and reply.get("field") is None, reply
            assert "a page of feed 'wide' leaves each of its 10000 entries" in reply["message"]
    fits = {"title": "x", "content": '"' + "<" * 700 + '"', "content_type": JSON}
    assert http.post(url, json=fits).status_code == 201
    feed = httpx.get(uwsgi_server.url("/feeds/wide/recent")).text
    assert feed.count("<entry>") == 1


def test_an_id_at_the_byte_limit_is_stored(uwsgi_server: UwsgiServer, http: httpx.Client) -> None:
    """An id at the byte limit is stored.

    The limit, 1,024 bytes, fits PostgreSQL's unique index as well as SQLite's.
    """
    entry_id = "tag:example.com,2027:" + "z" * (1024 - len("tag:example.com,2027:"))
    r = http.post(uwsgi_server.url("/entries"), json={"title": "long id", "id": entry_id})
    assert r.status_code == 201, r.text
    assert r.json()["id"] == entry_id
    replay = http.post(uwsgi_server.url("/entries"), json={"title": "long id", "id": entry_id})
    assert replay.status_code == 200 and replay.json()["created"] is False


def test_a_token_id_beyond_the_column_is_a_401(
    uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine
) -> None:
    before = snapshot(uwsgi_server, http, db)
    for token_id in (2**31, 2**63 - 1):
        r = http.post(
            uwsgi_server.url("/entries"),
            json={"title": "x"},
            headers={"Authorization": f"Bearer sft_{token_id}_{'A' * 43}"},
        )
        assert_json_error(r, 401)
        assert 'error="invalid_token"' in r.headers["www-authenticate"]
    assert snapshot(uwsgi_server, http, db) == before


@pytest.mark.parametrize(
    "request_line",
    [
        b"GET /healthz X\nSet-Cookie: a=b",  # A bare LF ends the request line.
        b"GET /healthz HTTP/1.1 Set-Cookie: a=b",
        b"GET /healthz HTTP/1.1\x0bSet-Cookie: a=b",
        b"GET /healthz HTTP/9.9",  # Not to be answered HTTP/9.9 200 OK.
    ],
)
def test_a_request_line_with_a_forged_protocol_gets_no_answer(
    uwsgi_server: UwsgiServer, request_line: bytes
) -> None:
    """A request line with a forged protocol gets no answer.

    uWSGI begins its status line with the request line's protocol as it came. So the answer to
    these would carry a Set-Cookie header of the sender's choosing.
    """
    with socket.create_connection((HOST, uwsgi_server.port), timeout=10) as sock:
        sock.sendall(request_line + f"\r\nHost: {HOST}\r\n\r\n".encode())
        received = b""
        while data := sock.recv(65536):
            received += data
    assert received == b""
    with socket.create_connection((HOST, uwsgi_server.port), timeout=10) as sock:
        sock.sendall(f"GET /healthz HTTP/1.0\r\nHost: {HOST}\r\n\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.0 200 OK\r\n")


def test_a_body_with_both_transfer_encoding_and_content_length_is_a_400(
    uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine
) -> None:
    """A body with both Transfer-Encoding and Content-Length is a 400.

    RFC 9112 6.1 asks for that. uWSGI reads the Content-Length and would store the event. A
    proxy in front might read the chunks instead.
    """
    before = snapshot(uwsgi_server, http, db)
    body = b'{"title": "smuggled"}'
    head = (
        f"POST /entries HTTP/1.1\r\nHost: {HOST}:{uwsgi_server.port}\r\n"
        f"Authorization: Bearer {uwsgi_server.token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection((HOST, uwsgi_server.port), timeout=30) as sock:
        sock.sendall(head.encode("latin-1") + body)
        received = b""
        while data := sock.recv(65536):
            received += data
    status_line, _, rest = received.partition(b"\r\n")
    assert status_line.split()[1] == b"400", received
    assert b"both Transfer-Encoding and Content-Length" in rest
    assert snapshot(uwsgi_server, http, db) == before


def _post_short_body(server: UwsgiServer, *, close_write: bool) -> tuple[int, dict[str, Any]]:
    """POST a body of 10 bytes under ``Content-Length: 100``.

    The socket is kept open, and the server waits for the rest, up to its socket timeout. With
    ``close_write``, its writing half is closed instead.
    """
    head = (
        f"POST /entries HTTP/1.1\r\nHost: {HOST}:{server.port}\r\n"
        f"Authorization: Bearer {server.token}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection((HOST, server.port), timeout=30) as sock:
        sock.sendall(head.encode("latin-1") + b'{"title":')
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    raw = b"".join(chunks)
    status_line, _, rest = raw.partition(b"\r\n")
    _, _, body = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(body)


@pytest.mark.parametrize("close_write", [False, True], ids=["client-waits", "client-closes"])
def test_a_body_shorter_than_its_content_length_is_a_400(
    uwsgi_server: UwsgiServer, http: httpx.Client, db: Engine, close_write: bool
) -> None:
    before = snapshot(uwsgi_server, http, db)
    status, body = _post_short_body(uwsgi_server, close_write=close_write)
    # The app read the body short and said so, when uWSGI's socket timeout (4 s) ended the
    # read. A worker stuck on the read would answer nothing: the client gives up after 30 s,
    # and harakiri kills the worker after 60 s.
    assert status == 400, body
    assert body["error"] == "bad_request" and "Content-Length" in body["message"], body
    assert "HARAKIRI" not in uwsgi_server.log()
    assert snapshot(uwsgi_server, http, db) == before

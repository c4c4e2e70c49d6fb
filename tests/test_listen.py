"""How the shipped uWSGI (``uwsgi.ini``, what ``simplefeed serve`` runs) answers request heads
over the limits and slow clients (issues #11 and #15). A real uWSGI on loopback; every test
bounded in time. Slow clients each hold one of a worker's threads, not the worker
(docs/explanation/decisions/serving-model.md); tests/test_nginx.py shows the shipped nginx block
holding 1,000 of them.

"Delay" is measured as the issue words it: other clients' ``GET /recent`` while the slow clients
are at it, against the same probe just before, on the same (shared, busy) machine.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from bench.servers import HOST, UwsgiServer
from tests.conftest import shipped_with_entries

pytestmark = pytest.mark.e2e

PROCESSES = 4  # as shipped


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UwsgiServer]:
    with shipped_with_entries(tmp_path_factory.mktemp("listen"), PROCESSES) as s:
        yield s


def answer_recent(base_url: str, probes: int = 3) -> None:
    """Ask for /recent a few times, each by a new client on a new connection, and get 200s.

    A test calls it while something holds the server until the test lets go. An answer then
    shows that the holder does not stand in the way. A request that the holder blocks gets no
    answer until its 30 s timeout, which fails the test.
    """
    for _ in range(probes):
        assert httpx.get(base_url + "/recent", timeout=30).status_code == 200


class Tricklers:
    """``count`` connections, each sending ``first`` and then ``each`` every ``interval`` seconds
    until stopped (one thread drives them all)."""

    def __init__(
        self, port: int, count: int, first: bytes, each: bytes, interval: float = 0.3
    ) -> None:
        self.port, self.count, self.first, self.each = port, count, first, each
        self.interval = interval
        self.stop = threading.Event()
        self.sockets: list[socket.socket] = []
        self.closed_early = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Tricklers:
        for _ in range(self.count):
            sock = socket.create_connection((HOST, self.port), timeout=10)
            sock.sendall(self.first)
            sock.setblocking(False)
            self.sockets.append(sock)
        self.thread.start()
        time.sleep(0.5)  # let them reach whatever they occupy
        return self

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            for sock in list(self.sockets):
                try:
                    sock.send(self.each)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    self.closed_early += 1
                    self.sockets.remove(sock)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        for sock in self.sockets:
            sock.close()


SLOW_HEAD = b"GET /recent HTTP/1.1\r\nHost: x\r\n"


def slow_body_head(token: str) -> bytes:
    """A publish whose body will come slowly; with a valid token, so the app waits for it."""
    return (
        "POST /entries HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: 100000\r\n\r\n["
    ).encode()


def raw(server: UwsgiServer, data: bytes) -> bytes:
    with socket.create_connection((HOST, server.port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    "request_bytes,status,error",
    [
        (b"GET /recent?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n", 414, "uri_too_long"),
        (
            b"GET /recent HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n",
            431,
            "request_header_fields_too_large",
        ),
        (
            b"GET /recent HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-Many-%d: aaaaaaaaaa\r\n" % i for i in range(300)),
            431,
            "request_header_fields_too_large",
        ),
    ],
    ids=["long target", "one long field", "many fields"],
)
def test_request_heads_over_the_limits(
    server: UwsgiServer, request_bytes: bytes, status: int, error: str
) -> None:
    answer = raw(server, request_bytes + b"Connection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), answer[:300]
    assert f'"error": "{error}"'.encode() in body, body


def test_a_head_over_64_kib_is_dropped_and_the_service_goes_on(server: UwsgiServer) -> None:
    """The router's own limit (documented): no answer, the connection is closed."""
    answer = raw(server, b"GET /recent HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
    assert answer == b""
    assert httpx.get(server.url("/recent"), timeout=10).status_code == 200


SLOW_CLIENTS = 10  # issue #11: "10 connections trickling headers or bodies"


@pytest.mark.parametrize("what", ["heads", "bodies"])
def test_slow_clients_do_not_delay_other_clients(server: UwsgiServer, what: str) -> None:
    """Other clients get /recent while 10 connections trickle a head or a publish's body.

    The slow clients send a few bytes at a time, so they are never idle for the socket timeout.
    They keep at it until the test stops them, so a probe they blocked would get no answer.
    With one thread per worker every probe waited for them.
    """
    if what == "heads":
        first, each = SLOW_HEAD, b"X-Slow: 1\r\n"
    else:
        first, each = slow_body_head(server.token), b" "
    with Tricklers(server.port, SLOW_CLIENTS, first, each) as slow:
        answer_recent(server.base_url)
        still_open = len(slow.sockets)
    assert still_open == SLOW_CLIENTS, "the slow clients must still be at it while we probe"

"""The serving model (issues #11 and #15): kept-alive connections with pooled clients, idle
connections bounded, and reads answered while producers wait for a held SQLite write lock. A
real uWSGI with the shipped ``uwsgi.ini`` on loopback; every test bounded in count and time.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import select
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.servers import HOST, UwsgiServer
from tests.conftest import shipped_with_entries
from tests.test_listen import answer_recent

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UwsgiServer]:
    with shipped_with_entries(tmp_path_factory.mktemp("serving"), 4) as s:
        yield s


def small_node(workdir: Path) -> UwsgiServer:
    """The shipped uWSGI with 2 workers of 8 threads (16 for the node), on a SQLite database in
    ``workdir``: small enough for a test to take every thread."""
    return UwsgiServer.scratch(
        workdir,
        processes=2,
        extra_env={"SIMPLEFEED_THREADS": "8"},
    )


class Connects:
    """Counts the TCP connections an httpx client opens (httpcore's trace events)."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            with self.lock:
                self.count += 1


def test_a_pool_of_kept_alive_connections_serves_1000_requests_without_a_reset(
    server: UwsgiServer,
) -> None:
    """1,000 requests from 8 threads over one httpx pool of 8 connections: reads, 304s,
    archived pages, publishes, and refusals that leave a body unread (those say
    ``Connection: close``, so the pool opens a new connection instead of sending into one uWSGI
    closes; without it this test sees resets). Every request is answered, and the pool reuses
    its connections."""
    auth = {"Authorization": f"Bearer {server.token}"}
    etag = httpx.get(server.url("/recent")).headers["etag"]
    connects = Connects()
    limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)

    def one(i: int, client: httpx.Client) -> tuple[int, int]:
        trace = {"trace": connects}
        kind = i % 10
        if kind == 0:
            r = client.post(
                server.url("/entries"), json={"title": f"p{i}"}, headers=auth, extensions=trace
            )
            return r.status_code, 201
        if kind == 1:  # refused before its body is read: 401
            r = client.post(server.url("/entries"), json={"title": "x"}, extensions=trace)
            return r.status_code, 401
        if kind == 2:  # refused before its body is read: 415
            r = client.post(
                server.url("/entries"),
                content=b"x" * 5000,
                headers={**auth, "Content-Type": "text/plain"},
                extensions=trace,
            )
            return r.status_code, 415
        if kind == 3:
            return client.get(server.url("/pages/1"), extensions=trace).status_code, 200
        if kind == 4:
            r = client.get(server.url("/nowhere"), extensions=trace)
            return r.status_code, 404
        r = client.get(server.url("/recent"), extensions=trace)
        assert r.status_code == 200
        r = client.get(server.url("/recent"), headers={"If-None-Match": etag}, extensions=trace)
        return r.status_code, r.status_code if r.status_code in (200, 304) else 304

    with httpx.Client(limits=limits, timeout=30) as client, ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: one(i, client), range(1000)))
    wrong = [(got, want) for got, want in results if got != want]
    assert wrong == []
    # 200 refusals close their connection; everything else reuses the pool's 8.
    assert connects.count <= 8 + 200, connects.count
    assert server.problems() == []


def _idle_connection(server: UwsgiServer) -> socket.socket:
    """A connection that has had one response and now says nothing (a pooled client's)."""
    sock = socket.create_connection((HOST, server.port), timeout=10)
    sock.sendall(b"GET /recent HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200")
    return sock


def test_idle_kept_alive_connections_do_not_stop_new_clients(server: UwsgiServer) -> None:
    """A new client is answered while 100 idle kept-alive connections stay open.

    That is far more connections than processes. A server that gave each connection a process
    would not even answer the idle ones' first requests. The server closes each idle connection
    after its socket timeout (4 s without a byte), so idle connections cannot pile up.
    """
    idle = [_idle_connection(server) for _ in range(100)]
    try:
        answer_recent(server.base_url)
        deadline = time.monotonic() + 20
        closed = 0
        for sock in idle:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            if sock.recv(1) == b"":  # EOF: uWSGI closed it
                closed += 1
        assert closed == len(idle)
    finally:
        for sock in idle:
            sock.close()


def _read_until_closed(sock: socket.socket, head_only: bool) -> tuple[bytes, bytes]:
    """The response on ``sock`` (head, body by its Content-Length), then the server's close:
    an EOF within 3 s of the response's last byte, before the 4 s after which uWSGI closes an
    idle connection anyway (``socket-timeout``)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before the end of the head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length: *(\d+)\r?$", head)
    expected = 0 if head_only or length is None else int(length.group(1))
    while len(body) < expected:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(body)} of {expected} bytes"
        body += chunk
    sock.settimeout(3.0)
    assert sock.recv(65536) == b"", "more bytes after the response"  # timeout: not closed
    return head, body


@pytest.mark.parametrize(
    "request_head",
    [
        "GET /recent",
        "HEAD /recent",
        "GET /recent\r\nIf-None-Match: {etag}",  # a 304
        "GET /recent\r\nIf-None-Match: {etag}\r\nPrefer: wait=1",  # held 1 s, then a 304
        "GET /pages/1",  # an archived page's file
        "GET /pages/1\r\nAccept-Encoding: gzip",  # its precompressed copy
        "GET /no-such-thing",
        "POST /entries\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json"
        '\r\n\r\n{{"title": "c"}}',
    ],
    ids=["get", "head", "304", "long-poll", "page", "page-gzip", "404", "publish"],
)
@pytest.mark.parametrize("option", ["close", "keep-alive, Close"])
def test_a_client_that_says_connection_close_has_its_connection_closed(
    server: UwsgiServer, request_head: str, option: str
) -> None:
    """RFC 9112 9.6: a server that receives the ``close`` connection option MUST close the
    connection after its response (and SHOULD say ``Connection: close``). uWSGI's
    http11-socket keeps every HTTP/1.1 connection open whatever the client says, so a client
    that reads to the end (urllib's requests say ``close``) waited 4 s for each answer, and a
    worker's thread was held as long (simplefeed/runtime/wsgi.py, ``honour_close``)."""
    etag = httpx.get(server.url("/recent")).headers["etag"]
    line, _, rest = request_head.format(etag=etag, token=server.token).partition("\r\n")
    fields, _, body = rest.partition("\r\n\r\n")
    request = f"{line} HTTP/1.1\r\nHost: x\r\nConnection: {option}\r\n"
    if body:
        fields += f"\r\nContent-Length: {len(body)}"
    request += (fields + "\r\n" if fields else "") + "\r\n" + body
    with socket.create_connection((HOST, server.port), timeout=10) as sock:
        sock.sendall(request.encode())
        head, got = _read_until_closed(sock, head_only=line.startswith("HEAD"))
    status = int(head.split(b" ")[1])
    assert status == {"POST": 201, "HEAD": 200}.get(line.split()[0], status)
    assert status in (200, 201, 304, 404), head
    assert re.findall(rb"(?im)^connection: *(.*?)\r?$", head) == [b"close"], head
    if status == 304 or line.startswith("HEAD"):
        assert got == b""
    else:
        assert got, head
    assert server.problems() == []


def test_reads_are_answered_while_producers_wait_for_a_held_write_lock(
    tmp_path: Path,
) -> None:
    """/recent is answered while 24 producers wait for a write lock that another process holds.

    The uWSGI has 2 workers of 8 threads each. Publishes take at most half of a worker's
    threads, so at most 8 wait. The others get 503 and Retry-After at once. Once the lock is
    released the waiting ones are stored. Without the bound the producers take all 16 threads,
    and /recent waits for the lock. The test holds the lock until /recent has answered, so a
    read that waited for it would time out.
    """
    db = tmp_path / "simplefeed.sqlite3"
    with small_node(tmp_path) as srv:
        auth = {"Authorization": f"Bearer {srv.token}"}
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        released = False
        try:
            with ThreadPoolExecutor(24) as pool:
                answers = [
                    pool.submit(
                        httpx.post,
                        srv.url("/entries"),
                        json={"title": f"waiting {i}"},
                        headers=auth,
                        timeout=60,
                    )
                    for i in range(24)
                ]
                # The producers are in: at most 8 wait for the lock, so 16 have their 503.
                deadline = time.monotonic() + 60
                while sum(a.done() for a in answers) < 16:
                    assert time.monotonic() < deadline, [a.done() for a in answers]
                    time.sleep(0.05)
                answer_recent(srv.base_url)
                holder.execute("ROLLBACK")
                released = True
                replies = [a.result() for a in answers]
        finally:
            if not released:
                holder.execute("ROLLBACK")
            holder.close()
        statuses = sorted(r.status_code for r in replies)
        assert set(statuses) <= {201, 503}, statuses
        assert all(r.headers.get("retry-after") for r in replies if r.status_code == 503)
        # Said as what it is: back-pressure, not a database down (which /healthz denies).
        busy = "the server is busy with other publishes; retry later"
        assert [r.json()["message"] for r in replies if r.status_code == 503] == [busy] * (
            statuses.count(503)
        )
        stored = httpx.get(srv.url("/recent")).text.count("<entry>")
        assert stored == statuses.count(201) > 0
        # The 503s are logged as errors (a fault an operator should see); nothing else is.
        assert [p for p in srv.problems() if '"status":503' not in p] == []


def _server_socket_option(server: UwsgiServer, client: socket.socket, level: int, name: int) -> int:
    """A socket option of the server's end of ``client``'s connection, read from the uWSGI
    process that holds it (pidfd_getfd: a copy of its descriptor; the workers are this test's
    descendants, so the kernel allows it)."""
    import ctypes
    import os

    local = client.getsockname()[1]
    inode = ""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        here, there = (int(a.split(":")[1], 16) for a in fields[1:3])
        if here == server.port and there == local:
            inode = fields[9]
    assert inode, "the server's end of the connection is not in /proc/net/tcp"
    assert server.process is not None
    pids = [server.process.pid]
    pids += [int(p) for p in Path(f"/proc/{pids[0]}/task/{pids[0]}/children").read_text().split()]
    libc = ctypes.CDLL(None, use_errno=True)
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) != f"socket:[{inode}]":
                    continue
                pidfd = os.pidfd_open(pid)
                try:
                    copy = libc.syscall(438, pidfd, int(fd.name), 0)  # pidfd_getfd
                    if copy < 0:
                        pytest.skip(f"pidfd_getfd refused: {os.strerror(ctypes.get_errno())}")
                    with socket.socket(fileno=copy) as sock:
                        return sock.getsockopt(level, name)
                finally:
                    os.close(pidfd)
    raise AssertionError(f"no uWSGI process holds socket:[{inode}]")


def test_kept_alive_responses_are_not_held_back_by_nagle(server: UwsgiServer) -> None:
    """uWSGI writes a response's head and its body in two writes (an archived page goes by
    sendfile after its head). On a kept-alive connection Nagle's algorithm holds the second
    write until the client acknowledges the first, and a client delays that acknowledgement
    (40 ms on Linux): every request a pooled client makes one after the other then waits about
    40 ms. A consumer's walk back went from 45 ms to 2 ms a page when uwsgi.ini turned Nagle
    off (``tcp-nodelay``; docs/explanation/decisions/serving-model.md). So the server's end of a
    kept-alive connection must have TCP_NODELAY set."""
    with socket.create_connection((HOST, server.port), timeout=10) as sock:
        sock.sendall(b"GET /pages/1 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        nodelay = _server_socket_option(server, sock, socket.IPPROTO_TCP, socket.TCP_NODELAY)
    assert nodelay != 0


def test_long_polls_never_take_every_thread_of_the_node(tmp_path: Path) -> None:
    """Two workers of 8 threads (16 for the node) and 18 consumers long-polling at once.

    At most 14 (seven eighths of the node's threads) wait. The others are answered at once as
    without ``Prefer`` (no ``Preference-Applied``). A producer's publish is then answered while
    the waits still hold, and it wakes every waiting one with a 200. Without the bound the waits
    take every thread. The publish then queues in the kernel until a wait ends by its timeout,
    and that wait answers 304, which the count of 200s catches.
    """
    with small_node(tmp_path) as s:
        auth = {"Authorization": f"Bearer {s.token}"}
        assert httpx.post(s.url("/entries"), json={"title": "a"}, headers=auth).status_code == 201
        etag = httpx.get(s.url("/recent"), headers={"Accept-Encoding": "identity"}).headers["etag"]
        request = (
            f"GET /recent HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\nPrefer: wait=20\r\n\r\n"
        ).encode()
        answers: list[bytes] = []
        lock = threading.Lock()

        def long_poll() -> None:
            # The answer's head and body, then the connection closed by this side (a kept-alive
            # connection left open would hold a thread until the socket timeout).
            with socket.create_connection((HOST, s.port), timeout=30) as sock:
                sock.sendall(request)
                data = b""
                while b"\r\n\r\n" not in data:
                    data += sock.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: (\d+)", head)
                while length is not None and len(body) < int(length[1]):
                    body += sock.recv(65536)
            with lock:
                answers.append(head)

        polls = [threading.Thread(target=long_poll) for _ in range(18)]
        for t in polls:
            t.start()
        # Every long-poll has its answer or waits: the node counts the waiting ones.
        deadline = time.monotonic() + 60
        while _gauge(s.url("/metrics"), "simplefeed_long_polls_waiting") + len(answers) < 18:
            assert time.monotonic() < deadline, answers
            time.sleep(0.05)
        declined = [a for a in answers if a.startswith(b"HTTP/1.1 304")]
        assert len(declined) >= 4, answers
        assert not any(b"preference-applied" in a.lower() for a in declined)
        r = httpx.post(s.url("/entries"), json={"title": "b"}, headers=auth, timeout=30)
        assert r.status_code == 201
        for t in polls:
            t.join(timeout=30)
        woken = [a for a in answers if a.startswith(b"HTTP/1.1 200")]
        assert len(woken) + len(declined) == 18
        assert all(b"preference-applied: wait=20" in a.lower() for a in woken)
        assert 1 <= len(woken) <= 14
        assert b"simplefeed_waits_declined_total" in httpx.get(s.url("/metrics")).content


def _gauge(metrics_url: str, name: str) -> float:
    """The value of an unlabelled gauge in the service's /metrics."""
    for line in httpx.get(metrics_url, timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is not in {metrics_url}")


def _listening_inode(port: int) -> str:
    """The inode of the socket listening on 127.0.0.1:``port`` (/proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":  # LISTEN
            return fields[9]
    raise AssertionError(f"nothing listens on port {port}")


def _queues_watching(pid: int, fds: set[int]) -> list[int]:
    """The epoll flags with which each event queue of process ``pid`` watches one of ``fds``."""
    flags = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") != "anon_inode:[eventpoll]":
                continue
            with open(f"/proc/{pid}/fdinfo/{name}") as info:
                watched = [line.split() for line in info if line.startswith("tfd:")]
        except OSError:
            continue
        flags += [int(w[3], 16) for w in watched if int(w[1]) in fds]
    return flags


def test_a_new_connection_wakes_one_waiting_thread_not_all(server: UwsgiServer) -> None:
    """Each uWSGI thread waits for connections in its own epoll queue, and on http11-socket
    uWSGI takes no lock around accept: every new connection woke every idle thread of the
    node (a client opening a connection per request got 0.09 of the rate of one keeping it).
    Each worker sets EPOLLEXCLUSIVE on its threads' queues once they wait."""
    assert server.process is not None
    workers = server.wait_all_workers()
    listening = {
        int(fd)
        for fd in os.listdir(f"/proc/{server.process.pid}/fd")
        if os.readlink(f"/proc/{server.process.pid}/fd/{fd}")
        == f"socket:[{_listening_inode(server.port)}]"
    }
    threads = {pid: len(os.listdir(f"/proc/{pid}/task")) for pid in workers}
    deadline = time.monotonic() + 30
    while True:
        flags = {pid: _queues_watching(pid, listening) for pid in workers}
        done = all(
            len(f) >= 200 and all(x & select.EPOLLEXCLUSIVE for x in f) for f in flags.values()
        )
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert done, {pid: (threads[pid], sorted(set(f))) for pid, f in flags.items()}
    r = httpx.get(server.url("/recent"), headers={"Connection": "close"})
    assert r.status_code == 200 and r.headers["connection"] == "close"


def _workers_of_kept_connections(server: UwsgiServer, connections: int) -> set[int]:
    """The workers (pids) that serve ``connections`` kept-alive connections open at once.

    Each connection holds its thread from its first request to its close. The access lines say
    which worker answered each request id.
    """
    ids = [f"round-{time.monotonic_ns()}-{i}" for i in range(connections)]
    with contextlib.ExitStack() as stack:
        for rid in ids:
            conn = http.client.HTTPConnection(HOST, server.port, timeout=10)
            stack.callback(conn.close)
            conn.request("GET", "/healthz", headers={"X-Request-Id": rid})
            response = conn.getresponse()
            response.read()
            assert response.status == 200
    deadline = time.monotonic() + 10
    while True:  # The access lines are written within a tenth of a second.
        pids = {
            line["request_id"]: line["pid"]
            for line in map(json.loads, re.findall(r"(?m)^\{.*\}$", server.log()))
            if line.get("request_id") in ids
        }
        if len(pids) == connections or time.monotonic() > deadline:
            return set(pids.values())
        time.sleep(0.05)


def test_kept_alive_connections_go_round_the_workers(server: UwsgiServer) -> None:
    """A new connection wakes the first waiting thread in the listening socket's list. Each
    worker once put all its threads there at once. So the first worker took every kept-alive
    connection while one of its 200 threads was idle, and four processes answered no faster
    than one. The workers now take turns, so connections go round them."""
    workers = server.wait_all_workers()
    deadline = time.monotonic() + 60
    while True:  # The workers take turns as they start.
        served = _workers_of_kept_connections(server, 2 * len(workers))
        if served == workers or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert served == workers

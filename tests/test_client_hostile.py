"""The consumer holds against a hostile server, over real sockets on 127.0.0.1.

Nothing a server sends makes the consumer hang or eat memory. Nothing makes it follow the
server elsewhere, print a forged line, or end with a traceback.

The server is a few lines of socket code of the test's own (:class:`Hostile`). So it can do
what no WSGI server would. It declares or sends a 2 GB body. It sends a 2 MB gzip bomb, which
inflates to 2 GB. It drips its answer one byte every 5 s, sends 400-digit header values, and
redirects to another origin.

``simplefeed consume`` runs as a process of its own, under a wrapper that reports its peak
resident set size. Each bound is checked against the exit code, the message and that peak.
**The consumer stays under 300 MB of RSS** with the default bounds of 64 MiB per response.
Without the bounds, it grows to 5.6 GB on the 2 GB body and 4.2 GB on the bomb. An
address-space limit of 2 GB on the child keeps a regression from taking the machine with it.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.servers import HOST, clean_environ, simplefeed_command
from simplefeed.client import Checkpoint, Consumer, RetryPolicy, StateError
from simplefeed.client.state import StateFile

RSS_LIMIT_KIB = 300 * 1024
GIB = 1024**3

Send = Callable[[socket.socket], None]


def atom(base: str, entries: list[tuple[int, str]], *, extra_head: str = "") -> bytes:
    """Return a one-page feed of ``(seq, title)`` entries.

    It is the recent document, and it stands for itself.
    """
    items = "".join(
        f"<entry><id>urn:h:{seq}</id><title>{title}</title>"
        f"<updated>2027-01-01T00:00:00Z</updated><sf:seq>{seq}</sf:seq></entry>"
        for seq, title in reversed(entries)
    )
    return (
        "<?xml version='1.0' encoding='UTF-8'?>\n"
        '<feed xmlns="http://www.w3.org/2005/Atom" xmlns:sf="https://simplefeed.dev/ns/1.0">'
        f"<id>urn:h</id><title>h</title><updated>2027-01-01T00:00:00Z</updated>{extra_head}"
        f'<link rel="self" href="{base}/recent"/>{items}</feed>'
    ).encode()


def head(status: str, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    return "\r\n".join(lines).encode()


def answer(body: bytes, status: str = "200 OK", **headers: str) -> Send:
    def send(sock: socket.socket) -> None:
        fields = {"Content-Type": "application/atom+xml", "Content-Length": str(len(body))}
        fields.update({k.replace("_", "-"): v for k, v in headers.items()})
        sock.sendall(head(status, fields) + body)

    return send


def endless(sock: socket.socket) -> None:
    """Send 2 GB of body without a Content-Length, so only the connection's end would end it."""
    sock.sendall(head("200 OK", {"Content-Type": "application/atom+xml", "Connection": "close"}))
    chunk = b"<" * (1024 * 1024)
    for _ in range(2048):
        sock.sendall(chunk)


def declared_huge(sock: socket.socket) -> None:
    sock.sendall(head("200 OK", {"Content-Length": str(2 * GIB)}) + b"<feed")


def drip(data: bytes) -> Send:
    def send(sock: socket.socket) -> None:
        for i in range(len(data)):
            sock.sendall(data[i : i + 1])
            time.sleep(5)

    return send


@dataclass
class Hostile:
    """A server on 127.0.0.1 that answers each path with its scripted behaviour."""

    routes: dict[str, Send]
    port: int = 0
    #: The head of every request received, in order.
    requests: list[bytes] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"


@pytest.fixture
def hostile() -> Iterator[Callable[[dict[str, Send]], Hostile]]:
    servers: list[socketserver.ThreadingTCPServer] = []

    def start(routes: dict[str, Send]) -> Hostile:
        server_state = Hostile(routes)

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                data = b""
                while b"\r\n\r\n" not in data:
                    more = self.request.recv(65536)
                    if not more:
                        return
                    data += more
                server_state.requests.append(data)
                path = data.split(b" ", 2)[1].decode()
                send = server_state.routes.get(path)
                try:
                    if send is None:
                        self.request.sendall(head("404 Not Found", {"Content-Length": "0"}))
                    else:
                        send(self.request)
                except OSError:
                    pass  # The consumer hung up, as it should.

        socketserver.ThreadingTCPServer.daemon_threads = True
        socketserver.ThreadingTCPServer.allow_reuse_address = True
        server = socketserver.ThreadingTCPServer((HOST, 0), Handler)
        servers.append(server)
        server_state.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server_state

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    rss_kib: int
    seconds: float


#: Runs the command, then prints its peak RSS in KiB as the last line on stderr.
WRAPPER = (
    "import resource, subprocess, sys\n"
    "def limit():\n"
    f"    resource.setrlimit(resource.RLIMIT_AS, ({2 * GIB}, {2 * GIB}))\n"
    "code = subprocess.call(sys.argv[1:], preexec_fn=limit)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def consume(url: str, state: Path, *args: str, timeout: float = 120) -> Run:
    started = time.monotonic()
    command = [sys.executable, "-c", WRAPPER, *simplefeed_command(), "consume", url]
    result = subprocess.run(
        [*command, "--state", str(state), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_environ(),
        check=False,
    )
    *stderr, rss = result.stderr.rstrip("\n").split("\n")
    return Run(
        result.returncode, result.stdout, "\n".join(stderr), int(rss), time.monotonic() - started
    )


def assert_no_traceback(run: Run) -> None:
    assert "Traceback" not in run.stderr, run.stderr
    assert run.rss_kib < RSS_LIMIT_KIB, f"peak RSS {run.rss_kib} KiB"


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """Return about 2 MB of gzip that inflates to 2 GB of zeros.

    It is a gzip header, then 128 times the deflate blocks of 16 MiB of zeros. After a full
    flush, the compressor starts afresh and byte-aligned. So each 16 MiB gives the same bytes,
    and the blocks are compressed once. Compressing all 2 GB would take 11-16 s of a test
    worker. A final empty block follows, then the trailer with the CRC-32 and length of the
    2 GB.
    """
    zeros = bytes(16 * 1024 * 1024)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)  # Raw deflate.
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH) == block
    crc = 0
    for _ in range(128):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # Deflate, no name, no time.
    final_empty_block = b"\x03\x00"
    data = header + block * 128 + final_empty_block + struct.pack("<II", crc, 2**31)
    assert 1_000_000 < len(data) < 3_000_000
    # It is gzip, and it inflates to zeros. This checks the first 64 MiB.
    inflated = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, 64 * 1024 * 1024)
    assert inflated == bytes(64 * 1024 * 1024)
    return data


# -- size ----------------------------------------------------------------------------------


def test_a_2_gb_body_is_given_up_at_the_bound(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    server = hostile({"/recent": endless, "/declared": declared_huge})
    run = consume(f"{server.base}/recent", tmp_path / "s.sqlite3", "--retries", "0")
    assert run.code == 5, run.stderr
    assert "response too large" in run.stderr and str(64 * 1024 * 1024) in run.stderr
    assert_no_traceback(run)
    run = consume(f"{server.base}/declared", tmp_path / "s.sqlite3", "--retries", "0")
    assert run.code == 5 and "Content-Length over the limit" in run.stderr, run.stderr
    assert_no_traceback(run)


def test_a_gzip_bomb_is_given_up_at_the_bound(
    hostile: Callable[..., Hostile], tmp_path: Path, bomb: bytes
) -> None:
    server = hostile({"/recent": answer(bomb, Content_Encoding="gzip")})
    run = consume(f"{server.base}/recent", tmp_path / "s.sqlite3", "--retries", "0")
    assert run.code == 5, run.stderr
    assert "the decompressed body over the limit" in run.stderr
    assert_no_traceback(run)
    # A small bound is kept as well. The bomb's first inflated chunk already passes it.
    run = consume(
        f"{server.base}/recent", tmp_path / "t.sqlite3", "--retries", "0", "--max-size", "100000"
    )
    assert run.code == 5 and "100000" in run.stderr


def test_a_gzipped_feed_within_the_bound_is_read(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    server = hostile({})
    server.routes["/recent"] = answer(
        gzip.compress(atom(server.base, [(1, "one"), (2, "two")])), Content_Encoding="gzip"
    )
    run = consume(f"{server.base}/recent", tmp_path / "s.sqlite3")
    assert run.code == 0, run.stderr
    assert run.stdout == "1\turn:h:1\tone\n2\turn:h:2\ttwo\n"


@pytest.mark.parametrize(
    ("coding", "damage", "said"),
    [
        ("zstd", False, "unknown content coding 'zstd'"),  # The consumer did not ask for it.
        ("gzip", True, "not valid gzip: the data ends before the stream does"),
    ],
)
def test_a_body_in_a_coding_not_asked_for_or_cut_short_is_an_error_naming_it(
    hostile: Callable[..., Hostile], tmp_path: Path, coding: str, damage: bool, said: str
) -> None:
    server = hostile({})
    body = gzip.compress(atom(server.base, [(1, "one")]))
    server.routes["/recent"] = answer(body[:-8] if damage else body, Content_Encoding=coding)
    run = consume(f"{server.base}/recent", tmp_path / "s.sqlite3", "--retries", "0")
    assert run.code == 5 and said in run.stderr, run.stderr
    assert_no_traceback(run)


def test_codings_stacked_past_two_are_refused_unread(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """Codings stacked past two are refused before the body is read.

    Each coding is a stage of the decoder, and each stage holds up to the bound. So 19,000 gzip
    layers, a 955 KB body, would take the consumer to 716 MB. And 2,000 layers would run past
    --max-time.
    """
    server = hostile({})
    document = atom(server.base, [(1, "one")])
    for layers in (2, 3, 2000):
        body = document
        for _ in range(layers):
            body = gzip.compress(body, compresslevel=1)
        server.routes[f"/{layers}"] = answer(body, Content_Encoding=", ".join(["gzip"] * layers))
    run = consume(f"{server.base}/2", tmp_path / "s.sqlite3")
    assert run.code == 0 and run.stdout == "1\turn:h:1\tone\n", run.stderr
    for layers in (3, 2000):
        run = consume(f"{server.base}/{layers}", tmp_path / f"{layers}.sqlite3", "--retries", "0")
        assert run.code == 5, run.stderr
        assert f"{layers} content codings applied one after another (at most 2)" in run.stderr
        assert_no_traceback(run)


# -- time ----------------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["body", "headers"])
def test_a_server_dripping_a_byte_every_5_s_is_cut_off_at_max_time(
    hostile: Callable[..., Hostile], tmp_path: Path, what: str
) -> None:
    server = hostile({})
    body = atom(server.base, [(1, "one")])
    if what == "body":
        server.routes["/recent"] = lambda sock: (
            sock.sendall(head("200 OK", {"Content-Length": str(len(body))})),
            drip(body)(sock),
        )[-1]
    else:
        server.routes["/recent"] = drip(head("200 OK", {"Content-Length": str(len(body))}) + body)
    run = consume(
        f"{server.base}/recent", tmp_path / "s.sqlite3", "--retries", "0", "--max-time", "3"
    )
    # Cut by --max-time, which says so. The whole drip would outlast consume()'s timeout.
    assert run.code == 5, run.stderr
    assert "took over 3 s" in run.stderr
    assert_no_traceback(run)


# -- headers and numbers that overflow -----------------------------------------------------

HUGE = "9" * 400


def test_overflowing_header_values_are_taken_at_their_bound(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    server = hostile({})
    body = atom(server.base, [(1, "one")])
    server.routes["/recent"] = answer(body, Cache_Control=f"max-age={HUGE}", Age=HUGE)
    run = consume(f"{server.base}/recent", tmp_path / "s.sqlite3")
    assert run.code == 0, run.stderr
    assert run.stdout == "1\turn:h:1\tone\n"
    assert_no_traceback(run)


def test_an_overflowing_retry_after_waits_the_longest_wait(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    server = hostile({"/recent": answer(b"", "503 Service Unavailable", Retry_After=HUGE)})
    waits: list[float] = []
    with (
        Consumer(
            f"{server.base}/recent",
            tmp_path / "s.sqlite3",
            retry=RetryPolicy(attempts=3, max_wait=7.0),
            sleep=waits.append,
        ) as consumer,
        pytest.raises(Exception, match="gave up after 3 attempts"),
    ):
        list(consumer.entries())
    assert waits == [7.0, 7.0]


def test_a_sequence_number_of_2_to_the_70_is_a_protocol_error(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    server = hostile({})
    body = atom(server.base, [(2**70, "big")])
    server.routes["/recent"] = answer(body)
    run = consume(f"{server.base}/recent", tmp_path / "s.sqlite3")
    assert run.code == 4, run.stderr
    assert "sequence number" in run.stderr and "checkpoint untouched" in run.stderr
    assert_no_traceback(run)


# -- redirects -----------------------------------------------------------------------------


def test_redirects_stay_within_the_origin_unless_another_is_allowed(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    other = hostile({})
    other.routes["/recent"] = answer(atom(other.base, [(1, "elsewhere")]))
    server = hostile({})
    server.routes["/recent"] = answer(atom(server.base, [(1, "here")]))
    server.routes["/moved"] = answer(b"", "301 Moved Permanently", Location="/recent")
    server.routes["/away"] = answer(b"", "302 Found", Location=f"{other.base}/recent")
    run = consume(f"{server.base}/moved", tmp_path / "a.sqlite3")
    assert run.code == 0 and run.stdout == "1\turn:h:1\there\n", run.stderr
    run = consume(f"{server.base}/away", tmp_path / "b.sqlite3")
    assert run.code == 5, run.stderr
    # The message names the flag that allows it as the command line spells it. The library's
    # name "allow_redirect_origins" would send a newcomer looking for an option of that name.
    assert (
        f"redirect to another origin refused: {other.base}/recent (see --allow-redirect-origin)"
        in run.stderr
    )
    assert "allow_redirect_origins" not in run.stderr
    assert run.stdout == ""
    run = consume(
        f"{server.base}/away", tmp_path / "c.sqlite3", "--allow-redirect-origin", other.base
    )
    assert run.code == 0 and run.stdout == "1\turn:h:1\telsewhere\n", run.stderr
    # A loop within the origin says so, not only "unexpected HTTP status 302".
    server.routes["/r1"] = answer(b"", "302 Found", Location="/r2")
    server.routes["/r2"] = answer(b"", "302 Found", Location="/r1")
    run = consume(f"{server.base}/r1", tmp_path / "d.sqlite3", "--retries", "0")
    assert run.code == 5, run.stderr
    assert f"302 (over 5 redirects in a row, the last to {server.base}/r1)" in run.stderr


def test_links_stay_within_the_origin_unless_another_is_allowed(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """Links stay within the origin unless another origin is allowed.

    A page's prev-archive link to another origin is refused before any request. Otherwise a
    hostile feed could make the consumer fetch whatever it can reach.
    """
    other = hostile({})
    other.routes["/pages/1"] = answer(atom(other.base, [(1, "elsewhere")]))
    server = hostile({})
    link = f'<link rel="prev-archive" href="{other.base}/pages/1"/>'
    server.routes["/recent"] = answer(atom(server.base, [(2, "here")], extra_head=link))
    run = consume(f"{server.base}/recent", tmp_path / "a.sqlite3")
    assert run.code == 4, run.stderr
    assert run.stderr.startswith(f"simplefeed consume: error: {other.base}/pages/1: not fetched:")
    assert (
        f"a link to another origin than the entry point's ({server.base}/recent;"
        " see --allow-redirect-origin)" in run.stderr
    )
    assert "allow_redirect_origins" not in run.stderr
    assert run.stdout == "" and other.requests == []
    assert_no_traceback(run)
    run = consume(
        f"{server.base}/recent", tmp_path / "b.sqlite3", "--allow-redirect-origin", other.base
    )
    assert other.requests  # Followed. What the page then says is another matter.
    assert "another origin" not in run.stderr


@pytest.mark.parametrize(
    "href", ["http://[::1", "http://127.0.0.1:19110:80/x", "http://xn--a.com/", "http://xn--/"]
)
def test_a_link_to_an_invalid_url_is_a_protocol_error(
    hostile: Callable[..., Hostile], tmp_path: Path, href: str
) -> None:
    """A link to an invalid URL is a protocol error.

    It must not end the consumer as an internal error (exit 70, InvalidURL).
    """
    server = hostile({})
    link = f'<link rel="prev-archive" href="{href}"/>'
    server.routes["/recent"] = answer(atom(server.base, [(2, "x")], extra_head=link))
    run = consume(f"{server.base}/recent", tmp_path / "a.sqlite3")
    assert run.code == 4 and "a link to an invalid URL" in run.stderr, run.stderr
    assert_no_traceback(run)
    server.routes["/away"] = answer(b"", "302 Found", Location=href)
    run = consume(f"{server.base}/away", tmp_path / "b.sqlite3")
    assert run.code == 5 and "redirect to an invalid URL" in run.stderr, run.stderr
    assert_no_traceback(run)


def test_what_a_server_chose_reaches_the_terminal_as_text(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """What a server chose reaches the terminal as text, escaped.

    This covers C1 controls, U+2028 and bidirectional formatting characters. They may stand in
    a title, or in a URL that an error message quotes. --jsonl, --exec and the messages must
    not pass them raw. They are escaped, and the JSON reads back as the same value.
    """
    sly = "a\u202eb\x85c\u2028d\x9be"
    server = hostile({})
    server.routes["/recent"] = answer(atom(server.base, [(1, sly)]))
    run = consume(f"{server.base}/recent", tmp_path / "a.sqlite3", "--jsonl")
    assert run.code == 0, run.stderr
    assert run.stdout.isascii() and run.stdout.count("\n") == 1, run.stdout
    assert json.loads(run.stdout)["title"] == sly
    away = f"http://203.0.113.9/{sly}"
    link = f'<link rel="prev-archive" href="{away}"/>'
    server.routes["/elsewhere"] = answer(atom(server.base, [(2, "x")], extra_head=link))
    run = consume(f"{server.base}/elsewhere", tmp_path / "b.sqlite3")
    assert run.code == 4, run.stderr
    assert run.stderr.isascii() and run.stderr.count("\n") <= 1, run.stderr
    assert "/a\\u202eb\\x85c\\u2028d\\x9be" in run.stderr
    # The checkpoint's page URL, as `consumer status` prints it.
    via = f'<link rel="via" href="{server.base}/p{sly}"/>'
    server.routes["/status"] = answer(atom(server.base, [(1, "x")], extra_head=via))
    assert consume(f"{server.base}/status", tmp_path / "c.sqlite3").code == 0
    status = subprocess.run(
        [*simplefeed_command(), "consumer", "status", "--state", str(tmp_path / "c.sqlite3")],
        capture_output=True,
        text=True,
        env=clean_environ(),
        check=True,
    )
    assert status.stdout.isascii() and "/pa\\u202eb\\x85c" in status.stdout, status.stdout


def test_an_element_with_thousands_of_attributes_is_refused_unread(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """An element with thousands of attributes is refused before it is read.

    feedparser's time grows with the square of an element's attributes. This 462 KB page takes
    it 15.6 s of CPU. So the page is refused before feedparser reads it. Text with as many '=',
    such as escaped markup in content, is read as usual.
    """
    server = hostile({})
    crowded = " ".join(f'a{i}="x"' for i in range(43_000))
    server.routes["/recent"] = answer(atom(server.base, [(1, "x")], extra_head=f"<x {crowded}/>"))
    server.routes["/equals"] = answer(atom(server.base, [(1, "a=b " * 5_000)]))
    run = consume(f"{server.base}/recent", tmp_path / "a.sqlite3")
    assert run.code == 4, run.stderr
    assert "an element with 43000 attributes (<x>; over 256" in run.stderr
    assert_no_traceback(run)
    run = consume(f"{server.base}/equals", tmp_path / "b.sqlite3")
    assert run.code == 0 and run.stdout.startswith("1\turn:h:1\ta=b a=b"), run.stderr
    # Namespace prefixes. For each element in a namespace it does not know, feedparser looks at
    # each declared prefix. So 40,000 of them in 1.5 MB take 29 s. The same few declared again
    # are fine.
    many = "".join(f'<p{i}:e xmlns:p{i}="urn:x-y:{i}"/>' for i in range(40_000))
    server.routes["/prefixes"] = answer(atom(server.base, [(1, "x")], extra_head=many))
    run = consume(f"{server.base}/prefixes", tmp_path / "c.sqlite3")
    assert run.code == 4 and "40001 namespace prefixes declared (over 32" in run.stderr, run.stderr
    again = '<c0:e xmlns:c0="urn:x-y:again"/>' * 5_000
    server.routes["/again"] = answer(atom(server.base, [(1, "x")], extra_head=again))
    run = consume(f"{server.base}/again", tmp_path / "d.sqlite3")
    assert run.code == 0, run.stderr


def test_only_a_permanent_redirect_of_the_entry_point_is_warned_of(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """Only a permanent redirect of the entry point is warned of.

    Checkpoints are kept under the URL given. So an entry point that moved for good is said
    once, naming where the permanent redirects led. One that redirects for now is not.
    """
    server = hostile({})
    server.routes["/recent"] = answer(atom(server.base, [(1, "here")]))
    server.routes["/moved"] = answer(b"", "308 Permanent Redirect", Location="/old")
    server.routes["/old"] = answer(b"", "301 Moved Permanently", Location="/recent")
    server.routes["/for-now"] = answer(b"", "307 Temporary Redirect", Location="/recent")
    server.routes["/then-for-now"] = answer(b"", "301 Moved Permanently", Location="/for-now")
    run = consume(f"{server.base}/moved", tmp_path / "a.sqlite3")
    assert run.code == 0 and run.stdout == "1\turn:h:1\there\n", run.stderr
    assert run.stderr == (
        f"simplefeed consume: {server.base}/moved redirects permanently to {server.base}/recent;"
        " checkpoints are kept under the URL given, so another spelling of this feed starts"
        f" over: give {server.base}/recent to share them"
    )
    run = consume(f"{server.base}/then-for-now", tmp_path / "b.sqlite3")
    assert run.code == 0 and f"permanently to {server.base}/for-now;" in run.stderr
    run = consume(f"{server.base}/for-now", tmp_path / "c.sqlite3")
    assert run.code == 0 and run.stderr == ""


# -- what a server says --------------------------------------------------------------------


def test_an_error_body_s_message_is_quoted_bounded_and_escaped(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """The message of an error body is quoted, bounded and escaped.

    The consumer says the message of a JSON error body. `unexpected HTTP status 404` alone
    does not tell a mistyped feed name from a page gone. Yet no server can flood the line,
    reach the terminal with a control, or end the consumer with a traceback.
    """
    loud = "line 1\nline 2\x1b[31m\u202e" + "y" * 500
    routes = {
        "/loud": answer(
            json.dumps({"error": "not_found", "message": loud}).encode(),
            "404 Not Found",
            Content_Type="application/json",
        ),
        "/deep": answer(b'{"a":' * 10_000, "403 Forbidden"),
        "/number": answer(b'{"message": 5}', "410 Gone"),
        "/html": answer(b"<html><body>Not Found</body></html>", "404 Not Found"),
    }
    server = hostile(routes)
    run = consume(f"{server.base}/loud", tmp_path / "s.sqlite3")
    assert run.code == 5
    said = "line 1\\nline 2\\x1b[31m\\u202e" + "y" * 181 + "..."
    assert run.stderr == (
        f"simplefeed consume: error: {server.base}/loud: unexpected HTTP status 404; the server"
        f" says: {said}"
    )
    for path, status in (("/deep", 403), ("/number", 410), ("/html", 404)):
        run = consume(f"{server.base}{path}", tmp_path / "s.sqlite3")
        assert run.code == 5
        assert run.stderr.endswith(f"{path}: unexpected HTTP status {status}"), run.stderr
        assert_no_traceback(run)


@pytest.mark.parametrize("parser", ["feedparser", "lxml"])
def test_a_body_that_is_not_atom_says_a_content_type_that_is_no_xml(
    hostile: Callable[..., Hostile], tmp_path: Path, parser: str
) -> None:
    """A body that is not Atom says its Content-Type when that is no XML type.

    `not an Atom feed: SAXParseException: <unknown>:2:0: syntax error` does not tell that the
    URL is a web page's. The Content-Type does. An XML type says nothing more, because then the
    document is what is wrong. A feed served as another type is still read.
    """
    page = b"<!DOCTYPE html>\n<html><body>Sign in</body></html>"
    feed = atom("http://x", [(1, "one")])
    server = hostile(
        {
            "/page": answer(page, Content_Type="text/html; charset=utf-8"),
            "/xml": answer(b"<html/>", Content_Type="application/xml"),
            "/text": answer(feed, Content_Type="text/plain"),
        }
    )
    run = consume(f"{server.base}/page", tmp_path / "s.sqlite3", "--parser", parser)
    assert run.code == 4
    assert run.stderr.startswith(
        f"simplefeed consume: error: {server.base}/page: not an Atom feed (Content-Type"
        " text/html; charset=utf-8): "
    ), run.stderr
    run = consume(f"{server.base}/xml", tmp_path / "s.sqlite3", "--parser", parser)
    assert run.code == 4 and f"{server.base}/xml: not an Atom feed: " in run.stderr
    run = consume(f"{server.base}/text", tmp_path / "s.sqlite3", "--parser", parser)
    assert run.code == 0 and run.stdout == "1\turn:h:1\tone\n", run.stderr


# -- output --------------------------------------------------------------------------------


def test_a_title_cannot_forge_a_line_of_the_default_output(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    server = hostile({})
    forged = "real&#10;2\turn:forged\tforged&#13;&#x85;&#x2028;&#x202E;lmth.exe\\"
    server.routes["/recent"] = answer(atom(server.base, [(1, forged), (2, "two")]))
    run = consume(f"{server.base}/recent", tmp_path / "s.sqlite3")
    assert run.code == 0, run.stderr
    lines = run.stdout.split("\n")
    assert lines == [
        "1\turn:h:1\treal\\n2\\turn:forged\\tforged\\r\\x85\\u2028\\u202elmth.exe\\\\",
        "2\turn:h:2\ttwo",
        "",
    ]
    run = consume(f"{server.base}/recent", tmp_path / "j.sqlite3", "--jsonl")
    title = json.loads(run.stdout.split("\n")[0])["title"]
    assert title == "real\n2\turn:forged\tforged\r\x85\u2028\u202elmth.exe\\"


@pytest.mark.parametrize(
    "option", ["--timeout", "--max-time", "--wait", "--min-interval", "--max-interval"]
)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_seconds_that_are_not_finite_are_a_usage_error(
    option: str, value: str, tmp_path: Path
) -> None:
    """Seconds that are not finite are a usage error.

    Every comparison with NaN is false. So `--timeout nan` would end with an internal error
    (exit 70), and `--max-time nan` would lift the bound on a response's time.
    """
    run = consume("http://127.0.0.1:9/recent", tmp_path / "s.sqlite3", f"{option}={value}")
    assert run.code == 2, (run.code, run.stderr)
    assert f"Invalid value for '{option}'" in run.stderr
    assert "finite number of seconds" in run.stderr or "not in the range" in run.stderr
    assert not (tmp_path / "s.sqlite3").exists()


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("notaurl", "is not an http:// or https:// URL"),
        ("ftp://127.0.0.1/recent", "is not an http:// or https:// URL"),
        ("http:///recent", "has no host"),
        ("http://[::1/recent", "is not a URL (Invalid port: ':1')"),
        ("http://127.0.0.1:99999/recent", "has port 99999, outside 1-65535"),
        ("http://reader:s3cret@127.0.0.1:9/recent", "holds a user name or password"),
    ],
)
def test_an_entry_point_that_is_no_http_url_is_a_usage_error(
    url: str, words: str, tmp_path: Path
) -> None:
    """An entry point that is no HTTP URL is a usage error.

    Otherwise `http://[::1/recent` ends with an internal error (exit 70). `ftp://` and
    `notaurl` would be network errors (exit 5), after a state file was made. A password in the
    URL is not sent, and must not be printed in any message either.
    """
    run = consume(url, tmp_path / "s.sqlite3")
    assert run.code == 2, (run.code, run.stderr)
    assert f"Invalid value for 'URL': {words}" in run.stderr
    assert "s3cret" not in run.stderr
    assert not (tmp_path / "s.sqlite3").exists()
    with pytest.raises(ValueError, match=re.escape(f"the entry point {words}")):
        Consumer(url, tmp_path / "s.sqlite3")
    run = consume(
        "http://127.0.0.1:9/recent", tmp_path / "s.sqlite3", "--allow-redirect-origin", url
    )
    assert run.code == 2 and words in run.stderr, (run.code, run.stderr)


# -- follow mode: nothing grows --------------------------------------------------------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_following_a_feed_for_hundreds_of_polls_grows_nothing(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """Following a feed for hundreds of polls grows nothing.

    Each poll finds five new entries, and the recent document keeps the last 20. The server
    answers as one that honours ``Prefer: wait`` answers a long-poll after its feed changed.
    So the consumer polls again at once. RSS and the state file stay flat from the 100th poll
    to the 250th.
    """
    server = hostile({})
    polls = [0]

    def recent(sock: socket.socket) -> None:
        polls[0] += 1
        newest = 5 * polls[0]
        window = [(s, f"entry {s}") for s in range(max(1, newest - 19), newest + 1)]
        body = atom(server.base, window)
        etag = f'"v{polls[0]}"'
        answer(body, Cache_Control="no-cache", ETag=etag, Preference_Applied="wait=30")(sock)

    server.routes["/recent"] = recent
    state = tmp_path / "s.sqlite3"
    command = [*simplefeed_command(), "consume", f"{server.base}/recent", "--state", str(state)]
    child = subprocess.Popen(
        [*command, "--follow"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=clean_environ(),
    )
    try:
        deadline = time.monotonic() + 400  # Room for 250 polls on a busy machine.
        while polls[0] < 100 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert polls[0] >= 100, "the consumer did not poll"
        rss_at_100 = rss_kib(child.pid)
        state_at_100 = sum(f.stat().st_size for f in tmp_path.glob("s.sqlite3*"))
        while polls[0] < 250 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert polls[0] >= 250
        rss_at_250 = rss_kib(child.pid)
        state_at_250 = sum(f.stat().st_size for f in tmp_path.glob("s.sqlite3*"))
    finally:
        child.send_signal(2)  # SIGINT, so exit 130.
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == 130, stderr
    assert rss_at_250 - rss_at_100 < 4 * 1024, (rss_at_100, rss_at_250)
    assert state_at_250 < max(2 * state_at_100, 8 * 1024 * 1024), (state_at_100, state_at_250)
    assert "Traceback" not in stderr.decode()


def test_cookies_a_server_sets_are_neither_kept_nor_sent_back(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """Cookies a server sets are neither kept nor sent back.

    A feed needs no cookies. A server might set a new one with every answer. The consumer's
    cookie jar would then grow for as long as it follows the feed. So would the Cookie header
    of every later request. httpx keeps them all, so 200 polls would mean 200 cookies.
    """
    server = hostile({})
    served = [0]

    def recent(sock: socket.socket) -> None:
        served[0] += 1
        body = atom(server.base, [(1, "one")])
        answer(body, Cache_Control="no-cache", Set_Cookie=f"c{served[0]}={'x' * 100}; Path=/")(sock)

    server.routes["/recent"] = recent
    with StateFile(tmp_path / "s.sqlite3") as state, Consumer(f"{server.base}/recent", state) as c:
        for _ in range(3):
            assert [e.seq for e in c.entries()] in ([1], [])
    assert len(server.requests) == 3
    assert not [r for r in server.requests if b"\r\ncookie:" in r.lower()], server.requests


def test_a_state_file_with_an_entry_point_of_before_the_check_is_a_usage_error(
    tmp_path: Path,
) -> None:
    """A state file with an entry point from before the check is a usage error.

    Such a file may hold an entry point with a password, recorded before entry points were
    checked. The consumer commands say so (exit 2), without printing it. They do not end with
    an internal error.
    """
    path = tmp_path / "s.sqlite3"
    with StateFile(path) as state:
        state.save_checkpoint(
            "http://reader:s3cret@127.0.0.1:9/recent",
            Checkpoint("urn:x:1", 1, "http://127.0.0.1:9/pages/1"),
            now=1.0,
        )
    done = subprocess.run(
        [*simplefeed_command(), "consumer", "status", "--state", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "an entry point of the state file holds a user name or password" in done.stderr
    assert "s3cret" not in done.stderr + done.stdout


def test_json_content_with_an_escaped_lone_surrogate_is_printed_as_json_that_reads_back(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """JSON content with an escaped lone surrogate prints as JSON that reads back.

    RFC 8259 lets JSON escape a lone surrogate. I-JSON does not, and a Simplefeed server
    refuses it from producers. But another server may serve one. Printed as decoded, it cannot
    be carried in UTF-8. Then `--jsonl` and `--exec` would stop at the entry as a failed handler
    (exit 3), and parking it would fail the same way. So the JSON text escapes it again.
    """
    server = hostile({})
    value = {"a": "\ud800", "b": "\x00", "c": "é😀"}
    content = '{"a": "\\ud800", "b": "\\u0000", "c": "é😀"}'
    body = atom(server.base, [(1, "t")]).replace(
        b"<sf:seq>1</sf:seq>",
        b'<sf:seq>1</sf:seq><content type="text" sf:type="application/json">'
        + content.encode()
        + b"</content>",
    )
    server.routes["/recent"] = answer(body)
    for args in (["--jsonl"], ["--parser", "lxml", "--jsonl"], ["--exec", "cat"]):
        run = consume(f"{server.base}/recent", tmp_path / f"{len(args)}.sqlite3", *args)
        assert run.code == 0, (args, run.code, run.stderr)
        assert json.loads(run.stdout)["content"] == value, (args, run.stdout)
    state = tmp_path / "park.sqlite3"
    run = consume(f"{server.base}/recent", state, "--exec", "false", "--on-error", "park")
    assert run.code == 0, run.stderr
    parked = subprocess.run(
        [*simplefeed_command(), "consumer", "parked", "--state", str(state), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert parked.returncode == 0, parked.stderr
    assert json.loads(parked.stdout)["entry"]["content"] == value


@pytest.mark.parametrize("parser", ["feedparser", "lxml"])
def test_json_content_with_a_number_past_a_double_is_a_protocol_error(
    hostile: Callable[..., Hostile], tmp_path: Path, parser: str
) -> None:
    """JSON content with a number past a double is a protocol error.

    `1e400` would read as infinity, and `--jsonl` would print `"a":Infinity`. No strict JSON
    reader takes that line. A Simplefeed server refuses such content at its door. From another
    server, it is the feed's fault (exit 4), and the checkpoint stays untouched.
    """
    server = hostile({})
    body = atom(server.base, [(1, "t")]).replace(
        b"<sf:seq>1</sf:seq>",
        b'<sf:seq>1</sf:seq><content type="text" sf:type="application/json">{"a": 1e400}</content>',
    )
    server.routes["/recent"] = answer(body)
    run = consume(f"{server.base}/recent", tmp_path / "s.sqlite3", "--jsonl", "--parser", parser)
    assert run.code == 4, (run.code, run.stdout, run.stderr)
    assert "the number 1e400 overflows a double" in run.stderr
    assert run.stdout == ""


def test_a_second_consumer_on_the_same_state_file_is_refused_while_the_first_runs(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """A second consumer on the same state file is refused while the first runs.

    Two consumers may share a state file when a cron job's run overlaps the next. Each would
    then handle every new entry, at the same time. So the second stops at once (exit 6) and
    touches nothing. Once the first is done, it runs.
    """
    server = hostile({})
    server.routes["/recent"] = answer(atom(server.base, [(1, "one"), (2, "two")]))
    path = tmp_path / "s.sqlite3"
    with Consumer(f"{server.base}/recent", path) as first:
        entries = first.entries()
        assert next(entries).seq == 1  # The first is in the middle of its run.
        run = consume(f"{server.base}/recent", path)
        assert run.code == 6, (run.code, run.stdout, run.stderr)
        assert "is processing from this state file" in run.stderr
        assert run.stdout == ""
        # A second iteration of the same consumer says so, not "another consumer".
        with pytest.raises(StateError, match="this consumer is iterating already"):
            next(first.entries())
        assert [e.seq for e in entries] == [2]
    run = consume(f"{server.base}/recent", path)
    assert run.code == 0, run.stderr
    assert run.stdout == ""  # The first handled both. The lock went with it.
    assert (tmp_path / "s.sqlite3.lock").exists()


def test_a_state_file_under_another_name_is_the_same_state_file(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """A state file under another name is the same state file.

    A consumer given a symbolic link to the state file must take the same lock. Otherwise two
    consumers would each handle every entry, at the same time. A hard link cannot be told
    apart, so a state file with one is refused.
    """
    server = hostile({})
    server.routes["/recent"] = answer(atom(server.base, [(1, "one"), (2, "two")]))
    path = tmp_path / "s.sqlite3"
    (tmp_path / "alias.sqlite3").symlink_to(path)
    with Consumer(f"{server.base}/recent", path) as first:
        entries = first.entries()
        assert next(entries).seq == 1
        run = consume(f"{server.base}/recent", tmp_path / "alias.sqlite3")
        assert run.code == 6 and "is processing from this state file" in run.stderr, run.stderr
        assert [e.seq for e in entries] == [2]
    os.link(path, tmp_path / "hard.sqlite3")
    for name in ("s.sqlite3", "hard.sqlite3"):
        run = consume(f"{server.base}/recent", tmp_path / name)
        assert run.code == 6 and "it has 2 hard links" in run.stderr, run.stderr
        assert run.stdout == ""


def test_an_entry_id_too_long_for_the_environment_still_reaches_the_handler(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """An entry id too long for the environment still reaches the handler.

    execve refuses an environment string over 128 KiB with "Argument list too long". So a
    200,000-character id would make `--exec` fail before the handler ran, for good. The message
    quoting the id would be a 200 KB line.
    """
    server = hostile({})
    long_id = "urn:h:" + "i" * 200_000
    server.routes["/recent"] = answer(
        atom(server.base, [(1, "one"), (2, "two")]).replace(b"urn:h:2<", f"{long_id}<".encode())
    )
    handler = tmp_path / "handler.py"
    handler.write_text(
        "import json, os, sys\n"
        "entry = json.load(sys.stdin)\n"
        "print(entry['seq'], len(entry['id']), os.environ.get('SIMPLEFEED_ENTRY_ID', '-')[:8])\n"
        "sys.exit(int(os.environ.get('FAIL', '0')) if entry['seq'] == 2 else 0)\n"
    )
    command = f"{sys.executable} {handler}"
    run = consume(f"{server.base}/recent", tmp_path / "s.sqlite3", "--exec", command)
    assert run.code == 0, run.stderr
    assert run.stdout == "1 7 urn:h:1\n2 200006 -\n"
    os.environ["FAIL"] = "1"
    try:
        run = consume(f"{server.base}/recent", tmp_path / "t.sqlite3", "--exec", command)
    finally:
        del os.environ["FAIL"]
    assert run.code == 3 and "handler failed on entry 'urn:h:iii" in run.stderr, run.stderr[:300]
    assert len(run.stderr) < 2000, run.stderr[:300]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_reset_stopped_while_a_server_drips_exits_130_and_moves_nothing(
    hostile: Callable[[dict[str, Send]], Hostile], tmp_path: Path, stop: signal.Signals
) -> None:
    """A reset stopped while a server drips exits 130 and moves nothing.

    `consumer reset` reads the feed, so a server that drips its answer holds it until
    --max-time. Stopped meanwhile, click's way is to say "Aborted!" and exit 1. The consumer
    commands do not document that status. So reset acts as consume does: one line, exit 130,
    and the checkpoint as it was.
    """
    server = hostile({})
    server.routes["/recent"] = drip(atom(server.base, [(1, "one"), (2, "two")]))
    recent = f"{server.base}/recent"
    state = tmp_path / "s.sqlite3"
    before = Checkpoint("urn:h:2", 2, recent)
    with StateFile(state) as file:
        file.save_checkpoint(recent, before, now=1.0)
    child = subprocess.Popen(
        [*simplefeed_command(), "consumer", "reset", "--state", str(state), "--to", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=clean_environ(),
    )
    try:
        deadline = time.monotonic() + 60
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.requests, "the reset did not ask for the entry point"
    finally:
        child.send_signal(stop)
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == 130, stderr
    assert stderr.decode() == "simplefeed consumer: interrupted\n"
    with StateFile(state) as file:
        assert file.load_checkpoint(recent) == before

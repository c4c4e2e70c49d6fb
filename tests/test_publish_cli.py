"""`simplefeed publish` against a real uWSGI: its answers, its refusals, local checks, retries.

A small proxy on 127.0.0.1 stands between the command and the server. It counts the posts
that reach it, and it can answer the first one 503 with ``Retry-After``, as a busy server
does. The command then talks real HTTP to both.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from bench.servers import UwsgiServer, simplefeed_command
from tests.conftest import query


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UwsgiServer]:
    with UwsgiServer.scratch(tmp_path_factory.mktemp("publish"), processes=1) as s:
        yield s


class Proxy(ThreadingHTTPServer):
    """Forwards posts to ``target``. It answers the first ``busy`` of them 503 itself."""

    daemon_threads = True

    def __init__(self, target: str, busy: int) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.target = target
        self.busy = busy
        self.posts: list[bytes] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(BaseHTTPRequestHandler):
    server: Proxy

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.posts.append(body)
        if len(self.server.posts) <= self.server.busy:
            self._answer(503, {"Retry-After": "1"}, b'{"error":"unavailable","message":"busy"}')
            return
        headers = {k: self.headers[k] for k in ("Authorization", "Content-Type")}
        reply = httpx.post(self.server.target + self.path, content=body, headers=headers)
        self._answer(reply.status_code, {}, reply.content)

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in {**headers, "Content-Type": "application/json"}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def proxy(server: UwsgiServer, request: pytest.FixtureRequest) -> Iterator[Proxy]:
    made = Proxy(server.base_url, busy=getattr(request, "param", 0))
    thread = threading.Thread(target=made.serve_forever)
    thread.start()
    try:
        yield made
    finally:
        made.shutdown()
        thread.join(30)
        made.server_close()


def publish(
    server: UwsgiServer, url: str, *args: str, stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    environ = {**server.env(), **env}
    environ["SIMPLEFEED_TOKEN"] = server.token
    return subprocess.run(
        [*simplefeed_command(), "publish", "--url", url, *args],
        input=stdin,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def feed_ids(server: UwsgiServer) -> list[str]:
    return [r[0] for r in query(server.database_url, "SELECT entry_id FROM entries ORDER BY seq")]


def test_an_event_and_an_array_print_the_servers_answers(server: UwsgiServer) -> None:
    done = publish(
        server, server.base_url, "--title", "one", "--id", "tag:simplefeed.test,2026:cli-1"
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["id"] == "tag:simplefeed.test,2026:cli-1" and answer["created"] is True
    assert answer["url"] == server.url(f"/pages/{answer['page']}")
    again = publish(
        server, server.base_url, "--title", "one", "--id", "tag:simplefeed.test,2026:cli-1"
    )
    assert (again.returncode, json.loads(again.stdout)["created"]) == (0, False), again.stderr
    done = publish(server, server.base_url, stdin='[{"title": "a"}, {"title": "b"}]')
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout)["entries"]
    assert feed_ids(server)[-2:] == [e["id"] for e in entries]
    assert all(e["id"].startswith("urn:uuid:") for e in entries)  # Made before the first try.


def test_a_refused_event_prints_the_servers_error_and_exits_1(server: UwsgiServer) -> None:
    taken = ("--id", "tag:simplefeed.test,2026:taken")
    assert publish(server, server.base_url, "--title", "v1", *taken).returncode == 0
    done = publish(server, server.base_url, "--title", "v2", *taken)
    assert done.returncode == 1, done.stderr
    refused = json.loads(done.stdout)
    assert (refused["error"], refused["id"]) == ("conflict", taken[1]), refused
    batch = json.dumps([{"title": "fine"}, {"title": "v2", "id": taken[1]}])
    done = publish(server, server.base_url, stdin=batch)
    assert done.returncode == 1, done.stderr
    refused = json.loads(done.stdout)
    assert refused["error"] == "conflict" and refused["index"] == 1, refused
    assert refused["id"] == taken[1]


@pytest.mark.parametrize(
    ("args", "stdin", "words"),
    [
        (["--title", ""], "", "nothing sent, because the server would refuse it: title"),
        ([], '{"title": "t", "title": "u"}', "the name 'title' appears twice"),
        ([], '[{"title": "ok"}, {"title": "t", "colour": 1}]', "[1].colour"),
        ([], '[{"title": "ok"}, 3]', "event [1] is not a JSON object"),
        ([], "[]", "standard input holds an empty array"),
        ([], '{"title": NaN}', "NaN is not a JSON number"),
    ],
)
def test_a_locally_invalid_event_sends_nothing(
    server: UwsgiServer, proxy: Proxy, args: list[str], stdin: str, words: str
) -> None:
    before = feed_ids(server)
    done = publish(server, proxy.url, *args, stdin=stdin)
    assert done.returncode == 1 and words in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stdout == "", done.stderr
    assert proxy.posts == []
    assert feed_ids(server) == before


def test_the_local_checks_take_the_limits_this_environment_sets(
    server: UwsgiServer, proxy: Proxy
) -> None:
    """An operator's lower SIMPLEFEED_MAX_* limit is applied before any request."""
    done = publish(server, proxy.url, "--title", "x" * 20, SIMPLEFEED_MAX_TITLE_CHARS="10")
    assert done.returncode == 1 and "title" in done.stderr and "10" in done.stderr, done.stderr
    assert proxy.posts == []


@pytest.mark.parametrize("proxy", [1], indirect=True)
def test_a_503_with_retry_after_is_retried_and_the_event_is_in_the_feed_once(
    server: UwsgiServer, proxy: Proxy
) -> None:
    done = publish(server, proxy.url, "--title", "after a 503")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert len(proxy.posts) == 2 and proxy.posts[0] == proxy.posts[1]  # The same id each time.
    assert feed_ids(server).count(answer["id"]) == 1


@pytest.mark.parametrize("proxy", [100], indirect=True)
def test_retry_for_0_tries_once_and_says_the_server_was_unavailable(
    server: UwsgiServer, proxy: Proxy
) -> None:
    done = publish(server, proxy.url, "--retry-for", "0", "--title", "never taken")
    assert done.returncode == 1, done.stderr
    assert len(proxy.posts) == 1
    assert "the server did not take the events in time: the server answered 503" in done.stderr

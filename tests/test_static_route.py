"""uWSGI's static route (uwsgi.ini): archived pages straight from the archive directory, with no
Python and no database involved, and everything else to the app.

The app sends an ``X-Request-Id`` with every answer, so its absence shows that uWSGI answered
alone. Each test runs twice: with the page plugin that ``simplefeed serve`` builds, and with
the routing rules that serve pages where it cannot be built (no C compiler).
"""

from __future__ import annotations

import gzip
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path

import brotli
import httpx
import pytest

from bench.servers import (
    HOST,
    PROJECT_ROOT,
    UwsgiServer,
    clean_environ,
    free_port,
    simplefeed_command,
)
from simplefeed.app.resources import ATOM_CONTENT_SECURITY_POLICY
from simplefeed.runtime import plugin
from simplefeed.settings import static_archive_problem

pytestmark = pytest.mark.e2e

PAGE_SIZE = 10
ATOM = "application/atom+xml; charset=utf-8"
IMMUTABLE = "public, max-age=31536000, immutable"
ARCHIVED = ["/pages/1", "/pages/2", "/feeds/orders/pages/1"]


def skip_without_compiler() -> None:
    try:
        plugin.compiler(os.environ)
    except plugin.PluginUnavailable as exc:
        pytest.skip(f"{exc}, to build the page plugin")


def without_compiler(tmp_path: Path) -> dict[str, str]:
    """An environment where ``simplefeed serve`` finds no built plugin and cannot build one."""
    return {"CC": str(tmp_path / "no-cc"), "XDG_CACHE_HOME": str(tmp_path / "cache")}


@pytest.fixture(scope="module", params=["plugin", "rules"])
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[UwsgiServer]:
    if request.param == "plugin":
        skip_without_compiler()
    workdir = tmp_path_factory.mktemp("static")
    env = without_compiler(workdir) if request.param == "rules" else {}
    with UwsgiServer.scratch(workdir, page_size=PAGE_SIZE, extra_env=env) as s:
        warned = "cannot build the page plugin" in s.log()
        assert warned == (request.param == "rules"), s.log()
        s.cli("feed", "create", "orders", "--page-size", str(PAGE_SIZE))
        auth = {"Authorization": f"Bearer {s.token}"}
        for path in ("/entries", "/feeds/orders/entries"):
            events = [{"title": f"{path} {i}"} for i in range(2 * PAGE_SIZE + 5)]
            assert httpx.post(s.url(path), json=events, headers=auth).status_code == 201
        yield s


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10, headers={"Accept-Encoding": "identity"}) as client:
        yield client


def file_of(server: UwsgiServer, path: str) -> Path:
    return server.archive_dir / path.lstrip("/")


def by_uwsgi(r: httpx.Response) -> bool:
    return "x-request-id" not in r.headers


def check_static(http: httpx.Client, url: str, file: Path) -> None:
    """The page as uWSGI sends it from ``file``, and its 304s."""
    r = http.get(url)
    assert r.status_code == 200 and by_uwsgi(r), url
    assert r.content == file.read_bytes()
    assert r.headers.get_list("content-type") == [ATOM]
    assert r.headers.get_list("cache-control") == [IMMUTABLE]
    assert r.headers.get_list("vary") == ["Accept-Encoding"]
    assert r.headers.get_list("x-content-type-options") == ["nosniff"]
    assert r.headers.get_list("content-security-policy") == [ATOM_CONTENT_SECURITY_POLICY]
    assert len(r.headers.get_list("date")) == 1
    assert re.fullmatch(
        r"[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT", r.headers["date"]
    )
    assert abs(parsedate_to_datetime(r.headers["date"]).timestamp() - time.time()) < 600
    lm = r.headers["last-modified"]
    assert lm == formatdate(int(file.stat().st_mtime), usegmt=True)  # the freeze time
    for since, status in ((0, 304), (60, 304), (-60, 200)):
        date = formatdate(parsedate_to_datetime(lm).timestamp() + since, usegmt=True)
        again = http.get(url, headers={"If-Modified-Since": date})
        assert (again.status_code, by_uwsgi(again)) == (status, True), since
        assert again.content == (b"" if status == 304 else file.read_bytes())
        assert again.headers.get_list("cache-control") == [IMMUTABLE]


def test_archived_pages_are_sent_from_their_files(server: UwsgiServer, http: httpx.Client) -> None:
    for path in ARCHIVED:
        check_static(http, server.url(path), file_of(server, path))
        head = http.head(server.url(path))
        assert head.status_code == 200 and by_uwsgi(head)
        assert head.headers["content-length"] == str(file_of(server, path).stat().st_size)


@pytest.mark.parametrize(
    ("accept", "coding"),
    [("gzip", "gzip"), ("gzip, deflate", "gzip"), ("br", "br"), ("gzip, br", "br")],
)
def test_the_compressed_copy_the_request_accepts(
    server: UwsgiServer, http: httpx.Client, accept: str, coding: str
) -> None:
    with http.stream("GET", server.url("/pages/1"), headers={"Accept-Encoding": accept}) as r:
        raw = b"".join(r.iter_raw())
    assert r.status_code == 200 and by_uwsgi(r)
    assert r.headers["content-encoding"] == coding
    assert r.headers.get_list("vary") == ["Accept-Encoding"]
    assert r.headers.get_list("content-type") == [ATOM]
    decode = gzip.decompress if coding == "gzip" else brotli.decompress
    assert decode(raw) == file_of(server, "/pages/1").read_bytes()


def test_weighted_accept_encoding_goes_to_the_app(server: UwsgiServer, http: httpx.Client) -> None:
    """uWSGI would send gzip to "gzip;q=0": it reads the header by substring."""
    page = file_of(server, "/pages/1").read_bytes()
    refused = http.get(server.url("/pages/1"), headers={"Accept-Encoding": "gzip;q=0, br;q=0"})
    assert refused.status_code == 200 and not by_uwsgi(refused)
    assert "content-encoding" not in refused.headers and refused.content == page
    weighed = http.get(server.url("/pages/1"), headers={"Accept-Encoding": "br;q=0.1, gzip"})
    assert weighed.headers["content-encoding"] == "gzip" and weighed.content == page


def test_everything_else_goes_to_the_app(server: UwsgiServer, http: httpx.Client) -> None:
    for path in ("/recent", "/pages/3", "/feeds/orders/pages/3", "/pages/1?x=1", "/pages/%31"):
        r = http.get(server.url(path))
        assert r.status_code == 200 and not by_uwsgi(r), path
    for path, status in (
        ("/pages/01", 308),
        ("/feeds/events/pages/1", 308),
        ("/pages/1.gz", 404),
        ("/pages/1/", 404),
        ("//pages/1", 404),
        ("/pages/99", 404),
    ):
        r = http.get(server.url(path), follow_redirects=False)
        assert r.status_code == status and not by_uwsgi(r), path
    for method, status in (("POST", 405), ("OPTIONS", 200), ("DELETE", 405)):
        r = http.request(method, server.url("/pages/1"))
        assert r.status_code == status and not by_uwsgi(r), method


def test_the_app_answers_without_the_static_headers(
    server: UwsgiServer, http: httpx.Client
) -> None:
    """uwsgi.ini's add-header lines are for the files. A request that goes to the app drops
    them, so each of its answers has its own headers once, and only those."""
    auth = {"Authorization": f"Bearer {server.token}"}
    for method, path, status in (
        ("GET", "/recent", 200),
        ("GET", "/pages/1?x=1", 200),  # the archived page, through the app
        ("HEAD", "/pages/3", 200),
        ("GET", "/pages/99", 404),
        ("POST", "/entries", 422),
    ):
        r = http.request(method, server.url(path), headers=auth, json=[{}])
        assert (r.status_code, by_uwsgi(r)) == (status, False), path
        for name in ("content-type", "cache-control", "x-content-type-options", "date"):
            assert len(r.headers.get_list(name)) <= 1, (path, name, r.headers)
        assert "content-security-policy" not in r.headers or r.headers.get_list(
            "content-security-policy"
        ) == [ATOM_CONTENT_SECURITY_POLICY]
        assert r.headers.get_list("vary", split_commas=True).count("Accept-Encoding") <= 1
        if status == 404:
            assert r.headers["content-type"] == "application/json"
            assert IMMUTABLE not in r.headers.get_list("cache-control")


def test_a_missing_file_goes_to_the_app_which_writes_it_back(
    server: UwsgiServer, http: httpx.Client
) -> None:
    file = file_of(server, "/feeds/orders/pages/2")
    body = file.read_bytes()
    file.unlink()
    try:
        r = http.get(server.url("/feeds/orders/pages/2"))
        assert r.status_code == 200 and r.content == body and not by_uwsgi(r)
        assert file.read_bytes() == body
        check_static(http, server.url("/feeds/orders/pages/2"), file)
    finally:
        if not file.exists():
            file.write_bytes(body)


def test_a_client_that_asks_to_close_or_speaks_http_1_0_gets_the_app(
    server: UwsgiServer,
) -> None:
    """http11-socket keeps every connection open; the app closes one when asked (RFC 9112)."""
    for request in (
        b"GET /pages/1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /pages/1 HTTP/1.0\r\nHost: x\r\n\r\n",
    ):
        with socket.create_connection((HOST, server.port), timeout=10) as sock:
            sock.sendall(request)
            received = b""
            while data := sock.recv(65536):  # to the end: the server closes
                received += data
        head, _, body = received.partition(b"\r\n\r\n")
        assert b" 200 OK\r\n" in head and b"x-request-id" in head.lower(), head
        assert body == file_of(server, "/pages/1").read_bytes()


@pytest.mark.parametrize("method", [b"GET", b"HEAD"])
def test_close_in_capitals_gets_the_app(server: UwsgiServer, method: bytes) -> None:
    """Connection options are case-insensitive (RFC 9110 7.6.1)."""
    with socket.create_connection((HOST, server.port), timeout=10) as sock:
        sock.sendall(method + b" /pages/1 HTTP/1.1\r\nHost: x\r\nConnection: CLOSE\r\n\r\n")
        received = b""
        while data := sock.recv(65536):  # to the end: the app closes
            received += data
    assert b" 200 OK\r\n" in received and b"x-request-id" in received.lower(), received


@pytest.mark.parametrize(
    "request_line",
    [b"GET /pages/1 X\nSet-Cookie: a=b", b"GET /pages/1 HTTP/1.1 Set-Cookie: a=b"],
)
def test_a_forged_protocol_gets_no_answer(server: UwsgiServer, request_line: bytes) -> None:
    """uWSGI starts its status line with the request's protocol as sent."""
    with socket.create_connection((HOST, server.port), timeout=10) as sock:
        sock.sendall(request_line + b"\r\nHost: x\r\n\r\n")
        received = b""
        while data := sock.recv(65536):
            received += data
    assert received == b""


def direct_uwsgi(
    tmp_path: Path, env: dict[str, str], how: str = "uwsgi"
) -> subprocess.Popen[bytes]:
    """uWSGI started directly with the shipped uwsgi.ini, as an operator may, or (``how``
    "serve") by ``simplefeed serve``."""
    if how == "serve":
        argv = [*simplefeed_command(), "serve"]
    else:
        argv = [
            str(Path(sys.executable).with_name("uwsgi")),
            "--ini",
            str(PROJECT_ROOT / "uwsgi.ini"),
        ]
    with (tmp_path / "direct.log").open("ab") as log:
        return subprocess.Popen(
            argv,
            env={**clean_environ(), "PYTHONPATH": str(PROJECT_ROOT), **env},
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def ready(
    http: httpx.Client, url: str, process: subprocess.Popen[bytes], log: Path
) -> httpx.Response:
    """The first answer to ``url`` once uWSGI listens and a worker has loaded the app."""
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, log.read_text()
        try:
            return http.get(url)
        except httpx.TransportError:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, 9)
    process.wait()


@pytest.mark.parametrize("how", ["serve", "uwsgi"])
def test_pages_answer_with_no_database_at_all(
    server: UwsgiServer, tmp_path: Path, how: str
) -> None:
    """A service started while its database does not answer: the static route sends every
    archived page (and its 304), and /recent is a 503."""
    port = free_port()
    process = direct_uwsgi(
        tmp_path,
        {
            # Nothing listens there: the database is down.
            "SIMPLEFEED_DATABASE_URL": f"postgresql+psycopg://postgres@{HOST}:{free_port()}/x",
            "SIMPLEFEED_ARCHIVE_DIR": str(server.archive_dir),
            "SIMPLEFEED_HTTP_SOCKET": f"{HOST}:{port}",
            "SIMPLEFEED_BASE_URL": server.base_url,
            "SIMPLEFEED_PROCESSES": "1",
        },
        how,
    )
    base = f"http://{HOST}:{port}"
    try:
        with httpx.Client(timeout=10, headers={"Accept-Encoding": "identity"}) as http:
            recent = ready(http, base + "/recent", process, tmp_path / "direct.log")
            assert recent.status_code == 503
            for path in ARCHIVED:
                check_static(http, base + path, file_of(server, path))
    finally:
        stop(process)


def test_an_archive_path_uwsgi_cannot_serve_stops_the_start(tmp_path: Path) -> None:
    """uWSGI serves a file only under the real path it was given: with a symbolic link in the
    path every archived page would get no answer at all, so the app refuses to start."""
    real = tmp_path / "real-archive"
    real.mkdir()
    (tmp_path / "linked").symlink_to(real)
    server = UwsgiServer.scratch(tmp_path, page_size=PAGE_SIZE)
    server.migrate()
    process = direct_uwsgi(
        tmp_path,
        {
            "SIMPLEFEED_DATABASE_URL": server.database_url,
            "SIMPLEFEED_ARCHIVE_DIR": str(tmp_path / "linked"),
            "SIMPLEFEED_HTTP_SOCKET": f"{HOST}:{free_port()}",
            "SIMPLEFEED_BASE_URL": "http://feeds.example.test",
            "SIMPLEFEED_PROCESSES": "1",
        },
    )
    try:
        assert process.wait(timeout=60) == 22
    finally:
        stop(process)
    log = (tmp_path / "direct.log").read_text()
    assert f"set it to {real}" in log


def test_static_archive_problem(tmp_path: Path) -> None:
    real = tmp_path / "archive"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert static_archive_problem(str(real), "/elsewhere") is None
    assert static_archive_problem(None, str(tmp_path)) is None  # ./archive
    for given in ("archive", str(tmp_path / "link"), f"{real}/", f"{tmp_path}/x/../archive"):
        problem = static_archive_problem(given, str(tmp_path))
        assert problem is not None and str(real) in problem, given


def test_a_range_gets_the_whole_page(server: UwsgiServer, http: httpx.Client) -> None:
    """uWSGI's static serving ignores Range, as the app does (docs/reference/http-api.md)."""
    page = file_of(server, "/pages/1").read_bytes()
    for path, static in (("/pages/1", True), ("/pages/1?app", False)):
        r = http.get(server.url(path), headers={"Range": "bytes=0-9"})
        assert (r.status_code, r.content, by_uwsgi(r)) == (200, page, static), path


def test_the_page_plugin_is_built_once(tmp_path: Path) -> None:
    skip_without_compiler()
    uwsgi = str(Path(sys.executable).with_name("uwsgi"))
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    built = plugin.plugin_for(uwsgi, plugin.pyuwsgi_module(), env)
    assert (
        built.parent.parent == tmp_path / "simplefeed"
        and built.name == "simplefeed_pages_plugin.so"
    )
    made = built.stat().st_mtime_ns
    assert plugin.plugin_for(uwsgi, plugin.pyuwsgi_module(), env) == built
    assert built.stat().st_mtime_ns == made
    assert [p.name for p in built.parent.iterdir()] == [built.name]  # no build left behind


@pytest.mark.parametrize(
    ("cc", "said"), [("no-such-cc", "no C compiler"), ("false", "false failed")]
)
def test_a_plugin_that_cannot_be_built_says_why(tmp_path: Path, cc: str, said: str) -> None:
    uwsgi = str(Path(sys.executable).with_name("uwsgi"))
    env = {"XDG_CACHE_HOME": str(tmp_path), "CC": cc}
    with pytest.raises(plugin.PluginUnavailable, match=said):
        plugin.plugin_for(uwsgi, plugin.pyuwsgi_module(), env)
    assert not list((tmp_path / "simplefeed").rglob("*.so"))

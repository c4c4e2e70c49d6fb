"""The shipped nginx configuration (deploy/nginx/simplefeed.conf.template) in front of the shipped
uWSGI service, on loopback ports. nginx serves archived pages from the archive directory
itself, and passes every other request to the app with uwsgi_pass.

Needs Debian's nginx (``apt-get install -y nginx``; .ci/run installs it). Without it, and with no
way to install it here, the nginx test is skipped with that reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path

import httpx
import pytest

from bench.servers import (
    HOST,
    PROJECT_ROOT,
    UwsgiServer,
    clean_environ,
    ensure_debian_binary,
    free_port,
    render_template,
)
from simplefeed.app.resources import ATOM_CONTENT_SECURITY_POLICY
from tests.test_listen import (
    SLOW_HEAD,
    Tricklers,
    answer_recent,
    slow_body_head,
)

pytestmark = pytest.mark.e2e

TEMPLATE = PROJECT_ROOT / "deploy" / "nginx" / "simplefeed.conf.template"
PAGE_SIZE = 10
ATOM = "application/atom+xml; charset=utf-8"
IMMUTABLE = "public, max-age=31536000, immutable"
LIVE = "public, max-age=10"
COMPARED = ("content-type", "cache-control", "last-modified", "content-length")

LOG_FORMAT = "ORIGIN %(method) %(uri) %(status)"
LOG_LINE = re.compile(r"^ORIGIN (\S+) (\S+) (\d{3})$")


def _nginx_path() -> str | None:
    if shutil.which("nginx"):
        return shutil.which("nginx")
    return "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None


def ensure_nginx() -> str:
    return ensure_debian_binary("nginx", _nginx_path)


MAIN_CONF = """\
{user}
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
worker_rlimit_nofile 8192;
events {{ worker_connections 4096; }}
http {{
    sendfile on;
    include {conf_dir}/mime.types;
    default_type application/octet-stream;
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    uwsgi_temp_path {prefix}/uwsgi;
    fastcgi_temp_path {prefix}/fastcgi;
    scgi_temp_path {prefix}/scgi;
    include {prefix}/simplefeed.conf;
}}
"""


class Nginx:
    """nginx in the foreground with a shipped server block, its own prefix, pid and logs:
    deploy/nginx/ in front of the service at ``upstream``, or ``template`` filled with
    ``values`` (nginx's listening address is filled in here)."""

    def __init__(
        self,
        nginx: str,
        prefix: Path,
        upstream: str = "",
        archive_dir: Path | None = None,
        *,
        template: Path = TEMPLATE,
        values: Mapping[str, str] | None = None,
    ) -> None:
        prefix.mkdir(parents=True)
        # The block includes uwsgi_params relative to nginx's configuration directory, as in
        # /etc/nginx: the main file lives beside copies of Debian's.
        for name in ("mime.types", "uwsgi_params"):
            shutil.copy(Path("/etc/nginx") / name, prefix / name)
        self.port = free_port()
        if values is None:
            values = {
                "SIMPLEFEED_SERVER_NAME": "localhost",
                "SIMPLEFEED_UPSTREAM": upstream,
                "SIMPLEFEED_ARCHIVE_DIR": str(archive_dir),
            }
        listen = {"SIMPLEFEED_LISTEN": f"{HOST}:{self.port}"}
        (prefix / "simplefeed.conf").write_text(
            render_template(template.read_text(), {**values, **listen})
        )
        conf = prefix / "nginx.conf"
        conf.write_text(
            MAIN_CONF.format(
                # As root nginx's workers would run as "nobody", who cannot enter a private
                # temporary directory (production: the archive is readable by nginx's user).
                user="user root;" if os.geteuid() == 0 else "",
                prefix=prefix,
                conf_dir=prefix,
            )
        )
        self.prefix = prefix
        self.log_path = prefix / "nginx.out"
        argv = [nginx, "-p", str(prefix), "-e", str(prefix / "error.log"), "-c", str(conf)]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [*argv, "-g", "daemon off;"],
                env=clean_environ(),
                cwd=prefix,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def _wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break
                with contextlib.suppress(httpx.TransportError):
                    client.get(self.url("/healthz"))
                    return
                time.sleep(0.1)
        logs = self.log_path.read_text(errors="replace")
        with contextlib.suppress(FileNotFoundError):
            logs += (self.prefix / "error.log").read_text(errors="replace")
        raise RuntimeError(f"nginx did not come up\n{logs}")

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGQUIT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def logged_ini(workdir: Path, log: Path) -> Path:
    """A copy of the shipped uwsgi.ini with a request log."""
    text = (PROJECT_ROOT / "uwsgi.ini").read_text()
    text, n = re.subn(r"(?m)^disable-logging = true$", "disable-logging = false", text)
    assert n == 1
    text += f"\nreq-logger = file:{log}\nlog-format = {LOG_FORMAT}\n"
    ini = workdir / "uwsgi-logged.ini"
    ini.write_text(text)
    return ini


def origin_hits(log: Path) -> list[tuple[str, str, int]]:
    """Requests uWSGI logged (it writes once it has answered: wait for the log to settle)."""
    size, deadline = -1, time.monotonic() + 2.0
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = log.stat().st_size if log.exists() else 0
        if now == size:
            break
        size = now
    lines = log.read_text().splitlines() if log.exists() else []
    return [(m[1], m[2], int(m[3])) for m in map(LOG_LINE.match, lines) if m]


@dataclass
class Deployment:
    origin: UwsgiServer
    nginx: Nginx
    request_log: Path


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    nginx = ensure_nginx()
    workdir = tmp_path_factory.mktemp("nginx")
    log = workdir / "requests.log"
    upstream = f"{HOST}:{free_port()}"
    origin = UwsgiServer.scratch(
        workdir,
        page_size=PAGE_SIZE,
        processes=2,
        ini=logged_ini(workdir, log),
        extra_env={"SIMPLEFEED_UWSGI_SOCKET": upstream},
    )
    with origin:
        origin.cli("feed", "create", "orders", "--page-size", str(PAGE_SIZE))
        auth = {"Authorization": f"Bearer {origin.token}"}
        for path in ("/entries", "/feeds/orders/entries"):
            events = [{"title": f"{path} {i}", "content": f"<&> {i}"} for i in range(25)]
            r = httpx.post(origin.url(path), json=events, headers=auth, timeout=30)
            assert r.status_code == 201, r.text
        proxy = Nginx(nginx, workdir / "nginx", upstream, origin.archive_dir)
        try:
            yield Deployment(origin, proxy, log)
        finally:
            proxy.stop()


ARCHIVED = ["/pages/1", "/pages/2", "/feeds/orders/pages/1", "/feeds/orders/pages/2"]


def check_static_page(http: httpx.Client, url: str, file: Path) -> None:
    """An archived page as nginx serves it from ``file``: the bytes, the headers, a 304 for
    each validator, HEAD, and the gzip copy with Vary."""
    served = http.get(url, headers={"Accept-Encoding": "identity"})
    assert served.status_code == 200, url
    assert served.content == file.read_bytes()
    assert served.headers.get_list("content-type") == [ATOM]
    assert served.headers.get_list("cache-control") == [IMMUTABLE]
    assert served.headers.get_list("vary") == ["Accept-Encoding"]
    assert served.headers["x-content-type-options"] == "nosniff"
    assert served.headers["content-security-policy"] == ATOM_CONTENT_SECURITY_POLICY
    assert len(served.headers.get_list("date")) == 1
    lm = served.headers["last-modified"]
    assert lm == formatdate(int(file.stat().st_mtime), usegmt=True)

    def status(**headers: str) -> int:
        r = http.get(url, headers={"Accept-Encoding": "identity", **headers})
        assert r.status_code != 304 or r.content == b""
        return r.status_code

    later = formatdate(parsedate_to_datetime(lm).timestamp() + 60, usegmt=True)
    earlier = formatdate(parsedate_to_datetime(lm).timestamp() - 60, usegmt=True)
    assert status(**{"If-Modified-Since": lm}) == 304
    assert status(**{"If-Modified-Since": later}) == 304
    assert status(**{"If-Modified-Since": earlier}) == 200
    assert status(**{"If-None-Match": served.headers["etag"]}) == 304
    assert status(**{"If-None-Match": '"other"'}) == 200

    head = http.head(url, headers={"Accept-Encoding": "identity"})
    assert head.status_code == 200 and head.content == b""
    for name in ("content-type", "cache-control", "etag", "last-modified", "content-length"):
        assert head.headers.get_list(name) == served.headers.get_list(name), name

    # The gzip copy, as written beside the page; br is not offered by this block.
    for accept in ("gzip", "br, gzip", "gzip;q=0.5, identity;q=0.1"):
        coded = http.get(url, headers={"Accept-Encoding": accept})
        raw = coded.headers["content-encoding"], coded.headers.get_list("vary")
        assert raw == ("gzip", ["Accept-Encoding"]), (accept, raw)
        assert coded.content == file.read_bytes()  # httpx decodes it
        assert coded.headers.get_list("cache-control") == [IMMUTABLE]
        assert coded.headers.get_list("content-type") == [ATOM]
    refused = http.get(url, headers={"Accept-Encoding": "gzip;q=0"})
    assert "content-encoding" not in refused.headers
    assert refused.content == file.read_bytes()


def test_archived_pages_from_the_directory(deployment: Deployment) -> None:
    origin, nginx = deployment.origin, deployment.nginx
    with httpx.Client(timeout=10) as http:
        before = len(origin_hits(deployment.request_log))
        for path in ARCHIVED:
            file = origin.archive_dir / path.lstrip("/")
            # Readable by nginx's user in production (not only by the service's).
            assert stat.S_IMODE(file.stat().st_mode) & 0o044 == 0o044, oct(file.stat().st_mode)
            check_static_page(http, nginx.url(path), file)
            # The same bytes and type as the app sends.
            direct = http.get(origin.url(path), headers={"Accept-Encoding": "identity"})
            assert direct.content == file.read_bytes()
            assert direct.headers.get_list("content-type") == [ATOM]
        # nginx answered every one of them from the directory.
        assert origin_hits(deployment.request_log)[before:] == [
            ("GET", path, 200) for path in ARCHIVED
        ]


def test_every_archived_page_answers_with_the_app_stopped(
    tmp_path: Path,
) -> None:
    nginx = ensure_nginx()
    upstream = f"{HOST}:{free_port()}"
    origin = UwsgiServer.scratch(
        tmp_path, page_size=PAGE_SIZE, extra_env={"SIMPLEFEED_UWSGI_SOCKET": upstream}
    )
    with origin:
        origin.publish([{"title": f"event {i}"} for i in range(2 * PAGE_SIZE + 3)])
    proxy = Nginx(nginx, tmp_path / "nginx", upstream, origin.archive_dir)
    try:
        with httpx.Client(timeout=10) as http:
            for path in ("/pages/1", "/pages/2"):
                check_static_page(http, proxy.url(path), origin.archive_dir / path.lstrip("/"))
            # The working page needs the app, which is gone: nginx's 502.
            assert http.get(proxy.url("/pages/3")).status_code == 502
    finally:
        proxy.stop()


def test_missing_file_goes_to_the_app_which_writes_it_back(deployment: Deployment) -> None:
    origin, nginx = deployment.origin, deployment.nginx
    file = origin.archive_dir / "feeds/orders/pages/2"
    body = file.read_bytes()
    file.unlink()
    try:
        before = len(origin_hits(deployment.request_log))
        identity = {"Accept-Encoding": "identity"}
        r = httpx.get(nginx.url("/feeds/orders/pages/2"), headers=identity)
        assert r.status_code == 200 and r.content == body
        assert r.headers["cache-control"] == IMMUTABLE
        assert r.headers["etag"].startswith('"')  # the app's strong ETag
        assert origin_hits(deployment.request_log)[before:] == [
            ("GET", "/feeds/orders/pages/2", 200)
        ]
        assert file.read_bytes() == body
        # Written back, so nginx serves it again.
        again = httpx.get(nginx.url("/feeds/orders/pages/2"), headers=identity)
        assert again.content == body
        assert origin_hits(deployment.request_log)[before + 1 :] == []
    finally:
        if not file.exists():
            file.write_bytes(body)


def test_everything_else_goes_to_the_app(deployment: Deployment) -> None:
    origin, nginx = deployment.origin, deployment.nginx
    with httpx.Client(timeout=10) as http:
        for path in ("/recent", "/pages/3", "/feeds/orders/recent", "/feeds/orders/pages/3"):
            # Wait for the live documents' Last-Modified (sent once its second is over).
            deadline = time.monotonic() + 3
            while "last-modified" not in (direct := http.get(origin.url(path))).headers:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            served = http.get(nginx.url(path))
            assert served.status_code == 200
            assert served.content == direct.content
            for name in (*COMPARED, "etag"):
                assert served.headers.get_list(name) == direct.headers.get_list(name), name
            assert served.headers["cache-control"] == LIVE
            r = http.get(nginx.url(path), headers={"If-None-Match": served.headers["etag"]})
            assert r.status_code == 304 and r.content == b""
            assert r.headers["etag"] == served.headers["etag"]

        # The app's JSON errors, not nginx's HTML ones.
        r = http.get(nginx.url("/pages/99"))
        assert r.status_code == 404 and r.json()["error"] == "not_found"
        # Other methods on an archived page's URL: the app's answers, not nginx's.
        r = http.post(nginx.url("/pages/1"), json={"title": "x"})
        assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"
        r = http.options(nginx.url("/pages/1"))
        assert r.status_code == 200 and "GET" in r.headers["allow"]
        r = http.get(nginx.url("/pages/1.gz"))
        assert r.status_code == 404 and r.json()["error"] == "not_found"
        r = http.get(nginx.url("/pages/1/../../uwsgi.ini"))
        assert r.status_code == 404
        # Publishing through nginx, with the producer's token.
        r = http.post(
            nginx.url("/entries"),
            json={"title": "through nginx"},
            headers={"Authorization": f"Bearer {origin.token}"},
        )
        assert r.status_code == 201, r.text
        assert b"through nginx" in http.get(nginx.url("/recent")).content


def test_the_http_socket_says_connection_close_behind_nginx(deployment: Deployment) -> None:
    """Behind nginx the HTTP socket closes each connection, and says so once, whether uWSGI
    sends the file or the app answers."""
    origin = deployment.origin
    for path, by_app in (("/pages/1", False), ("/recent", True), ("/pages/99", True)):
        r = httpx.get(origin.url(path), headers={"Accept-Encoding": "identity"}, timeout=10)
        assert ("x-request-id" in r.headers) == by_app, path
        assert r.headers.get_list("connection") == ["close"], (path, r.headers)


def test_metrics_is_not_passed_on(deployment: Deployment) -> None:
    """/metrics (no token) stays off the public side: nginx answers it 404 itself, however it is
    spelled, and the app never sees the request; the service's own socket still has it."""
    origin, nginx = deployment.origin, deployment.nginx
    with httpx.Client(timeout=10) as http:
        assert http.get(origin.url("/metrics")).status_code == 200

        def reached() -> int:
            hits = origin_hits(deployment.request_log)
            return sum(1 for h in hits if h[1].split("?")[0] == "/metrics")

        before = reached()
        for path in ("/metrics", "/metrics?x=1", "//metrics", "/metrics/"):
            for method in ("GET", "HEAD"):
                r = http.request(method, nginx.url(path))
                assert r.status_code == 404, (method, path, r.status_code)
                assert b"simplefeed_" not in r.content
        assert reached() == before


def test_a_thousand_slow_clients_delay_no_one(deployment: Deployment) -> None:
    """Other clients get /recent through nginx while 1,000 connections trickle heads or bodies.

    nginx holds the slow ones, and uWSGI never sees a request before nginx has all of it. The
    slow clients keep at it until the test stops them, so a probe they blocked would get no
    answer.
    """
    nginx, token = deployment.nginx, deployment.origin.token
    heads = Tricklers(nginx.port, 500, SLOW_HEAD, b"X-Slow: 1\r\n", interval=0.5)
    bodies = Tricklers(nginx.port, 500, slow_body_head(token), b" ", interval=0.5)
    with heads, bodies:
        answer_recent(nginx.url(""))
        still_there = len(heads.sockets) + len(bodies.sockets)
    assert still_there == 1000, (heads.closed_early, bodies.closed_early)

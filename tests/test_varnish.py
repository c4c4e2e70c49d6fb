"""Simplefeed behind a real cache: Varnish with the shipped VCL (deploy/varnish.vcl) in front of
the shipped uWSGI service, and many polling clients.

The origin's own request log (uWSGI's, enabled for this test in a copy of uwsgi.ini) counts what
reached it: archived pages once each, /recent about once per max-age however many clients poll,
revalidated with a conditional request (a 304) while nothing changes; a publish shows up through
the cache within max-age; the cache's archived pages are the origin's bytes.

Needs Debian's varnish (``apt-get install -y varnish``; .ci/run installs it). Without it, and
with no way to install it here, the test is skipped with that reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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

pytestmark = pytest.mark.e2e

MAX_AGE = 2  # seconds: SIMPLEFEED_RECENT_MAX_AGE of the origin
PAGE_SIZE = 10
POLLERS = 50
POLL_SECONDS = 6.0
VCL = PROJECT_ROOT / "deploy" / "varnish.vcl"
BASE_URL = "http://feeds.example.com"

#: The origin's request log: one line per request that reached uWSGI (routed static files too).
LOG_FORMAT = (
    "ORIGIN %(method) %(uri) %(status) inm=[%(var.HTTP_IF_NONE_MATCH)] "
    "ims=[%(var.HTTP_IF_MODIFIED_SINCE)]"
)
LOG_LINE = re.compile(r"^ORIGIN (\S+) (\S+) (\d{3}) inm=\[(.*?)\] ims=\[(.*?)\]$")


# -- Varnish ----------------------------------------------------------------------------------


def varnishd_path() -> str | None:
    for candidate in (shutil.which("varnishd"), "/usr/sbin/varnishd"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def ensure_varnishd() -> str:
    """varnishd's path; installs Debian's varnish when missing and possible, else skips."""
    return ensure_debian_binary("varnish", varnishd_path)


class Varnish:
    """``varnishd -F`` on a free 127.0.0.1 port with the shipped VCL, until ``stop``."""

    def __init__(
        self, varnishd: str, workdir: Path, backend_port: int, *, probe_interval: str = ""
    ) -> None:
        self.workdir = workdir
        self.vcl = workdir / "simplefeed.vcl"
        text = render_template(
            VCL.read_text(),
            {"SIMPLEFEED_BACKEND_HOST": HOST, "SIMPLEFEED_BACKEND_PORT": str(backend_port)},
        )
        if probe_interval:
            # Only the probe's pace: the backend turns sick (or healthy) within seconds.
            text, n = re.subn(r"\.interval = \S+;", f".interval = {probe_interval};", text)
            assert n == 1
        self.vcl.write_text(text)
        self.log_path = workdir / "varnishd.log"
        self.port = free_port()
        argv = [
            varnishd,
            "-F",
            "-a",
            f"{HOST}:{self.port}",
            "-T",
            f"{HOST}:{free_port()}",
            "-f",
            str(self.vcl),
            "-n",
            str(workdir / "varnish"),
            "-s",
            "malloc,64m",
            # As deploy/README.md says to run it: the origin's codings and ETags as they are.
            "-p",
            "http_gzip_support=off",
        ]
        if os.geteuid() == 0:
            # As root varnishd would drop to its own users, who cannot read a private
            # temporary directory.
            argv += ["-j", "none"]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                argv,
                env=clean_environ(),
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break
                with contextlib.suppress(httpx.TransportError):
                    # A read that the tests' documents do not share a cache entry with.
                    if client.get(self.url("/openapi.json")).status_code == 200:
                        return
                time.sleep(0.1)
        raise RuntimeError(f"varnishd did not come up\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
        # The manager and its cache child share the session (and process group) we gave them.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


# -- the origin, logging every request --------------------------------------------------------


@dataclass(frozen=True)
class OriginHit:
    method: str
    path: str
    status: int
    if_none_match: str
    if_modified_since: str


class Origin(UwsgiServer):
    """The shipped service, with uWSGI's request log on (a copy of uwsgi.ini that only adds it)."""

    def __init__(self, workdir: Path) -> None:
        self.request_log = workdir / "requests.log"
        ini = workdir / "uwsgi-logged.ini"
        text = (PROJECT_ROOT / "uwsgi.ini").read_text()
        text, n = re.subn(r"(?m)^disable-logging = true$", "disable-logging = false", text)
        assert n == 1, "uwsgi.ini no longer has disable-logging = true"
        text += f"\nreq-logger = file:{self.request_log}\nlog-format = {LOG_FORMAT}\n"
        ini.write_text(text)
        super().__init__(
            f"sqlite:///{workdir / 'simplefeed.sqlite3'}",
            workdir / "archive",
            workdir,
            page_size=PAGE_SIZE,
            processes=2,
            ini=ini,
            extra_env={"SIMPLEFEED_RECENT_MAX_AGE": str(MAX_AGE)},
        )

    def hits(self) -> list[OriginHit]:
        """The requests logged so far (uWSGI writes a line once it has answered: wait for the
        log to stop growing, briefly)."""
        size, deadline = -1, time.monotonic() + 2.0
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = self.request_log.stat().st_size if self.request_log.exists() else 0
            if now == size:
                break
            size = now
        try:
            lines = self.request_log.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            m = LOG_LINE.match(line)
            if m:
                method, path, status, inm, ims = m.groups()
                # uWSGI logs a missing variable as "-".
                out.append(
                    OriginHit(
                        method, path, int(status), *("" if v == "-" else v for v in (inm, ims))
                    )
                )
        return out

    def hits_for(self, path: str) -> list[OriginHit]:
        return [h for h in self.hits() if h.path == path and h.method in ("GET", "HEAD")]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Origin, Varnish]]:
    varnishd = ensure_varnishd()
    origin = Origin(tmp_path)
    with origin:
        cache = Varnish(varnishd, tmp_path, origin.port)
        try:
            cache.wait_ready()
            yield origin, cache
        finally:
            cache.stop()


# -- the test ---------------------------------------------------------------------------------


def titles(body: bytes) -> list[str]:
    return re.findall(r"<title[^>]*>([^<]*)</title>", body.decode())


def test_varnish_in_front_of_the_service(stack: tuple[Origin, Varnish]) -> None:
    origin, cache = stack
    auth = {"Authorization": f"Bearer {origin.token}"}
    with httpx.Client(timeout=10.0) as http:
        # 25 events through the cache (POST passes, with its credentials): pages 1-2 frozen,
        # page 3 working with 5 entries.
        r = http.post(
            cache.url("/entries"), json=[{"title": f"e{i}"} for i in range(25)], headers=auth
        )
        assert r.status_code == 201, r.text
        assert [h.method for h in origin.hits() if h.path == "/entries"] == ["POST"]

        # Archived pages: fetched from the origin once, then served by the cache.
        archived = ["/pages/1", "/pages/2"]
        for path in archived:
            for i in range(20):
                r = http.get(cache.url(path))
                assert r.status_code == 200
                assert r.headers["x-cache"] == ("MISS" if i == 0 else "HIT"), (path, i)
                assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
            assert len(origin.hits_for(path)) == 1, origin.hits_for(path)

        # Many clients polling /recent for a while: some plain, some conditional as consumers
        # are. The origin sees about one request per max-age, conditional once it has a copy.
        stop = time.monotonic() + POLL_SECONDS
        statuses: dict[int, int] = {}
        ages: set[int] = set()
        lock = threading.Lock()

        def poll(n: int) -> None:
            etag = None
            done = 0
            with httpx.Client(timeout=10.0) as client:
                # A fixed count as well as a time, so that a busy machine polls no less.
                while done < 12 or time.monotonic() < stop:
                    done += 1
                    headers = {"If-None-Match": etag} if etag and n % 2 else {}
                    resp = client.get(cache.url("/recent"), headers=headers)
                    with lock:
                        statuses[resp.status_code] = statuses.get(resp.status_code, 0) + 1
                        ages.add(int(resp.headers.get("age", "0")))
                    etag = resp.headers.get("etag", etag)
                    time.sleep(0.02)

        before = len(origin.hits_for("/recent"))
        with ThreadPoolExecutor(POLLERS) as pool:
            list(pool.map(poll, range(POLLERS)))
        recent_hits = origin.hits_for("/recent")[before:]
        assert set(statuses) <= {200, 304}, statuses
        # The pollers share each copy: the origin sees at most one poll in POLLERS. The cache
        # keeps a copy for its max-age (its Age reaches the last whole second of it), and
        # never serves one older.
        polls = sum(statuses.values())
        assert 1 <= len(recent_hits) <= polls / POLLERS, (len(recent_hits), polls)
        assert max(ages) == MAX_AGE - 1, ages
        revalidations = [h for h in recent_hits if h.if_none_match or h.if_modified_since]
        assert any(h.status == 304 for h in revalidations), recent_hits
        assert all(h.status == 304 for h in revalidations), recent_hits

        # A publish shows up through the cache within max-age.
        assert "late 2" not in titles(http.get(cache.url("/recent")).content)
        r = http.post(
            cache.url("/entries"), json=[{"title": f"late {i}"} for i in range(3)], headers=auth
        )
        assert r.status_code == 201, r.text
        # Until the cache's copy expires it serves the old one, within its max-age.
        deadline = time.monotonic() + 60
        while "late 2" not in titles((seen := http.get(cache.url("/recent"))).content):
            assert int(seen.headers.get("age", "0")) <= MAX_AGE - 1, seen.headers
            assert time.monotonic() < deadline, "publish never seen through the cache"
            time.sleep(0.05)
        # The origin was asked conditionally and answered with the new document.
        last = origin.hits_for("/recent")[-1]
        assert last.status == 200 and last.if_none_match, last

        # Page 3 is the working page, cached for max-age; two more events fill and freeze it,
        # and within max-age the cache has the archived bytes, then keeps them.
        assert b"fh:archive" not in http.get(cache.url("/pages/3")).content
        r = http.post(
            cache.url("/entries"), json=[{"title": f"late {i}"} for i in (3, 4)], headers=auth
        )
        assert r.status_code == 201, r.text
        deadline = time.monotonic() + 60
        while b"fh:archive" not in (page3 := http.get(cache.url("/pages/3"))).content:
            assert int(page3.headers.get("age", "0")) <= MAX_AGE - 1, page3.headers
            assert time.monotonic() < deadline, "page 3 still the working page in the cache"
            time.sleep(0.05)
        archived.append("/pages/3")
        assert page3.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert "late 4" in titles(page3.content)

        # No cached archived page differs from the origin's bytes, or from the file.
        assert len(origin.hits_for("/pages/1")) == len(origin.hits_for("/pages/2")) == 1
        for path in archived:
            cached = http.get(cache.url(path))
            assert cached.headers["x-cache"] == "HIT"
            direct = http.get(origin.url(path))
            file_bytes = (origin.archive_dir / path.lstrip("/")).read_bytes()
            assert cached.content == direct.content == file_bytes, path
            assert cached.headers["last-modified"] == direct.headers["last-modified"]


def test_a_long_poll_passes_through_the_cache_to_the_origin(
    stack: tuple[Origin, Varnish],
) -> None:
    """A consumer long-polling through Varnish (``Prefer: wait`` with its current ETag) is held
    by the origin until the feed changes, as if the cache were not there: the VCL passes such
    requests (deploy/varnish.vcl). Without that rule the cache answers the conditional request
    304 from its fresh copy at once, and the consumer polls in a loop instead of waiting. The
    cache's copy for other clients is untouched by the held request."""
    origin, cache = stack
    auth = {"Authorization": f"Bearer {origin.token}"}
    with httpx.Client(timeout=20.0) as http:
        r = http.post(cache.url("/entries"), json={"title": "first"}, headers=auth)
        assert r.status_code == 201, r.text
        etag = http.get(cache.url("/recent")).headers["etag"]
        assert http.get(cache.url("/recent")).headers["x-cache"] == "HIT"
        held: list[httpx.Response] = []
        waiting = threading.Thread(
            target=lambda: held.append(
                http.get(cache.url("/recent"), headers={"If-None-Match": etag, "Prefer": "wait=15"})
            )
        )
        waiting.start()
        time.sleep(1.5)
        assert held == [], "answered at once: the cache did not pass the long-poll through"
        r = httpx.post(cache.url("/entries"), json={"title": "second"}, headers=auth)
        assert r.status_code == 201, r.text
        waiting.join(timeout=15)
        assert len(held) == 1
        answer = held[0]
        assert answer.status_code == 200
        assert answer.headers["preference-applied"] == "wait=15"
        assert answer.headers["x-cache"] == "MISS"
        assert answer.headers["etag"] != etag
        assert "second" in titles(answer.content)
        # Reaching the origin: the held request is in its log as a conditional GET.
        assert any(h.if_none_match == etag for h in origin.hits_for("/recent"))


class ReadOnlyOrigin(Origin):
    """The origin with /healthz unhealthy for a publishing reason (SIMPLEFEED_MIN_FREE_BYTES
    above any disk's free space, as in the operator trial) while reads work: ready once /recent
    answers."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.extra_env["SIMPLEFEED_MIN_FREE_BYTES"] = str(10**18)
        self.extra_env["SIMPLEFEED_BASE_URL"] = BASE_URL

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url("/recent"), timeout=2.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"/recent did not answer 200\n{self.log()}")


def test_reads_through_the_cache_while_only_publishing_is_unhealthy(tmp_path: Path) -> None:
    """/healthz is 503 when publishing cannot proceed (here: too little free disk) although
    every read works; the VCL's probe asks a read (/recent), so the backend stays healthy:
    archived pages not yet cached are fetched (not "503 Backend fetch failed") and /recent is
    fresh, not the grace copy."""
    varnishd = ensure_varnishd()
    writer = Origin(tmp_path)
    # One base URL across the two runs (each gets a port of its own).
    writer.extra_env["SIMPLEFEED_BASE_URL"] = BASE_URL
    with writer:  # publish first, while the disk check still passes
        auth = {"Authorization": f"Bearer {writer.token}"}
        r = httpx.post(
            writer.url("/entries"), json=[{"title": f"e{i}"} for i in range(25)], headers=auth
        )
        assert r.status_code == 201, r.text
    with ReadOnlyOrigin(tmp_path) as origin:
        assert httpx.get(origin.url("/healthz")).status_code == 503
        cache = Varnish(varnishd, tmp_path, origin.port, probe_interval="0.2s")
        try:
            cache.wait_ready()
            time.sleep(3.0)  # probes: 15 at 0.2 s, every one a /healthz 503 had it asked that
            with httpx.Client(timeout=10.0) as http:
                assert http.get(cache.url("/healthz")).status_code == 503  # passed on, as is
                for path in ("/pages/1", "/pages/2", "/recent", "/pages/3"):
                    r = http.get(cache.url(path))
                    assert r.status_code == 200, (path, r.status_code, r.text[:200])
                    assert r.content == http.get(origin.url(path)).content, path
                    assert r.headers["x-cache"] == "MISS", path
        finally:
            cache.stop()


def _plain_client() -> httpx.Client:
    """A client that sends only the Accept-Encoding a request names (none by default)."""
    client = httpx.Client(timeout=10.0)
    del client.headers["accept-encoding"]
    return client


@pytest.mark.parametrize(
    ("accept_encoding", "coding"),
    [(None, None), ("identity", None), ("gzip", "gzip"), ("br", "br"), ("gzip, deflate, br", "br")],
)
def test_the_origins_codings_and_etags_pass_through(
    stack: tuple[Origin, Varnish], accept_encoding: str | None, coding: str | None
) -> None:
    """The origin negotiates br, gzip and identity. Through Varnish (http_gzip_support off,
    Accept-Encoding normalised in the VCL) each client gets the origin's representation for
    what it accepts, headers and bytes, and a 304 for its validator, from the origin's copy and
    then from the cache's. /recent's validator is its strong ETag; an archived page's, from
    uWSGI's static route, its Last-Modified."""
    origin, cache = stack
    auth = {"Authorization": f"Bearer {origin.token}"}
    r = httpx.post(
        origin.url("/entries"), json=[{"title": f"e{i}"} for i in range(15)], headers=auth
    )
    assert r.status_code == 201, r.text
    headers = {"Accept-Encoding": accept_encoding} if accept_encoding else {}
    with _plain_client() as http:
        for path in ("/pages/1", "/recent"):
            direct = http.get(origin.url(path), headers=headers)
            assert direct.headers.get("content-encoding") == coding, path
            if path == "/recent":
                name, validator = "etag", direct.headers["etag"]
                assert not validator.startswith("W/"), validator
                condition = {"If-None-Match": validator}
            else:
                name, validator = "last-modified", direct.headers["last-modified"]
                condition = {"If-Modified-Since": validator}
            for i in range(2):
                served = http.get(cache.url(path), headers=headers)
                assert served.status_code == 200
                if i:
                    assert served.headers["x-cache"] == "HIT", path
                assert served.headers.get("content-encoding") == coding, path
                assert served.headers[name] == validator, path
                assert served.headers["vary"] == "Accept-Encoding", path
                assert served.content == direct.content, path
                r = http.get(cache.url(path), headers={**headers, **condition})
                assert r.status_code == 304, (path, r.status_code, r.headers)
                assert r.headers.get(name, validator) == validator

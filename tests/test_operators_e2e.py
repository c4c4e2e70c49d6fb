"""What an operator sees of a real ``simplefeed serve`` (uWSGI, several processes): the base URL
it embeds, its access log, its metrics.

Each test runs its own server on a temporary SQLite file (the log and metrics are per server).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from lxml import etree

from bench.servers import PROJECT_ROOT, ServerError, UwsgiServer, free_port

pytestmark = pytest.mark.e2e

ATOM = {"a": "http://www.w3.org/2005/Atom"}


def server(tmp_path: Path, **kwargs: object) -> UwsgiServer:
    return UwsgiServer.scratch(
        tmp_path,
        **kwargs,  # type: ignore[arg-type]
    )


def test_serve_port_without_base_url_links_to_that_port(tmp_path: Path) -> None:
    with server(tmp_path, base_url_env=False) as s:
        expected = f"http://localhost:{s.port}"
        response = httpx.get(s.url("/recent"))
        assert response.status_code == 200
        doc = etree.fromstring(response.content)
        assert doc.xpath("a:link[@rel='self']/@href", namespaces=ATOM) == [f"{expected}/recent"]
        assert f"links say {expected}" in s.log()
        # The URL a consumer must start at: at http://127.0.0.1:PORT/recent it would find
        # the links at another origin and stop at the first archived page.
        assert f"simplefeed: consumers: {expected}/recent" in s.log()


def test_serve_takes_its_processes_and_threads_from_the_settings(tmp_path: Path) -> None:
    """`SIMPLEFEED_PROCESSES=8` was overridden by `serve`'s own default (4), and uWSGI read
    `SIMPLEFEED_THREADS=abc` (or 0) as no threads: one request at a time per worker, a
    waiting long-poll holding all of it. Now the settings decide, checked."""
    env = {"SIMPLEFEED_PROCESSES": "3", "SIMPLEFEED_THREADS": "7"}
    with server(tmp_path, processes=None, extra_env=env) as s:
        assert httpx.get(s.url("/recent")).status_code == 200
        log = s.log()
    assert "(3 processes of 7 threads)" in log
    assert "spawned uWSGI worker 3 " in log and "spawned uWSGI worker 4 " not in log, log[-3000:]
    for threads in ("abc", "0"):
        refused = server(tmp_path, extra_env={"SIMPLEFEED_THREADS": threads}).cli(
            "serve", "--port", "1", check=False
        )
        assert refused.returncode == 1
        assert refused.stderr.startswith("Error: SIMPLEFEED_THREADS must be"), refused.stderr


def test_every_worker_logs_a_misspelt_setting(tmp_path: Path) -> None:
    """A deployment's typo is in the log the operator reads, not only in a command's output:
    uWSGI started from its ini file gets the warning too."""

    def warnings() -> list[dict[str, Any]]:
        return [
            json.loads(line)
            for line in s.log().splitlines()
            if line.startswith("{") and "SIMPLEFEED_MAXWAIT" in line
        ]

    with server(tmp_path, extra_env={"SIMPLEFEED_MAXWAIT": "5"}) as s:
        assert httpx.get(s.url("/recent")).status_code == 200
        # Healthy once one worker answers: the other may still be loading the app (lazy-apps).
        deadline = time.monotonic() + 30
        while len({w["pid"] for w in warnings()}) < s.processes and time.monotonic() < deadline:
            time.sleep(0.1)
        log, found = s.log(), warnings()
    message = (
        "SIMPLEFEED_MAXWAIT is set but is not a setting, so it is ignored: did you mean"
        " SIMPLEFEED_MAX_WAIT?"
    )
    assert f"simplefeed: warning: {message}" in log  # `simplefeed serve`, before uWSGI
    assert len({w["pid"] for w in found}) == s.processes == 2
    assert {(w["level"], w["message"]) for w in found} == {("WARNING", message)}


def uwsgi_until_it_stops(ini: Path, env: dict[str, str]) -> tuple[int, str]:
    """uWSGI started without `serve`, from the checkout, until it exits (60 s at most): its exit
    status and its standard error."""
    uwsgi = subprocess.Popen(
        [str(Path(sys.executable).with_name("uwsgi")), "--ini", str(ini)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: nothing outlives the test
    )
    try:
        _, stderr = uwsgi.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(uwsgi.pid, signal.SIGKILL)
        uwsgi.wait()
    return uwsgi.returncode, stderr


def test_start_refuses_a_base_url_other_than_the_archived_pages(tmp_path: Path) -> None:
    """The issue's trap: served with `--port` alone, pages froze with links to that port;
    started on another port, the service refuses (serve, db upgrade, uWSGI itself) instead of
    mixing links, and starts again with the pages' base URL."""
    first = server(tmp_path, page_size=2, base_url_env=False)
    with first:
        old_base = f"http://localhost:{first.port}"
        auth = {"Authorization": f"Bearer {first.token}"}
        batch = [{"title": f"e{i}"} for i in range(3)]
        assert httpx.post(first.url("/entries"), json=batch, headers=auth).status_code == 201
        page = httpx.get(first.url("/pages/1")).content
    assert f'href="{old_base}/pages/1"'.encode() in page

    again = server(tmp_path, page_size=2, base_url_env=False)
    with pytest.raises(ServerError, match="uWSGI exited before answering"):
        again.start(attempts=1)
    new_base = f"http://localhost:{again.port}"
    refusal = (
        f"feed 'events' has archived pages linking to {old_base}, but the base URL is now "
        f"{new_base}: set SIMPLEFEED_BASE_URL={old_base} again, or move the feed to the new one "
        f"with `simplefeed archive rebase {new_base} --feed events` (docs/how-to/rebase.md)"
    )
    refused = again.log().rsplit("=== simplefeed serve", 1)[1]  # the log is the first's too
    assert f"Error: {refusal}\n" in refused
    assert "Traceback" not in refused

    other = "http://feeds.elsewhere.test"
    upgrade = server(tmp_path, extra_env={"SIMPLEFEED_BASE_URL": other}).cli(
        "db", "upgrade", check=False
    )
    assert upgrade.returncode == 1
    assert upgrade.stderr.splitlines() == [
        f"Error: feed 'events' has archived pages linking to {old_base}, but the base URL is now "
        f"{other}: set SIMPLEFEED_BASE_URL={old_base} again, or move the feed to the new one "
        f"with `simplefeed archive rebase {other} --feed events` (docs/how-to/rebase.md)"
    ]

    # uWSGI started without `serve`: every worker refuses to load the app, and uWSGI stops.
    env = uwsgi_alone_env(server(tmp_path, extra_env={"SIMPLEFEED_BASE_URL": other}), tmp_path)
    returncode, stderr = uwsgi_until_it_stops(PROJECT_ROOT / "uwsgi.ini", env)
    assert returncode == 22
    critical = [json.loads(line) for line in stderr.splitlines() if '"CRITICAL"' in line]
    assert critical and critical[0]["message"].startswith(
        f"not starting: feed 'events' has archived pages linking to {old_base}, but the base URL "
        f"is now {other}"
    )

    # With the pages' own base URL it starts, and serves the same bytes.
    with server(tmp_path, page_size=2, extra_env={"SIMPLEFEED_BASE_URL": old_base}) as fixed:
        assert httpx.get(fixed.url("/pages/1")).content == page


def test_start_refuses_a_default_feed_that_does_not_exist(tmp_path: Path) -> None:
    """SIMPLEFEED_DEFAULT_FEED changed and the feed not created: /recent and POST /entries
    answered 404 while /healthz said ok. `serve` and uWSGI alone now refuse, naming the fix."""
    with server(tmp_path):  # the database migrated, 'events' created
        pass
    refusal = (
        "SIMPLEFEED_DEFAULT_FEED names feed 'orders', which does not exist, so /recent and POST"
        " /entries would answer 404: create it (`simplefeed feed create orders`) or name one of"
        " the feeds there are (events)"
    )
    orders = {"SIMPLEFEED_DEFAULT_FEED": "orders"}
    serve = server(tmp_path, extra_env=orders).cli("serve", "--port", "1", check=False)
    assert serve.returncode == 1
    assert serve.stderr.splitlines() == [f"Error: {refusal}"]

    env = uwsgi_alone_env(server(tmp_path, extra_env=orders), tmp_path)
    returncode, stderr = uwsgi_until_it_stops(PROJECT_ROOT / "uwsgi.ini", env)
    assert returncode == 22
    critical = [json.loads(line) for line in stderr.splitlines() if '"CRITICAL"' in line]
    assert critical and critical[0]["message"] == f"not starting: {refusal}", stderr[-3000:]

    server(tmp_path, extra_env=orders).cli("feed", "create", "orders")
    with server(tmp_path, extra_env=orders) as fixed:
        assert httpx.get(fixed.url("/recent")).status_code == 200


def uwsgi_alone_env(s: UwsgiServer, tmp_path: Path) -> dict[str, str]:
    """The environment of uWSGI started without `serve` against ``s``'s database."""
    env = s.env()
    env["SIMPLEFEED_HTTP_SOCKET"] = f"127.0.0.1:{free_port()}"
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)
    env["SIMPLEFEED_PROCESSES"] = "2"
    return env


@pytest.mark.parametrize("state", ["missing", "empty", "at an older schema"])
def test_uwsgi_alone_refuses_a_database_that_serve_refuses(tmp_path: Path, state: str) -> None:
    """`uwsgi --ini uwsgi.ini` (docs/how-to/run.md) against a SQLite file that is not there, has
    no tables or is at an older schema started and answered every request 503 "the database
    is unavailable". It now refuses as `serve` does, in one CRITICAL line with serve's words,
    and stops with the status of a worker that could not load its app (22), not 0."""
    s = server(tmp_path)
    database = tmp_path / "simplefeed.sqlite3"
    if state == "empty":
        database.touch()
    elif state == "at an older schema":
        s.migrate()
        with contextlib.closing(sqlite3.connect(database)) as db, db:
            db.execute("UPDATE alembic_version SET version_num = '0003'")
    serve = s.cli("serve", "--port", str(free_port()), check=False)
    assert serve.returncode == 1 and serve.stderr.startswith("Error: database "), serve.stderr
    refusal = serve.stderr.strip().removeprefix("Error: ")

    returncode, stderr = uwsgi_until_it_stops(
        PROJECT_ROOT / "uwsgi.ini", uwsgi_alone_env(s, tmp_path)
    )
    assert returncode == 22, stderr[-3000:]
    critical = [json.loads(line) for line in stderr.splitlines() if '"CRITICAL"' in line]
    assert critical and critical[0]["message"] == f"not starting: {refusal}", stderr[-3000:]
    assert state != "missing" or not database.exists()  # nothing made in its place


def test_uwsgi_alone_starts_while_the_database_does_not_answer(tmp_path: Path) -> None:
    """A database server that is down may come up: uWSGI alone starts, warns that it could not
    check the schema, and answers 503 with Retry-After until the database answers."""
    s = UwsgiServer(
        f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none",
        tmp_path / "archive",
        tmp_path,
    )
    env = uwsgi_alone_env(s, tmp_path)
    uwsgi = subprocess.Popen(
        [str(Path(sys.executable).with_name("uwsgi")), "--ini", str(PROJECT_ROOT / "uwsgi.ini")],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        url = f"http://{env['SIMPLEFEED_HTTP_SOCKET']}/healthz"
        deadline = time.monotonic() + 60
        while True:
            assert uwsgi.poll() is None, uwsgi.communicate()[1][-3000:]
            try:
                health = httpx.get(url)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert health.status_code == 503 and health.headers["Retry-After"]
    finally:
        os.killpg(uwsgi.pid, signal.SIGTERM)
        try:
            _, stderr = uwsgi.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(uwsgi.pid, signal.SIGKILL)
            _, stderr = uwsgi.communicate()
    warnings = [json.loads(line) for line in stderr.splitlines() if '"WARNING"' in line]
    assert any(
        w["message"].startswith("schema, base URL and default feed not checked: database ")
        and "does not answer" in w["message"]
        for w in warnings
    ), stderr[-3000:]


def test_uwsgi_without_a_shared_area_refuses_to_start_saying_what_to_add(tmp_path: Path) -> None:
    """An operator's own uWSGI configuration without `sharedarea` (where the node counts its
    waiting long-polls): the first worker to load the app refuses in one CRITICAL line naming
    the setting, and uWSGI stops, instead of every worker failing on a missing attribute of
    the uwsgi module."""
    ini = tmp_path / "uwsgi.ini"
    shipped = (PROJECT_ROOT / "uwsgi.ini").read_text().splitlines(keepends=True)
    ini.write_text("".join(line for line in shipped if not line.startswith("sharedarea")))
    assert ini.read_text() != (PROJECT_ROOT / "uwsgi.ini").read_text()
    returncode, stderr = uwsgi_until_it_stops(ini, uwsgi_alone_env(server(tmp_path), tmp_path))
    assert returncode == 22
    critical = [json.loads(line) for line in stderr.splitlines() if '"CRITICAL"' in line]
    assert critical, stderr[-3000:]
    assert critical[0]["message"] == (
        "not starting: uWSGI has no shared area, where the node counts its waiting long-polls:"
        " add `sharedarea = 1` to the uWSGI configuration (the shipped uwsgi.ini has it)"
    )
    # (Workers still importing when the master stops them print their KeyboardInterrupt, from
    # wherever the import was: once inside pathlib, "object has no attribute '_str'".)
    assert "has no attribute 'sharedarea" not in stderr


# -- the access log ---------------------------------------------------------------------------


def log_lines(s: UwsgiServer) -> list[dict[str, Any]]:
    """The JSON lines of the server's log (uWSGI's own start-up lines are not JSON)."""
    return [json.loads(line) for line in s.log().splitlines() if line.startswith("{")]


def wait_for_line(s: UwsgiServer, **match: Any) -> dict[str, Any]:
    """The first JSON log line with these fields (lines are written once a request is answered:
    wait a little for them)."""
    deadline = time.monotonic() + 10
    while True:
        for line in log_lines(s):
            if all(line.get(k) == v for k, v in match.items()):
                return line
        if time.monotonic() > deadline:
            raise AssertionError(f"no log line with {match}:\n{s.log()[-3000:]}")
        time.sleep(0.1)


def test_access_log_one_json_line_per_request(tmp_path: Path) -> None:
    with server(tmp_path, page_size=2) as s:
        token_id = int(s.token.split("_")[1])
        secret = s.token.split("_", 2)[2]
        auth = {"Authorization": f"Bearer {s.token}"}
        batch = [{"title": f"e{i}"} for i in range(3)]
        published = httpx.post(s.url("/entries"), json=batch, headers=auth)
        assert published.status_code == 201
        line = wait_for_line(s, method="POST", request_id=published.headers["X-Request-Id"])
        assert line["path"] == "/entries"
        assert line["status"] == 201
        assert line["feed"] == "events"
        assert line["token_id"] == token_id
        assert (line["created"], line["seq_first"], line["seq_last"]) == (3, 1, 3)
        assert line["bytes"] == int(published.headers["Content-Length"])  # as sent
        assert line["duration_ms"] > 0
        assert line["level"] == "INFO" and line["logger"] == "simplefeed.access"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"])

        recent = httpx.get(s.url("/recent"))
        line = wait_for_line(s, request_id=recent.headers["X-Request-Id"])
        assert (line["method"], line["path"], line["status"]) == ("GET", "/recent", 200)
        assert line["bytes"] == int(recent.headers["Content-Length"])
        again = httpx.get(s.url("/recent"), headers={"If-None-Match": recent.headers["ETag"]})
        assert again.status_code == 304
        line = wait_for_line(s, request_id=again.headers["X-Request-Id"])
        assert (line["status"], line["bytes"]) == (304, 0)

        # An archived page that the app sends (uWSGI sends the canonical URL's file itself,
        # without the app, so without a line): one line too.
        page = httpx.get(s.url("/pages/1?from=log"))
        assert page.status_code == 200
        line = wait_for_line(s, request_id=page.headers["X-Request-Id"])
        sent = int(page.headers["Content-Length"])
        assert (line["path"], line["status"], line["bytes"]) == ("/pages/1", 200, sent)
        static = httpx.get(s.url("/pages/1"))
        assert static.status_code == 200 and "X-Request-Id" not in static.headers

        # Refused with a request id the client can quote; a proxy's own id is kept.
        missing = httpx.get(s.url("/feeds/nope/recent"), headers={"X-Request-Id": "edge-42"})
        assert missing.status_code == 404
        assert missing.headers["X-Request-Id"] == "edge-42"
        line = wait_for_line(s, request_id="edge-42")
        assert (line["status"], line["feed"]) == (404, "nope")

        # Every request the app answered has exactly one line, and the secret is never logged.
        ids = [published, recent, again, page, missing]
        for response in ids:
            rid = response.headers["X-Request-Id"]
            assert [x["request_id"] for x in log_lines(s) if x.get("request_id") == rid] == [rid]
        assert secret not in s.log()


def test_log_lines_stay_small_and_valid_under_hostile_requests(tmp_path: Path) -> None:
    """Huge paths and headers, quotes and control characters: every line stays one JSON object
    of bounded size, and a bad token's secret is not echoed."""
    with server(tmp_path) as s:
        hostile_paths = [
            "/" + "a" * 2000,
            "/" + "b" * 6000,  # over uWSGI's buffer: it drops the connection
            "/feeds/" + "%22%0A%5C" * 200 + "/recent",
            '/entries"},{"status":200',
        ]
        with httpx.Client() as client:

            def send(method: str, path: str, **kwargs: Any) -> None:
                with contextlib.suppress(httpx.TransportError):
                    client.request(method, s.url(path), **kwargs)

            for path in hostile_paths:
                send("GET", path)
            send(
                "POST",
                "/entries",
                json={"title": "x"},
                headers={"Authorization": "Bearer sft_1_" + "S3CRETSECRET" * 40},
            )
            send("GET", "/recent", headers={f"X-Junk-{i}": "j" * 1000 for i in range(3)})
            last = client.get(s.url("/healthz"))
        wait_for_line(s, request_id=last.headers["X-Request-Id"])
        lines = [line for line in s.log().splitlines() if line.startswith("{")]
        assert len(lines) >= 6
        for line in lines:
            assert len(line.encode()) <= 2048, line[:200]
            json.loads(line)
        assert "S3CRETSECRET" not in s.log()


def test_database_fault_logged_with_the_request_id(tmp_path: Path) -> None:
    """A 503 (the database failing) is logged as a warning with the request id the client got."""
    with server(tmp_path) as s:
        path = tmp_path / "simplefeed.sqlite3"
        with sqlite3.connect(path) as conn:
            conn.execute("ALTER TABLE feeds RENAME TO feeds_away")
        try:
            failed = httpx.get(s.url("/healthz"))
            failed = httpx.get(s.url("/recent"))
        finally:
            with sqlite3.connect(path) as conn:
                conn.execute("ALTER TABLE feeds_away RENAME TO feeds")
        assert failed.status_code == 503
        rid = failed.headers["X-Request-Id"]
        access = wait_for_line(s, request_id=rid, logger="simplefeed.access")
        assert (access["status"], access["level"]) == (503, "ERROR")
        warnings = [
            x for x in log_lines(s) if x.get("request_id") == rid and x["level"] == "WARNING"
        ]
        assert warnings, "the fault itself was not logged with the request id"
        assert httpx.get(s.url("/recent")).status_code == 200


# -- retiring a feed ----------------------------------------------------------------------------


def test_retired_feed_refuses_publishes_with_410_and_serves_reads(tmp_path: Path) -> None:
    with server(tmp_path, page_size=2) as s:
        auth = {"Authorization": f"Bearer {s.token}"}
        batch = [{"title": f"e{i}"} for i in range(3)]
        assert httpx.post(s.url("/entries"), json=batch, headers=auth).status_code == 201
        page = httpx.get(s.url("/pages/1"))
        recent = httpx.get(s.url("/recent"))
        s.cli("feed", "retire", "events")
        refused = httpx.post(s.url("/entries"), json={"title": "late"}, headers=auth)
        assert refused.status_code == 410
        assert refused.headers["content-type"] == "application/json"
        assert (refused.json()["error"], refused.json()["feed"]) == ("gone", "events")
        line = wait_for_line(s, request_id=refused.headers["X-Request-Id"])
        assert (line["status"], line["feed"]) == (410, "events")
        again = httpx.get(s.url("/pages/1"))
        assert (again.status_code, again.content) == (200, page.content)
        assert httpx.get(s.url("/recent")).content == recent.content
        assert s.problems() == []


# -- metrics ----------------------------------------------------------------------------------


def scrape(s: UwsgiServer) -> dict[str, float]:
    """``GET /metrics``, parsed: ``name{labels}`` -> value (labels as the server wrote them)."""
    response = httpx.get(s.url("/metrics"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    values: dict[str, float] = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            values[key] = float(value)
    return values


def metrics_directory(s: UwsgiServer) -> Path:
    """The run's metrics directory, as the running master's environment names it."""
    assert s.process is not None
    environ = Path(f"/proc/{s.process.pid}/environ").read_text().split("\0")
    return Path(
        dict(item.split("=", 1) for item in environ if "=" in item)["PROMETHEUS_MULTIPROC_DIR"]
    )


def test_metrics_add_up_across_worker_processes(tmp_path: Path) -> None:
    # One thread per worker, and a connection per publish: each worker then takes one of the
    # producers' requests at a time (with 200 threads, one worker may take them all).
    with server(tmp_path, page_size=10, processes=3, extra_env={"SIMPLEFEED_THREADS": "1"}) as s:
        # Until the other workers have loaded the app, the first one takes every request.
        s.wait_all_workers()
        auth = {"Authorization": f"Bearer {s.token}"}
        ids = "tag:ops.simplefeed.test,2026:e"
        with httpx.Client(headers=auth) as client:
            # Five producers at once, so that several workers publish.
            with ThreadPoolExecutor(5) as pool:
                statuses = list(
                    pool.map(
                        lambda i: (
                            httpx.post(
                                s.url("/entries"),
                                json={"title": f"e{i}", "id": f"{ids}{i}"},
                                headers=auth,
                            ).status_code
                        ),
                        range(25),
                    )
                )
            assert statuses == [201] * 25
            # A replay stores nothing and is not counted.
            replay = client.post(s.url("/entries"), json={"title": "e0", "id": f"{ids}0"})
            assert replay.status_code == 200
            etag = client.get(s.url("/recent")).headers["ETag"]
            for _ in range(12):
                assert (
                    client.get(s.url("/recent"), headers={"If-None-Match": etag}).status_code == 304
                )
            for _ in range(4):
                assert client.get(s.url("/nope")).status_code == 404
            last = client.get(s.url("/healthz"))
        wait_for_line(s, request_id=last.headers["X-Request-Id"])
        publishers = {x["pid"] for x in log_lines(s) if x.get("method") == "POST"}
        assert len(publishers) >= 2, "every publish went to one worker: nothing to add up"

        for _ in range(6):  # whichever worker answers the scrape, the sums are the same
            m = scrape(s)
            assert m['simplefeed_events_published_total{feed="events"}'] == 25
            assert m['simplefeed_publish_duration_seconds_count{feed="events"}'] == 26
            assert m['simplefeed_pages_frozen_total{feed="events"}'] == 2
            assert m['simplefeed_reads_total{document="recent",status="304"}'] == 12
            assert m['simplefeed_reads_total{document="recent",status="200"}'] == 1
            assert m['simplefeed_read_duration_seconds_count{document="recent",status="304"}'] == 12
            assert m['simplefeed_http_errors_total{status="404"}'] == 4
            assert m['simplefeed_head_sequence{feed="events"}'] == 25
            assert m['simplefeed_archived_pages{feed="events"}'] == 2
            assert 0 <= m['simplefeed_head_age_seconds{feed="events"}'] < 600

        metrics_dir = metrics_directory(s)
        assert metrics_dir.is_dir()
    assert not metrics_dir.exists(), "the run's metrics files outlived the server"


def test_a_graceful_reload_brings_the_service_back(tmp_path: Path) -> None:
    """`kill -HUP` on the master (uWSGI's graceful reload) ended the service.
    uWSGI ran again the interpreter under pyuwsgi's script, not the venv's ("No module named
    'pyuwsgi'"), and had removed the metrics directory (its exit hook runs before a reload),
    which every new worker then failed on. Now it comes back, with its entries, and goes on."""
    with server(tmp_path, page_size=5) as s:
        auth = {"Authorization": f"Bearer {s.token}"}
        for i in range(7):
            assert (
                httpx.post(s.url("/entries"), json={"title": f"e{i}"}, headers=auth).status_code
                == 201
            )
        assert s.process is not None
        os.kill(s.process.pid, signal.SIGHUP)
        deadline = time.monotonic() + 120  # a reload on a busy machine
        while "gracefully (RE)spawned uWSGI master process" not in s.log():
            assert s.running and time.monotonic() < deadline, s.log()[-3000:]
            time.sleep(0.1)
        healthy = None
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                healthy = httpx.get(s.url("/healthz")).status_code
                if healthy == 200:
                    break
            time.sleep(0.1)
        assert healthy == 200, s.log()[-3000:]
        after = httpx.post(s.url("/entries"), json={"title": "after"}, headers=auth)
        assert (after.status_code, after.json()["seq"]) == (201, 8)
        assert httpx.get(s.url("/metrics")).status_code == 200
        assert "Traceback" not in s.log()
        metrics_dir = metrics_directory(s)
        assert metrics_dir.is_dir()
    assert not metrics_dir.exists()

"""The three routes to a document answer alike.

The routes are the app itself, the shipped uWSGI (``uwsgi.ini``), and the shipped nginx block
in front of it. The app runs in-process, over the same database and archive.

Archived pages are static files on the uWSGI and nginx routes, and a static route sends its own
validators. So for them each route must send the same bytes, Content-Type and immutable
Cache-Control, a 304 for a validator it sent, and the gzip copy with ``Vary: Accept-Encoding``.
Everything else reaches the app on every route, so conditional requests, HEAD, OPTIONS and the
URL rules must answer alike. They give the same status, validators and headers.

Needs Debian's nginx (tests/test_nginx.py says how it is found or installed).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime

import falcon.testing
import httpx
import pytest

from bench.servers import HOST, UwsgiServer, free_port
from simplefeed import codings
from simplefeed.app import create_app
from simplefeed.settings import Settings
from tests.test_nginx import Nginx, ensure_nginx, logged_ini

pytestmark = pytest.mark.e2e

PAGE_SIZE = 10
ATOM = "application/atom+xml; charset=utf-8"
IMMUTABLE = "public, max-age=31536000, immutable"
#: Headers that must be equal on every route. Date must be there, and its value is the clock's.
COMPARED = (
    "etag",
    "last-modified",
    "cache-control",
    "content-type",
    "content-length",
    "allow",
    "location",
    "content-encoding",
    "vary",
)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, list[str]]
    body: bytes
    dates: int


@dataclass
class Routes:
    app: falcon.testing.TestClient
    uwsgi: UwsgiServer
    nginx: Nginx
    #: One client for the two routes over HTTP. It keeps its connections alive, as a CDN or a
    #: consumer does. It sends only the table's headers, as the app is asked.
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10))

    def __post_init__(self) -> None:
        del self.http.headers["Accept-Encoding"]

    def ask(self, route: str, method: str, path: str, headers: dict[str, str]) -> Answer:
        if route == "app":
            r = self.app.simulate_request(method, path, headers=headers)
            got = {k.lower(): [v] for k, v in r.headers.items()}
            dates = 1 if "date" in got else 0
            return Answer(r.status_code, got, r.content, dates)
        base = self.uwsgi.base_url if route == "uwsgi" else f"http://{HOST}:{self.nginx.port}"
        with self.http.stream(method, base + path, headers=headers) as resp:
            body = b"".join(resp.iter_raw())  # As sent, not decoded.
        multi = {k.lower(): resp.headers.get_list(k) for k in resp.headers}
        return Answer(resp.status_code, multi, body, len(resp.headers.get_list("date")))


#: The id of the first entry of each feed, for the entry locator's URLs.
LOCATED_ID = "tag:example.com,2026:located"


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Routes]:
    nginx_binary = ensure_nginx()
    workdir = tmp_path_factory.mktemp("routes")
    upstream = f"{HOST}:{free_port()}"
    server = UwsgiServer.scratch(
        workdir,
        page_size=PAGE_SIZE,
        processes=2,
        ini=logged_ini(workdir, workdir / "requests.log"),
        extra_env={"SIMPLEFEED_UWSGI_SOCKET": upstream},
    )
    with server:
        server.cli("feed", "create", "orders", "--page-size", str(PAGE_SIZE))
        auth = {"Authorization": f"Bearer {server.token}"}
        for path in ("/entries", "/feeds/orders/entries"):
            events: list[dict[str, str]] = [{"title": f"{path} {i}"} for i in range(25)]
            events[0]["id"] = LOCATED_ID
            r = httpx.post(server.url(path), json=events, headers=auth, timeout=30)
            assert r.status_code == 201, r.text
        time.sleep(1.1)  # The live documents' Last-Modified settles once its second is over.
        settings = Settings(
            database_url=server.database_url,
            archive_dir=server.archive_dir,
            base_url=server.base_url,
            page_size=PAGE_SIZE,
        )
        app = falcon.testing.TestClient(create_app(settings))
        proxy = Nginx(nginx_binary, workdir / "nginx", upstream, server.archive_dir)
        routes = Routes(app, server, proxy)
        try:
            yield routes
        finally:
            routes.http.close()
            proxy.stop()


def _shifted(date: str, seconds: int) -> str:
    return formatdate(parsedate_to_datetime(date).timestamp() + seconds, usegmt=True)


def _rfc850(date: str) -> str:
    return parsedate_to_datetime(date).strftime("%A, %d-%b-%y %H:%M:%S GMT")


def _asctime(date: str) -> str:
    d = parsedate_to_datetime(date)
    return d.strftime("%a %b ") + f"{d.day:2d}" + d.strftime(" %H:%M:%S %Y")


def table(etag: str, lm: str) -> list[tuple[str, dict[str, str], int]]:
    """Return (method, headers, expected status) for a document with validators etag and lm."""
    earlier, later = _shifted(lm, -60), _shifted(lm, 60)
    return [
        ("GET", {}, 200),
        ("HEAD", {}, 200),
        ("GET", {"If-None-Match": etag}, 304),
        ("HEAD", {"If-None-Match": etag}, 304),
        ("GET", {"If-None-Match": f"W/{etag}"}, 304),
        ("GET", {"If-None-Match": f'"x", {etag}'}, 304),
        ("GET", {"If-None-Match": "*"}, 304),
        ("GET", {"If-None-Match": '"x"'}, 200),
        ("GET", {"If-Modified-Since": lm}, 304),
        ("GET", {"If-Modified-Since": later}, 304),
        ("GET", {"If-Modified-Since": earlier}, 200),
        ("GET", {"If-Modified-Since": _rfc850(lm)}, 304),
        ("GET", {"If-Modified-Since": _asctime(lm)}, 304),
        ("GET", {"If-Modified-Since": "garbage"}, 200),
        ("GET", {"If-Modified-Since": f"{lm}, {earlier}"}, 200),
        ("GET", {"If-None-Match": '"x"', "If-Modified-Since": later}, 200),
        ("GET", {"If-None-Match": etag, "If-Modified-Since": earlier}, 304),
        ("GET", {"If-Match": etag}, 200),
        ("GET", {"If-Match": "*"}, 200),
        ("GET", {"If-Match": '"x"'}, 412),
        ("HEAD", {"If-Match": '"x"'}, 412),
        ("GET", {"If-Match": f"W/{etag}"}, 412),
        ("GET", {"If-Unmodified-Since": lm}, 200),
        ("GET", {"If-Unmodified-Since": earlier}, 412),
        ("GET", {"If-Unmodified-Since": "garbage"}, 200),
        ("GET", {"If-Match": etag, "If-Unmodified-Since": earlier}, 200),
        ("GET", {"If-Match": '"x"', "If-None-Match": etag}, 412),
        ("GET", {"Range": "bytes=0-9"}, 200),
        ("OPTIONS", {}, 200),
        ("PUT", {}, 405),
        ("DELETE", {}, 405),
    ]


def coded_table(identity: str, coded: str, coding: str) -> list[tuple[str, dict[str, str], int]]:
    """Return (method, headers, expected status) for a document in ``coding``.

    Its ETag is ``coded``, and its identity ETag is ``identity``. Each conditional request is
    evaluated against the ETag of the representation that would be sent.
    """
    accept = {"Accept-Encoding": coding}
    return [
        ("GET", accept, 200),
        ("HEAD", accept, 200),
        ("GET", {**accept, "If-None-Match": coded}, 304),
        ("HEAD", {**accept, "If-None-Match": coded}, 304),
        ("GET", {**accept, "If-None-Match": f"W/{coded}"}, 304),
        # A copy of the identity bytes is not the coded representation, nor the other way round.
        ("GET", {**accept, "If-None-Match": identity}, 200),
        ("GET", {"If-None-Match": coded}, 200),
        ("GET", {"Accept-Encoding": "identity", "If-None-Match": coded}, 200),
        ("GET", {**accept, "If-Match": coded}, 200),
        ("GET", {**accept, "If-Match": identity}, 412),
        ("GET", {"Accept-Encoding": f"{coding};q=0.5, identity;q=0.2"}, 200),
        ("GET", {"Accept-Encoding": f"identity;q=0, {coding}"}, 200),
        ("GET", {"Accept-Encoding": f"*;q=0, {coding};q=0.1"}, 200),
        ("GET", {"Accept-Encoding": f"{coding};q=0, *"}, 200),
        ("GET", {"Accept-Encoding": "identity;q=0"}, 406),
        ("GET", {"Accept-Encoding": "*;q=0"}, 406),
        ("GET", {"Accept-Encoding": "compress, identity;q=0"}, 406),
        ("GET", {**accept, "Range": "bytes=0-9"}, 200),
    ]


ARCHIVED = ["/pages/1", "/pages/2", "/feeds/orders/pages/1"]
#: Live documents: the working pages and the recent documents.
DOCUMENTS = ["/pages/3", "/recent", "/feeds/orders/pages/3"]
OTHERS: list[tuple[str, str, int]] = [
    ("GET", "/healthz", 200),
    ("HEAD", "/healthz", 200),
    ("OPTIONS", "/healthz", 200),
    ("GET", "/openapi.json", 200),
    ("HEAD", "/openapi.json", 200),
    ("OPTIONS", "/openapi.json", 200),
    ("OPTIONS", "/entries", 200),
    ("OPTIONS", "/feeds/nope/recent", 404),
    ("OPTIONS", "/feeds/nope/pages/1", 404),
    ("GET", "/pages/01", 308),
    ("HEAD", "/pages/001", 308),
    ("GET", "/feeds/events/pages/1", 308),
    ("GET", "/feeds/events/recent", 308),
    ("GET", "/feeds/orders/pages/01", 308),
    ("GET", "/pages/+1", 404),
    ("GET", "/pages/1_0", 404),
    ("GET", "/pages/0", 404),
    ("GET", "//recent", 404),
    ("GET", "//pages/1", 404),
    ("GET", "/pages/99", 404),
    ("POST", "/pages/1", 405),
]


def assert_alike(
    routes: Routes, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    answers = {r: routes.ask(r, method, path, headers) for r in ROUTES}
    where = (method, path, headers)
    for route, answer in answers.items():
        assert answer.status == status, (route, where, answer.status, answer.body[:200])
        assert answer.dates == 1, (route, where, "one Date header")
    app = answers["app"]
    for route in ("uwsgi", "nginx"):
        other = answers[route]
        for name in COMPARED:
            assert other.headers.get(name) == app.headers.get(name), (route, where, name)
        assert other.body == app.body, (route, where)
    if method == "HEAD" or status in (304, 308):
        assert app.body == b"", where


ROUTES = ("app", "uwsgi", "nginx")


def check_archived(routes: Routes, route: str, path: str) -> None:
    """Check one route's answers for an archived page, against the page's bytes on disk."""
    page = (routes.uwsgi.archive_dir / path.lstrip("/")).read_bytes()
    got = routes.ask(route, "GET", path, {})
    where = (route, path)
    assert got.status == 200 and got.body == page, where
    assert got.headers["content-type"] == [ATOM], where
    assert got.headers["cache-control"] == [IMMUTABLE], where
    assert got.headers["vary"] == ["Accept-Encoding"], where
    assert got.dates == 1, where
    # Each validator the route sent gives a 304 without a body.
    conditions = {"last-modified": "If-Modified-Since", "etag": "If-None-Match"}
    sent = [(conditions[name], got.headers[name][0]) for name in conditions if name in got.headers]
    assert sent, (where, "no validator")
    for header, value in sent:
        for method in ("GET", "HEAD"):
            again = routes.ask(route, method, path, {header: value})
            assert (again.status, again.body) == (304, b""), (where, method, header)
    head = routes.ask(route, "HEAD", path, {})
    assert (head.status, head.body) == (200, b""), where
    assert head.headers["content-length"] == [str(len(page))], where
    coded = routes.ask(route, "GET", path, {"Accept-Encoding": "gzip"})
    assert coded.status == 200, where
    assert coded.headers["content-encoding"] == ["gzip"], where
    assert coded.headers["vary"] == ["Accept-Encoding"], where
    assert coded.headers["cache-control"] == [IMMUTABLE], where
    assert coded.headers["content-type"] == [ATOM], where
    assert codings.decode(coded.body, "gzip") == page, where


@pytest.mark.parametrize("path", ARCHIVED)
def test_archived_pages_send_the_same_bytes_and_headers_on_every_route(
    routes: Routes, path: str
) -> None:
    for route in ROUTES:
        check_archived(routes, route, path)
    # The static routes answered without the app, which sends a request id with everything.
    for route in ("uwsgi", "nginx"):
        assert "x-request-id" not in routes.ask(route, "GET", path, {}).headers, route
    # uWSGI's route takes the canonical target only. The app answers one with a query.
    assert "x-request-id" in routes.ask("uwsgi", "GET", path + "?q", {}).headers


@pytest.mark.parametrize("path", DOCUMENTS)
def test_documents_answer_alike_on_every_route(routes: Routes, path: str) -> None:
    first = routes.ask("app", "GET", path, {})
    assert first.status == 200
    etag, lm = first.headers["etag"][0], first.headers["last-modified"][0]
    for method, headers, status in table(etag, lm):
        assert_alike(routes, method, path, headers, status)
    for coding in ("gzip", "br"):
        coded = routes.ask("app", "GET", path, {"Accept-Encoding": coding})
        assert coded.headers["content-encoding"] == [coding]
        assert coded.headers["etag"] == [etag[:-1] + f'-{coding}"']
        assert codings.decode(coded.body, coding) == first.body
        for method, headers, status in coded_table(etag, coded.headers["etag"][0], coding):
            assert_alike(routes, method, path, headers, status)


def test_other_urls_answer_alike_on_every_route(routes: Routes) -> None:
    for method, path, status in OTHERS:
        assert_alike(routes, method, path, {}, status)
        assert_alike(routes, method, path, {"Accept-Encoding": "gzip"}, status)
        assert_alike(routes, method, path, {"Accept-Encoding": "br, gzip"}, status)

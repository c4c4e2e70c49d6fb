"""The CDN arrangement (deploy/cdn/nginx.conf.template), on loopback: nginx as the edge, moto's
S3 server as the bucket that holds the archived pages, and the service for the rest. A page the
bucket does not hold comes from the service: the working page, or a page not uploaded yet.

The bucket's ETag is the MD5 of the object's bytes, which neither of the service's answers
sends (the app's is their SHA-256; uWSGI's static route sends none). So it shows that the
bucket answered.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime

import httpx
import pytest

from bench.servers import HOST, PROJECT_ROOT, S3Server, UwsgiServer, free_port
from simplefeed.app.resources import ATOM_CONTENT_SECURITY_POLICY
from simplefeed.archive.s3 import S3Store
from simplefeed.archive.store import page_key
from tests.test_nginx import Nginx, ensure_nginx

pytestmark = pytest.mark.e2e

TEMPLATE = PROJECT_ROOT / "deploy" / "cdn" / "nginx.conf.template"
BUCKET = "simplefeed-cdn"
PREFIX = "feeds-archive"
PAGE_SIZE = 10
ATOM = "application/atom+xml; charset=utf-8"
IMMUTABLE = "public, max-age=31536000, immutable"
UPLOADED = [("events", 1), ("events", 2), ("orders", 1)]


@dataclass
class Edge:
    service: UwsgiServer
    bucket: S3Server
    store: S3Store
    nginx: Nginx

    def url(self, path: str) -> str:
        return self.nginx.url(path)


def edge_nginx(nginx: str, prefix_dir: object, service: UwsgiServer, bucket: S3Server) -> Nginx:
    host = f"{HOST}:{bucket.port}"
    return Nginx(
        nginx,
        prefix_dir,  # type: ignore[arg-type]
        template=TEMPLATE,
        values={
            "SIMPLEFEED_SERVICE": f"{HOST}:{service.port}",
            "SIMPLEFEED_BUCKET_HOST": host,
            "SIMPLEFEED_BUCKET_HOST_HEADER": host,
            "SIMPLEFEED_BUCKET_PATH": f"/{BUCKET}/{PREFIX}",
        },
    )


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    nginx = ensure_nginx()
    workdir = tmp_path_factory.mktemp("cdn")
    # The service's links name the edge, which listens on the port chosen here.
    with S3Server(workdir / "s3") as bucket:
        bucket.bucket(BUCKET)
        bucket.public_read(BUCKET, PREFIX)
        store = S3Store.from_url(f"s3://{BUCKET}/{PREFIX}", bucket.environ())
        service = UwsgiServer.scratch(workdir, page_size=PAGE_SIZE)
        with service:
            service.cli("feed", "create", "orders", "--page-size", str(PAGE_SIZE))
            auth = {"Authorization": f"Bearer {service.token}"}
            for path in ("/entries", "/feeds/orders/entries"):
                events = [{"title": f"{path} {i}"} for i in range(2 * PAGE_SIZE + 5)]
                r = httpx.post(service.url(path), json=events, headers=auth)
                assert r.status_code == 201, r.text
            # Uploaded as the service's archive store does: orders' page 2 is not (yet).
            for feed, number in UPLOADED:
                key = page_key(feed, "events", number)
                file = service.archive_dir / key
                store.put(key, file.read_bytes(), file.stat().st_mtime_ns // 1000)
            proxy = edge_nginx(nginx, workdir / "nginx", service, bucket)
            try:
                yield Edge(service, bucket, store, proxy)
            finally:
                proxy.stop()


def from_bucket(r: httpx.Response, sent: bytes) -> bool:
    """Whether ``r`` came from the bucket, which holds ``sent`` (the bytes on the wire)."""
    return r.headers.get("etag") == f'"{hashlib.md5(sent).hexdigest()}"'


@pytest.mark.parametrize(("feed", "number"), UPLOADED)
def test_archived_pages_come_from_the_bucket(edge: Edge, feed: str, number: int) -> None:
    key = page_key(feed, "events", number)
    page = edge.store.get(key)
    assert page is not None
    with httpx.Client(timeout=10) as http:
        plain = http.get(edge.url("/" + key), headers={"Accept-Encoding": "identity"})
        assert plain.status_code == 200 and from_bucket(plain, page)
        assert plain.content == page
        assert plain.headers.get_list("content-type") == [ATOM]
        assert plain.headers.get_list("cache-control") == [IMMUTABLE]
        assert plain.headers.get_list("vary") == ["Accept-Encoding"]
        assert plain.headers["content-security-policy"] == ATOM_CONTENT_SECURITY_POLICY
        assert plain.headers["x-content-type-options"] == "nosniff"
        assert not any(name.startswith("x-amz-") for name in plain.headers)

        # The bucket's own validators give 304s through the edge.
        etag, lm = plain.headers["etag"], plain.headers["last-modified"]
        later = formatdate(parsedate_to_datetime(lm).timestamp() + 60, usegmt=True)
        for condition in ({"If-None-Match": etag}, {"If-Modified-Since": later}):
            again = http.get(edge.url("/" + key), headers={**condition, "Accept-Encoding": ""})
            assert (again.status_code, again.content) == (304, b""), condition
            assert again.headers.get_list("cache-control") == [IMMUTABLE]

        head = http.head(edge.url("/" + key), headers={"Accept-Encoding": "identity"})
        assert head.status_code == 200 and head.headers["etag"] == etag
        assert head.headers["content-length"] == str(len(page))

        for accept in ("gzip", "br, gzip", "gzip, deflate"):
            with http.stream("GET", edge.url("/" + key), headers={"Accept-Encoding": accept}) as r:
                raw = b"".join(r.iter_raw())
            assert r.status_code == 200 and from_bucket(r, raw), accept
            assert r.headers["content-encoding"] == "gzip", accept
            assert r.headers.get_list("vary") == ["Accept-Encoding"]
            assert r.headers.get_list("content-type") == [ATOM]
            assert gzip.decompress(raw) == page
        weighed = http.get(edge.url("/" + key), headers={"Accept-Encoding": "gzip;q=0"})
        assert "content-encoding" not in weighed.headers and weighed.content == page


def test_the_rest_comes_from_the_service(edge: Edge) -> None:
    with httpx.Client(timeout=10) as http:
        for path in ("/recent", "/pages/3", "/feeds/orders/pages/3", "/feeds/orders/pages/2"):
            r = http.get(edge.url(path))
            assert r.status_code == 200 and not from_bucket(r, r.content), path
            assert r.content == http.get(edge.service.url(path)).content, path
        # The working page is live; a page not yet in the bucket is archived already.
        assert http.get(edge.url("/pages/3")).headers["cache-control"] == "public, max-age=10"
        not_yet = http.get(edge.url("/feeds/orders/pages/2"))
        assert not_yet.headers["cache-control"] == IMMUTABLE
        for path, status in (("/pages/99", 404), ("/pages/01", 308), ("/metrics", 404)):
            r = http.get(edge.url(path), follow_redirects=False)
            assert r.status_code == status, path
        r = http.post(edge.url("/pages/1"), json={"title": "x"})
        assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"
        r = http.post(
            edge.url("/entries"),
            json={"title": "through the edge"},
            headers={"Authorization": f"Bearer {edge.service.token}"},
        )
        assert r.status_code == 201, r.text


def test_the_service_answers_while_the_bucket_is_down(edge: Edge, tmp_path: object) -> None:
    """An edge whose bucket does not answer falls back to the service for every page."""
    nginx = ensure_nginx()
    gone = S3Server(edge.bucket.workdir)
    gone.port = free_port()  # nothing listens there
    proxy = edge_nginx(nginx, tmp_path / "nginx", edge.service, gone)  # type: ignore[operator]
    try:
        with httpx.Client(timeout=10) as http:
            for feed, number in UPLOADED:
                key = page_key(feed, "events", number)
                r = http.get(proxy.url("/" + key), headers={"Accept-Encoding": "identity"})
                assert r.status_code == 200 and not from_bucket(r, r.content), key
                assert r.content == edge.store.get(key)
    finally:
        proxy.stop()

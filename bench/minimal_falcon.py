"""The framework's ceiling, a minimal falcon app that answers like Simplefeed's /recent.

It has no store. The script ``bench/read.py`` runs it under the same uWSGI options as the
service. Its ini is derived from the shipped ``uwsgi.ini`` with only ``module`` changed. It
returns the bytes of the file named by ``SIMPLEFEED_BENCH_BODY``. It sends the headers the
service sends for /recent: Content-Type, Cache-Control, ETag and Last-Modified. It answers 304
when ``If-None-Match`` carries that ETag. A request that accepts gzip gets the same bytes,
gzipped once at start, with their own ETag.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from email.utils import formatdate
from pathlib import Path

import falcon

BODY = Path(os.environ["SIMPLEFEED_BENCH_BODY"]).read_bytes()
ETAG = '"' + hashlib.sha256(BODY).hexdigest()[:16] + '"'
GZIPPED = gzip.compress(BODY, compresslevel=9, mtime=0)
GZIP_ETAG = ETAG[:-1] + '-gzip"'
LAST_MODIFIED = formatdate(0, usegmt=True)
CACHE_CONTROL = "public, max-age=10"


class Recent:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        coded = "gzip" in (req.get_header("Accept-Encoding") or "")
        etag = GZIP_ETAG if coded else ETAG
        resp.cache_control = [CACHE_CONTROL]
        resp.set_header("ETag", etag)
        resp.set_header("Last-Modified", LAST_MODIFIED)
        resp.set_header("Vary", "Accept-Encoding")
        tags = req.if_none_match
        if tags is not None and any(str(t) == etag.strip('"') for t in tags):
            resp.status = falcon.HTTP_304
            return
        resp.content_type = "application/atom+xml; charset=utf-8"
        if coded:
            resp.set_header("Content-Encoding", "gzip")
        resp.data = GZIPPED if coded else BODY

    on_head = on_get


application = falcon.App()
application.add_route("/recent", Recent())

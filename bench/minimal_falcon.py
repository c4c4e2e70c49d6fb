"""The framework's ceiling: a minimal falcon app that answers like Simplefeed's /recent, no store.

``bench/read.py`` runs it under the same uWSGI options as the service (an ini derived from the
shipped ``uwsgi.ini`` with only ``module`` changed). It returns the bytes of the file named by
``SIMPLEFEED_BENCH_BODY`` with the headers the service sends for /recent (Content-Type,
Cache-Control, ETag, Last-Modified), and a 304 when ``If-None-Match`` carries that ETag.
"""

from __future__ import annotations

import hashlib
import os
from email.utils import formatdate
from pathlib import Path

import falcon

BODY = Path(os.environ["SIMPLEFEED_BENCH_BODY"]).read_bytes()
ETAG = '"' + hashlib.sha256(BODY).hexdigest()[:16] + '"'
LAST_MODIFIED = formatdate(0, usegmt=True)
CACHE_CONTROL = "public, max-age=10"


class Recent:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.cache_control = [CACHE_CONTROL]
        resp.set_header("ETag", ETAG)
        resp.set_header("Last-Modified", LAST_MODIFIED)
        tags = req.if_none_match
        if tags is not None and any(str(t) == ETAG.strip('"') for t in tags):
            resp.status = falcon.HTTP_304
            return
        resp.content_type = "application/atom+xml; charset=utf-8"
        resp.data = BODY

    on_head = on_get


application = falcon.App()
application.add_route("/recent", Recent())

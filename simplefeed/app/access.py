"""Every request the application answers: a request id, one access-log line, its metrics.

The request id comes from a well-formed ``X-Request-Id`` sent by a proxy in front. Otherwise it
is made here. It is returned in the ``X-Request-Id`` response header. It is on every log line
written while the request is served, an error's traceback included. So a client's complaint
leads to the line. The access line goes to logger ``simplefeed.access``, at level INFO, or ERROR
for a 5xx. It carries method, path (never the query string), status, bytes, duration and feed.
For a long-poll that waited, it says how the wait ended: ``woken`` early, or ``timeout``.
For a publish, it also carries the sequence numbers assigned and the token's id, never its
secret.
"""

from __future__ import annotations

import logging
import random
import re
import time
from typing import Any

import falcon

from simplefeed import logs, metrics
from simplefeed.model import Appended

log = logging.getLogger("simplefeed.access")

REQUEST_ID_HEADER = "X-Request-Id"
_GOOD_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}\Z")

#: The environ key of the moment a request came (``time.perf_counter``). It is set when
#: something before the app saw the request first, such as a long-poll waiting in
#: :class:`~simplefeed.app.waiting.WaitingRoom`. The access line's duration counts from there.
STARTED = "simplefeed.started"
#: The environ key where the access line leaves what it said of a request besides its status
#: and duration: ``(fields, document)``. :class:`~simplefeed.app.waiting.WaitingRoom` says the
#: same of the requests it answers alike.
LOGGED = "simplefeed.logged"
#: The environ key of how a long-poll's wait ended: "woken" before its time, or "timeout".
#: Whoever held the request sets it, the app or the
#: :class:`~simplefeed.app.waiting.WaitingRoom`.
WAIT_ENDED = "simplefeed.wait_ended"


def request_id(env: dict[str, Any]) -> str:
    """A well-formed ``X-Request-Id`` the request came with, else a new one.

    A new id is 64 random bits from the process's own generator. An id for logs needs to be
    unique, not secret, and Python reseeds the generator in each forked process. ``secrets``
    reads the kernel's generator each time. That system call lets another thread take the
    interpreter. When one publish wakes a worker's 125 long-polls, that would hand the
    interpreter over 125 more times.
    """
    given: str | None = env.get("HTTP_X_REQUEST_ID")
    if given and _GOOD_REQUEST_ID.match(given):
        return given
    return f"{random.getrandbits(64):016x}"


def answered(
    method: str,
    path: str,
    status: int,
    fields: dict[str, Any],
    document: str | None,
    seconds: float,
) -> None:
    """Write a request's access line and its read and error metrics.

    ``fields`` holds method, path, status, bytes, duration and the rest.
    """
    if document is not None and status in (200, 304):
        metrics.read(document, status, seconds)
    if status >= 400:
        metrics.error(status)
    # A 501 answers a method the client made up. It is not a fault of the server's.
    if status >= 500 and status != 501:
        log.error("%s", _message(method, path, status), extra={"fields": fields})
    else:
        logs.info(log, _message(method, path, status), fields)


def _message(method: str, path: str, status: int) -> str:
    return f"{method} {logs.clip(path, 96)} {status}"


def line_again(method: str, path: str, status: int, fields: dict[str, Any]) -> logs.RepeatedLine:
    """The access line of a 200 or 304 given again, encoded once but for what varies.

    That is its time, request id and duration (:meth:`~simplefeed.app.answers.Answers.again`).
    """
    return logs.RepeatedLine(log, _message(method, path, status), fields, "duration_ms")


def answered_again(
    line: logs.RepeatedLine, status: int, document: str | None, seconds: float, rid: str
) -> None:
    """What :func:`answered` does for a 200 or 304 given again, with its ``line_again``."""
    if document is not None:
        metrics.read(document, status, seconds)
    line.write(round(seconds * 1000, 3), rid)


def _document(template: str | None) -> str | None:
    """Which feed document a route serves (for the read metrics), if any."""
    if template is None:
        return None
    if template.endswith("/recent"):
        return "recent"
    if "/pages/" in template:
        return "page"
    return None


def _body_bytes(resp: falcon.Response) -> int:
    if resp.stream is not None:
        return int(resp.content_length or 0)
    body = resp.render_body()
    return len(body) if body else 0


class Access:
    """Falcon middleware, installed first, so it sees every request and every answer."""

    def __init__(self, default_feed: str) -> None:
        self.default_feed = default_feed

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        rid = request_id(req.env)
        req.context.request_id = rid
        req.context.request_token = logs.request_id.set(rid)
        req.context.started = req.env.get(STARTED) or time.perf_counter()

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        name = params.get("feed")
        template = req.uri_template or ""
        if name is not None:
            req.context.feed = logs.clip(str(name), 64)
        elif _document(template) is not None or template == "/entries":
            req.context.feed = self.default_feed

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        started: float = req.context.get("started") or time.perf_counter()
        seconds = time.perf_counter() - started
        rid = req.context.get("request_id")
        if rid is not None:
            resp.set_header(REQUEST_ID_HEADER, rid)
        status = resp.status_code
        feed = req.context.get("feed")
        fields: dict[str, Any] = {
            "method": req.method,
            "path": req.path,
            "status": status,
            "bytes": 0 if status == 304 else _body_bytes(resp),
            "duration_ms": round(seconds * 1000, 3),
        }
        if feed is not None:
            fields["feed"] = feed
        wait_ended = req.env.get(WAIT_ENDED)
        if wait_ended is not None:
            fields["wait"] = wait_ended
        appended: list[Appended] | None = req.context.get("appended")
        if appended is not None:
            created = [a.seq for a in appended if a.created]
            fields["token_id"] = req.context.get("token_id")
            fields["created"] = len(created)
            fields["replayed"] = len(appended) - len(created)
            if created:
                fields["seq_first"], fields["seq_last"] = min(created), max(created)
            metrics.published(str(feed), len(created), seconds)
        document = _document(req.uri_template)
        answered(req.method, req.path, status, fields, document, seconds)
        req.env[LOGGED] = (fields, document)
        token = req.context.get("request_token")
        if token is not None:
            logs.request_id.reset(token)

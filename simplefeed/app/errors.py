"""Mapping errors to HTTP, in one place: every error reply is JSON naming the problem."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import falcon

from simplefeed.errors import (
    AuthError,
    BaseUrlMismatch,
    Conflict,
    DefaultFeedMismatch,
    EntryConflict,
    FeedRetired,
    Forbidden,
    InvalidEvent,
    NotFound,
    PublishingBusy,
    RequestError,
    SimplefeedError,
    StorageLow,
    StoreUnavailable,
    Unauthorized,
    UnsupportedContentCoding,
)

log = logging.getLogger(__name__)

#: A full disk is not freed within a second, so producers are asked to wait longer.
STORAGE_RETRY_AFTER_S = 30

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    410: "gone",
    411: "length_required",
    412: "precondition_failed",
    413: "payload_too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    422: "invalid_event",
    431: "request_header_fields_too_large",
    500: "internal_error",
    501: "not_implemented",
    503: "unavailable",
}


def _reply(resp: falcon.Response, status: int, message: str, **extra: Any) -> None:
    body: dict[str, Any] = {"error": _STATUS_CODES.get(status, str(status)), "message": message}
    body.update({k: v for k, v in extra.items() if v is not None})
    resp.status = status
    resp.media = body
    resp.content_type = falcon.MEDIA_JSON
    resp.cache_control = ["no-store"]


def precondition_failed(resp: falcon.Response) -> None:
    """412: an If-Match or If-Unmodified-Since of a GET/HEAD is false (RFC 9110 13.1.1, 13.1.4)."""
    _reply(resp, 412, "the representation does not match the request's preconditions")


def handle_domain(req: falcon.Request, resp: falcon.Response, ex: Exception, params: Any) -> None:
    if isinstance(ex, Unauthorized):
        _reply(resp, 401, str(ex))
        challenge = 'Bearer realm="simplefeed"'
        if ex.invalid_token:
            challenge += ', error="invalid_token"'
        resp.set_header("WWW-Authenticate", challenge)
    elif isinstance(ex, Forbidden):
        _reply(resp, 403, str(ex), feed=ex.feed)
    elif isinstance(ex, AuthError):
        _reply(resp, 401, str(ex))
    elif isinstance(ex, NotFound):
        _reply(resp, 404, str(ex))
    elif isinstance(ex, FeedRetired):
        _reply(resp, 410, str(ex), feed=ex.feed)
    elif isinstance(ex, EntryConflict):
        _reply(resp, 409, str(ex), id=ex.entry_id, index=ex.index)
    elif isinstance(ex, Conflict):
        _reply(resp, 409, str(ex))
    elif isinstance(ex, InvalidEvent):
        _reply(resp, ex.status, ex.message, index=ex.index, field=ex.field)
    elif isinstance(ex, UnsupportedContentCoding):
        _reply(resp, ex.status, ex.message)
        resp.set_header("Accept-Encoding", "identity")  # RFC 9110 12.5.3: what it would take.
    elif isinstance(ex, RequestError):
        _reply(resp, ex.status, ex.message)
    elif isinstance(ex, BaseUrlMismatch):
        # A publish would freeze a page under another base URL than the pages before it. This
        # process started before its check could see them. The operator must fix it, so the
        # producer keeps its event and retries. Meanwhile /healthz names the feed.
        log.error("publishing refused on %s %s: %s", req.method, req.path, ex)
        _reply(resp, 503, "the server's base URL differs from its archived pages'; retry later")
        resp.set_header("Retry-After", str(STORAGE_RETRY_AFTER_S))
    elif isinstance(ex, DefaultFeedMismatch):
        # A publish would freeze a page at another feed's URLs than the pages before it, because
        # SIMPLEFEED_DEFAULT_FEED changed. This process started before its check could see
        # them. As above, the operator must fix it.
        log.error("publishing refused on %s %s: %s", req.method, req.path, ex)
        _reply(resp, 503, "the server's default feed differs from its archived pages'; retry later")
        resp.set_header("Retry-After", str(STORAGE_RETRY_AFTER_S))
    elif isinstance(ex, PublishingBusy):
        log.warning("publishing refused on %s %s: %s", req.method, req.path, ex)
        _reply(resp, 503, "the server is busy with other publishes; retry later")
        resp.set_header("Retry-After", "1")
    elif isinstance(ex, StorageLow):
        log.warning("publishing refused on %s %s: %s", req.method, req.path, ex)
        _reply(resp, 503, "the server is short of disk space; retry later")
        resp.set_header("Retry-After", str(STORAGE_RETRY_AFTER_S))
    elif isinstance(ex, StoreUnavailable):
        log.warning("database unavailable on %s %s: %s", req.method, req.path, ex)
        _reply(resp, 503, "the database is unavailable; retry later")
        resp.set_header("Retry-After", "1")
    else:
        handle_unexpected(req, resp, ex, params)


def handle_unexpected(
    req: falcon.Request, resp: falcon.Response, ex: Exception, params: Any
) -> None:
    if isinstance(ex, falcon.HTTPError):  # Falcon's own: 404 no route, 405, and so on.
        _reply(resp, ex.status_code, ex.description or ex.title)
        headers = ex.headers or {}
        for name, value in headers.items() if isinstance(headers, Mapping) else headers:
            resp.set_header(name, value)
        return
    log.exception("unhandled error on %s %s", req.method, req.path)
    _reply(resp, 500, "internal error")


def reply(req: falcon.Request, resp: falcon.Response, ex: Exception) -> None:
    """The JSON error reply for ``ex``, as the handlers below write it.

    A resource that answers some clients otherwise (a page for people) uses it, so the mapping
    stays the same.
    """
    if isinstance(ex, SimplefeedError):
        handle_domain(req, resp, ex, None)
    else:
        handle_unexpected(req, resp, ex, None)


def install(app: falcon.App[falcon.Request, falcon.Response]) -> None:
    # Falcon looks handlers up by the exception's MRO, most specific registered class first.
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(falcon.HTTPError, handle_unexpected)
    app.add_error_handler(SimplefeedError, handle_domain)

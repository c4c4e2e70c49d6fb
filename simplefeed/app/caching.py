"""HTTP validators and conditional requests (RFC 9110 section 13, RFC 9111).

Live documents (the recent document and the working page) change; their Last-Modified is only
sent once the second it names is over (RFC 9110 8.8.2.2): a change later in that same second
would otherwise keep the same Last-Modified, and a client revalidating with If-Modified-Since
would be told "not modified" while it is. The ETag is always sent and always exact.
"""

from __future__ import annotations

from datetime import UTC
from email.utils import formatdate

import falcon

ARCHIVE_CACHE_CONTROL = "public, max-age=31536000, immutable"


def http_date(seconds: int) -> str:
    return formatdate(seconds, usegmt=True)


def set_validators(resp: falcon.Response, etag: str, last_modified_s: int | None) -> None:
    resp.set_header("ETag", etag)
    if last_modified_s is not None:
        resp.set_header("Last-Modified", http_date(last_modified_s))


def settled_second(modified_us: int, now_us: int) -> int | None:
    """Last-Modified (whole seconds) for a live document, or None while its second is running."""
    second = modified_us // 1_000_000
    return second if second < now_us // 1_000_000 else None


def not_modified(req: falcon.Request, etag: str, last_modified_s: int | None) -> bool:
    """True if the request's preconditions say the client's copy is current (GET/HEAD)."""
    tags = req.if_none_match
    if tags is not None:
        # Weak comparison (RFC 9110 13.1.2): the opaque tags must match.
        if any(t == "*" for t in tags):
            return True
        opaque = etag.removeprefix("W/").strip('"')
        return any(str(t) == opaque for t in tags)
    since = req.if_modified_since
    if since is not None and last_modified_s is not None:
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        return last_modified_s <= int(since.timestamp())
    return False

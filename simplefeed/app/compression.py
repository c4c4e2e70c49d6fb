"""Compressed replies: every document and JSON reply in the coding the request accepts best.

The documents (the live ones, archived pages) negotiate in their resources. Those keep their
encoded bytes, once per version or in files beside archived pages. They evaluate conditional
requests against the selected coding's ETag (:func:`simplefeed.codings.tagged`). Every other
reply with a body is encoded here, per request, at a cheap level. That covers JSON (errors,
publish results, /healthz, /openapi.json), metrics, and the pages for people.

Each says ``Vary: Accept-Encoding``. A shared cache keys its copies by the request's
Accept-Encoding, so it never hands a client bytes it did not ask for.
"""

from __future__ import annotations

import falcon

from simplefeed import codings
from simplefeed.codings import IDENTITY

VARY = "Accept-Encoding"
#: Replies shorter than this go as they are. A coding's own framing (gzip's 18 bytes) and the
#: Content-Encoding header would take back most of what it saves (REDbot: CONNEG_GZIP_BAD).
#: Longer ones are sent encoded only if that is shorter.
MIN_ENCODED = 256


def negotiate(req: falcon.Request) -> str:
    """The coding of a document for this request: one of codings.CODINGS, or identity.

    A 406 when the request refuses every one (``identity;q=0`` and no coding offered).
    """
    chosen = codings.choose(req.get_header("Accept-Encoding"))
    if chosen is None:
        raise falcon.HTTPNotAcceptable(
            description="no acceptable content coding: this server offers "
            + ", ".join((*codings.CODINGS, IDENTITY))
        )
    return chosen


def mark(req: falcon.Request, resp: falcon.Response, coding: str, *, body: bool) -> None:
    """Set the headers of a document's representation in ``coding``.

    Its resource sends them, and the middleware leaves it alone. ``body`` is False for a 304,
    which carries Vary only.
    """
    req.context.negotiated = True
    resp.append_header("Vary", VARY)  # After Prefer, if a long-poll said it.
    if body and coding != IDENTITY:
        resp.set_header("Content-Encoding", coding)


class Compress:
    """Encode the replies that no resource negotiated: anything with a body, where shorter.

    It works per request. A reply whose request accepts no offered coding, not even identity,
    goes as identity. It is the answer to what was asked (a 201, an error), and is never
    replaced by a 406.
    """

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        if req.context.get("negotiated") or resp.stream is not None:
            return
        body = resp.render_body()
        if not body:
            return
        resp.append_header("Vary", VARY)  # After what the resource varies on (Accept).
        coding = codings.choose(req.get_header("Accept-Encoding")) or IDENTITY
        if coding == IDENTITY or len(body) < MIN_ENCODED:
            return
        encoded = codings.encode(body, coding, kept=False)
        if len(encoded) >= len(body):
            return
        resp.text = None
        resp.data = encoded
        resp.set_header("Content-Encoding", coding)

"""Content codings (RFC 9110 8.4, 12.5.3): which one a request accepts, and the codings themselves.

This is the only user of ``gzip``, ``zlib`` and ``brotli``. The service encodes with it. The
consumer decodes with it what it receives (:class:`Decoder`, within a size bound) and what its
cache holds. The service offers ``br`` and ``gzip`` besides ``identity``. It prefers them in
that order when a request accepts several equally. Atom and JSON compress well. An archived page
of 100 entries shrinks to 0.06 of its size with brotli, and 0.08 with gzip.

Each coding of a document is a representation of its own, with its own ETag. That is the
identity ETag's opaque part with ``-<coding>`` appended (``"abc"`` -> ``"abc-gzip"``). So a
conditional request is evaluated against the representation that would be sent. A copy of the
identity bytes is never confirmed by a 304 that is read as the gzip one, nor the other way round.

Compression is deterministic. gzip writes no timestamp or name, and brotli has neither. The same
bytes at the same level give the same encoded bytes. So an encoded document is the same whether
it was encoded once at freeze time, on another node, or again by ``archive rebuild``.
"""

from __future__ import annotations

import functools
import gzip
import re
import zlib

import brotli

#: Offered codings, most preferred first. "identity" is always available besides them.
CODINGS = ("br", "gzip")
IDENTITY = "identity"
#: The file name suffix of an archived page's precompressed copy, per coding. With gzip, nginx's
#: gzip_static and uWSGI's static-gzip look for it.
SUFFIXES = {"br": ".br", "gzip": ".gz"}

#: Levels for what is encoded once and kept: archived pages, and one live document version.
#: gzip uses its best. brotli uses 6, which gives 0.063 of a 100-entry page in 0.4 ms. Level 11
#: gives 0.057 in 560 ms, under the publish that freezes the page. See
#: docs/explanation/decisions/compression.md.
_KEPT = {"gzip": 9, "br": 6}
#: Levels for replies encoded per request (JSON replies): cheap.
_PER_REQUEST = {"gzip": 6, "br": 4}

# One element of Accept-Encoding: a coding (or *) and an optional weight (RFC 9110 12.4.2).
_ELEMENT = re.compile(
    r"\s*([!#$%&'*+\-.^_`|~0-9A-Za-z]+)\s*(?:;\s*[qQ]\s*=\s*(0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?))?\s*"
)
#: RFC 9110 8.4.1.3: a recipient SHOULD consider "x-gzip" to be equivalent to "gzip".
_ALIASES = {"x-gzip": "gzip"}


def encode(data: bytes, coding: str, *, kept: bool = True) -> bytes:
    """``data`` in ``coding`` (one of CODINGS).

    ``kept`` means bytes encoded once and kept, at the higher level. Otherwise the per-request
    level applies.
    """
    levels = _KEPT if kept else _PER_REQUEST
    if coding == "gzip":
        return gzip.compress(data, compresslevel=levels["gzip"], mtime=0)
    if coding == "br":
        return bytes(brotli.compress(data, quality=levels["br"]))
    raise ValueError(f"unknown content coding {coding!r}")


def decode(data: bytes, coding: str) -> bytes:
    """The bytes that ``data`` in ``coding`` encodes; ValueError if it is not valid."""
    try:
        if coding == "gzip":
            return gzip.decompress(data)
        if coding == "br":
            return bytes(brotli.decompress(data))
    except (OSError, EOFError, zlib.error, brotli.error) as exc:
        raise ValueError(f"not valid {coding}: {exc}") from exc
    raise ValueError(f"unknown content coding {coding!r}")


class TooLarge(ValueError):
    """Decoding would give more bytes than the decoder's limit."""


#: The most content codings a body may have been given one after another. RFC 9110 8.4 allows
#: a list. Servers apply one, and a second is the most any sends by mistake.
MAX_CODINGS = 2


class Decoder:
    """Decode a body sent with ``Content-Encoding: content_encoding`` as it arrives.

    It never holds more than ``limit`` decoded bytes, and raises :class:`TooLarge` past it. So a
    bomb stops at the bound and is never inflated whole. A client may be sent ``br``, ``gzip``
    (and ``x-gzip``), ``deflate`` and ``identity``. ``deflate`` is the zlib format (RFC 9110
    8.4.1.2). Several may come, in the order they were applied. Any other raises ValueError. So
    do bytes not valid in their coding, and bytes ending before it does.
    """

    def __init__(self, content_encoding: str | None, limit: int) -> None:
        names = [name.strip().lower() for name in (content_encoding or "").split(",")]
        self.codings = tuple(
            _ALIASES.get(name, name) for name in names if name and name != IDENTITY
        )
        if len(self.codings) > MAX_CODINGS:
            # Each is a stage holding up to ``limit`` bytes, and each chunk passes through all
            # of them. Without the bound on codings, 19,000 gzip layers (a 955 KB body) would
            # take a consumer to 716 MB.
            raise ValueError(
                f"{len(self.codings)} content codings applied one after another (at most"
                f" {MAX_CODINGS})"
            )
        self._stages = [_stage(coding, limit) for coding in reversed(self.codings)]

    def decode(self, data: bytes) -> bytes:
        """The decoded bytes that ``data`` (the next bytes received) completes."""
        for stage in self._stages:
            data = stage.decode(data)
        return data

    def end(self) -> bytes:
        """The last decoded bytes, once the body has been received whole."""
        data = b""
        for stage in self._stages:
            data = stage.decode(data) + stage.end()
        return data


class _Inflate:
    """gzip or deflate (zlib's formats), never more than ``limit`` bytes out.

    A gzip body may be several members one after the other (RFC 1952 2.2). Each is read as
    :func:`decode` reads them. Anything else after the end of the stream is refused, not
    dropped.
    """

    def __init__(self, coding: str, limit: int) -> None:
        self.coding = coding
        self.left = limit
        self._wbits = zlib.MAX_WBITS | (16 if coding == "gzip" else 0)
        self._zlib = zlib.decompressobj(self._wbits)

    def decode(self, data: bytes) -> bytes:
        out = b""
        while True:
            try:
                out += self._zlib.decompress(data, self.left - len(out) + 1)
            except zlib.error as exc:
                raise ValueError(f"not valid {self.coding}: {exc}") from exc
            if len(out) > self.left or self._zlib.unconsumed_tail:
                raise TooLarge(self.coding)
            data = self._zlib.unused_data
            if not data:
                self.left -= len(out)
                return out
            if self.coding != "gzip":
                raise ValueError(f"not valid {self.coding}: bytes after the end of the stream")
            self._zlib = zlib.decompressobj(self._wbits)  # The next member.

    def end(self) -> bytes:
        if not self._zlib.eof:
            raise ValueError(f"not valid {self.coding}: the data ends before the stream does")
        return b""


class _Unbrotli:
    """br, never more than ``limit`` bytes out."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self._brotli = brotli.Decompressor()

    def decode(self, data: bytes) -> bytes:
        try:
            out = bytes(self._brotli.process(data, output_buffer_limit=self.left + 1))
        except brotli.error as exc:
            raise ValueError(f"not valid br: {exc}") from exc
        self.left -= len(out)
        if self.left < 0 or not self._brotli.can_accept_more_data():
            raise TooLarge("br")
        return out

    def end(self) -> bytes:
        if not self._brotli.is_finished():
            raise ValueError("not valid br: the data ends before the stream does")
        return b""


def _stage(coding: str, limit: int) -> _Inflate | _Unbrotli:
    if coding in ("gzip", "deflate"):
        return _Inflate(coding, limit)
    if coding == "br":
        return _Unbrotli(limit)
    raise ValueError(f"unknown content coding {coding!r}")


def tagged(etag: str, coding: str) -> str:
    """The ETag of a document's ``coding`` representation, from its identity ETag."""
    if coding == IDENTITY:
        return etag
    return etag[:-1] + "-" + coding + '"'


@functools.lru_cache(maxsize=512)
def choose(accept_encoding: str | None) -> str | None:
    """The coding to send for a request's Accept-Encoding.

    It is one of CODINGS or ``identity``. It is None when none of them is acceptable, that is
    ``identity;q=0`` or ``*;q=0`` and no offered coding.

    No header means identity, because a client that says nothing may not decode anything. The
    highest weight wins. Equal weights go by CODINGS' order, then identity. An element that
    does not parse is ignored, as is an unknown coding.
    """
    if accept_encoding is None:
        return IDENTITY
    weights: dict[str, float] = {}
    for element in accept_encoding.split(","):
        if not element.strip():
            continue
        match = _ELEMENT.fullmatch(element)
        if match is None:
            continue
        name = match[1].lower()
        name = _ALIASES.get(name, name)
        weight = float(match[2]) if match[2] is not None else 1.0
        weights[name] = max(weight, weights.get(name, 0.0))
    star = weights.get("*")
    best, best_weight = None, 0.0
    for coding in CODINGS:
        weight = weights.get(coding, star if star is not None else 0.0)
        if weight > best_weight:
            best, best_weight = coding, weight
    identity = weights.get(IDENTITY, star if star is not None else 1.0)
    if identity > best_weight:
        return IDENTITY
    return best

"""Compressed documents and replies (issue #15).

The tests cover negotiation by Accept-Encoding, and one ETag per coding. Archived pages have
precompressed copies. These are written when the page is archived, checked on first read, and
written where missing. Live documents are encoded once per version. The tests run in-process
on both databases. tests/test_routes.py asks the same of real uWSGI and nginx.
tests/test_redbot.py has REDbot judge them.
"""

from __future__ import annotations

import os
import tracemalloc
import zlib

import falcon.testing
import pytest

from simplefeed import codings
from simplefeed.app import create_app
from simplefeed.app.caching import FeedHeads, LiveBodies
from simplefeed.codings import choose
from simplefeed.service import Simplefeed
from tests.test_integrity import post

PAGE_SIZE = 5  # As in the `settings` fixture.


@pytest.mark.parametrize(
    ("header", "chosen"),
    [
        (None, "identity"),
        ("", "identity"),
        ("gzip", "gzip"),
        ("x-gzip", "gzip"),
        ("GZIP", "gzip"),
        ("gzip, deflate, br", "br"),
        ("gzip, deflate, br, zstd", "br"),
        ("br;q=0.5, gzip", "gzip"),
        ("br;q=0.5, gzip;q=0.5", "identity"),
        ("br;q=0.5, gzip;q=0.5, identity;q=0.1", "br"),
        ("gzip;q=0.5, identity", "identity"),
        ("gzip, identity", "gzip"),
        ("deflate", "identity"),
        ("*", "br"),
        ("*;q=0.5, gzip", "gzip"),
        ("br;q=0, *", "gzip"),
        ("identity;q=0", None),
        ("*;q=0", None),
        ("*;q=0, identity", "identity"),
        ("identity;q=0, gzip;q=0.001", "gzip"),
        ("gzip;q=0", "identity"),
        ("gzip;q=1.5", "identity"),  # Not a weight, so the element is ignored.
        ("gzip;q=0.0001", "identity"),
        ("gzip ; q=0.8 , br ; Q=0.9", "identity"),
        ("gzip ; q=0.8 , br ; Q=0.9 , identity;q=0", "br"),
        (",, gzip ,", "gzip"),
        ("compress, identity;q=0", None),
    ],
)
def test_choose_honours_weights(header: str | None, chosen: str | None) -> None:
    assert choose(header) == chosen


def test_tagged_etags_name_the_coding() -> None:
    assert codings.tagged('"abc"', "gzip") == '"abc-gzip"'
    assert codings.tagged('W/"abc"', "br") == 'W/"abc-br"'
    assert codings.tagged('"abc"', "identity") == '"abc"'


def test_encoding_is_deterministic() -> None:
    data = b"<feed>" + b"<entry>x</entry>" * 100 + b"</feed>"
    for coding in codings.CODINGS:
        assert codings.encode(data, coding) == codings.encode(data, coding)
        assert codings.decode(codings.encode(data, coding), coding) == data
        with pytest.raises(ValueError):
            codings.decode(b"not " + coding.encode(), coding)


def decoded(decoder: codings.Decoder, data: bytes, chunk: int) -> bytes:
    parts = [decoder.decode(data[i : i + chunk]) for i in range(0, len(data), chunk)]
    return b"".join(parts) + decoder.end()


@pytest.mark.parametrize("chunk", [1, 777, 1 << 20])
@pytest.mark.parametrize("coding", [*codings.CODINGS, "x-gzip", "deflate"])
def test_a_decoder_decodes_as_bytes_arrive_up_to_its_limit(coding: str, chunk: int) -> None:
    data = os.urandom(3000) + b"<entry>x</entry>" * 5000  # 83,000 bytes.
    if coding == "deflate":
        sent = zlib.compress(data)
    else:
        sent = codings.encode(data, "gzip" if coding == "x-gzip" else coding)
    assert decoded(codings.Decoder(coding.upper(), len(data)), sent, chunk) == data
    with pytest.raises(codings.TooLarge):  # One byte less is allowed. Never more is held.
        decoded(codings.Decoder(coding, len(data) - 1), sent, chunk)
    with pytest.raises(ValueError, match="ends before the stream does"):
        decoded(codings.Decoder(coding, len(data)), sent[:-5], chunk)
    with pytest.raises(ValueError, match="not valid"):
        decoded(codings.Decoder(coding, len(data)), b"\x00garbage" * 10, chunk)


def test_a_decoder_undoes_codings_in_the_reverse_order_and_knows_only_its_own() -> None:
    twice = codings.encode(codings.encode(b"hello", "gzip"), "br")
    assert decoded(codings.Decoder("gzip, br", 100), twice, 3) == b"hello"
    assert decoded(codings.Decoder(" identity ,", 5), b"hello", 2) == b"hello"
    assert codings.Decoder(None, 5).codings == ()
    for unknown in ("zstd", "compress", "gzip, zstd"):
        with pytest.raises(ValueError, match="unknown content coding"):
            codings.Decoder(unknown, 100)


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_a_decoder_refuses_bytes_after_the_stream_and_reads_each_gzip_member(chunk: int) -> None:
    # Bytes after a finished stream are not part of any body. They are refused, as decode()
    # refuses them, not dropped. A gzip body must not be read as its first stream alone.
    for coding, sent in (
        ("gzip", codings.encode(b"hello", "gzip")),
        ("deflate", zlib.compress(b"hello")),
        ("br", codings.encode(b"hello", "br")),
    ):
        with pytest.raises(ValueError, match="not valid"):
            decoded(codings.Decoder(coding, 100), sent + b"junk", chunk)
        if coding != "gzip":  # One stream to a body.
            with pytest.raises(ValueError, match="not valid"):
                decoded(codings.Decoder(coding, 100), sent + sent, chunk)
    # A gzip body may be several members (RFC 1952 2.2). Each is read, as gzip.decompress
    # does, all within the one limit.
    members = codings.encode(b"hello ", "gzip") + codings.encode(b"world", "gzip")
    assert decoded(codings.Decoder("gzip", 11), members, chunk) == b"hello world"
    assert codings.decode(members, "gzip") == b"hello world"
    with pytest.raises(codings.TooLarge):
        decoded(codings.Decoder("gzip", 10), members, chunk)
    with pytest.raises(ValueError, match="ends before the stream does"):
        decoded(codings.Decoder("gzip", 11), members[:-3], chunk)


def test_a_bomb_stops_at_the_limit_without_inflating() -> None:
    bomb = zlib.compressobj(9, zlib.DEFLATED, 31)
    sent = b"".join(bomb.compress(bytes(1 << 24)) for _ in range(8)) + bomb.flush()  # 128 MiB.
    decoder = codings.Decoder("gzip", 1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(codings.TooLarge):
            decoded(decoder, sent, 1 << 16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak


def get(client: falcon.testing.TestClient, path: str, **headers: str) -> falcon.testing.Result:
    return client.simulate_get(path, headers=headers)


@pytest.mark.parametrize("path", ["/recent", "/pages/2", "/pages/1"])  # live, working, archived
@pytest.mark.parametrize("coding", codings.CODINGS)
def test_documents_in_each_coding(
    client: falcon.testing.TestClient, path: str, coding: str
) -> None:
    post(client, PAGE_SIZE + 2, "batch")
    plain = get(client, path)
    assert plain.status_code == 200
    assert plain.headers["Vary"] == "Accept-Encoding"
    assert "Content-Encoding" not in plain.headers
    etag = plain.headers["ETag"]
    coded = get(client, path, **{"Accept-Encoding": f"{coding}, identity;q=0.5"})
    assert coded.status_code == 200
    assert coded.headers["Content-Encoding"] == coding
    assert coded.headers["Vary"] == "Accept-Encoding"
    assert coded.headers["ETag"] == etag[:-1] + f'-{coding}"'
    assert codings.decode(coded.content, coding) == plain.content
    assert len(coded.content) < 0.5 * len(plain.content)
    assert int(coded.headers["Content-Length"]) == len(coded.content)
    head = client.simulate_head(path, headers={"Accept-Encoding": coding})
    assert head.headers["Content-Length"] == coded.headers["Content-Length"]
    assert head.headers["ETag"] == coded.headers["ETag"]
    # Each conditional request is evaluated against the representation to be sent. The
    # identity ETag does not confirm the coded bytes, because the client has the identity
    # ones. Nor does the coded ETag confirm the identity bytes.
    again = get(client, path, **{"Accept-Encoding": coding, "If-None-Match": etag})
    assert again.status_code == 200
    assert again.headers["Content-Encoding"] == coding
    assert codings.decode(again.content, coding) == plain.content
    assert get(client, path, **{"If-None-Match": coded.headers["ETag"]}).status_code == 200
    same = get(client, path, **{"Accept-Encoding": coding, "If-None-Match": coded.headers["ETag"]})
    assert same.status_code == 304
    assert same.headers["ETag"] == coded.headers["ETag"]
    assert same.headers["Vary"] == "Accept-Encoding"
    assert same.content == b""
    assert get(client, path, **{"Accept-Encoding": coding, "If-Match": etag}).status_code == 412


def test_nothing_acceptable_is_a_406(client: falcon.testing.TestClient) -> None:
    post(client, 1, "one")
    result = get(client, "/recent", **{"Accept-Encoding": "identity;q=0, compress"})
    assert result.status_code == 406
    assert result.json["error"] == "not_acceptable"
    assert "gzip" in result.json["message"]
    assert "Content-Encoding" not in result.headers
    # A publish is answered whatever it accepts, with the reply and not a 406.
    result = client.simulate_post(
        "/entries", json={"title": "t"}, headers={"Accept-Encoding": "identity;q=0"}
    )
    assert result.status_code == 201


def test_json_replies_are_compressed_where_that_pays(client: falcon.testing.TestClient) -> None:
    spec = get(client, "/openapi.json", **{"Accept-Encoding": "gzip"})
    assert spec.headers["Content-Encoding"] == "gzip"
    assert spec.headers["Vary"] == "Accept-Encoding"
    plain = get(client, "/openapi.json")
    assert codings.decode(spec.content, "gzip") == plain.content
    assert "Content-Encoding" not in plain.headers
    small = get(client, "/pages/99", **{"Accept-Encoding": "gzip"})
    assert small.status_code == 404
    assert "Content-Encoding" not in small.headers  # It would only grow.
    assert small.json["error"] == "not_found"
    batch = [{"title": f"a fairly long title for entry {i}"} for i in range(20)]
    published = client.simulate_post("/entries", json=batch, headers={"Accept-Encoding": "br"})
    assert published.status_code == 201
    assert published.headers["Content-Encoding"] == "br"
    assert b'"entries"' in codings.decode(published.content, "br")


def test_live_documents_are_encoded_once_per_version(
    core: Simplefeed, client: falcon.testing.TestClient
) -> None:
    heads, bodies = FeedHeads(core), LiveBodies(core)
    post(client, 1, "one")
    first = bodies.body(heads.validators("events", "recent").live, "gzip")
    assert bodies.body(heads.validators("events", "recent").live, "gzip") is first
    post(client, 1, "n")
    newer = bodies.body(heads.validators("events", "recent").live, "gzip")
    assert newer is not first
    assert b"<title>n 0</title>" in codings.decode(newer, "gzip")


def test_archived_copies_are_written_at_freeze(
    core: Simplefeed, client: falcon.testing.TestClient
) -> None:
    post(client, PAGE_SIZE + 1, "batch")
    path = core.page_path("events", 1)
    for coding, suffix in codings.SUFFIXES.items():
        copy = path.with_name(path.name + suffix)
        assert codings.decode(copy.read_bytes(), coding) == path.read_bytes()
        assert copy.stat().st_mtime_ns == path.stat().st_mtime_ns
        served = get(client, "/pages/1", **{"Accept-Encoding": coding})
        assert served.content == copy.read_bytes()  # The file, as it is.


@pytest.mark.parametrize("damage", ["missing", "garbage", "other page"])
def test_a_cold_process_checks_and_writes_missing_copies(
    core: Simplefeed, client: falcon.testing.TestClient, damage: str
) -> None:
    """A cold process checks and writes missing copies.

    Pages archived before there were copies get them on first read. A copy that does not
    decode to the page's bytes is never served, but written again.
    """
    post(client, 2 * PAGE_SIZE + 1, "batch")
    path = core.page_path("events", 1)
    copy = path.with_name(path.name + ".gz")
    if damage == "missing":
        copy.unlink()
    elif damage == "garbage":
        copy.write_bytes(b"\x1f\x8b not gzip")
    else:
        other = core.page_path("events", 2)
        copy.write_bytes(other.with_name(other.name + ".gz").read_bytes())
    cold = falcon.testing.TestClient(create_app(core.settings, core=core))
    served = get(cold, "/pages/1", **{"Accept-Encoding": "gzip"})
    assert served.status_code == 200
    assert codings.decode(served.content, "gzip") == path.read_bytes()
    assert codings.decode(copy.read_bytes(), "gzip") == path.read_bytes()
    assert core.verify_archive().problems == []


def test_rebuild_writes_missing_copies_and_verify_names_them(
    core: Simplefeed, client: falcon.testing.TestClient
) -> None:
    post(client, PAGE_SIZE + 1, "batch")
    path = core.page_path("events", 1)
    br = path.with_name(path.name + ".br")
    br.unlink()
    (problem,) = core.verify_archive().problems
    assert problem == f"{br}: missing (`simplefeed archive rebuild` writes it)"
    assert core.rebuild_archive().restored == [br]
    assert core.verify_archive().problems == []
    assert core.rebuild_archive().restored == []

"""Every archived page the consumer reads is the one the newer document vouches for.

That holds whether the page is fetched or taken from the cache. The newer document's
``prev-archive`` link carries ``sf:sha256``, the lowercase hex SHA-256 of the page's bytes as
served. A small WSGI app of the test's own serves hand-made documents with right and wrong
digests. Pages written before servers gave digests carry none. They are read as usual, with
nothing to check.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import httpx
import pytest

from simplefeed.client import (
    Checkpoint,
    Consumer,
    DigestMismatch,
    FeedEntry,
    HandlerError,
    StateFile,
)
from simplefeed.client.parse import PARSERS, Parser
from tests.test_client_faults import Documents

BASE = "http://feeds.example.test"
RECENT = f"{BASE}/recent"


def page(seqs: list[int], links: dict[str, str], *, archive: bool, digest: str | None) -> bytes:
    entries = "".join(
        f"<entry><id>urn:e:{s}</id><title>e{s}</title>"
        f"<updated>2027-01-01T00:00:{s:02d}Z</updated><sf:seq>{s}</sf:seq></entry>"
        for s in reversed(seqs)
    )
    link_xml = ""
    for rel, href in links.items():
        extra = f' sf:sha256="{digest}"' if rel == "prev-archive" and digest is not None else ""
        link_xml += f'<link rel="{rel}" href="{href}"{extra}/>'
    return (
        "<?xml version='1.0' encoding='UTF-8'?>\n"
        '<feed xmlns="http://www.w3.org/2005/Atom" xmlns:sf="https://simplefeed.dev/ns/1.0" '
        'xmlns:fh="http://purl.org/syndication/history/1.0">'
        f"<id>urn:feed</id><title>feed</title><updated>2027-01-01T00:00:00Z</updated>"
        f"{link_xml}{'<fh:archive/>' if archive else ''}{entries}</feed>"
    ).encode()


def feed(*, digests: bool = True, tamper: int | None = None) -> dict[str, bytes]:
    """Return a feed's documents by path.

    Archived pages 1-3 hold three entries each, and working page 4 holds two. The recent
    document stands in for page 4. Each prev-archive link gives the digest of the page
    before, unless ``digests`` is false. ``tamper`` alters that page after its digest was
    taken.
    """
    docs: dict[str, bytes] = {}
    digest: str | None = None
    for n in (1, 2, 3, 4):
        url = f"{BASE}/pages/{n}"
        links = {"self": url, "current": RECENT}
        if n > 1:
            links["prev-archive"] = f"{BASE}/pages/{n - 1}"
        if n < 4:
            links["next-archive"] = f"{BASE}/pages/{n + 1}"
        seqs = list(range(3 * n - 2, 3 * n + 1)) if n < 4 else [10, 11]
        body = page(seqs, links, archive=n < 4, digest=digest if digests else None)
        docs[f"/pages/{n}"] = body
        if n == 4:
            links = {"self": RECENT, "via": url, "prev-archive": links["prev-archive"]}
            docs["/recent"] = page(seqs, links, archive=False, digest=digest if digests else None)
        digest = hashlib.sha256(body).hexdigest()
    if tamper is not None:
        docs[f"/pages/{tamper}"] = docs[f"/pages/{tamper}"].replace(b"<title>e", b"<title>E", 1)
    return docs


def run(docs: dict[str, bytes], state: Path, parser: Parser = "feedparser") -> list[int]:
    handled: list[FeedEntry] = []
    with Consumer(
        RECENT, state, transport=httpx.WSGITransport(app=Documents(docs)), parser=parser
    ) as consumer:
        consumer.run(handled.append)
    return [e.seq for e in handled]


@pytest.mark.parametrize("parser", PARSERS)
def test_a_feed_whose_digests_match_is_read_whole(parser: Parser, tmp_path: Path) -> None:
    assert run(feed(), tmp_path / "s.sqlite3", parser) == list(range(1, 12))


def test_pages_without_digests_are_read_as_before(tmp_path: Path) -> None:
    assert run(feed(digests=False), tmp_path / "s.sqlite3") == list(range(1, 12))


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("tampered", [1, 2, 3])
def test_an_altered_archived_page_stops_the_walk_before_any_entry(
    parser: Parser, tampered: int, tmp_path: Path
) -> None:
    state = tmp_path / "s.sqlite3"
    handled: list[int] = []
    docs = feed(tamper=tampered)
    with (
        Consumer(
            RECENT, state, transport=httpx.WSGITransport(app=Documents(docs)), parser=parser
        ) as consumer,
        pytest.raises(DigestMismatch) as info,
    ):
        consumer.run(lambda e: handled.append(e.seq))
    assert info.value.url == f"{BASE}/pages/{tampered}"
    assert info.value.found == hashlib.sha256(docs[f"/pages/{tampered}"]).hexdigest()
    assert handled == []
    with StateFile(state) as file:
        assert file.load_checkpoint(RECENT) is None
        assert file.get_document(f"{BASE}/pages/{tampered}") is None  # Not kept.


def test_an_altered_page_met_while_resuming_stops_before_its_entries(tmp_path: Path) -> None:
    state = tmp_path / "s.sqlite3"
    with StateFile(state) as file:
        file.save_checkpoint(RECENT, Checkpoint("urn:e:4", 4, f"{BASE}/pages/2"), 0)
    handled: list[int] = []
    docs = feed(tamper=2)
    with (
        Consumer(RECENT, state, transport=httpx.WSGITransport(app=Documents(docs))) as consumer,
        pytest.raises(DigestMismatch),
    ):
        consumer.run(lambda e: handled.append(e.seq))
    assert handled == []  # Page 3's link says page 2 is not this one, so none is handed over.
    with StateFile(state) as file:
        assert file.load_checkpoint(RECENT) == Checkpoint("urn:e:4", 4, f"{BASE}/pages/2")


def test_a_damaged_cached_copy_is_caught_dropped_and_fetched_again(tmp_path: Path) -> None:
    state = tmp_path / "s.sqlite3"
    docs = feed()
    handled: list[int] = []

    def fails_on_5(entry: FeedEntry) -> None:
        if entry.seq == 5:
            raise ValueError("not now")
        handled.append(entry.seq)

    # Stopped on page 2, with checkpoint 4. Pages 2 and 3 stay cached for the next run.
    with (
        Consumer(RECENT, state, transport=httpx.WSGITransport(app=Documents(docs))) as consumer,
        pytest.raises(HandlerError),
    ):
        consumer.run(fails_on_5)
    assert handled == [1, 2, 3, 4]
    with sqlite3.connect(state) as db:  # The disk flips a byte of the cached page 3.
        (body,) = db.execute(
            "SELECT body FROM documents WHERE url = ?", (f"{BASE}/pages/3",)
        ).fetchone()
        db.execute(
            "UPDATE documents SET body = ? WHERE url = ?",
            (bytes(body).replace(b"<title>e", b"<title>X", 1), f"{BASE}/pages/3"),
        )
    db.close()
    with pytest.raises(DigestMismatch) as info:  # The recent document's link vouches for it.
        run(docs, state)
    assert info.value.url == f"{BASE}/pages/3"
    with StateFile(state) as file:  # Caught walking back, before any entry.
        assert file.load_checkpoint(RECENT) == Checkpoint("urn:e:4", 4, f"{BASE}/pages/2")
    assert run(docs, state) == [5, 6, 7, 8, 9, 10, 11]  # The next run asked the server again.

"""The consumer walks relative links, which RFC 4287 allows.

RFC 4287's IRIs are references, resolved against ``xml:base`` and the document's URL (RFC 3986
5.1). A server other than Simplefeed may write ``<link rel="prev-archive" href="?page=3"/>``,
or put an ``xml:base`` on its feed. The consumer must not refuse such a feed with "a link to
another origin than the entry point's". The tests use real sockets on 127.0.0.1. The hostile
server's fixture plays a well-behaved server here. Every run is bounded in time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from simplefeed.client import Consumer, FeedEntry, HandlerError
from simplefeed.client.parse import parse_page
from tests import test_client_hostile
from tests.test_client_hostile import Hostile, answer, assert_no_traceback, consume
from tests.test_client_walk import RUN_TIMEOUT, checkpoint_of, run_library

hostile = test_client_hostile.hostile

FEED = (
    '<feed xmlns="http://www.w3.org/2005/Atom" xmlns:sf="https://simplefeed.dev/ns/1.0" '
    'xmlns:fh="http://purl.org/syndication/history/1.0"{base}>'
    "<id>urn:feed</id><title>feed</title><updated>2027-01-01T00:00:00Z</updated>"
)


def document(seqs: list[int], links: dict[str, str], *, archive: bool, base: str = "") -> bytes:
    """Return a document that holds the entries ``seqs``, written newest first.

    Its links by rel are written as given. The ``prev-archive`` link carries the digest in
    ``links["sha"]``. Each entry has a relative ``alternate`` link ``e/<seq>``.
    """
    written = "".join(
        f'<link rel="{rel}" href="{href}"'
        + (f' sf:sha256="{links["sha"]}"' if rel == "prev-archive" else "")
        + "/>"
        for rel, href in links.items()
        if rel != "sha"
    )
    items = "".join(
        f"<entry><id>urn:e:{seq}</id><title>e{seq}</title><link href='e/{seq}'/>"
        f"<updated>2027-01-01T00:00:00Z</updated><sf:seq>{seq}</sf:seq></entry>"
        for seq in reversed(seqs)
    )
    xml_base = f' xml:base="{base}"' if base else ""
    return (
        "<?xml version='1.0' encoding='UTF-8'?>\n"
        + FEED.format(base=xml_base)
        + written
        + ("<fh:archive/>" if archive else "")
        + items
        + "</feed>"
    ).encode()


def relative_feed(server: Hostile) -> tuple[str, dict[str, bytes]]:
    """Return the entry point's URL, and the documents by path, of a feed with relative links.

    The feed has an entry point ``/feed/recent``, and two archived pages
    ``/feed/archive?page=1`` and ``?page=2``. Every link is relative. The pages' links are
    query-only references, and the entry point's are path-relative.
    """
    p1 = document(
        [1, 2],
        {"self": "?page=1", "next-archive": "?page=2"},
        archive=True,
    )
    p2 = document(
        [3, 4],
        {
            "self": "?page=2",
            "prev-archive": "?page=1",
            "sha": hashlib.sha256(p1).hexdigest(),
            "next-archive": "recent",
        },
        archive=True,
        base="archive",
    )
    recent = document(
        [5],
        {
            "self": "recent",
            "prev-archive": "archive?page=2",
            "sha": hashlib.sha256(p2).hexdigest(),
        },
        archive=False,
    )
    documents = {"/feed/archive?page=1": p1, "/feed/archive?page=2": p2, "/feed/recent": recent}
    server.routes.update({path: answer(body) for path, body in documents.items()})
    return f"{server.base}/feed/recent", documents


@pytest.mark.parametrize("parser", ["lxml", "feedparser"])
def test_a_feed_whose_links_are_relative_is_walked(
    hostile: Callable[..., Hostile], tmp_path: Path, parser: str
) -> None:
    """A feed whose links are relative is walked.

    Every entry comes once, oldest first. The checkpoint names the archived page by its
    absolute URL. A second run finds nothing new. ``?page=2``'s links are relative to its
    ``xml:base``, which is ``archive``, itself relative to the page's URL. So its
    ``next-archive`` of ``recent`` is ``/feed/recent``. Its ``prev-archive`` is
    ``/feed/archive?page=1``.
    """
    server = hostile({})
    url, _ = relative_feed(server)
    state = tmp_path / "s.sqlite3"
    run = consume(url, state, "--parser", parser, "--jsonl", timeout=RUN_TIMEOUT)
    assert run.code == 0, run.stderr
    assert_no_traceback(run)
    printed = [json.loads(line) for line in run.stdout.splitlines()]
    assert [entry["seq"] for entry in printed] == [1, 2, 3, 4, 5]
    assert printed[0]["links"][0]["href"] == f"{server.base}/feed/e/1"
    assert printed[0]["page"] == f"{server.base}/feed/archive?page=1"
    again = consume(url, state, "--parser", parser, timeout=RUN_TIMEOUT)
    assert (again.code, again.stdout) == (0, ""), again.stderr
    checkpoint = checkpoint_of(state, url)
    assert checkpoint is not None
    assert checkpoint.seq == 5


def test_a_resume_on_a_relative_archived_page_walks_back_to_it(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """A resume on a relative archived page walks back to it.

    A handler that fails on entry 3 stops the library. The checkpoint is on entry 2, on
    ``/feed/archive?page=1``, named by its resolved URL. The library resumes from there with
    3, 4 and 5, and nothing twice.
    """
    server = hostile({})
    url, _ = relative_feed(server)
    state = tmp_path / "s.sqlite3"
    handled: list[int] = []

    def fail_on_3(entry: FeedEntry) -> None:
        if entry.seq == 3:
            raise RuntimeError("down")
        handled.append(entry.seq)

    with Consumer(url, state, timeout=10) as consumer, pytest.raises(HandlerError):
        consumer.run(fail_on_3)
    checkpoint = checkpoint_of(state, url)
    assert checkpoint is not None
    assert checkpoint.page_url == f"{server.base}/feed/archive?page=1"
    with Consumer(url, state, timeout=10) as consumer:
        assert run_library(consumer, handled) is None
    assert handled == [1, 2, 3, 4, 5]


def test_links_are_resolved_against_xml_base_and_the_document_url() -> None:
    """Links are resolved against xml:base and the document's URL.

    That holds for feed links and entry links alike. An absolute link is left as written.
    """
    body = document(
        [7],
        {"self": "https://other.example/x", "prev-archive": "../old/3", "sha": "0" * 64},
        archive=True,
        base="/feeds/a/",
    )
    page = parse_page("http://h.example:8080/feeds/b/recent", body, parser="lxml")
    assert page.links["self"] == "https://other.example/x"
    assert page.prev_archive == "http://h.example:8080/feeds/old/3"
    assert [link.href for link in page.entries[0].links] == ["http://h.example:8080/feeds/a/e/7"]
    without_base = document([7], {"prev-archive": "?page=2", "sha": "0" * 64}, archive=True)
    page = parse_page("http://h.example/feed/archive?page=3", without_base, parser="lxml")
    assert page.prev_archive == "http://h.example/feed/archive?page=2"
    assert [link.href for link in page.entries[0].links] == ["http://h.example/feed/e/7"]

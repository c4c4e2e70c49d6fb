"""The walk holds against a hostile server, over real sockets on 127.0.0.1.

1. A poisoned archived page met while resuming. Every page read forward is checked against
   the digest chain anchored at the entry point. The ``sf:sha256`` of the entry point's
   ``prev-archive`` link vouches for the newest archived page. Each archived page's link
   vouches for the one before. The ``next-archive`` chain must end at the entry point.
   Without these checks, a resumed run prints a forged page's entries.
2. Chains that never end. Some are archived pages without entries, which can cost 175,196
   requests in 60 s and a state file of 103 MB. Others are one-entry pages counting down
   from 2**62. An archived page without entries is refused. A pass walks back ``max_pages``
   pages at most.
3. An id listed again at another sequence number on the next page. It must not be processed
   twice.

Every run is bounded in time. The command runs with a timeout, and the library in a thread
joined with one. Each run checks the exit status or the exception, and that the checkpoint is
left as it was. It also checks that nothing was handled past the problem.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from simplefeed.client import Checkpoint, Consumer, MalformedPage, TooManyPages
from simplefeed.client.state import StateFile
from simplefeed.client.walk import MAX_PAGES
from tests import test_client_hostile
from tests.test_client_hostile import Hostile, Send, answer, assert_no_traceback, consume

#: The hostile server's fixture, a real server on an ephemeral port of 127.0.0.1.
hostile = test_client_hostile.hostile

#: Seconds any one consumer run may take. The runs here take under two.
RUN_TIMEOUT = 30.0

Entry = tuple[int, str, str]  # The seq, id and title.


def doc(
    entries: list[Entry],
    *,
    self_url: str,
    via: str | None = None,
    prev: str | None = None,
    prev_sha: str | None = None,
    next_url: str | None = None,
    archive: bool = False,
) -> bytes:
    """Return one document of a feed, with entries given oldest first and written newest first."""
    items = "".join(
        f"<entry><id>{entry_id}</id><title>{title}</title>"
        f"<updated>2027-01-01T00:00:00Z</updated><sf:seq>{seq}</sf:seq></entry>"
        for seq, entry_id, title in reversed(entries)
    )
    links = f'<link rel="self" href="{self_url}"/>'
    if via is not None:
        links += f'<link rel="via" href="{via}"/>'
    if prev is not None:
        digest = f' sf:sha256="{prev_sha}"' if prev_sha is not None else ""
        links += f'<link rel="prev-archive" href="{prev}"{digest}/>'
    if next_url is not None:
        links += f'<link rel="next-archive" href="{next_url}"/>'
    return (
        "<?xml version='1.0' encoding='UTF-8'?>\n"
        '<feed xmlns="http://www.w3.org/2005/Atom" xmlns:sf="https://simplefeed.dev/ns/1.0" '
        'xmlns:fh="http://purl.org/syndication/history/1.0">'
        "<id>urn:feed</id><title>feed</title><updated>2027-01-01T00:00:00Z</updated>"
        f"{links}{'<fh:archive/>' if archive else ''}{items}</feed>"
    ).encode()


def chain(base: str, pages: list[list[int]]) -> list[tuple[str, bytes]]:
    """Return a feed as (path, body) pairs.

    The feed has archived pages ``/p/1`` and on. Each links to its neighbours, and each page's
    digest is on the link of the one after. The last list of sequence numbers becomes the
    entry point ``/recent``. It stands for the working page after them.
    """
    documents: list[tuple[str, bytes]] = []
    for number, seqs in enumerate(pages, start=1):
        prev = documents[-1] if documents else None
        last = number == len(pages)
        path = "/recent" if last else f"/p/{number}"
        documents.append(
            (
                path,
                doc(
                    entries(*seqs),
                    self_url=f"{base}{path}",
                    via=f"{base}/p/{number}" if last else None,
                    prev=f"{base}{prev[0]}" if prev else None,
                    prev_sha=sha(prev[1]) if prev else None,
                    next_url=None if last else f"{base}/p/{number + 1}",
                    archive=not last,
                ),
            )
        )
    return documents


def sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def entries(*seqs: int, title: str = "e") -> list[Entry]:
    return [(seq, f"urn:e:{seq}", f"{title}{seq}") for seq in seqs]


def checkpoint_of(state: Path, url: str) -> Checkpoint | None:
    with StateFile(state) as file:
        return file.load_checkpoint(url)


def cached_documents(state: Path) -> int:
    import sqlite3

    with sqlite3.connect(state) as db:
        (count,) = db.execute("SELECT count(*) FROM documents").fetchone()
    db.close()
    return int(count)


def fails_on(seq: int) -> str:
    """Return an --exec handler that fails on the entry with sequence number ``seq``."""
    code = f"import json, sys; sys.exit(json.load(sys.stdin)['seq'] == {seq})"
    return f'{sys.executable} -c "{code}"'


class Generated(dict[str, Send]):
    """Routes made up on request, ``/p/N`` from ``make(N)``."""

    def __init__(self, fixed: dict[str, Send], make: Callable[[int], bytes]) -> None:
        super().__init__(fixed)
        self.make = make

    def get(self, path: str, default: Send | None = None) -> Send | None:  # type: ignore[override]
        if path in self:
            return self[path]
        if path.startswith("/p/") and path[3:].isdigit():
            return answer(self.make(int(path[3:])))
        return default


def run_library(consumer: Consumer, handled: list[int]) -> BaseException | None:
    """Run ``consumer.run`` in a thread for up to RUN_TIMEOUT seconds, and return what it raised."""
    raised: list[BaseException] = []

    def go() -> None:
        try:
            consumer.run(lambda entry: handled.append(entry.seq))
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(RUN_TIMEOUT)
    if thread.is_alive():
        consumer.stop()
        thread.join(RUN_TIMEOUT)
        raise AssertionError(f"the consumer was still running after {RUN_TIMEOUT} s")
    return raised[0] if raised else None


# -- 1. a poisoned archived page met while resuming ----------------------------------------


def _stopped_on_page_1(server: Hostile, state: Path) -> tuple[str, bytes]:
    """Run once, stopping on page 1, and return the entry point's URL and /p/1.

    The entry point ``early`` holds entries 3 and 4, and links prev-archive to /p/1 with its
    digest. /p/1 is archived with entries 1 and 2, and links next-archive to /p/2. The handler
    fails on 3. So the checkpoint stays on entry 2, at /p/1, which is cached.
    """
    base = server.base
    p1 = doc(entries(1, 2), self_url=f"{base}/p/1", next_url=f"{base}/p/2", archive=True)
    early = doc(
        entries(3, 4),
        self_url=f"{base}/recent",
        via=f"{base}/p/2",
        prev=f"{base}/p/1",
        prev_sha=sha(p1),
    )
    server.routes.update({"/recent": answer(early), "/p/1": answer(p1)})
    url = f"{base}/recent"
    run = consume(url, state, "--exec", fails_on(3), timeout=RUN_TIMEOUT)
    assert run.code == 3, run.stderr
    assert checkpoint_of(state, url) == Checkpoint("urn:e:2", 2, f"{base}/p/1")
    return url, p1


def test_a_poisoned_page_met_while_resuming_is_refused_by_the_entry_point_s_digest(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """A poisoned page met while resuming is refused by the entry point's digest.

    The poisoned /p/2 has no next-archive, no fh:archive and no digest. Taken for the end of
    the walk, it would let the second run exit 0 and print FORGED entries. So the entry
    point's digest for /p/2 must be compared.
    """
    server = hostile({})
    state = tmp_path / "s.sqlite3"
    url, p1 = _stopped_on_page_1(server, state)
    base = server.base
    authentic_p2 = doc(
        entries(3, 4),
        self_url=f"{base}/p/2",
        prev=f"{base}/p/1",
        prev_sha=sha(p1),
        next_url=f"{base}/p/3",
        archive=True,
    )
    recent = doc(
        entries(5, 6),
        self_url=f"{base}/recent",
        via=f"{base}/p/3",
        prev=f"{base}/p/2",
        prev_sha=sha(authentic_p2),
    )
    poisoned_p2 = doc(
        [(3, "urn:e:3", "FORGED"), (4, "urn:e:4", "FORGED"), (5, "urn:e:5", "FORGED")],
        self_url=f"{base}/p/2",
        prev=f"{base}/p/1",
    )
    server.routes.update({"/recent": answer(recent), "/p/2": answer(poisoned_p2)})
    run = consume(url, state, timeout=RUN_TIMEOUT)
    assert run.code == 4, (run.code, run.stdout, run.stderr)
    assert f"{base}/p/2: SHA-256 mismatch" in run.stderr
    assert run.stdout == ""
    assert checkpoint_of(state, url) == Checkpoint("urn:e:2", 2, f"{base}/p/1")
    assert_no_traceback(run)
    # The server mends /p/2: the next run reads on.
    server.routes["/p/2"] = answer(authentic_p2)
    run = consume(url, state, timeout=RUN_TIMEOUT)
    assert run.code == 0, run.stderr
    assert [line.split("\t")[0] for line in run.stdout.splitlines()] == ["3", "4", "5", "6"]


def test_a_next_archive_chain_that_ends_short_of_the_entry_point_is_refused(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """A next-archive chain that ends short of the entry point is refused.

    A server from before digests sends none, so nothing vouches for a page's bytes. But the
    next-archive chain must still end at the entry point. An archived page without one is not
    the end of the walk.
    """
    server = hostile({})
    base = server.base
    state = tmp_path / "s.sqlite3"
    url = f"{base}/recent"
    with StateFile(state) as file:
        file.save_checkpoint(url, Checkpoint("urn:e:2", 2, f"{base}/p/1"), 0)
    p1 = doc(entries(1, 2), self_url=f"{base}/p/1", next_url=f"{base}/p/2", archive=True)
    forged = doc(
        entries(3, 4, title="FORGED"), self_url=f"{base}/p/2", prev=f"{base}/p/1", archive=True
    )
    recent = doc(entries(5, 6), self_url=url, via=f"{base}/p/3", prev=f"{base}/p/2")
    server.routes.update({"/recent": answer(recent), "/p/1": answer(p1), "/p/2": answer(forged)})
    run = consume(url, state, timeout=RUN_TIMEOUT)
    assert run.code == 4, (run.code, run.stdout, run.stderr)
    assert f"the next-archive chain ended at {base}/p/2, not at the entry point" in run.stderr
    assert run.stdout == ""
    assert checkpoint_of(state, url) == Checkpoint("urn:e:2", 2, f"{base}/p/1")
    assert_no_traceback(run)


# -- 2. chains that never end ----------------------------------------------------------------


def test_an_endless_chain_of_empty_pages_stops_at_the_first(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """An endless chain of empty pages stops at the first.

    Each /p/N is archived without entries, and links prev-archive to /p/N+1. A consumer that
    follows it makes 175,196 requests in 60 s, and its state file grows to 103 MB. Simplefeed
    never archives a page without entries, so the first is a protocol error.
    """
    server = hostile({})
    base = server.base

    def empty(n: int) -> bytes:
        return doc([], self_url=f"{base}/p/{n}", prev=f"{base}/p/{n + 1}", archive=True)

    recent = doc([], self_url=f"{base}/recent", via=f"{base}/p/0", prev=f"{base}/p/1")
    server.routes = Generated({"/recent": answer(recent)}, empty)
    state = tmp_path / "s.sqlite3"
    url = f"{base}/recent"
    run = consume(url, state, timeout=RUN_TIMEOUT)
    assert run.code == 4, (run.code, run.stderr)
    assert f"{base}/p/1: an archived page without entries" in run.stderr
    assert run.stdout == "" and checkpoint_of(state, url) is None
    assert len(server.requests) == 2  # The /recent and /p/1 requests.
    assert cached_documents(state) <= 2
    assert_no_traceback(run)


def test_an_endless_chain_of_pages_not_archived_stops_at_the_first(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """An endless chain of pages that are not archived stops at the first.

    It is the same chain without fh:archive. prev-archive leads only to archived pages.
    """
    server = hostile({})
    base = server.base

    def empty(n: int) -> bytes:
        return doc([], self_url=f"{base}/p/{n}", prev=f"{base}/p/{n + 1}")

    recent = doc([], self_url=f"{base}/recent", via=f"{base}/p/0", prev=f"{base}/p/1")
    server.routes = Generated({"/recent": answer(recent)}, empty)
    state = tmp_path / "s.sqlite3"
    run = consume(f"{base}/recent", state, timeout=RUN_TIMEOUT)
    assert run.code == 4, (run.code, run.stderr)
    assert "prev-archive led to a page that is not archived" in run.stderr
    assert len(server.requests) == 2
    assert_no_traceback(run)


def test_a_chain_counting_down_from_2_to_the_62_stops_at_max_pages(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """A chain counting down from 2**62 stops at max_pages.

    One-entry archived pages count down from 2**62. Every page is well-formed and older than
    the one before. So only the bound on pages ends the walk: here 50, and MAX_PAGES by
    default. It ends before any entry is handled, with at most that many pages cached.
    """
    assert Consumer.__init__.__kwdefaults__["max_pages"] == MAX_PAGES
    server = hostile({})
    base = server.base
    top = 2**62

    def one(n: int) -> bytes:
        seq = top - n
        return doc(
            [(seq, f"urn:e:{seq}", "x")],
            self_url=f"{base}/p/{n}",
            prev=f"{base}/p/{n + 1}",
            next_url=f"{base}/p/{n - 1}",
            archive=True,
        )

    recent = doc(
        [(top, f"urn:e:{top}", "x")],
        self_url=f"{base}/recent",
        via=f"{base}/p/0",
        prev=f"{base}/p/1",
    )
    server.routes = Generated({"/recent": answer(recent)}, one)
    url = f"{base}/recent"
    handled: list[int] = []
    for n, checkpoint in enumerate((None, Checkpoint("urn:e:5", 5, f"{base}/p/9"))):
        state = tmp_path / f"s{n}.sqlite3"
        if checkpoint is not None:
            with StateFile(state) as file:
                file.save_checkpoint(url, checkpoint, 0)
        server.requests.clear()
        with Consumer(url, state, max_pages=50) as consumer:
            raised = run_library(consumer, handled)
        assert isinstance(raised, TooManyPages) and isinstance(raised, MalformedPage), raised
        assert raised.limit == 50 and raised.setting == "max_pages"
        assert f"{base}/p/51: not fetched: over 50 pages to walk back (max_pages" in str(raised)
        assert handled == []
        assert checkpoint_of(state, url) == checkpoint
        assert len(server.requests) == 51  # The /recent and /p/1 to /p/50 requests.
        assert cached_documents(state) <= 51
    # The command takes the bound as --max-pages.
    server.requests.clear()
    run = consume(url, tmp_path / "cli.sqlite3", "--max-pages", "20")
    assert run.code == 4 and "over 20 pages to walk back (--max-pages;" in run.stderr, run.stderr
    assert "max_pages" not in run.stderr
    assert run.stdout == "" and len(server.requests) == 21
    assert_no_traceback(run)


# -- 3. an id listed again on the next page ---------------------------------------------------


def _dup_feed(server: Hostile, old: list[Entry], new: list[Entry]) -> str:
    base = server.base
    p1 = doc(old, self_url=f"{base}/p/1", next_url=f"{base}/p/2", archive=True)
    recent = doc(
        new, self_url=f"{base}/recent", via=f"{base}/p/2", prev=f"{base}/p/1", prev_sha=sha(p1)
    )
    server.routes.update({"/recent": answer(recent), "/p/1": answer(p1)})
    return f"{base}/recent"


def test_an_id_listed_again_on_the_next_page_is_a_protocol_error(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """An id listed again on the next page is a protocol error.

    p1 holds 1 (urn:e:1) and 2 (urn:e:2). Recent holds 3 (urn:e:2, "dup-of-2") and 4 (urn:e:4).
    Entries 1 and 2 are handled, and the repeat stops the run. It is not printed twice.
    """
    server = hostile({})
    url = _dup_feed(server, entries(1, 2), [(3, "urn:e:2", "dup-of-2"), *entries(4)])
    base = server.base
    state = tmp_path / "s.sqlite3"
    run = consume(url, state, timeout=RUN_TIMEOUT)
    assert run.code == 4, (run.code, run.stdout, run.stderr)
    assert "entry 'urn:e:2' appears again with sequence number 3" in run.stderr
    assert run.stdout == "1\turn:e:1\te1\n2\turn:e:2\te2\n"
    assert checkpoint_of(state, url) == Checkpoint("urn:e:2", 2, f"{base}/p/1")
    assert_no_traceback(run)


def test_an_id_of_the_checkpoint_s_page_listed_again_is_refused_before_any_entry(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """An id of the checkpoint's page listed again is refused before any entry.

    The run resumes after entry 2, and entry 1's id comes again at 3 on the next page. The
    checkpoint's page is read whole, so its ids are known. Nothing is handled.
    """
    server = hostile({})
    url = _dup_feed(server, entries(1, 2), [(3, "urn:e:1", "dup-of-1"), *entries(4)])
    base = server.base
    state = tmp_path / "s.sqlite3"
    with StateFile(state) as file:
        file.save_checkpoint(url, Checkpoint("urn:e:2", 2, f"{base}/p/1"), 0)
    run = consume(url, state, timeout=RUN_TIMEOUT)
    assert run.code == 4, (run.code, run.stdout, run.stderr)
    assert "entry 'urn:e:1' appears again with sequence number 3" in run.stderr
    assert run.stdout == ""
    assert checkpoint_of(state, url) == Checkpoint("urn:e:2", 2, f"{base}/p/1")
    assert_no_traceback(run)


# -- 4. what a pass keeps, and an entry point behind the checkpoint ------------------------


class _Queried(dict[str, Send]):
    """Routes that answer ``/p/1?...`` as they answer ``/p/1``."""

    def get(self, path: str, default: Send | None = None) -> Send | None:  # type: ignore[override]
        return super().get(path.partition("?")[0], default)


def test_pages_linked_under_changing_urls_are_not_kept_for_good(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """Pages linked under changing URLs are not kept for good.

    Take a server whose prev-archive link changes its query at every pass. Each resume would
    pin the page again under a new URL. The cache lets a page go only by the URL the checkpoint
    names. So the state file would grow for good, to 77 MB in 30 s of --follow. Only pages read
    from their permanent URL are kept.
    """
    server = hostile({})
    base = server.base
    p1 = doc(entries(1, 2, 3), self_url=f"{base}/p/1", next_url=f"{base}/w", archive=True)
    passes = [0]

    def recent(sock: Any) -> None:
        passes[0] += 1
        body = doc(
            [],
            self_url=f"{base}/recent",
            via=f"{base}/w",
            prev=f"{base}/p/1?n={passes[0]}",
            prev_sha=sha(p1),
        )
        answer(body)(sock)

    server.routes = _Queried({"/recent": recent, "/p/1": answer(p1)})
    url = f"{base}/recent"
    state = tmp_path / "s.sqlite3"
    outputs = [consume(url, state, timeout=RUN_TIMEOUT) for _ in range(5)]
    assert [run.code for run in outputs] == [0] * 5, outputs[-1].stderr
    assert outputs[0].stdout.count("\n") == 3 and all(run.stdout == "" for run in outputs[1:])
    assert cached_documents(state) <= 2  # The entry point, and no page under a query.


@pytest.mark.parametrize("stale", [(4,), ()])
def test_an_entry_point_older_than_the_checkpoint_has_nothing_new(
    hostile: Callable[..., Hostile], tmp_path: Path, stale: tuple[int, ...]
) -> None:
    """An entry point older than the checkpoint has nothing new.

    A stale copy of the entry point may come from a CDN's edge. It may also come from another
    server process that answers from what it last served while its database is down. It must
    not end the consumer with "the last processed entry is no longer in the feed" (exit 4). It
    is nothing new, and a warning says so. The next fresh copy reads on.

    A copy taken just after a page was archived holds no entries. The page before it then holds
    the feed's newest entry. Through a caching proxy, that too must not end in exit 4. The
    `consumer reset` it would suggest reads entries again.
    """
    server = hostile({})
    base = server.base
    p1 = doc(entries(1, 2, 3), self_url=f"{base}/p/1", next_url=f"{base}/p/2", archive=True)

    def recent(*seqs: int) -> bytes:
        return doc(
            entries(*seqs),
            self_url=f"{base}/recent",
            via=f"{base}/p/2",
            prev=f"{base}/p/1",
            prev_sha=sha(p1),
        )

    server.routes.update({"/recent": answer(recent(4, 5)), "/p/1": answer(p1)})
    url = f"{base}/recent"
    state = tmp_path / "s.sqlite3"
    run = consume(url, state, timeout=RUN_TIMEOUT)
    assert run.code == 0 and run.stdout.count("\n") == 5, run.stderr
    server.routes["/recent"] = answer(recent(*stale))
    run = consume(url, state, timeout=RUN_TIMEOUT)
    assert run.code == 0 and run.stdout == "", run.stderr
    newest = stale[-1] if stale else 3
    assert f"its newest entry (sequence {newest}) is older than the last processed (5)" in (
        run.stderr
    )
    assert checkpoint_of(state, url) == Checkpoint("urn:e:5", 5, f"{base}/p/2")
    server.routes["/recent"] = answer(recent(4, 5, 6))
    run = consume(url, state, timeout=RUN_TIMEOUT)
    assert run.code == 0 and run.stdout == "6\turn:e:6\te6\n", run.stderr


def test_damaged_cached_pages_cost_one_failed_run_not_one_each(
    hostile: Callable[..., Hostile], tmp_path: Path
) -> None:
    """Damaged cached pages cost one failed run, not one each.

    The chain may no longer vouch for cached pages. `archive rebase` may have re-rendered the
    feed, or the pages are damaged. Dropping one copy a run would stop the consumer once per
    page, 15 runs for 15 pages. So the consumer drops every cached page at the first, and the
    next run reads them again.
    """
    server = hostile({})
    server.routes.update(
        {path: answer(body) for path, body in chain(server.base, [[1, 2], [3, 4], [5, 6], [7]])}
    )
    url = f"{server.base}/recent"
    state = tmp_path / "s.sqlite3"
    run = consume(url, state, "--exec", fails_on(2), timeout=RUN_TIMEOUT)
    assert run.code == 3, run.stderr
    with contextlib.closing(sqlite3.connect(state)) as db, db:
        damaged = db.execute(
            "UPDATE documents SET body = CAST(body || x'0a' AS BLOB), coding = 'identity'"
            " WHERE immutable"
        ).rowcount
    assert damaged == 3
    run = consume(url, state, timeout=RUN_TIMEOUT)
    assert run.code == 4 and "SHA-256 mismatch" in run.stderr, run.stderr
    run = consume(url, state, timeout=RUN_TIMEOUT)
    assert run.code == 0, run.stderr
    assert [line.split("\t")[0] for line in run.stdout.splitlines()] == [
        "2",
        "3",
        "4",
        "5",
        "6",
        "7",
    ]

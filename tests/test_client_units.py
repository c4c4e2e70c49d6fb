"""The consumer's pure parts and its state file.

These tests cover polling intervals, and parsing real rendered documents and bytes that are
not Atom. They walk over pages held in memory, and check the SQLite state.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from simplefeed import atom
from simplefeed.client import (
    Bounds,
    Checkpoint,
    Consumer,
    LastEntryVanished,
    LinkLoop,
    MalformedPage,
    NotAtom,
    PollPolicy,
    RedirectRefused,
    RepeatedEntry,
    RetryPolicy,
    SequenceGap,
    StateError,
    StateFile,
)
from simplefeed.client.command import FLAGS
from simplefeed.client.errors import Parting
from simplefeed.client.parse import Outline, Page, parse_page
from simplefeed.client.poll import next_interval
from simplefeed.client.state import CachedDocument
from simplefeed.client.walk import new_entries, parting, starting_point
from simplefeed.model import Document, DocumentKind, Entry, Event, Feed, Link
from simplefeed.rules import paging

BASE = "http://feeds.example.test"
T0 = 1_800_000_000_000_000

# -- polling -------------------------------------------------------------------------------


def test_interval_doubles_when_quiet_and_halves_when_busy() -> None:
    policy = PollPolicy(min_interval=1, max_interval=60, factor=2)
    interval = policy.initial
    seen = []
    for found in [0, 0, 0, 0, 0, 0, 0, 3, 1, 0]:
        interval = next_interval(policy, interval, found)
        seen.append(interval)
    assert seen == [2, 4, 8, 16, 32, 60, 60, 30, 15, 30]


def test_interval_stays_within_bounds_and_never_below_max_age() -> None:
    policy = PollPolicy(min_interval=1, max_interval=30, factor=1.5)
    assert next_interval(policy, 1, 5) == 1
    assert next_interval(policy, 30, 0) == 30
    assert next_interval(policy, 1, 5, max_age=10) == 10
    assert next_interval(policy, 30, 0, max_age=120) == 120  # Max-age beats max_interval.
    assert next_interval(policy, 4, 0, max_age=0) == 6


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_interval": 0},
        {"min_interval": 5, "max_interval": 1},
        {"factor": 0.5},
        {"min_interval": float("nan")},
        {"max_interval": float("inf")},
        {"factor": float("nan")},
    ],
)
def test_poll_policy_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        PollPolicy(**kwargs)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_seconds_that_are_not_finite_are_refused_by_the_library(
    value: float, tmp_path: Path
) -> None:
    """Seconds that are not finite are refused by the library.

    NaN makes every comparison with a deadline false, which leaves a response's time unbounded.
    An infinite wait never ends. The library refuses both, as the command does.
    """
    with pytest.raises(ValueError, match="finite"):
        Bounds(max_seconds=value)
    with pytest.raises(ValueError, match="finite"):
        RetryPolicy(initial=value)
    with pytest.raises(ValueError, match="finite"):
        Consumer("http://feeds.example.test/recent", tmp_path / "s.sqlite3", timeout=value)
    with pytest.raises(ValueError, match="finite"):
        Consumer("http://feeds.example.test/recent", tmp_path / "s.sqlite3", wait=value)


# -- documents rendered by the real renderer -----------------------------------------------

FEED = Feed(
    id=1,
    name="events",
    uuid="8c5d1a3e-0000-4000-8000-000000000001",
    title="events",
    page_size=3,
    created_us=T0,
    head_seq=0,
    head_updated_us=None,
    modified_us=T0,
)


def make_entry(seq: int, **event: object) -> Entry:
    fields: dict[str, object] = {"title": f"event {seq}"}
    fields.update(event)
    return Entry(
        seq=seq,
        id=f"urn:test:{seq}",
        updated_us=T0 + seq,
        published_us=T0 + seq,
        event=Event(**fields),  # type: ignore[arg-type]
    )


def render(kind: DocumentKind, number: int, entries: list[Entry]) -> bytes:
    urls = paging.Urls(BASE, "events", "events")
    doc = Document(
        feed=FEED,
        kind=kind,
        number=number,
        updated_us=entries[-1].updated_us if entries else T0,
        links=paging.links(urls, kind, number),
        locator_base=urls.locator_base,
        entries=tuple(reversed(entries)),  # Documents hold entries newest first.
    )
    return atom.render(doc)


def test_parse_an_archived_page() -> None:
    entries = [
        make_entry(4, content='{"amount": 3, "note": "é"}', content_type="application/json"),
        make_entry(5, content="<b>hi</b>", content_type="html"),
        make_entry(6, links=(Link(href="http://shop.test/o/6", rel="related", title="order"),)),
    ]
    page = parse_page(f"{BASE}/pages/2", render("archive", 2, entries))
    assert page.is_archive
    assert page.warnings == ()
    assert page.links == {
        "self": f"{BASE}/pages/2",
        "current": f"{BASE}/recent",
        "prev-archive": f"{BASE}/pages/1",
        "next-archive": f"{BASE}/pages/3",
    }
    assert page.permanent_url == f"{BASE}/pages/2"
    assert [e.seq for e in page.entries] == [4, 5, 6]  # Oldest first.
    assert [e.id for e in page.entries] == ["urn:test:4", "urn:test:5", "urn:test:6"]
    json_entry, html_entry, linked = page.entries
    assert json_entry.content == {"amount": 3, "note": "é"}  # The JSON value.
    assert json_entry.content_type == "application/json"
    assert json_entry.summary is None  # None is invented for JSON, carried as text.
    assert html_entry.content == "<b>hi</b>" and html_entry.content_type == "html"
    assert linked.links[0].href == "http://shop.test/o/6"
    assert linked.links[0].rel == "related" and linked.links[0].title == "order"
    assert json_entry.updated == "2027-01-15T08:00:00.000004+00:00"
    assert all(e.page_url == f"{BASE}/pages/2" for e in page.entries)
    assert json_entry.to_json()["seq"] == 4


def test_parse_the_recent_document_uses_via_as_the_permanent_url() -> None:
    page = parse_page(f"{BASE}/recent", render("recent", 3, [make_entry(7)]))
    assert not page.is_archive
    assert page.permanent_url == f"{BASE}/pages/3"
    assert page.entries[0].page_url == f"{BASE}/pages/3"
    assert page.next_archive is None and page.prev_archive == f"{BASE}/pages/2"
    empty = parse_page(f"{BASE}/recent", render("recent", 1, []))
    assert empty.entries == () and empty.prev_archive is None


def test_inline_xml_content_is_kept() -> None:
    xml = '<order xmlns="urn:shop"><id>9</id></order>'
    body = render("working", 1, [make_entry(1, content=xml, content_type="application/xml")])
    (entry,) = parse_page(f"{BASE}/pages/1", body).entries
    assert entry.content_type == "application/xml"
    assert "<id>9</id>" in (entry.content or "") and "urn:shop" in (entry.content or "")


def test_any_namespace_prefix_works() -> None:
    body = render("archive", 1, [make_entry(1), make_entry(2)])
    body = body.replace(b"xmlns:sf=", b"xmlns:q=").replace(b"sf:seq", b"q:seq")
    body = body.replace(b"xmlns:fh=", b"xmlns:hist=").replace(b"fh:archive", b"hist:archive")
    page = parse_page("u", body)
    assert [e.seq for e in page.entries] == [1, 2] and page.is_archive


GOOD = render("archive", 1, [make_entry(1), make_entry(2), make_entry(3)])


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"this is not xml <<<", "SAXParseException"),
        (b'{"error": "oops"}', "SAXParseException"),
        (GOOD[: len(GOOD) // 2], "SAXParseException"),  # Cut short, yet feedparser finds entries.
        (b"", "no Atom feed element"),
        (b"<html><body><h1>502 Bad Gateway</h1></body></html>", "no Atom feed element"),
        (b'<?xml version="1.0"?><foo xmlns="urn:x"/>', "no Atom feed element"),
        (
            b'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title></channel></rss>',
            "a rss20 document",
        ),
    ],
)
def test_bytes_that_are_not_atom_raise_not_atom(body: bytes, reason: str) -> None:
    with pytest.raises(NotAtom) as info:
        parse_page("http://x.test/p", body)
    assert reason in info.value.reason
    assert info.value.url == "http://x.test/p"


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        ((b"<sf:seq>2</sf:seq>", b""), "no valid sequence number"),
        ((b"<sf:seq>2</sf:seq>", b"<sf:seq>two</sf:seq>"), "no valid sequence number"),
        ((b"<sf:seq>2</sf:seq>", b"<sf:seq>9</sf:seq>"), "not newest first"),
        ((b"<id>urn:test:2</id>", b""), "has no id"),
        ((b"<sf:seq>2</sf:seq>", b"<sf:seq>0</sf:seq>"), "out of range"),
        ((b"<sf:seq>2</sf:seq>", b"<sf:seq>1180591620717411303424</sf:seq>"), "no valid seq"),
        ((b"<sf:seq>2</sf:seq>", b"<sf:seq>9223372036854775808</sf:seq>"), "out of range"),
        ((b"<sf:seq>2</sf:seq>", b"<sf:seq>-2</sf:seq>"), "no valid sequence number"),
        ((b"<id>urn:test:2</id>", b"<id>urn:test:1</id>"), "on the page twice"),
        (
            (
                b"<sf:seq>2</sf:seq>",
                b'<link href="urn:x" length="' + b"9" * 400 + b'"/><sf:seq>2</sf:seq>',
            ),
            "length",
        ),
    ],
)
def test_atom_that_breaks_the_protocol_raises_malformed_page(
    edit: tuple[bytes, bytes], reason: str
) -> None:
    assert edit[0] in GOOD
    with pytest.raises(MalformedPage, match=reason):
        parse_page("u", GOOD.replace(*edit))


# -- walking over pages held in memory -----------------------------------------------------


class Pages:
    """A page source from a dict of URL to parsed page, which records what was asked for."""

    def __init__(self, pages: dict[str, Page]) -> None:
        self.pages = pages
        self.asked: list[str] = []

    def page(self, url: str) -> Page:
        self.asked.append(url)
        return self.pages[url]


def feed_pages(head_seq: int, size: int = 3) -> tuple[Page, Pages]:
    """Return the documents of a feed with ``head_seq`` entries, as the server renders them."""
    entries = [make_entry(s) for s in range(1, head_seq + 1)]
    working = paging.working_page(head_seq, size)
    pages: dict[str, Page] = {}
    for n in range(1, working + 1):
        chunk = entries[(n - 1) * size : n * size]
        kind: DocumentKind = "archive" if n < working else "working"
        url = f"{BASE}/pages/{n}"
        pages[url] = parse_page(url, render(kind, n, chunk))
    head_entries = entries[(working - 1) * size :]
    head = parse_page(f"{BASE}/recent", render("recent", working, head_entries))
    return head, Pages(pages)


def seqs(head: Page, source: Pages, checkpoint: Checkpoint | None) -> list[int]:
    return [e.seq for e in new_entries(source, head, checkpoint)]


def test_first_walk_goes_back_to_the_first_page_and_forward() -> None:
    head, source = feed_pages(10)
    assert seqs(head, source, None) == list(range(1, 11))
    # Back through prev-archive, holding one page at a time. Then forward again through
    # next-archive. The consumer's source serves archived pages from its cache.
    assert source.asked == [f"{BASE}/pages/{n}" for n in (3, 2, 1, 2, 3)]


class Outlines(Pages):
    """A page source that also gives outlines, as the consumer's does."""

    def __init__(self, pages: dict[str, Page]) -> None:
        super().__init__(pages)
        self.outlined: list[str] = []

    def outline(self, url: str) -> Outline:
        self.outlined.append(url)
        return Outline.of(self.pages[url])


def test_first_walk_reads_outlines_back_and_pages_forward() -> None:
    head, pages = feed_pages(10)
    source = Outlines(pages.pages)
    assert seqs(head, source, None) == list(range(1, 11))
    assert source.outlined == [f"{BASE}/pages/{n}" for n in (3, 2, 1)]
    assert source.asked == [f"{BASE}/pages/{n}" for n in (1, 2, 3)]


def test_checkpoint_in_head_needs_no_other_page() -> None:
    head, source = feed_pages(11)
    assert seqs(head, source, Checkpoint("urn:test:10", 10, f"{BASE}/pages/4")) == [11]
    assert source.asked == []


def test_resume_walks_back_to_the_checkpoints_page_then_forward() -> None:
    head, pages = feed_pages(14)
    source = Outlines(pages.pages)
    assert seqs(head, source, Checkpoint("urn:test:5", 5, f"{BASE}/pages/2")) == list(range(6, 15))
    # Back from head to the checkpoint's page through outlines. Each is checked against the
    # digest chain anchored at head. Then forward through next-archive, with every page
    # checked against the chain again. Head stands in for the page its via names.
    assert source.outlined == [f"{BASE}/pages/{n}" for n in (4, 3, 2)]
    assert source.asked == [f"{BASE}/pages/{n}" for n in (2, 3, 4)]


def test_resume_falls_back_to_walking_back_when_the_page_does_not_hold_the_entry() -> None:
    head, source = feed_pages(14)
    wrong = Checkpoint("urn:test:5", 5, f"{BASE}/pages/4")
    assert seqs(head, source, wrong) == list(range(6, 15))
    assert source.asked[:1] == [f"{BASE}/pages/4"]


def test_vanished_entry_loop_and_gap() -> None:
    head, source = feed_pages(9)
    with pytest.raises(LastEntryVanished):
        list(new_entries(source, head, Checkpoint("urn:test:404", 4, f"{BASE}/pages/2")))
    # Position is found by id and sequence number, so the id at another number is an error.
    with pytest.raises(RepeatedEntry) as repeated:
        list(new_entries(source, head, Checkpoint("urn:test:5", 3, f"{BASE}/pages/2")))
    assert (repeated.value.expected, repeated.value.found) == (3, 5)
    page2 = source.pages[f"{BASE}/pages/2"]
    source.pages[page2.url] = replace(page2, entries=page2.entries[1:])  # Without entry 4.
    with pytest.raises(SequenceGap) as gap:
        list(new_entries(source, head, Checkpoint("urn:test:3", 3, f"{BASE}/pages/1")))
    assert (gap.value.expected, gap.value.found) == (4, 5)
    source.pages[page2.url] = page2
    looped = Page(
        f"{BASE}/pages/1",
        {"self": f"{BASE}/pages/1", "prev-archive": f"{BASE}/pages/3"},
        source.pages[f"{BASE}/pages/1"].entries,
        True,
    )
    source.pages[f"{BASE}/pages/1"] = looped
    with pytest.raises(LinkLoop):
        list(new_entries(source, head, None))


def test_starting_point_is_the_newest_entry_or_before_the_first() -> None:
    head, source = feed_pages(6)  # The recent document is empty. Page 2 was just archived.
    assert head.entries == ()
    assert starting_point(source, head) == Checkpoint("urn:test:6", 6, f"{BASE}/pages/2")
    empty_head, empty = feed_pages(0)
    start = starting_point(empty, empty_head)
    assert start.seq == 0
    assert seqs(empty_head, empty, start) == []


def test_parting_finds_the_last_entry_read_that_the_feed_holds_as_read() -> None:
    """Parting finds the last entry read that the feed holds as read.

    A feed of 14 entries, urn:test:N at N, is set against what a consumer read. Parting says
    where they part.
    """
    head, pages = feed_pages(14)  # Pages 1-4 of 3. 13 and 14 on the working page.
    source = Outlines(pages.pages)
    read = {n: f"urn:test:{n}" for n in range(6, 15)}
    assert parting(source, head, read) == Parting(14, ())  # All held, so nothing lost.
    assert source.asked == [f"{BASE}/pages/{n}" for n in (4, 3, 2)]  # Back to 6's page only.
    other = read | {10: "urn:lost:10", 11: "urn:lost:11", 12: "urn:lost:12", 13: "urn:lost:13"}
    lost = ((10, "urn:lost:10"), (11, "urn:lost:11"), (12, "urn:lost:12"), (13, "urn:lost:13"))
    assert parting(source, head, other) == Parting(9, (*lost, (14, "urn:test:14")))
    # The lowest number held otherwise counts. An entry held as read past it (12 here) does not.
    assert parting(source, head, read | {10: "urn:lost:10"}).agreed == 9
    # Read past the feed's newest entry. Those are lost, and the rest are held.
    beyond = read | {15: "urn:lost:15", 16: "urn:lost:16"}
    assert parting(source, head, beyond) == Parting(14, ((15, "urn:lost:15"), (16, "urn:lost:16")))
    # Not even the oldest entry remembered is held as read. So where they part is not known.
    assert parting(source, head, {6: "urn:x:6", 7: "urn:test:7"}) == Parting(
        None, ((6, "urn:x:6"), (7, "urn:test:7"))
    )
    # A feed behind every entry read. It was restored to fewer entries than the oldest
    # remembered.
    short, shorter = feed_pages(4)
    assert parting(shorter, short, {6: "urn:test:6"}) == Parting(None, ((6, "urn:test:6"),))


# -- the state file ------------------------------------------------------------------------


def test_the_state_file_remembers_the_last_entries_processed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state file remembers the last entries processed.

    It writes the entries a checkpoint covers in the checkpoint's transaction, one row a run.
    The oldest runs beyond the bound are forgotten. So are the entries past a checkpoint that
    moved back.
    """
    monkeypatch.setattr("simplefeed.client.state.PROCESSED_KEPT", 5)
    url = f"{BASE}/recent"
    path = tmp_path / "state.sqlite3"

    def cp(seq: int) -> Checkpoint:
        return Checkpoint(f"urn:test:{seq}", seq, f"{BASE}/pages/1")

    def ids(*seqs: int) -> list[tuple[int, str]]:
        return [(n, f"urn:test:{n}") for n in seqs]

    with StateFile(path) as state:
        state.save_checkpoint(url, cp(3), 1.0, ids(1, 2, 3))
        state.save_checkpoint(f"{BASE}/other", cp(1), 1.0, [(1, "urn:other:1")])
        assert state.processed(url) == dict(ids(1, 2, 3))
        state.save_checkpoint(url, cp(5), 2.0, ids(4, 5))
        state.save_checkpoint(url, cp(9), 2.0, ids(6, 7, 8, 9))
        assert list(state.processed(url)) == [4, 5, 6, 7, 8, 9]  # 1-3 are older than the last 5.
        assert state.processed_id(url, 7) == "urn:test:7"
        assert state.processed_id(url, 3) is None
        state.save_checkpoint(url, cp(7), 3.0)  # Moved back by a reset. 8 and 9 are forgotten.
        assert state.processed(url) == dict(ids(4, 5, 6, 7))
        state.save_checkpoint(url, cp(5), 3.0)
        assert state.processed(url) == dict(ids(4, 5))
        state.save_checkpoint(url, cp(9), 4.0, [*ids(6, 7), (9, "urn:test:9")])  # 8 skipped.
        assert state.processed(url) == dict(ids(4, 5, 6, 7, 9))
        state.clear_checkpoint(url)
        assert state.processed(url) == {}
        assert state.processed(f"{BASE}/other") == {1: "urn:other:1"}
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4
        db.execute(f"UPDATE processed SET entry_ids = '[1]' WHERE feed_url = '{BASE}/other'")
    db.close()
    with StateFile(path) as state, pytest.raises(StateError, match="a damaged processed entr"):
        state.processed(f"{BASE}/other")


def test_a_checkpoint_costs_the_same_however_many_entries_are_remembered(tmp_path: Path) -> None:
    """A checkpoint costs the same however many entries are remembered.

    By default there is a checkpoint an entry. The state file then holds a run a checkpoint, up
    to 10,000. Writing the next checkpoint, and looking an entry up, find their runs by the key.
    The cost is counted in SQLite's own steps (its progress handler), not timed. Forgetting old
    runs must not read every row by its last number. That took a save from 0.13 to 0.45 ms.
    """
    url = f"{BASE}/recent"

    def steps(state: StateFile, seq: int) -> tuple[int, int]:
        counted = [0]

        def count() -> int:
            counted[0] += 1
            return 0

        state._db.set_progress_handler(count, 1)
        state.save_checkpoint(
            url, Checkpoint(f"urn:{seq}", seq, f"{BASE}/pages/1"), 1.0, [(seq, f"urn:{seq}")]
        )
        saving = counted[0]
        counted[0] = 0
        assert state.processed_id(url, seq - 2) == f"urn:{seq - 2}"
        looking = counted[0]
        state._db.set_progress_handler(None, 1)
        return saving, looking

    with StateFile(tmp_path / "state.sqlite3") as state:
        for seq in range(1, 100):
            state.save_checkpoint(
                url, Checkpoint(f"urn:{seq}", seq, f"{BASE}/pages/1"), 1.0, [(seq, f"urn:{seq}")]
            )
        few = steps(state, 100)
        for seq in range(101, 3000):
            state.save_checkpoint(
                url, Checkpoint(f"urn:{seq}", seq, f"{BASE}/pages/1"), 1.0, [(seq, f"urn:{seq}")]
            )
        many = steps(state, 3000)
    assert many[0] < 2 * few[0], (few, many)
    assert many[1] < 2 * few[1], (few, many)


def test_a_damaged_run_of_entries_remembered_is_said(tmp_path: Path) -> None:
    """A damaged run of remembered entries is said.

    A file edited by hand may hold a run whose ids do not match its numbers. However it is
    read, that is a StateError naming the run, not an internal error.
    """
    url = f"{BASE}/recent"
    path = tmp_path / "state.sqlite3"
    with StateFile(path) as state:
        state.save_checkpoint(
            url, Checkpoint("urn:3", 3, f"{BASE}/pages/1"), 1.0, [(1, "a"), (2, "b"), (3, "c")]
        )
    with sqlite3.connect(path) as db:
        db.execute("""UPDATE processed SET entry_ids = '["a"]'""")
    db.close()
    with StateFile(path) as state:
        for read in (lambda: state.processed(url), lambda: state.processed_id(url, 3)):
            with pytest.raises(
                StateError,
                match=r"a damaged processed entries .*1 ids for the entries numbered 1 to 3",
            ):
                read()
        with pytest.raises(StateError, match="a damaged processed entries"):
            state.save_checkpoint(url, Checkpoint("urn:2", 2, f"{BASE}/pages/1"), 2.0)  # moved back


def test_a_checkpoint_and_the_entries_it_covers_are_written_together(tmp_path: Path) -> None:
    """A checkpoint and the entries it covers are written together.

    A write that fails part way leaves neither. Here the entries' write fails, after the
    checkpoint's. The checkpoint never covers entries that the file does not remember.
    """
    url = f"{BASE}/recent"
    path = tmp_path / "state.sqlite3"
    first = Checkpoint("urn:test:1", 1, f"{BASE}/pages/1")
    with StateFile(path) as state:
        state.save_checkpoint(url, first, 1.0, [(1, "a")])
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TRIGGER full BEFORE INSERT ON processed BEGIN SELECT RAISE(ABORT, 'no"
            " room'); END"
        )
    db.close()
    with StateFile(path) as state:
        with pytest.raises(StateError, match="write failed: no room"):
            state.save_checkpoint(
                url, Checkpoint("urn:test:3", 3, f"{BASE}/pages/1"), 2.0, [(2, "b"), (3, "c")]
            )
        assert state.load_checkpoint(url) == first
        assert state.processed(url) == {1: "a"}


def test_state_file_keeps_checkpoints_and_documents_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    cp = Checkpoint("urn:test:7", 7, f"{BASE}/pages/3")
    doc = CachedDocument(f"{BASE}/pages/1", b"<feed/>", '"e1"', None, True, 100.0, None)
    with StateFile(path) as state:
        assert state.load_checkpoint(f"{BASE}/recent") is None
        state.save_checkpoint(f"{BASE}/recent", cp, now=1.0)
        state.put_document(doc)
    with StateFile(path) as state:
        assert state.load_checkpoint(f"{BASE}/recent") == cp
        assert state.load_checkpoint(f"{BASE}/feeds/other/recent") is None
        assert state.get_document(f"{BASE}/pages/1") == doc
        state.clear_checkpoint(f"{BASE}/recent")
        assert state.load_checkpoint(f"{BASE}/recent") is None
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_a_state_file_is_created_but_never_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state file is created, but never its directory.

    A mistyped directory would get a new, empty state file, with the directories made along.
    The consumer would then read the whole history again. So it is refused, naming the
    directory.
    """
    missing = tmp_path / "typo" / "deeper"
    words = f"no such directory: {missing} (a state file is created only in a directory"
    with pytest.raises(StateError, match=re.escape(words)):
        StateFile(missing / "state.sqlite3")
    with pytest.raises(StateError, match=re.escape(words)):
        Consumer(f"{BASE}/recent", missing / "state.sqlite3")
    assert not (tmp_path / "typo").exists()
    monkeypatch.chdir(tmp_path)  # A bare file name is in the working directory.
    StateFile("state.sqlite3").close()
    assert (tmp_path / "state.sqlite3").is_file()


def test_a_version_2_state_file_is_read_and_upgraded(tmp_path: Path) -> None:
    """A version 2 state file is read and upgraded.

    Version 2 kept bodies decoded, in a table without ``coding``. Its rows read as
    ``identity``, and the file takes encoded bodies from then on.
    """
    path = tmp_path / "state.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(
            """
            CREATE TABLE documents (url TEXT PRIMARY KEY, body BLOB NOT NULL, etag TEXT,
                last_modified TEXT, immutable INTEGER NOT NULL DEFAULT 0,
                fetched_at REAL NOT NULL, max_age REAL);
            INSERT INTO documents VALUES ('u1', X'3c666565642f3e', '"e1"', NULL, 1, 5.0, NULL);
            PRAGMA user_version=2;
            """
        )
    db.close()
    with StateFile(path) as state:
        assert state.get_document("u1") == CachedDocument(
            "u1", b"<feed/>", '"e1"', None, True, 5.0, None, coding="identity"
        )
        coded = CachedDocument("u2", b"\x1f\x8b", '"e2-gzip"', None, True, 6.0, None, "gzip")
        state.put_document(coded)
    with StateFile(path) as state:
        assert state.get_document("u2") == coded
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4
    db.close()


def test_cached_document_freshness() -> None:
    live = CachedDocument("u", b"", None, None, False, fetched_at=100.0, max_age=10.0)
    assert live.fresh(109.9) and not live.fresh(110.0)
    assert not CachedDocument("u", b"", None, None, False, 100.0, None).fresh(100.0)
    assert CachedDocument("u", b"", None, None, True, 100.0, None).fresh(1e12)


def test_a_file_that_is_not_a_state_file_is_a_state_error(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(StateError):
        StateFile(path)


def file_state(path: Path) -> tuple[list[str], int, int, str]:
    with sqlite3.connect(path) as db:
        found = (
            sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")),
            db.execute("PRAGMA user_version").fetchone()[0],
            db.execute("PRAGMA application_id").fetchone()[0],
            db.execute("PRAGMA journal_mode").fetchone()[0],
        )
    db.close()
    return found


@pytest.mark.parametrize(
    "setup",
    [
        "CREATE TABLE feeds (id INTEGER PRIMARY KEY); CREATE TABLE checkpoints (x);",
        "PRAGMA application_id=1234;",
    ],
    ids=["another application's tables", "another application's id"],
)
def test_another_applications_database_is_refused_untouched(tmp_path: Path, setup: str) -> None:
    """Another application's database is refused, and left untouched.

    Given the service's own database as `--state`, the consumer would put its tables, WAL mode
    and schema version there. Alembic checks that database.
    """
    path = tmp_path / "other.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(setup)
    db.close()
    before = file_state(path)
    with pytest.raises(StateError, match="not a simplefeed state file"):
        StateFile(path)
    assert file_state(path) == before


def test_a_state_file_is_marked_as_one(tmp_path: Path) -> None:
    """A state file is marked as one.

    New files, and files from before the mark, carry the consumer's application id.
    """
    path = tmp_path / "state.sqlite3"
    with StateFile(path):
        pass
    assert file_state(path)[2] == 0x53466373
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA application_id=0")
    db.close()
    with StateFile(path) as state:
        assert state.load_checkpoint(f"{BASE}/recent") is None
    assert file_state(path) == (
        ["checkpoints", "documents", "heads", "parked", "processed"],
        4,
        0x53466373,
        "wal",
    )


def test_every_type_the_consumer_s_methods_take_or_give_is_exported() -> None:
    """Every type the consumer's methods take or give is exported.

    `Consumer.status()` gives a `Status`. `parked()` gives `Parked`s with a `Head` beside. The
    `progress` callback gets a `Progress`. Each is importable from `simplefeed.client`.
    Otherwise annotating them needs the modules that its docstring says may change.
    """
    import inspect
    import typing

    import simplefeed.client as public

    def classes(annotation: object) -> set[type]:
        found = {annotation} if isinstance(annotation, type) else set()
        args = annotation if isinstance(annotation, list) else typing.get_args(annotation)
        for arg in args:  # A Callable's parameters come as a list.
            found |= classes(arg)
        return found

    used: set[type] = set()
    for name, member in inspect.getmembers(public.Consumer):
        if name.startswith("_") and name != "__init__":
            continue
        if callable(member):
            used |= {c for a in typing.get_type_hints(member).values() for c in classes(a)}
    ours = {c for c in used if c.__module__.startswith("simplefeed.client.")}
    assert {public.Status, public.Parked, public.Progress} <= ours
    missing = sorted(c.__name__ for c in ours if c.__name__ not in public.__all__)
    assert missing == []


def test_a_closed_state_file_says_so(tmp_path: Path) -> None:
    """A closed state file says so.

    Used after its consumer was closed, it must not say "read failed: Cannot operate on a
    closed database".
    """
    from simplefeed.client import StateError, StateFile

    state = StateFile(tmp_path / "state.sqlite3")
    state.close()
    with pytest.raises(StateError, match="read after the state file was closed"):
        state.load_checkpoint("http://feeds.example.test/recent")


def test_an_error_names_the_setting_as_asked_and_leaves_a_server_s_words_alone() -> None:
    """An error names the setting as asked, and leaves a server's words alone.

    ``simplefeed consume`` names a flag where the library names a parameter. A URL that holds
    the parameter's name is quoted as it is, because a server chose it.
    """
    error = RedirectRefused("http://a.test/max_pages", "http://b.test/allow_redirect_origins")
    assert str(error).endswith("/allow_redirect_origins (see allow_redirect_origins)")
    assert error.naming(FLAGS) == (
        "http://a.test/max_pages: redirect to another origin refused:"
        " http://b.test/allow_redirect_origins (see --allow-redirect-origin)"
    )
    assert error.naming({}) == str(error)
    unnamed = MalformedPage("http://a.test/allow_redirect_origins", "no entries")
    assert unnamed.setting is None and unnamed.naming(FLAGS) == str(unnamed)

"""The core against real databases: sequence, freezing, idempotency, archive files."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os

import pytest

from simplefeed import atom
from simplefeed.errors import EntryConflict, FeedExists, FeedNotFound, PageNotFound
from simplefeed.model import Entry, Event
from simplefeed.service import Simplefeed
from tests.conftest import START_US, FakeClock


def events(n: int, prefix: str = "event") -> list[Event]:
    return [Event(title=f"{prefix} {i}") for i in range(n)]


def all_entries(core: Simplefeed, feed: str = "events") -> list[Entry]:
    f = core.feed(feed)
    return list(reversed(core.store.entries_between(f.id, 1, f.head_seq)))


def test_sequence_is_contiguous_across_singles_and_batches(core: Simplefeed) -> None:
    seqs = [r.seq for r in core.publish("events", events(1))]
    seqs += [r.seq for r in core.publish("events", events(7))]
    seqs += [r.seq for r in core.publish("events", events(1))]
    assert seqs == list(range(1, 10))
    assert [e.seq for e in all_entries(core)] == list(range(1, 10))
    assert core.feed("events").head_seq == 9


def test_generated_ids_are_urn_uuids(core: Simplefeed) -> None:
    (result,) = core.publish("events", events(1))
    assert result.entry_id == "urn:uuid:00000000-0000-0000-0000-000000000002"  # 1 = the feed
    assert result.created and result.page == 1


def test_updated_is_strictly_increasing_and_never_reorders(core: Simplefeed) -> None:
    # The clock stands still and the producer gives equal and decreasing times.
    given = [START_US - 10, START_US - 10, START_US - 50, START_US + 5]
    core.publish("events", [Event(title=f"e{i}", updated_us=u) for i, u in enumerate(given)])
    core.publish("events", events(3))
    entries = all_entries(core)
    updated = [e.updated_us for e in entries]
    assert all(a < b for a, b in itertools.pairwise(updated))
    assert [e.published_us for e in entries[:4]] == given  # the producer's time is kept
    assert all(e.published_us <= e.updated_us for e in entries)
    assert updated[0] == START_US - 10  # honoured when it does not go backwards


def test_page_freezes_exactly_when_full(core: Simplefeed, clock: FakeClock) -> None:
    core.publish("events", events(4))
    feed = core.feed("events")
    assert list(core.store.iter_pages(feed.id)) == []
    clock.advance(3)
    core.publish("events", events(1))
    feed = core.feed("events")
    pages = list(core.store.iter_pages(feed.id))
    assert [p.number for p in pages] == [1]
    path = core.page_path("events", 1)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == pages[0].sha256
    assert path.read_bytes() == core.page(feed, 1).body
    assert os.stat(path).st_mtime_ns == pages[0].frozen_us * 1000
    assert core.live(feed, "working").number == 2
    with pytest.raises(PageNotFound):
        core.page(feed, 2)  # the working page is live, not frozen
    assert core.rerender(feed, 1) == core.page(feed, 1).body


def test_a_batch_crossing_several_pages_freezes_each_once(core: Simplefeed) -> None:
    results = core.publish("events", events(17))
    assert [r.page for r in results] == [1] * 5 + [2] * 5 + [3] * 5 + [4] * 2
    feed = core.feed("events")
    pages = list(core.store.iter_pages(feed.id))
    assert [p.number for p in pages] == [1, 2, 3]
    for page in pages:
        on_disk = core.page_path("events", page.number).read_bytes()
        assert hashlib.sha256(on_disk).hexdigest() == page.sha256
        assert core.rerender(feed, page.number) == on_disk
    with pytest.raises(PageNotFound):
        core.page(feed, 5)
    with pytest.raises(PageNotFound):
        core.page(feed, 0)


def test_frozen_bytes_never_change(core: Simplefeed, clock: FakeClock) -> None:
    core.publish("events", events(5))
    feed = core.feed("events")
    before = core.page(feed, 1)
    clock.advance(60)
    core.publish("events", events(12))
    after = core.page(core.feed("events"), 1)
    assert before == after


def test_replay_with_same_content_returns_the_existing_entry(core: Simplefeed) -> None:
    first = core.publish("events", [Event(title="paid", id="tag:shop.test,2026:order/1")])
    core.publish("events", events(2))
    again = core.publish("events", [Event(title="paid", id="tag:shop.test,2026:order/1")])
    assert again[0].seq == first[0].seq == 1
    assert again[0].created is False and first[0].created is True
    assert core.feed("events").head_seq == 3


def test_conflicting_replay_is_refused_and_the_batch_stores_nothing(core: Simplefeed) -> None:
    core.publish("events", [Event(title="paid", id="urn:x:1")])
    head = core.feed("events")
    with pytest.raises(EntryConflict) as exc:
        core.publish("events", [Event(title="new"), Event(title="refunded", id="urn:x:1")])
    assert exc.value.entry_id == "urn:x:1" and exc.value.index == 1
    assert core.feed("events") == head
    assert len(all_entries(core)) == 1


def test_duplicate_ids_inside_one_batch(core: Simplefeed) -> None:
    results = core.publish(
        "events", [Event(title="a", id="urn:x:a"), Event(title="a", id="urn:x:a")]
    )
    assert [(r.seq, r.created) for r in results] == [(1, True), (1, False)]
    with pytest.raises(EntryConflict) as exc:
        core.publish("events", [Event(title="b", id="urn:x:b"), Event(title="c", id="urn:x:b")])
    assert exc.value.index == 1
    assert core.feed("events").head_seq == 1


def test_feeds_are_independent(core: Simplefeed) -> None:
    core.create_feed("orders", page_size=2, title="Orders")
    with pytest.raises(FeedExists):
        core.create_feed("orders")
    core.publish("orders", events(3))
    core.publish("events", events(1))
    assert core.feed("orders").head_seq == 3
    assert core.feed("events").head_seq == 1
    assert core.page_path("orders", 1).exists()
    assert core.page_path("orders", 1).parts[-4:] == ("feeds", "orders", "pages", "1")
    with pytest.raises(FeedNotFound):
        core.publish("nope", events(1))


def test_rebuild_restores_missing_and_damaged_files(core: Simplefeed) -> None:
    core.publish("events", events(15))
    p1, p2, p3 = (core.page_path("events", n) for n in (1, 2, 3))
    original = {p: p.read_bytes() for p in (p1, p2, p3)}
    p1.unlink()
    p2.write_bytes(original[p2][:-10] + b"garbage!!!")
    report = core.rebuild_archive()
    assert report.checked == 3
    assert sorted(report.restored) == sorted([p1, p2])
    assert {p: p.read_bytes() for p in (p1, p2, p3)} == original
    assert core.rebuild_archive().restored == []


def test_a_node_without_the_file_serves_from_the_database_and_writes_it(
    core: Simplefeed,
) -> None:
    core.publish("events", events(5))
    path = core.page_path("events", 1)
    body = path.read_bytes()
    path.unlink()
    page = core.page(core.feed("events"), 1)
    assert page.body == body  # type: ignore[union-attr]
    assert path.read_bytes() == body


def test_live_etag_changes_with_the_document_format(
    core: Simplefeed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release that renders live documents differently must not have a client's old copy
    confirmed by a 304: the format is part of the ETag, the head alone is not enough."""
    feed = core.feed("events")
    before = core.live(feed, "recent").etag
    monkeypatch.setattr(atom, "DOCUMENT_FORMAT", atom.DOCUMENT_FORMAT + 1)
    assert core.live(feed, "recent").etag != before


def test_live_etag_tells_a_restored_head_from_the_one_before(core: Simplefeed) -> None:
    """A database restored from a backup and published to since has the head it had before
    with other entries, appended at another time: another ETag (it was the same, and a
    consumer's conditional GET kept the entries the restore lost: tests/test_consumer_reset)."""
    core.publish("events", events(2))
    feed = core.feed("events")
    again = dataclasses.replace(feed, modified_us=feed.modified_us + 1)
    assert core.live(again, "recent").etag != core.live(feed, "recent").etag
    assert core.live(again, "recent").etag.startswith('"r2-')


def test_live_etag_changes_exactly_with_the_head(core: Simplefeed) -> None:
    feed = core.feed("events")
    etag0 = core.live(feed, "recent").etag
    assert core.live(core.feed("events"), "recent").etag == etag0
    core.publish("events", events(1))
    etag1 = core.live(core.feed("events"), "recent").etag
    assert etag1 != etag0
    assert core.live(core.feed("events"), "working").etag != etag1

"""The append decision (simplefeed.rules.appending), without a database.

The tests give examples, and properties over generated heads, stored entries and batches
(hypothesis).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simplefeed.errors import EntryConflict
from simplefeed.model import Appended, Event, Feed, PendingEntry, StoredEntry
from simplefeed.rules import paging
from simplefeed.rules.appending import appended_after, decide, ids_are_distinct, pending_entries

NOW = 1_800_000_000_000_000


def feed(head_seq: int = 0, head_updated_us: int | None = None, page_size: int = 5) -> Feed:
    return Feed(1, "events", "u", "events", page_size, 0, head_seq, head_updated_us, NOW - 10)


def made_ids() -> itertools.count[int]:
    return itertools.count(1)


def pending(*events: Event, now: int = NOW) -> list[PendingEntry]:
    counter = made_ids()
    return pending_entries(list(events), now, lambda: f"urn:made:{next(counter)}")


def test_new_events_are_numbered_after_the_head_with_increasing_updated() -> None:
    p = pending(Event("a"), Event("b", updated_us=NOW - 100), Event("c", updated_us=NOW + 7))
    d = decide(feed(head_seq=3, head_updated_us=NOW), p, {}, NOW)
    assert [(e.seq, e.updated_us, e.published_us) for e, _ in d.new] == [
        (4, NOW + 1, NOW),
        (5, NOW + 2, NOW - 100),
        (6, NOW + 7, NOW + 7),
    ]
    assert d.results == (
        Appended("urn:made:1", 4, 1, True),
        Appended("urn:made:2", 5, 1, True),
        Appended("urn:made:3", 6, 2, True),
    )
    assert list(d.full_pages) == [1]
    assert d.modified_us == NOW and not d.replayed


def test_a_replay_gets_the_stored_entry_and_stores_nothing() -> None:
    (p,) = pending(Event("paid", id="urn:order:1"))
    found = {p.id: StoredEntry(p.id, 2, p.fingerprint)}
    d = decide(feed(head_seq=7), [p], found, NOW)
    assert d.results == (Appended("urn:order:1", 2, 1, created=False),)
    assert d.new == () and d.replayed and list(d.full_pages) == []


def test_a_stored_id_made_for_this_request_is_its_own_earlier_append() -> None:
    (p,) = pending(Event("no id"))
    d = decide(feed(head_seq=7), [p], {p.id: StoredEntry(p.id, 7, p.fingerprint)}, NOW)
    assert d.results == (Appended(p.id, 7, 2, created=True),)


def test_the_same_id_with_other_content_is_a_conflict_naming_its_index() -> None:
    ps = pending(Event("ok"), Event("changed", id="urn:order:1"))
    found = {"urn:order:1": StoredEntry("urn:order:1", 1, "0" * 64)}
    with pytest.raises(EntryConflict) as info:
        decide(feed(head_seq=1), ps, found, NOW)
    assert (info.value.entry_id, info.value.index) == ("urn:order:1", 1)


def test_an_id_twice_in_a_batch() -> None:
    same = pending(Event("x", id="urn:a"), Event("y"), Event("x", id="urn:a"))
    d = decide(feed(), same, {}, NOW)
    assert [r.seq for r in d.results] == [1, 2, 1]
    assert [r.created for r in d.results] == [True, True, False]
    assert len(d.new) == 2 and not ids_are_distinct(same)
    with pytest.raises(EntryConflict) as info:
        decide(feed(), pending(Event("x", id="urn:a"), Event("z", id="urn:a")), {}, NOW)
    assert info.value.index == 1
    # Said as it is: nothing of the batch is in the feed. "already in the feed" would
    # mislead.
    assert str(info.value) == (
        "entry id 'urn:a' is given twice in this batch with different content (events 0 and 1)"
    )


@pytest.mark.parametrize(
    "stored_as, sent_as",
    [(None, "text"), ("text", None), ("text/plain", "text"), ("html", "text/html")],
)
def test_a_content_type_spelt_another_way_that_renders_alike_is_a_replay(
    stored_as: str | None, sent_as: str | None
) -> None:
    """A content type spelt another way that renders alike is a replay.

    A producer's retry may name the default content type, or leave it out. It renders the
    same document, so it must not be answered 409.
    """
    (first,) = pending(Event("x", content="hi", content_type=stored_as, id="urn:a"))
    (retry,) = pending(Event("x", content="hi", content_type=sent_as, id="urn:a"))
    assert first.fingerprint != retry.fingerprint
    found = {"urn:a": StoredEntry("urn:a", 1, first.fingerprint)}
    d = decide(feed(head_seq=1), [retry], found, NOW)
    assert d.results == (Appended("urn:a", 1, 1, created=False),) and not d.new
    both = decide(feed(), [first, retry], {}, NOW)  # The two in one batch.
    assert [r.created for r in both.results] == [True, False] and len(both.new) == 1
    for other in ("text/csv", "text" if stored_as == "html" else "html"):  # Other documents.
        (changed,) = pending(Event("x", content="hi", content_type=other, id="urn:a"))
        with pytest.raises(EntryConflict):
            decide(feed(head_seq=1), [changed], found, NOW)


def test_appended_after_a_head() -> None:
    ps = pending(Event("a"), Event("b"))
    assert appended_after(ps, 10, 5) == [
        Appended("urn:made:1", 9, 2, True),
        Appended("urn:made:2", 10, 2, True),
    ]


# -- properties -------------------------------------------------------------------------------

TITLES = st.sampled_from(["a", "b", "c"])
IDS = st.one_of(st.none(), st.sampled_from([f"urn:x:{i}" for i in range(6)]))
TIMES = st.one_of(st.none(), st.integers(NOW - 10_000, NOW + 10_000))
EVENTS = st.lists(st.builds(Event, title=TITLES, id=IDS, updated_us=TIMES), max_size=12)


@st.composite
def situations(draw: st.DrawFn) -> tuple[Feed, list[PendingEntry], dict[str, StoredEntry]]:
    size = draw(st.integers(1, 6))
    head = draw(st.integers(0, 30))
    head_updated = None if head == 0 else draw(st.integers(NOW - 20_000, NOW + 20_000))
    events = draw(EVENTS)
    ps = pending(*events)
    # Some of the producers' ids are in the feed already, with the same content or not.
    found: dict[str, StoredEntry] = {}
    for p in ps:
        if p.event.id is not None and head and p.id not in found and draw(st.booleans()):
            same = draw(st.booleans())
            seq = draw(st.integers(1, head))
            found[p.id] = StoredEntry(p.id, seq, p.fingerprint if same else "0" * 64)
    return feed(head, head_updated, size), ps, found


def conflicting(ps: list[PendingEntry], found: dict[str, StoredEntry]) -> int | None:
    """Return the index of the first event refused, by the rules written out another way."""
    fingerprints = {i: s.fingerprint for i, s in found.items()}
    for index, p in enumerate(ps):
        if fingerprints.setdefault(p.id, p.fingerprint) != p.fingerprint:
            return index
    return None


@settings(max_examples=400, deadline=None)
@given(situations())
def test_the_rules_hold_for_any_head_and_batch(
    situation: tuple[Feed, list[PendingEntry], dict[str, StoredEntry]],
) -> None:
    f, ps, found = situation
    refused = conflicting(ps, found)
    if refused is not None:
        with pytest.raises(EntryConflict) as info:
            decide(f, ps, found, NOW)
        assert info.value.index == refused and info.value.entry_id == ps[refused].id
        return
    d = decide(f, ps, found, NOW)
    assert d == decide(f, ps, found, NOW)  # A function of its arguments alone.
    assert len(d.results) == len(ps)
    # New entries take the sequence numbers after the head, with no gap, and each id once.
    seqs = [e.seq for e, _ in d.new]
    assert seqs == list(range(f.head_seq + 1, f.head_seq + 1 + len(d.new)))
    assert len({e.id for e, _ in d.new}) == len(d.new)
    assert all(e.id not in found for e, _ in d.new)
    # `updated` increases strictly from the head's, and is never before the event happened.
    updated = [e.updated_us for e, _ in d.new]
    previous = [f.head_updated_us] if f.head_updated_us is not None else []
    assert all(a < b for a, b in itertools.pairwise(previous + updated))
    assert all(e.updated_us >= e.published_us for e, _ in d.new)
    assert all(e.published_us == (p.event.updated_us or NOW) for e, p in d.new)
    # ... and as the one-round-trip SQL computes it, in closed form:
    # u_i = i + max(u_0, m_i), m_i = max over j <= i of (p_j - j).
    u0 = f.head_updated_us if f.head_updated_us is not None else -(2**62)
    prefix = list(
        itertools.accumulate((e.published_us - i for i, (e, _) in enumerate(d.new, 1)), max)
    )
    assert updated == [i + max(u0, m) for i, m in enumerate(prefix, 1)]
    # Each answer is the stored entry for a replay, and the first occurrence for a repeat.
    firsts: dict[str, Appended] = {}
    for p, r in zip(ps, d.results, strict=True):
        assert r.entry_id == p.id and r.page == paging.page_of(r.seq, f.page_size)
        if p.id in found:
            assert (r.seq, r.created) == (found[p.id].seq, p.event.id is None)
        elif p.id in firsts:
            assert replace(r, created=True) == firsts[p.id] and not r.created
        else:
            firsts[p.id] = r
            assert r.created
    assert d.replayed == any(p.id in found for p in ps)
    # The pages are exactly those the new head fills.
    head = f.head_seq + len(d.new)
    assert list(d.full_pages) == [
        n for n in range(1, head // f.page_size + 1) if n * f.page_size > f.head_seq
    ]
    assert d.modified_us == max(NOW, f.modified_us + 1)

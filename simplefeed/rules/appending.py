"""The decision of an append, apart from every I/O.

These are pure functions over the feed's head, the entries already stored under the events'
ids, and the events. Their rules are the heart of the product.

Replays and conflicts. Say the feed holds an event's id with the same content, by
fingerprint. Then the event is a *replay*. It gets the stored entry back and stores nothing.
A content type spelt another way that renders alike counts as the same. So ``text`` equals
none, and ``text/html`` equals ``html``. The same id with other content is a *conflict*
(:class:`~simplefeed.errors.EntryConflict`). Then the whole batch is refused. Within a batch,
an id repeated with the same content is a replay of its first occurrence.

Numbering. New events get the sequence numbers after the head, in order, with no gap.

Time. ``updated`` strictly increases along the sequence, as ``u_i = max(p_i, u_(i-1) + 1)``.
Here ``p_i`` is the time the event happened, and ``u_0`` is the head's ``updated``. So no two
entries of a feed share it, and its order is the order of the sequence.

Pages. The same append archives the pages that the new head fills.

Say the server made an id for this request and finds it stored. Then only this request's own
append can have stored it, by the one-round-trip path before that failed. So it is reported as
created.

The store's one-round-trip append (PostgreSQL) applies the same numbering and ``updated`` rule
in SQL. It does so for appends that are new and stay within the working page. Tests hold the
two paths equal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from simplefeed.errors import EntryConflict
from simplefeed.model import Appended, Entry, Event, Feed, PendingEntry, StoredEntry
from simplefeed.rules import paging


def pending_entries(
    events: Sequence[Event], now_us: int, new_id: Callable[[], str]
) -> list[PendingEntry]:
    """Prepare the events on their way in.

    Each one's id is fixed, as the producer's or ``new_id()``. Its time is fixed, as its own
    ``updated`` or ``now_us``. What is stored of it is computed too. That is everything that
    does not depend on the feed's head, so it is done before the head's lock is taken.
    """
    out = []
    for event in events:
        fingerprint, data = event.canonical()
        out.append(
            PendingEntry(
                id=event.id if event.id is not None else new_id(),
                event=event,
                published_us=event.updated_us if event.updated_us is not None else now_us,
                fingerprint=fingerprint,
                data=data,
            )
        )
    return out


def ids_are_distinct(pending: Sequence[PendingEntry]) -> bool:
    """Tell whether no id appears twice.

    A batch that repeats one goes by the ordinary path.
    """
    return len({p.id for p in pending}) == len(pending)


@dataclass(frozen=True)
class Decision:
    """What an append does, as its answer per event and what it writes."""

    #: One per event, in the events' order.
    results: tuple[Appended, ...]
    #: The entries to store, numbered after the head, each with the event it was made from.
    new: tuple[tuple[Entry, PendingEntry], ...]
    #: Pages the new head fills, to archive in the same transaction.
    full_pages: range
    #: The feed's ``modified_us`` after the append.
    modified_us: int
    #: Whether some event was answered from an entry already stored.
    replayed: bool


def decide(
    feed: Feed,
    pending: Sequence[PendingEntry],
    found: Mapping[str, StoredEntry],
    now_us: int,
) -> Decision:
    """Decide the append of ``pending`` to ``feed``, whose head is as locked.

    ``found`` holds the entries stored under their ids. Raises :class:`EntryConflict` if the
    append must be refused.
    """
    size = feed.page_size
    head = feed.head_seq
    last_updated = feed.head_updated_us
    results: list[Appended] = []
    new: list[tuple[Entry, PendingEntry]] = []
    first_seen: dict[str, tuple[str, Appended, int]] = {}
    replayed = False
    for index, p in enumerate(pending):
        stored = found.get(p.id)
        if stored is not None:
            if stored.fingerprint != p.fingerprint and not _replays(p, stored.fingerprint):
                raise EntryConflict(p.id, index)
            created = p.event.id is None  # Made for this request, so its own earlier append.
            results.append(Appended(p.id, stored.seq, paging.page_of(stored.seq, size), created))
            replayed = True
            continue
        seen = first_seen.get(p.id)
        if seen is not None:  # The producer's id twice in one batch.
            fingerprint, first, earlier = seen
            if fingerprint != p.fingerprint and not _replays(p, fingerprint):
                raise EntryConflict(p.id, index, earlier=earlier)
            results.append(Appended(first.entry_id, first.seq, first.page, created=False))
            continue
        head += 1
        updated = p.published_us if last_updated is None else max(p.published_us, last_updated + 1)
        last_updated = updated
        new.append((p.entry(head, updated), p))
        appended = Appended(p.id, head, paging.page_of(head, size), created=True)
        first_seen[p.id] = (p.fingerprint, appended, index)
        results.append(appended)
    return Decision(
        results=tuple(results),
        new=tuple(new),
        full_pages=paging.newly_full_pages(feed.head_seq, head, size),
        modified_us=max(now_us, feed.modified_us + 1),
        replayed=replayed,
    )


@dataclass(frozen=True)
class GroupDecision:
    """What an append of several publishes in one transaction does (:func:`decide_group`)."""

    #: One per publish, in the group's order: its answers, or the conflict that refuses it.
    outcomes: tuple[tuple[Appended, ...] | EntryConflict, ...]
    #: What the group writes, as one append: every new entry, the pages they fill.
    combined: Decision


def decide_group(
    feed: Feed,
    publishes: Sequence[Sequence[PendingEntry]],
    found: Mapping[str, StoredEntry],
    now_us: int,
) -> GroupDecision:
    """The appends of ``publishes`` to ``feed``, one after another, as if each had the feed's
    lock in turn: each sees the entries of those before it. A conflict refuses its own
    publish only; the others append as they would alone."""
    head = feed
    seen = dict(found)
    outcomes: list[tuple[Appended, ...] | EntryConflict] = []
    new: list[tuple[Entry, PendingEntry]] = []
    replayed = False
    for pending in publishes:
        try:
            one = decide(head, pending, seen, now_us)
        except EntryConflict as conflict:
            outcomes.append(conflict)
            continue
        outcomes.append(one.results)
        replayed = replayed or one.replayed
        for entry, p in one.new:
            seen[p.id] = StoredEntry(p.id, entry.seq, p.fingerprint)
        if one.new:
            last = one.new[-1][0]
            head = replace(head, head_seq=last.seq, head_updated_us=last.updated_us)
            new.extend(one.new)
    combined = Decision(
        results=tuple(a for o in outcomes if not isinstance(o, EntryConflict) for a in o),
        new=tuple(new),
        full_pages=paging.newly_full_pages(feed.head_seq, head.head_seq, feed.page_size),
        modified_us=max(now_us, feed.modified_us + 1),
        replayed=replayed,
    )
    return GroupDecision(tuple(outcomes), combined)


def appended_after(
    pending: Sequence[PendingEntry], head_seq: int, page_size: int
) -> list[Appended]:
    """Return the answers for ``pending``, appended as the last entries up to ``head_seq``."""
    first = head_seq - len(pending) + 1
    return [
        Appended(p.id, seq, paging.page_of(seq, page_size), created=True)
        for seq, p in enumerate(pending, first)
    ]


def _replays(p: PendingEntry, fingerprint: str) -> bool:
    """Tell whether an entry stored under ``p``'s id is ``p`` spelt another way.

    The entry was stored with ``fingerprint``. See :meth:`Event.replay_fingerprints`. This is
    computed only when the fingerprints differ.
    """
    return fingerprint in p.event.replay_fingerprints()

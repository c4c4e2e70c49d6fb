"""Entries: appending under the feed lock, and reading ranges of sequence numbers."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Row, select

from simplefeed.model import Entry, Event, Feed
from simplefeed.store.feeds import advance_head
from simplefeed.store.tables import entries


@dataclass(frozen=True)
class Existing:
    entry_id: str
    seq: int
    fingerprint: str


@dataclass(frozen=True)
class NewEntry:
    entry: Entry
    fingerprint: str


def find_entries(conn: Connection, feed_id: int, entry_ids: Iterable[str]) -> dict[str, Existing]:
    ids = list(set(entry_ids))
    found: dict[str, Existing] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        rows = conn.execute(
            select(entries.c.entry_id, entries.c.seq, entries.c.fingerprint).where(
                entries.c.feed_id == feed_id, entries.c.entry_id.in_(chunk)
            )
        )
        for entry_id, seq, fingerprint in rows:
            found[entry_id] = Existing(entry_id, seq, fingerprint)
    return found


def append_entries(
    conn: Connection, feed: Feed, new: Sequence[NewEntry], *, modified_us: int
) -> None:
    """Insert entries whose sequence numbers continue ``feed.head_seq``; move the head.

    The caller holds the feed lock (:func:`simplefeed.store.feeds.lock_feed`) and has numbered
    the entries ``head_seq + 1 ...``; the primary key (feed_id, seq) and the unique
    (feed_id, entry_id) make a duplicate impossible even if that contract were broken.
    """
    if not new:
        return
    expected = feed.head_seq + 1
    for n in new:
        if n.entry.seq != expected:
            raise AssertionError(f"sequence {n.entry.seq} appended where {expected} was due")
        expected += 1
    conn.execute(
        entries.insert(),
        [
            {
                "feed_id": feed.id,
                "seq": n.entry.seq,
                "entry_id": n.entry.id,
                "updated_us": n.entry.updated_us,
                "published_us": n.entry.published_us,
                "fingerprint": n.fingerprint,
                "data": json.dumps(
                    n.entry.event.to_json(), ensure_ascii=False, separators=(",", ":")
                ),
            }
            for n in new
        ],
    )
    last = new[-1].entry
    advance_head(
        conn, feed, head_seq=last.seq, head_updated_us=last.updated_us, modified_us=modified_us
    )


def _entry(row: Row[tuple[object, ...]]) -> Entry:
    m = row._mapping
    return Entry(
        seq=m["seq"],
        id=m["entry_id"],
        updated_us=m["updated_us"],
        published_us=m["published_us"],
        event=Event.from_json(json.loads(m["data"]), m["entry_id"]),
    )


def entries_between(conn: Connection, feed_id: int, first: int, last: int) -> list[Entry]:
    """Entries with ``first <= seq <= last``, newest first (document order)."""
    rows = conn.execute(
        select(entries)
        .where(entries.c.feed_id == feed_id, entries.c.seq >= first, entries.c.seq <= last)
        .order_by(entries.c.seq.desc())
    )
    return [_entry(r) for r in rows]

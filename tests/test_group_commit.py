"""Group commit: concurrent single-event publishes share one transaction, each answered as if
alone (simplefeed/service/groups.py, ``appending.decide_group``).

The decision of a group without a database; then many threads publishing through the app at
once on SQLite and PostgreSQL (hypothesis draws the mix: new events, replays, conflicts,
invalid events); then a group held behind the feed's lock, to see it form. Crashes in the
middle of a group: tests/test_scale.py. No timing assertions.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import falcon.testing
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text

from simplefeed import metrics
from simplefeed.app import create_app
from simplefeed.errors import EntryConflict
from simplefeed.model import Event, Feed, StoredEntry
from simplefeed.rules import auth
from simplefeed.rules.appending import decide, decide_group, pending_entries
from simplefeed.service import Simplefeed
from simplefeed.store import postgres
from tests.conftest import query

NOW = 1_800_000_000_000_000
THREADS = 12


def _feed(head_seq: int = 0, page_size: int = 5) -> Feed:
    return Feed(1, "events", "u", "events", page_size, 0, head_seq, None, NOW - 10)


def _pending(event: Event) -> list[Any]:
    return pending_entries([event], NOW, lambda: "urn:made:1")


# -- the decision -----------------------------------------------------------------------------


def test_a_group_decides_each_publish_in_turn_and_a_conflict_refuses_only_its_own() -> None:
    group = [
        _pending(Event("a", id="urn:a")),
        _pending(Event("b", id="urn:b")),
        _pending(Event("a again", id="urn:a")),  # a conflict with the first of the group
        _pending(Event("a", id="urn:a")),  # a replay of the first of the group
        _pending(Event("c", id="urn:c")),
    ]
    decided = decide_group(_feed(head_seq=3), group, {}, NOW)
    outcomes = decided.outcomes
    assert isinstance(outcomes[2], EntryConflict)
    assert [[(a.seq, a.created) for a in o] for o in outcomes if isinstance(o, tuple)] == [
        [(4, True)],
        [(5, True)],
        [(4, False)],
        [(6, True)],
    ]
    combined = decided.combined
    assert [e.seq for e, _ in combined.new] == [4, 5, 6]
    assert list(combined.full_pages) == [1] and combined.replayed


@given(
    st.lists(
        st.tuples(st.sampled_from(["urn:x", "urn:y", "urn:z", None]), st.sampled_from("ab")),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 12),
)
def test_a_group_decides_as_its_publishes_would_one_after_another(
    drawn: list[tuple[str | None, str]], head: int
) -> None:
    """The same answers, the same entries, as deciding each publish alone on the head the
    ones before it left."""
    publishes = [
        pending_entries([Event(title, id=i)], NOW, lambda n=n: f"urn:made:{n}")
        for n, (i, title) in enumerate(drawn)
    ]
    feed = _feed(head_seq=head)
    decided = decide_group(feed, publishes, {}, NOW)
    found: dict[str, Any] = {}
    new: list[Any] = []
    for pending, outcome in zip(publishes, decided.outcomes, strict=True):
        try:
            alone = decide(feed, pending, found, NOW)
        except EntryConflict:
            assert isinstance(outcome, EntryConflict)
            continue
        assert outcome == alone.results
        for entry, p in alone.new:
            found[p.id] = StoredEntry(p.id, entry.seq, p.fingerprint)
            feed = Feed(
                feed.id, feed.name, feed.uuid, feed.title, feed.page_size, 0, entry.seq,
                entry.updated_us, feed.modified_us,
            )  # fmt: skip
        new.extend(alone.new)
    assert decided.combined.new == tuple(new)
    assert [e.seq for e, _ in new] == list(range(head + 1, head + 1 + len(new)))


# -- many threads through the app -------------------------------------------------------------


def _append_metrics(feed: str) -> tuple[float, float]:
    """(commits, publishes) of the feed so far, in this process."""
    registry = metrics._OWN
    commits = registry.get_sample_value("simplefeed_append_publishes_count", {"feed": feed})
    publishes = registry.get_sample_value("simplefeed_append_publishes_sum", {"feed": feed})
    return commits or 0.0, publishes or 0.0


FEEDS = itertools.count(1)
#: What each request of a drawn mix is.
KINDS = ["new", "new", "new", "replay", "conflict", "invalid", "too large", "no id"]


def _body(kind: str, n: int, id_of: int) -> dict[str, Any]:
    if kind == "invalid":
        return {"title": "", "id": f"urn:invalid:{n}"}  # an empty title: 422
    if kind == "too large":
        return {"title": f"large {n}", "content": "<" * 400_000}
    if kind == "no id":
        return {"title": f"made {n}"}
    if kind == "conflict":
        return {"title": f"other {n}", "id": f"urn:g:{id_of}"}
    return {"title": f"event {id_of}", "id": f"urn:g:{id_of}"}  # new, or replay of id_of


@pytest.fixture
def app_client(core: Simplefeed, token: str) -> Iterator[falcon.testing.TestClient]:
    app = create_app(core.settings, core=core)
    yield falcon.testing.TestClient(app, headers={"Authorization": f"Bearer {token}"})


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 7)), min_size=8, max_size=48))
def test_concurrent_publishes_keep_every_guarantee(
    core: Simplefeed,
    app_client: falcon.testing.TestClient,
    database_url: str,
    drawn: list[tuple[str, int]],
) -> None:
    """THREADS threads publish the drawn mix at once to a new feed of pages of 5: sequence
    numbers stay contiguous, every acknowledged event is stored once, under the seq it was
    told, with its own content; a 409 means the id holds other content; nothing refused is
    stored; no 5xx."""
    name = f"mix{next(FEEDS)}"
    core.create_feed(name)
    path = f"/feeds/{name}/entries"
    bodies = [_body(kind, n, id_of) for n, (kind, id_of) in enumerate(drawn)]
    answers: list[tuple[int, dict[str, Any]] | None] = [None] * len(bodies)
    start = threading.Barrier(THREADS)

    def publish(worker: int) -> None:
        start.wait()
        for n in range(worker, len(bodies), THREADS):
            r = app_client.simulate_post(path, json=bodies[n])
            answers[n] = (r.status_code, r.json)

    threads = [threading.Thread(target=publish, args=(w,)) for w in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    rows = query(
        database_url,
        "SELECT e.seq, e.entry_id, e.data FROM entries e JOIN feeds f ON f.id = e.feed_id"
        f" WHERE f.name = '{name}' ORDER BY e.seq",
    )
    assert [seq for seq, _, _ in rows] == list(range(1, len(rows) + 1)), "a gap or a repeat"
    stored = {entry_id: (seq, data) for seq, entry_id, data in rows}
    assert len(stored) == len(rows)
    acknowledged = set()
    for body, answer in zip(bodies, answers, strict=True):
        assert answer is not None
        status, reply = answer
        assert status < 500, reply
        if status in (200, 201):
            seq, data = stored[reply["id"]]
            assert reply["seq"] == seq
            assert json.loads(data)["title"] == body["title"]
            acknowledged.add(reply["id"])
        elif status == 409:
            assert json.loads(stored[body["id"]][1])["title"] != body["title"]
        else:
            assert status in (413, 422, 400), reply
            assert body.get("id") not in stored
            assert all(json.loads(data)["title"] != body["title"] for _, data in stored.values())
    assert acknowledged == set(stored), "an entry nobody was told of, or one told and lost"


def _hold_the_feeds_lock(database_url: str, feed_id: int) -> Any:
    """Another session holding what every appender of the feed waits for: SQLite's write
    lock, or the feed's advisory lock on PostgreSQL. Returns the connection (roll it back)."""
    engine = create_engine(database_url)
    conn = engine.connect()
    if database_url.startswith("sqlite"):
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:space, :feed)"),
            {"space": postgres.ADVISORY_LOCK_SPACE, "feed": feed_id},
        )
    return conn


def test_publishes_that_queue_behind_a_commit_share_the_next_one(
    core: Simplefeed, app_client: falcon.testing.TestClient, database_url: str, token: str
) -> None:
    """While the feed's lock is held elsewhere, one publish waits for it and ten queue behind,
    one of them with a wrong token: two commits, the group's refusing that one alone and
    freezing the pages it fills."""
    # A token the app's screen remembers as valid, revoked since: only the append refuses it.
    wrong = core.create_token(label="revoked")
    first_use = {"Authorization": f"Bearer {wrong}"}
    r = app_client.simulate_post("/entries", json={"title": "x"}, headers=first_use)
    assert r.status_code == 201
    core.revoke_token(auth.parse_authorization(f"Bearer {wrong}").token_id)
    app_client.simulate_post("/entries", json={"title": "learn the feed"})
    feed = core.feed("events")
    commits_before, publishes_before = _append_metrics("events")
    holder = _hold_the_feeds_lock(database_url, feed.id)
    groups = core._publishing._groups
    answers: list[Any] = []

    def publish(n: int) -> None:
        headers = {"Authorization": f"Bearer {wrong}"} if n == 5 else None
        answers.append(
            app_client.simulate_post("/entries", json={"title": f"queued {n}"}, headers=headers)
        )

    first = threading.Thread(target=publish, args=(0,))
    first.start()
    while not groups.busy("events"):
        threading.Event().wait(0.001)  # the first publish is on its way to the lock
    rest = [threading.Thread(target=publish, args=(n,)) for n in range(1, 11)]
    for t in rest:
        t.start()
    deadline = time.monotonic() + 60
    while len(groups._queues.get("events", ())) < 10 and time.monotonic() < deadline:
        threading.Event().wait(0.001)  # all ten queued behind it
    queued = len(groups._queues.get("events", ()))
    holder.rollback()
    holder.close()
    holder.engine.dispose()
    for t in [first, *rest]:
        t.join()

    assert queued == 10, "the publishes did not queue behind the one under way"
    assert sorted(r.status_code for r in answers) == [201] * 10 + [401]
    assert sorted(r.json["seq"] for r in answers if r.status_code == 201) == list(range(3, 13))
    commits, publishes = _append_metrics("events")
    assert (commits - commits_before, publishes - publishes_before) == (2, 10)
    assert core.feed("events").head_seq == 12
    titles = [t for (t,) in query(database_url, "SELECT data FROM entries")]
    assert not any('"queued 5"' in t for t in titles), "the refused publish was stored"
    for number in (1, 2):
        assert core.store.page(feed.id, number) is not None, f"page {number} not frozen"
        assert app_client.simulate_get(f"/pages/{number}").status_code == 200

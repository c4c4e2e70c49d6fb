"""``simplefeed archive recover`` takes back the pages archived after a backup.

A database may be restored from a backup older than the archive. Recovery then takes back,
from their files, the pages archived after the backup. The feed goes on after them.

The tests play an operator's restore, on a real SQLite file and a real PostgreSQL database.
The corpus of every content kind and field (tests/test_atom.py) is published through the app.
A backup is made part way, with SQLite's backup API or a PostgreSQL copy of the database. More
is published, and the backup is restored beside the archive. The pages read back must render
to the files' bytes. The entries must be the producer's, but for what the documents cannot
tell. simplefeed.service.recovery states what that is. What cannot be read back must be
refused and named, with nothing of it stored.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
from sqlalchemy.engine import make_url

from bench.servers import UwsgiServer, sqlite_backup
from simplefeed import archive, atom, codings
from simplefeed.app import create_app
from simplefeed.errors import ArchiveAhead, FeedNotFound
from simplefeed.model import Entry, Event, Feed, Link, content_mode, locator_segment, rfc3339
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from tests.conftest import FakeClock, PostgresDatabases
from tests.test_atom import _batches
from tests.test_operators_cli import cli_on


def backup(core: Simplefeed, tmp_path: Path, postgres: PostgresDatabases | None) -> str:
    """Return a backup of the core's database, made as docs/how-to/backup.md makes one.

    The core is closed first, because a PostgreSQL database is copied with no connection on it.
    """
    url = core.settings.database_url
    if url.startswith("sqlite:///"):
        path = tmp_path / "backup.sqlite3"
        sqlite_backup(Path(url.removeprefix("sqlite:///")), path)
        core.close()
        return f"sqlite:///{path}"
    core.close()
    assert postgres is not None
    return postgres.copy_of(url)


def app_client(core: Simplefeed, token: str) -> falcon.testing.TestClient:
    return falcon.testing.TestClient(
        create_app(core.settings, core=core), headers={"Authorization": f"Bearer {token}"}
    )


def post(client: falcon.testing.TestClient, batch: list[dict[str, Any]]) -> None:
    reply = client.simulate_post("/entries", json=batch if len(batch) > 1 else batch[0])
    assert reply.status_code == 201, reply.text


@dataclass
class Recovery:
    """Hold the original database's closed core, the restored one's, and what the original held.

    What it held is every entry and every page's bytes.
    """

    settings: Settings
    restored: Simplefeed
    entries: list[Entry]
    files: dict[int, bytes]
    backed_up_head: int


@pytest.fixture
def recovery(
    core: Simplefeed,
    token: str,
    clock: FakeClock,
    tmp_path: Path,
    postgres: PostgresDatabases | None,
) -> Iterator[Recovery]:
    batches = _batches()
    client = app_client(core, token)
    for batch in batches[:6]:
        clock.advance(1)
        post(client, batch)
    head = core.feed("events").head_seq
    assert head % 5 and head > 5  # The backup holds an archived page and part of the next.
    copy = backup(core, tmp_path, postgres)
    later = Simplefeed(core.settings, clock=clock, new_uuid=core.new_uuid)
    try:
        client = app_client(later, token)
        for batch in batches[6:]:
            clock.advance(1)
            post(client, batch)
        feed = later.feed("events")
        assert feed.head_seq // 5 >= 5
        entries = later.store.entries_between(feed.id, 1, feed.head_seq)
        files = {
            n: later.page_path("events", n).read_bytes() for n in range(1, feed.head_seq // 5 + 1)
        }
    finally:
        later.close()
    settings = replace(core.settings, database_url=copy)
    restored = Simplefeed(settings, clock=clock, new_uuid=core.new_uuid)
    yield Recovery(settings, restored, sorted(entries, key=lambda e: e.seq), files, head)
    restored.close()
    if postgres is not None and not copy.startswith("sqlite"):
        postgres.release(copy)


def as_pages_show_it(entry: Entry, locator_base: str) -> Event:
    """Return the event as a page shows it, which is what recovery stores.

    simplefeed.service.recovery states the rules.
    """
    event = entry.event
    mode = content_mode(event.content_type)
    content_type = event.content_type
    if not event.content or mode == "text":
        content_type = None
    elif mode in ("html", "xhtml"):
        content_type = mode
    summary = event.summary
    if summary == event.title and (not event.content or mode == "base64"):
        summary = None
    links = event.links
    locator = Link(href=locator_base + locator_segment(entry.id))
    if not event.content and links and links[-1] == locator:
        links = links[:-1]
    content = event.content
    if content and mode == "json":
        content = atom.json_text(content)
    return replace(
        event,
        content=content if event.content else None,
        content_type=content_type,
        summary=summary,
        links=links,
        id=entry.id,
        updated_us=entry.published_us,
    )


@pytest.mark.parametrize("batch", [64, 2])
def test_recover_takes_back_every_page_and_the_feed_goes_on(
    recovery: Recovery, token: str, clock: FakeClock, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recover takes back every page, and the feed goes on.

    It works in one transaction, or two pages at a time with ``batch``.
    """
    monkeypatch.setattr("simplefeed.service.maintenance.RECOVERY_BATCH", batch)
    core = recovery.restored
    with pytest.raises(ArchiveAhead):
        core.check_archive()
    (done,) = core.recover_archive()
    last = len(recovery.files)
    frozen = recovery.backed_up_head // 5
    assert (done.feed, done.created, done.pages, done.problem, done.unwritten) == (
        "events",
        False,
        range(frozen + 1, last + 1),
        None,
        [],
    )
    assert done.entries == last * 5 - recovery.backed_up_head
    core.check_archive()  # The service starts.
    assert core.verify_archive().problems == []
    feed = core.feed("events")
    assert feed.head_seq == last * 5
    assert feed.head_updated_us == recovery.entries[last * 5 - 1].updated_us
    for number, body in recovery.files.items():
        assert core.page(feed, number).body == body
        assert core.rerender(feed, number) == body
    # Every entry: its number, id, times, and the producer's event as the pages show it.
    locator_base = core.urls("events").locator_base
    recovered = core.store.entries_between(feed.id, 1, feed.head_seq)
    for before, after in zip(
        recovery.entries, sorted(recovered, key=lambda e: e.seq), strict=False
    ):
        assert (after.seq, after.id, after.updated_us, after.published_us) == (
            before.seq,
            before.id,
            before.updated_us,
            before.published_us,
        )
        if before.seq <= recovery.backed_up_head:
            assert after.event == before.event  # The database's own, untouched.
            continue
        expected = as_pages_show_it(before, locator_base)
        if content_mode(before.event.content_type) in ("xml", "xhtml"):
            # The XML text as lxml writes it, with the same infoset. It renders alike.
            expected = replace(expected, content=after.event.content)
            assert atom.entry_parts(after, locator_base) == atom.entry_parts(before, locator_base)
        assert after.event == expected, before.event
    # The feed goes on: the next page chains to the last page taken back.
    client = app_client(core, token)
    clock.advance(1)
    post(client, [{"title": f"after {i}"} for i in range(5)])
    assert core.verify_archive().problems == []
    # A producer may retry a taken-back event, spelt as its page shows it. With the time it
    # happened (`published`), which the producer left to the server, the retry is a replay.
    # Without it, the retry is a conflict, because the page cannot tell that the time was left
    # out (simplefeed.service.recovery).
    (original,) = (e for e in recovery.entries if e.id == "urn:example:order:7")
    assert original.seq > recovery.backed_up_head and original.event.updated_us is None
    retry = {"title": "Explicit urn id", "id": original.id}
    stamped = {**retry, "updated": rfc3339(original.published_us)}
    assert client.simulate_post("/entries", json=stamped).status_code == 200
    assert client.simulate_post("/entries", json=retry).status_code == 409


def test_a_feed_created_after_the_backup_is_created_again_as_its_pages_say(
    core: Simplefeed, clock: FakeClock, tmp_path: Path, postgres: PostgresDatabases | None
) -> None:
    core.publish("events", [Event(title="before the backup")])
    copy = backup(core, tmp_path, postgres)
    later = Simplefeed(core.settings, clock=clock, new_uuid=core.new_uuid)
    try:
        made = later.create_feed("orders", title="Order events", page_size=3)
        later.create_feed("refunds", page_size=2)
        later.publish("orders", [Event(title=f"o{i}") for i in range(7)])
        later.publish("refunds", [Event(title=f"r{i}") for i in range(2)])
    finally:
        later.close()
    restored = Simplefeed(replace(core.settings, database_url=copy), clock=clock)
    try:
        # /healthz says it with a 200 and a warning for each feed. `feed create` refuses the
        # name.
        health = restored.health()
        assert not health.problems
        assert [w.split(" (")[0] for w in health.warnings] == [
            "the archive has page 1 of feed 'orders'",
            "the archive has page 1 of feed 'refunds'",
        ]
        with pytest.raises(ArchiveAhead, match="take its pages back with `simplefeed archive"):
            restored.create_feed("orders")
        damage(restored.page_path("refunds", 1), b"<title>r0", b"<title>R0", copies=False)
        # A feed id that is no uuid, and a directory whose name is no feed's, are never
        # created.
        page1 = restored.page_path("orders", 1).read_bytes()
        for name in ("ghost", "Not A Feed"):
            stray = restored.page_path("events", 1).parent.parent / "feeds" / name / "pages" / "1"
            stray.parent.mkdir(parents=True)
            stray.write_bytes(page1.replace(made.uuid.encode(), b"x" * 40))
        ghost, orders, refunds = restored.recover_archive()
        assert ghost.problem == (
            f"the database does not have the feed, and {restored.page_path('ghost', 1)}"
            " is not the first page of a feed this service wrote"
        )
        assert "Not A Feed" not in {f.name for f in restored.feeds()}
        assert (orders.feed, orders.created, orders.pages, orders.entries, orders.problem) == (
            "orders",
            True,
            range(1, 3),
            6,
            None,
        )
        feed = restored.feed("orders")
        assert (feed.uuid, feed.title, feed.page_size, feed.head_seq) == (
            made.uuid,
            "Order events",
            3,
            6,
        )
        assert (refunds.feed, refunds.pages, refunds.entries) == ("refunds", range(0), 0)
        # A consistent edit, such as an entry's title, renders alike, as its intact copies do.
        # With no later page to tell them apart, neither is taken.
        assert refunds.problem == (
            f"the database does not have the feed, and {restored.page_path('refunds', 1)}:"
            " page 1: its file and its compressed copies differ, each rendering alike, and no"
            " later page file vouches for either"
        )
        with pytest.raises(FeedNotFound):
            restored.feed("refunds")
        assert [w.split(" (")[0] for w in restored.health().warnings] == [
            "the archive has page 1 of feed 'ghost'",
            "the archive has page 1 of feed 'refunds'",
        ]
        restored.publish("orders", [Event(title=f"o{i}") for i in range(7, 10)])
        assert [p.number for p in restored.store.iter_pages(feed.id)] == [1, 2, 3]
        problems = restored.verify_archive().problems
        assert problems == [
            f"{tmp_path / 'archive' / 'feeds' / name}: files of a feed the database does"
            " not have (`simplefeed archive recover` takes its pages back; or remove them)"
            for name in ("Not A Feed", "ghost", "refunds")
        ]
    finally:
        restored.close()
        if postgres is not None and not copy.startswith("sqlite"):
            postgres.release(copy)


def lose(core: Simplefeed, *numbers: int) -> None:
    """Remove page files of feed events, and their compressed copies, from the archive."""
    for number in numbers:
        path = core.page_path("events", number)
        path.unlink()
        for coding in codings.CODINGS:
            archive.encoded_path(path, coding).unlink(missing_ok=True)


def test_a_page_another_process_froze_since_the_feed_was_read_is_not_ahead(
    core: Simplefeed, settings: Settings, clock: FakeClock
) -> None:
    """A page another process archived since the feed was read is not ahead.

    Under lazy-apps, a uWSGI worker may load the app late while the others publish. It reads
    the feed at 7 archived pages. It then finds the file of page 8, which another worker
    archived meanwhile. It must not refuse to start ("the database is older than the
    archive"), since that ends the whole uWSGI instance. So the feed is read again once a file
    is found, because a file is written after its page's commit.
    """
    core.publish("events", [Event(title=f"e{i}") for i in range(7)])
    stale = core.feed("events")  # 1 archived page, as the late worker read it.
    other = Simplefeed(settings, clock=clock)
    try:
        other.publish("events", [Event(title=f"f{i}") for i in range(10)])  # Pages 2 and 3.
    finally:
        other.close()
    assert core.page_path("events", 2).exists() and core.page_path("events", 3).exists()
    assert core._health.archive_ahead(stale) is None
    assert core._health.archive_ahead(stale, every_file=True) is None


def test_a_page_file_past_a_gap_is_said_by_every_command_that_meets_it(
    recovery: Recovery, tmp_path: Path
) -> None:
    """A page file past a gap is said by every command that meets it.

    Take page 9 in the archive and page 3 not. `archive verify` sends the operator to `archive
    recover`, which must not say "nothing to take back". `serve` and `db upgrade` must not go
    on, or page 9 would be archived again over a file that holds other entries. Pages past the
    gap cannot be taken back, because nothing vouches for the chain.
    """
    core = recovery.restored
    frozen = recovery.backed_up_head // 5
    last = len(recovery.files)
    assert last >= frozen + 3
    lose(core, frozen + 1)
    for other in ("\u00b2", "7.txt", "08"):  # No page's. int("²") must not end it in exit 70.
        (core.page_path("events", 1).parent / other).write_bytes(b"")
    core.check_archive()  # A worker looks for the next page's file only.
    with pytest.raises(ArchiveAhead) as raised:
        core.check_archive(every_file=True)  # Serve and db upgrade list the directory.
    (said,) = raised.value.problems
    assert f"the archive has page {frozen + 2} of feed 'events'" in said
    assert f"but not page {frozen + 1}, and the database has {frozen} archived pages" in said
    assert "`simplefeed archive recover` cannot take page" in said
    (done,) = core.recover_archive()
    assert (done.pages, done.entries) == (range(0), 0)
    assert done.problem is not None and f"but not page {frozen + 1}" in done.problem
    problems = core.verify_archive().problems
    assert problems and all(f"nor the archive page {frozen + 1}" in p for p in problems)
    assert all("cannot take it back" in p for p in problems)
    assert core.feed("events").head_seq == recovery.backed_up_head
    upgrade = cli_on(recovery.settings, tmp_path, "db", "upgrade")
    assert upgrade.returncode == 1 and f"but not page {frozen + 1}" in upgrade.stderr
    recover = cli_on(recovery.settings, tmp_path, "archive", "recover")
    assert recover.returncode == 1, (recover.stdout, recover.stderr)
    assert "nothing to take back" not in recover.stdout
    assert "the service does not start while they are there" in recover.stderr


def test_recover_takes_back_the_pages_before_a_gap_and_says_what_is_past_it(
    recovery: Recovery,
) -> None:
    core = recovery.restored
    frozen = recovery.backed_up_head // 5
    last = len(recovery.files)
    lose(core, frozen + 2)
    (done,) = core.recover_archive()
    assert done.pages == range(frozen + 1, frozen + 2)
    assert done.problem is not None
    assert f"the archive has page {frozen + 3} of feed 'events'" in done.problem
    said = f"but not page {frozen + 2}, and the database has {frozen + 1} archived pages"
    assert said in done.problem
    with pytest.raises(ArchiveAhead):
        core.check_archive(every_file=True)
    lose(core, *range(frozen + 3, last + 1))  # Moved aside, as the message says.
    core.check_archive(every_file=True)


def test_nothing_to_take_back_leaves_the_database_as_it_is(core: Simplefeed) -> None:
    core.publish("events", [Event(title=f"e{i}") for i in range(12)])
    assert core.recover_archive() == []
    assert core.feed("events").head_seq == 12


def damage(path: Path, old: bytes, new: bytes, *, copies: bool = True) -> None:
    """Put ``new`` in place of ``old`` in the page file ``path``.

    With ``copies``, do the same in its compressed copies, so that no version of the page is
    left as it was.
    """
    body = path.read_bytes()
    assert old in body
    path.write_bytes(body.replace(old, new, 1))
    for coding in codings.CODINGS if copies else ():
        copy = archive.encoded_path(path, coding)
        copy.write_bytes(codings.encode(body.replace(old, new, 1), coding))


def test_a_damaged_page_file_is_taken_back_from_its_copy_and_written_again(
    recovery: Recovery,
) -> None:
    core = recovery.restored
    first = recovery.backed_up_head // 5 + 1
    last = len(recovery.files)
    for number, cut in ((first, 100), (last, 0)):  # Cut short, and a bit flipped in a title.
        path = core.page_path("events", number)
        if cut:
            path.write_bytes(recovery.files[number][:cut])
        else:
            damage(path, b"<title>", b"<title>X", copies=False)
    core.page_path("events", first + 1).unlink()  # A file gone, its copies there.
    (done,) = core.recover_archive()
    assert (done.pages, done.problem) == (range(first, last + 1), None)
    assert sorted(done.written) == sorted(
        core.page_path("events", n) for n in (first, first + 1, last)
    )
    for number in range(first, last + 1):
        assert core.page_path("events", number).read_bytes() == recovery.files[number]
    assert core.verify_archive().problems == []


def test_a_damaged_page_stops_the_recovery_before_it_and_stores_nothing_of_it(
    recovery: Recovery,
) -> None:
    core = recovery.restored
    frozen = recovery.backed_up_head // 5
    bad = frozen + 2
    damage(core.page_path("events", bad), b"<title>", b"<title>X")
    (done,) = core.recover_archive()
    assert done.pages == range(frozen + 1, bad)
    assert done.problem == (
        f"page {bad}: its entries, read back, do not render to the file's bytes (damaged,"
        " edited, rendered with another base URL or by another release, or not this feed's)"
    )
    assert core.feed("events").head_seq == (bad - 1) * 5
    with pytest.raises(ArchiveAhead, match=f"the archive has page {bad} of feed 'events'"):
        core.check_archive()


@pytest.mark.parametrize("batch", [64, 1])
def test_an_edit_that_renders_alike_is_told_by_the_next_page(
    recovery: Recovery, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit that renders alike is told by the next page.

    An entry's title edited in a page file reads back and renders alike. The next page
    recorded a digest when it was archived, and that digest tells. It does so in the same
    batch, or in the next batch's first page.
    """
    monkeypatch.setattr("simplefeed.service.maintenance.RECOVERY_BATCH", batch)
    core = recovery.restored
    edited = recovery.backed_up_head // 5 + 2
    path = core.page_path("events", edited)
    title = recovery.entries[edited * 5 - 1].event.title.encode()
    damage(path, b"<title>" + title, b"<title>" + title.swapcase())
    (done,) = core.recover_archive()
    assert done.pages == range(edited - 1, edited)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert done.problem == (
        f"page {edited}: its bytes (SHA-256 {digest}) are not those page {edited + 1} gives it"
        f" ({hashlib.sha256(recovery.files[edited]).hexdigest()}): damaged or edited"
    )
    assert core.feed("events").head_seq == (edited - 1) * 5


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (b"<sf:seq>", b"<sf:seq>1", "holds entries"),
        (b"</feed>", b"", "is not well-formed XML"),
        (b"<published>", b"<foo/><published>", "an element this service does not write: foo"),
        (b"<published>", b"<!-- x --><published>", "an entry holds a comment"),
        (b"<published>", b"<published>yesterday", "could not have written (Invalid isoformat"),
        (b"<sf:seq>", b"<sf:seq>x", "could not have written (invalid literal for int()"),
        (b'length="12345"', b'length="1e9"', "could not have written (invalid literal for int()"),
        (b"<title>Explicit urn id", b"<title><b/>Explicit urn id", "an entry's title holds elem"),
        (b"<id>", b"<ID>", "Opening and ending tag mismatch"),
        (b"</published>", b"</published><published>x</published>", "could not have written"),
    ],
)
def test_a_page_that_is_not_ours_is_named(
    recovery: Recovery, old: bytes, new: bytes, said: str
) -> None:
    """A page that is not ours is named.

    The first page file past the database's that holds ``old`` gets ``new`` in its place. The
    pages before it are taken back. It is named, and nothing of it is stored.
    """
    core = recovery.restored
    first = recovery.backed_up_head // 5 + 1
    bad = next(n for n in range(first, len(recovery.files) + 1) if old in recovery.files[n])
    damage(core.page_path("events", bad), old, new)
    (done,) = core.recover_archive()
    assert done.pages == range(first, bad)
    assert done.problem is not None and done.problem.startswith(f"page {bad}")
    assert said in done.problem
    assert core.feed("events").head_seq == max((bad - 1) * 5, recovery.backed_up_head)


def test_a_page_whose_next_page_cannot_be_read_is_not_vouched_for(recovery: Recovery) -> None:
    core = recovery.restored
    first = recovery.backed_up_head // 5 + 1
    damage(core.page_path("events", first + 1), b"</feed>", b"")
    (done,) = core.recover_archive()
    assert (done.pages, done.problem) == (
        range(0),
        f"page {first}: page {first + 1}, which vouches for its bytes, gives no digest of them"
        " (it cannot be read, or it is damaged)",
    )


@pytest.mark.parametrize("reused", [False, True])
def test_a_database_published_to_since_it_was_restored_is_not_the_archive_past(
    recovery: Recovery, tmp_path: Path, reused: bool
) -> None:
    """A database published to since it was restored is not the archive's past.

    The operator moves the newer page files away, starts, publishes, then puts them back. The
    database then has an entry of its own where the file has another. With ``reused``, it has
    the file's newest id of that page, stored under the database's next number. The page is
    named, and nothing is stored.
    """
    core = recovery.restored
    pages = core.page_path("events", 1).parent
    aside = tmp_path / "aside"
    shutil.move(pages, aside)
    seq = recovery.backed_up_head + 1
    newest = recovery.entries[(seq // 5 + 1) * 5 - 1]
    core.publish("events", [Event(title="after the restore", id=newest.id if reused else None)])
    assert not pages.exists()  # No page was archived.
    shutil.move(aside, pages)
    (done,) = core.recover_archive()
    assert not done.pages and done.problem is not None
    if reused:
        assert done.problem == (
            f"page {seq // 5 + 1}: entry {newest.id!r} is number {newest.seq} in the file and"
            f" {seq} in the database"
        )
    else:
        assert "the database holds entry 'urn:uuid:" in done.problem
        assert f"as number {seq}, the file {recovery.entries[seq - 1].id!r}" in done.problem
    assert core.feed("events").head_seq == seq


def test_recovered_pages_render_alike_for_generated_entries() -> None:
    """Recovered pages render alike for generated entries.

    Any entry the renderer writes reads back into one that it renders to the same bytes.
    """
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.test_atom import _events

    feed = Feed(1, "events", "6f1c2a4e-1d2b-4c3d-9e8f-0a1b2c3d4e5f", "T", 5, 0, 10, 9, 9)
    times = st.integers(0, 4_102_444_800_000_000)
    ids = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=8)
    entries = st.lists(st.tuples(ids, times, times, _events()), min_size=1, max_size=5)

    @settings(
        max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(entries)
    def check(made: list[tuple[str, int, int, Event]]) -> None:
        written = tuple(
            Entry(seq, entry_id.strip() or "x", updated, published, event)
            for seq, (entry_id, updated, published, event) in zip(
                range(len(made), 0, -1), made, strict=True
            )
        )
        base = "http://feeds.example.test/entries/"
        body = atom.render(document(feed, written, base))
        read = atom.page_entries(body, base)
        assert atom.render(document(feed, tuple(read), base)) == body

    check()


def document(feed: Feed, entries: tuple[Entry, ...], locator_base: str) -> Any:
    from simplefeed.model import Document

    return Document(feed, "archive", 1, 5, (("self", "http://x/pages/1"),), locator_base, entries)


def test_the_command_says_what_it_took_back_and_exits_by_the_outcome(
    recovery: Recovery, tmp_path: Path
) -> None:
    settings = recovery.settings
    recovery.restored.close()
    frozen = recovery.backed_up_head // 5
    last = len(recovery.files)
    bad = recovery.settings.archive_dir / "pages" / str(last)
    damage(bad, b"<title>", b"<title>X")
    done = cli_on(settings, tmp_path, "archive", "recover")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"recovering archive {settings.archive_dir} into database ")
    assert lines[1:] == [
        f"feed 'events': took back pages {frozen + 1}-{last - 1}"
        f" ({(last - 1) * 5 - recovery.backed_up_head} entries)"
    ]
    assert done.stderr.startswith(f"feed 'events': page {last}: its entries, read back,")
    assert "(docs/how-to/backup.md)" in done.stderr
    # The operator puts the file back, from a cache or a copy. The rest is taken back.
    bad.write_bytes(recovery.files[last])
    done = cli_on(settings, tmp_path, "archive", "recover")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[1:] == [
        f"feed 'events': took back pages {last}-{last} (5 entries)",
        *(
            f"wrote again {bad}.{suffix} (taken back from a copy, or missing)"
            for suffix in ("br", "gz")
        ),
    ]
    done = cli_on(settings, tmp_path, "archive", "recover")
    assert (done.returncode, done.stdout.splitlines()[1:]) == (
        0,
        ["no page file past the database's archived pages: nothing to take back"],
    )
    assert cli_on(settings, tmp_path, "archive", "verify").returncode == 0


@pytest.mark.parametrize("what", ["unreadable file", "no such feed"])
def test_the_command_could_not_check(recovery: Recovery, tmp_path: Path, what: str) -> None:
    recovery.restored.close()
    settings = recovery.settings
    args: tuple[str, ...] = ("--feed", "nope")
    said = "no feed named 'nope'"
    if what == "unreadable file":  # A directory where the next page file should be.
        path = settings.archive_dir / "pages" / str(recovery.backed_up_head // 5 + 1)
        shutil.rmtree(path.parent)
        path.mkdir(parents=True)
        args, said = (), f"{path}: cannot be read"
    done = cli_on(settings, tmp_path, "archive", "recover", *args)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert said in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.mark.e2e
def test_an_operators_restore_then_recovery_with_the_real_commands(tmp_path: Path) -> None:
    """An operator's restore, then recovery, works with the real commands.

    This follows the backup guide with real processes. It backs up the running service's
    SQLite file. More is published and read by a consumer. The service stops and the backup
    is restored. `db upgrade` refuses the database, and `archive recover` takes the pages back.
    The service starts at the same URL. The consumer goes on with exactly the entries published
    since.
    """
    # max-age 0: each consumer run looks at /recent again at once.
    s = UwsgiServer.scratch(
        tmp_path / "service", page_size=5, extra_env={"SIMPLEFEED_RECENT_MAX_AGE": "0"}
    )
    state = tmp_path / "consumer.json"
    database = s.workdir / "simplefeed.sqlite3"

    def publish(first: int, n: int) -> None:
        s.publish([{"title": f"e{i}"} for i in range(first, first + n)])

    def consumed() -> list[str]:
        done = s.cli("consume", s.url("/recent"), "--state", str(state), "--jsonl")
        return [json.loads(line)["title"] for line in done.stdout.splitlines()]

    try:
        s.start()
        publish(0, 12)
        assert consumed() == [f"e{i}" for i in range(12)]
        backup = tmp_path / "backup.sqlite3"
        sqlite_backup(database, backup)
        publish(12, 13)  # Pages 3-5 are archived after the backup.
        assert consumed() == [f"e{i}" for i in range(12, 25)]
        port = s.port
        s.stop()
        for leftover in ("-wal", "-shm"):
            database.with_name(database.name + leftover).unlink(missing_ok=True)
        shutil.copyfile(backup, database)
        refused = s.cli("db", "upgrade", check=False)
        assert refused.returncode == 1
        assert "take their pages back with `simplefeed archive recover`" in refused.stderr
        done = s.cli("archive", "recover")
        assert done.stdout.splitlines()[1:] == ["feed 'events': took back pages 3-5 (13 entries)"]
        s.start(port=port)
        publish(25, 3)
        assert consumed() == ["e25", "e26", "e27"]
        assert s.cli("archive", "verify").returncode == 0
        assert s.problems() == []
    finally:
        s.stop()


def test_a_database_lost_with_no_backup_is_rebuilt_from_the_archive(
    core: Simplefeed, tmp_path: Path, postgres: PostgresDatabases | None
) -> None:
    """A database lost with no backup is rebuilt from the archive.

    With no backup at all, a new, empty database stands beside the archive. `db upgrade` does
    not create the default feed anew over its pages, but says to recover them. Nor does `feed
    create`. `archive recover` creates every feed as its first page says, and takes back all
    their pages. Then the service starts.
    """
    core.create_feed("orders", title="Order events", page_size=3)
    core.publish("events", [Event(title=f"e{i}") for i in range(12)])
    core.publish("orders", [Event(title=f"o{i}") for i in range(7)])
    feeds = {f.name: f for f in core.feeds()}
    core.close()
    pg = not core.settings.database_url.startswith("sqlite")
    if pg:
        assert postgres is not None
        url = postgres.new_database()
    else:
        url = f"sqlite:///{tmp_path / 'new.sqlite3'}"
    settings = replace(core.settings, database_url=url)
    try:
        refused = cli_on(settings, tmp_path, "db", "upgrade")
        assert refused.returncode == 1
        page1 = (settings.archive_dir / "pages" / "1").resolve()
        assert refused.stderr.startswith(
            f"Error: the archive has page 1 of feed 'events' ({page1}), which the database does"
            " not have (lost, or restored from a backup made before the feed was created): take"
            " its pages back with `simplefeed archive recover`"
        )
        again = cli_on(settings, tmp_path, "feed", "create", "orders")
        assert again.returncode == 1 and "feed 'orders'" in again.stderr
        args = ("archive", "recover")
        unready = Simplefeed(settings)
        try:  # What `serve` and uWSGI's load check.
            with pytest.raises(ArchiveAhead, match="take its pages back with `simplefeed archive"):
                unready.check_default_feed()
        finally:
            unready.close()
        # Run with another base URL than the pages were written with. This is said, and
        # nothing is created.
        wrong = cli_on(replace(settings, base_url="https://elsewhere.example"), tmp_path, *args)
        assert wrong.returncode == 1
        assert wrong.stderr.startswith(
            f"feed 'events': the database does not have the feed, and {page1}: page 1 says it"
            " is at http://feeds.example.test/pages/1, and this service would put it at"
            " https://elsewhere.example/pages/1: run it with the SIMPLEFEED_BASE_URL (and"
            " SIMPLEFEED_DEFAULT_FEED) the pages were written with"
        )
        assert "created" not in wrong.stdout
        done = cli_on(settings, tmp_path, *args)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[1:] == [
            "feed 'events': created again as its first page says",
            "feed 'events': took back pages 1-2 (10 entries)",
            "feed 'orders': created again as its first page says",
            "feed 'orders': took back pages 1-2 (6 entries)",
        ]
        assert cli_on(settings, tmp_path, "db", "upgrade").returncode == 0
        rebuilt = Simplefeed(settings)
        try:
            rebuilt.check_default_feed()
            rebuilt.check_archive()
            for name, before in feeds.items():
                after = rebuilt.feed(name)
                assert (after.uuid, after.title, after.page_size) == (
                    before.uuid,
                    before.title,
                    before.page_size,
                )
        finally:
            rebuilt.close()
        assert cli_on(settings, tmp_path, "archive", "verify").returncode == 0
    finally:
        if pg and postgres is not None:
            postgres.release(url)


def test_a_postgresql_backup_made_and_restored_the_readme_s_way(
    tmp_path: Path, postgres: PostgresDatabases | None, clock: FakeClock
) -> None:
    """A PostgreSQL backup made and restored the backup guide's way works.

    The guide backs up with `pg_dump -Fc`, and restores with `pg_restore --no-owner` into a new,
    empty database. Then `archive recover` runs. The pages archived after the dump come back.
    The restored sequences hand out new ids, for a feed and a token, without a clash. The
    recent document at the head from before the restore holds other entries, so it has another
    ETag.
    """
    if postgres is None:
        pytest.skip("PostgreSQL half skipped: set SIMPLEFEED_TEST_POSTGRES_URL to run it")
    url = postgres.new_database()
    settings = Settings(
        database_url=url,
        archive_dir=tmp_path / "archive",
        base_url="http://feeds.example.test",
        page_size=5,
        default_feed="events",
    )
    name = f"sf_t_{uuid.uuid4().hex[:12]}"
    restored_url = postgres.url(name)
    try:
        core = Simplefeed(settings, clock=clock)
        try:
            core.create_feed("events")
            core.publish("events", [Event(title=f"e{i}") for i in range(7)])
            dump = tmp_path / "backup.dump"
            subprocess.run(["pg_dump", "-Fc", "-f", str(dump), libpq(url)], check=True, timeout=60)
            core.publish("events", [Event(title=f"e{i}") for i in range(7, 23)])
            head = core.feed("events")
            etag_before = core.live(head, "recent").etag
        finally:
            core.close()
        postgres._admin(f'CREATE DATABASE "{name}"')
        postgres.made.add(name)
        restore = ["pg_restore", "--no-owner", "--dbname", libpq(restored_url), str(dump)]
        subprocess.run(restore, check=True, timeout=60)
        settings = replace(settings, database_url=restored_url)
        done = cli_on(settings, tmp_path, "archive", "recover")
        assert (done.returncode, done.stdout.splitlines()[1:]) == (
            0,
            ["feed 'events': took back pages 2-4 (13 entries)"],
        )
        restored = Simplefeed(settings, clock=clock)
        try:
            restored.check_archive()
            restored.create_feed("orders")
            restored.create_token(label="after the restore")
            restored.publish("events", [Event(title=f"e{i}") for i in range(23, 25)])
            assert restored.feed("events").head_seq == 22  # 20 taken back. e20-e22 are in no file.
            assert restored.verify_archive().problems == []
            restored.publish("events", [Event(title="e25")])
            again = restored.feed("events")
            assert again.head_seq == head.head_seq  # The head from before, with other entries.
            assert restored.live(again, "recent").etag != etag_before  # No 304 for a lost copy.
        finally:
            restored.close()
    finally:
        postgres.release(url)
        if name in postgres.made:
            postgres.release(restored_url)


def libpq(url: str) -> str:
    """Return a SQLAlchemy PostgreSQL URL as libpq's tools take it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

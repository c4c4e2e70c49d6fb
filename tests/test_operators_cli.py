"""Managing feeds and tokens from the command line, as an operator does: the installed
``simplefeed`` command in a subprocess, on a real SQLite file and a real PostgreSQL database
(the ``database_url`` fixture), with events published through the core beforehand.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import falcon.testing
import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from bench.servers import (
    PROJECT_ROOT,
    clean_environ,
    free_port,
    scratch_postgres_database,
    simplefeed_command,
)
from simplefeed.app import create_app
from simplefeed.errors import BaseUrlMismatch, InvalidFeed
from simplefeed.model import Event, Feed
from simplefeed.rules.feeds import base_url_problem
from simplefeed.runtime.cli import main
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings, mask_url
from simplefeed.store.schema import SCHEMA_REVISION, alembic_config
from tests.conftest import FakeClock, query
from tests.markdown import code_blocks, doc_text
from tests.test_cli_errors import run

BASE = "http://feeds.example.test"


def cli(core: Simplefeed, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``simplefeed ARGS`` on the core's database and archive, with its base URL."""
    return cli_on(core.settings, tmp_path, *args)


def cli_on(s: Settings, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``simplefeed ARGS`` with these settings' database, archive, base URL and page size."""
    return invoke(
        tmp_path,
        *args,
        SIMPLEFEED_DATABASE_URL=s.database_url,
        SIMPLEFEED_ARCHIVE_DIR=str(s.archive_dir),
        SIMPLEFEED_BASE_URL=s.base_url,
        SIMPLEFEED_PAGE_SIZE=str(s.page_size),
    )


def invoke(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``simplefeed ARGS`` in this process (click's test runner), in ``cwd``, with ``env`` its
    only SIMPLEFEED_* settings: the commands' own code on real databases, without a Python
    start and the package's imports each time (0.7 s of CPU a command; this file ran about a
    hundred). The installed command in a subprocess, its wiring, its exit statuses and its
    one-line errors: tests/test_cli_errors.py and the tests here that call ``run``."""
    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("SIMPLEFEED_")}
    with contextlib.chdir(cwd):
        result = CliRunner().invoke(main, list(args), env={**unset, **env}, catch_exceptions=False)
    return subprocess.CompletedProcess(
        ["simplefeed", *args], result.exit_code, result.stdout, result.stderr
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return done.stdout


def test_feed_list_has_a_header_and_json(core: Simplefeed, tmp_path: Path) -> None:
    core.create_feed("orders", title="Order events", page_size=3)
    core.publish("orders", [Event(title=f"o{i}") for i in range(7)])
    lines = ok(cli(core, tmp_path, "feed", "list")).splitlines()
    header = "FEED STATE HEAD PAGES PAGE SIZE LAST PUBLISH (UTC) TITLE"
    assert lines[0].split() == header.split()
    events, orders = (line.split() for line in lines[1:])
    assert events[:6] == ["events", "live", "0", "1", "5", "never"]
    assert orders[:5] == ["orders", "live", "7", "3", "3"]
    assert orders[5].startswith("2027-01-15T08:00:00")  # the injected clock
    assert " ".join(orders[6:]) == "Order events"
    # The columns line up under the header.
    assert lines[0].index("HEAD") == lines[2].index(" 7 ") + 1

    listed = json.loads(ok(cli(core, tmp_path, "feed", "list", "--json")))
    assert [f["name"] for f in listed] == ["events", "orders"]
    assert listed[1]["head_seq"] == 7
    assert (listed[1]["pages"], listed[1]["archived_pages"]) == (3, 2)
    assert listed[0]["last_publish"] is None


def test_feed_show_gives_the_stats_and_entry_points(core: Simplefeed, tmp_path: Path) -> None:
    core.create_feed("orders", page_size=3)
    core.publish("orders", [Event(title=f"o{i}") for i in range(7)])
    shown = json.loads(ok(cli(core, tmp_path, "feed", "show", "orders", "--json")))
    assert shown["head_seq"] == 7
    assert (shown["pages"], shown["archived_pages"], shown["page_size"]) == (3, 2, 3)
    assert shown["last_publish"].startswith("2027-01-15T08:00:00")
    assert shown["base_url"] == BASE
    assert shown["archived_pages_base_url"] == BASE  # recorded when page 1 froze
    assert (shown["state"], shown["retired"]) == ("live", None)
    assert shown["entry_points"] == {
        "recent": f"{BASE}/feeds/orders/recent",
        "working": f"{BASE}/feeds/orders/pages/3",
        "first": f"{BASE}/feeds/orders/pages/1",
        "html": f"{BASE}/feeds/orders",
    }
    text = ok(cli(core, tmp_path, "feed", "show", "orders"))
    assert re.search(r"^archived_pages +2$", text, re.MULTILINE)
    assert re.search(r"^retired +no$", text, re.MULTILINE)
    assert re.search(rf"^url recent +{BASE}/feeds/orders/recent$", text, re.MULTILINE)

    missing = cli(core, tmp_path, "feed", "show", "nope")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "Error: no feed named 'nope'"
    assert "warning" not in ok_with_stderr(cli(core, tmp_path, "feed", "show", "orders"))


def ok_with_stderr(done: subprocess.CompletedProcess[str]) -> str:
    ok(done)
    return done.stderr


def test_feed_show_warns_when_its_urls_are_not_the_ones_the_pages_link_to(
    core: Simplefeed, tmp_path: Path
) -> None:
    """`serve --port 18901` links to port 18901 without SIMPLEFEED_BASE_URL; `feed show` in
    another shell printed URLs on port 8080 beside the pages' own base URL, saying nothing."""
    core.create_feed("orders", page_size=3)
    core.publish("orders", [Event(title=f"o{i}") for i in range(4)])  # page 1 freezes
    s = core.settings
    for args in (["feed", "show", "orders"], ["feed", "show", "orders", "--json"]):
        done = run(
            tmp_path,
            *args,
            SIMPLEFEED_DATABASE_URL=s.database_url,
            SIMPLEFEED_ARCHIVE_DIR=str(s.archive_dir),
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip() == (
            f"simplefeed: warning: feed 'orders''s pages link to {BASE}, but these URLs are"
            " built on http://localhost:8080 (SIMPLEFEED_BASE_URL); set it to"
            f" {BASE}"
        )
    assert json.loads(done.stdout)["archived_pages_base_url"] == BASE  # stdout stays JSON


@pytest.mark.parametrize(
    "args,words",
    [
        (["orders", "--title", "Orders\x01"], "U+0001, which XML cannot carry"),
        (["orders", "--title", "Orders\ufffe"], "U+FFFE, which XML cannot carry"),
        (["orders", "--title", "Orders\x85"], "U+0085, a control character"),
        (["orders", "--title", "o" * 1025], "longer than 1024 characters"),
        (["Orders"], "use 1-64 of a-z 0-9 - _"),
        (["orders\n"], "use 1-64 of a-z 0-9 - _"),
    ],
)
def test_a_feed_its_documents_could_not_carry_is_not_created(
    core: Simplefeed, tmp_path: Path, args: list[str], words: str
) -> None:
    """The title is in every document of the feed, archived pages included: one character XML
    cannot carry made every one of them ill-formed (lxml, feedparser and the Simplefeed consumer
    refused /recent), for good."""
    done = cli(core, tmp_path, "feed", "create", *args)
    assert done.returncode == 1 and words in done.stderr, (done.returncode, done.stderr)
    assert [f.name for f in core.feeds()] == ["events"]
    ok(cli(core, tmp_path, "feed", "create", "orders", "--title", "Orders ✓"))


@pytest.mark.parametrize("page_size", [0, -1, 10_001])
def test_a_page_size_out_of_range_is_refused_by_the_core(core: Simplefeed, page_size: int) -> None:
    """Every way of creating a feed keeps the command's range, the library's included."""
    with pytest.raises(InvalidFeed, match="use 1-10000 entries"):
        core.create_feed("orders", page_size=page_size)
    assert [f.name for f in core.feeds()] == ["events"]
    assert core.create_feed("orders", page_size=10_000).page_size == 10_000


@pytest.mark.parametrize(
    ("label", "words"),
    [
        ("shop\tline", "contains U+0009: a label is one line of text"),
        ("shop\n2\t*\tactive", "contains U+000A"),
        ("shop\x1b[2J", "contains U+001B"),
        ("shop\u2028", "contains U+2028"),
        ("", "is blank"),
        ("   ", "is blank"),
        ("l" * 201, "is longer than 200 characters"),
    ],
)
def test_a_token_label_token_list_could_not_show_on_its_line_is_refused(
    core: Simplefeed, tmp_path: Path, label: str, words: str
) -> None:
    """A label is a field of one line of `token list`: a tab or a line break in it made a
    listing line that said something else (another token, active)."""
    done = cli(core, tmp_path, "token", "create", "--label", label)
    assert done.returncode == 1 and words in done.stderr, (done.returncode, done.stderr)
    assert "sft_" not in done.stdout
    assert core.tokens() == []
    ok(cli(core, tmp_path, "token", "create", "--label", "l" * 200)).startswith("sft_1_")


def test_listings_escape_what_could_break_their_lines(core: Simplefeed, tmp_path: Path) -> None:
    """A label stored before labels were checked, and a feed title (text that may hold line
    breaks and tabs), are shown escaped: one token or feed is one line."""
    core.store.create_token(secret_hash="0" * 64, feed=None, label="a\tb\nc\\", now_us=1)
    listed = ok(cli(core, tmp_path, "token", "list")).splitlines()
    assert len(listed) == 1 and listed[0].endswith("\ta\\tb\\nc\\\\"), listed
    core.create_feed("orders", title="Orders\n\tand more")
    rows = ok(cli(core, tmp_path, "feed", "list")).splitlines()
    assert (
        len(rows) == 3 and rows[2].startswith("orders") and rows[2].endswith("Orders\\n\\tand more")
    ), rows
    shown = ok(cli(core, tmp_path, "feed", "show", "orders")).splitlines()
    assert [line.split(None, 1) for line in shown if line.startswith("title ")] == [
        ["title", "Orders\\n\\tand more"]
    ], shown


def test_token_rotate_gives_a_new_secret_and_the_old_one_stops_at_once(
    core: Simplefeed, tmp_path: Path
) -> None:
    client = falcon.testing.TestClient(create_app(core.settings, core=core))

    def publish(token: str) -> int:
        headers = {"Authorization": f"Bearer {token}"}
        return client.simulate_post("/entries", json={"title": "x"}, headers=headers).status_code

    old = ok(cli(core, tmp_path, "token", "create", "--feed", "events", "--label", "shop")).strip()
    token_id = old.split("_")[1]
    # Published once first: on PostgreSQL the next publishes go the one-round-trip way, which
    # checks the secret in its own statement.
    assert publish(old) == 201
    rotated = cli(core, tmp_path, "token", "rotate", token_id)
    new = ok(rotated).strip()
    assert "shown once" in rotated.stderr
    assert new.startswith(f"sft_{token_id}_") and new != old
    assert publish(old) == 401
    assert publish(new) == 201
    listed = ok(cli(core, tmp_path, "token", "list")).splitlines()
    assert [line.split("\t")[:3] for line in listed] == [[token_id, "events", "active"]]
    assert listed[0].endswith("shop")
    assert new not in ok(cli(core, tmp_path, "token", "list"))

    # A revoked token stays revoked: rotating it does not bring it back.
    ok(cli(core, tmp_path, "token", "revoke", token_id))
    refused = cli(core, tmp_path, "token", "rotate", token_id)
    assert refused.returncode == 1
    assert refused.stderr.strip() == f"Error: no active token with id {token_id}"
    assert publish(new) == 401


def test_a_retired_feed_is_read_as_ever_and_refuses_publishes_with_410(
    core: Simplefeed, token: str, tmp_path: Path
) -> None:
    client = falcon.testing.TestClient(
        create_app(core.settings, core=core), headers={"Authorization": f"Bearer {token}"}
    )
    core.create_feed("orders", page_size=3)
    # Published before retiring: on PostgreSQL later publishes try the one-round-trip way.
    assert (
        client.simulate_post("/feeds/orders/entries", json=[{"title": "a"}] * 4).status
        == "201 Created"
    )
    before = {
        path: client.simulate_get(path)
        for path in ("/feeds/orders/recent", "/feeds/orders/pages/1", "/feeds/orders/pages/2")
    }

    done = ok(cli(core, tmp_path, "feed", "retire", "orders"))
    assert re.fullmatch(
        r"feed 'orders' retired at \S+Z: reads go on, publishes get 410 Gone\n", done
    )
    for body in ({"title": "b"}, [{"title": "b"}, {"title": "c"}]):
        refused = client.simulate_post("/feeds/orders/entries", json=body)
        assert refused.status_code == 410
        assert refused.json == {
            "error": "gone",
            "message": "feed 'orders' is retired: its pages are still served, "
            "but it takes no more events",
            "feed": "orders",
        }
    assert core.feed("orders").head_seq == 4  # nothing stored
    for path, response in before.items():
        again = client.simulate_get(path)
        assert (again.status_code, again.content, again.headers["ETag"]) == (
            200,
            response.content,
            response.headers["ETag"],
        ), path
    # The other feeds are not touched.
    assert client.simulate_post("/entries", json={"title": "x"}).status_code == 201

    shown = json.loads(ok(cli(core, tmp_path, "feed", "show", "orders", "--json")))
    assert shown["state"] == "retired"
    assert shown["retired"] == done.split()[4][:-1]
    assert "retired" in ok(cli(core, tmp_path, "feed", "list")).splitlines()[2]
    assert "Retired" in client.simulate_get("/feeds/orders").text
    assert "retired" in client.simulate_get("/").text

    ok(cli(core, tmp_path, "feed", "unretire", "orders"))
    assert client.simulate_post("/feeds/orders/entries", json={"title": "d"}).status_code == 201
    assert (
        json.loads(ok(cli(core, tmp_path, "feed", "show", "orders", "--json")))["state"] == "live"
    )


@contextlib.contextmanager
def database_at_0003(like: str, tmp_path: Path) -> Iterator[str]:
    """An empty database of the same backend as ``like``, migrated to revision 0003 (before
    feeds had a base URL)."""
    from alembic import command

    if like.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
        command.upgrade(alembic_config(url), "0003")
        yield url
        return
    with scratch_postgres_database("sf_old") as url:
        command.upgrade(alembic_config(url), "0003")
        yield url


def test_a_database_at_an_older_schema_is_named_with_both_revisions_and_the_fix(
    core: Simplefeed, tmp_path: Path
) -> None:
    with database_at_0003(core.settings.database_url, tmp_path) as url:
        done = run(tmp_path, "feed", "list", SIMPLEFEED_DATABASE_URL=url)
    assert done.returncode == 1, done.stderr
    shown = mask_url(url)
    assert done.stderr.splitlines() == [
        f"Error: database {shown} is at schema 0003, not the newest ({SCHEMA_REVISION});"
        " run `simplefeed db upgrade`"
    ]


def test_migration_records_the_base_url_of_pages_frozen_before_it(
    core: Simplefeed, tmp_path: Path
) -> None:
    """Feeds frozen before 0004 get the base URL their page 1's self link names, printed."""
    core.create_feed("orders", page_size=3)
    core.create_feed("broken", page_size=3)
    core.publish("events", [Event(title=f"e{i}") for i in range(7)])
    core.publish("orders", [Event(title=f"o{i}") for i in range(7)])
    core.publish("broken", [Event(title=f"b{i}") for i in range(3)])
    columns = "id, name, uuid, title, page_size, created_us, head_seq, head_updated_us, modified_us"
    feed_rows = query(core.settings.database_url, f"SELECT {columns} FROM feeds")
    names_of = {row[0]: row[1] for row in feed_rows}
    page_rows = [
        (*row, f'"{sha256}"', core.page_path(names_of[row[0]], row[1]).read_bytes())
        for *row, sha256 in query(
            core.settings.database_url,
            "SELECT feed_id, number, first_seq, last_seq, frozen_us, sha256 FROM pages",
        )
    ]
    broken_id = next(row[0] for row in feed_rows if row[1] == "broken")
    with database_at_0003(core.settings.database_url, tmp_path) as old:
        engine = create_engine(old)
        try:
            with engine.begin() as conn:
                for row in feed_rows:
                    conn.execute(
                        text(f"INSERT INTO feeds ({columns}) VALUES ({_marks(columns)})"),
                        dict(zip(columns.split(", "), row, strict=True)),
                    )
                names = "feed_id, number, first_seq, last_seq, frozen_us, etag, body"
                for row in page_rows:
                    values = dict(zip(names.split(", "), row, strict=True))
                    if values["feed_id"] == broken_id:
                        values["body"] = b"<feed xmlns='http://www.w3.org/2005/Atom'/>"
                    conn.execute(
                        text(f"INSERT INTO pages ({names}) VALUES ({_marks(names)})"), values
                    )
        finally:
            engine.dispose()
        archive_dir = tmp_path / "old-archive"  # (0005 writes the pages there from the bytes)
        env = {
            "SIMPLEFEED_DATABASE_URL": old,
            "SIMPLEFEED_BASE_URL": BASE,
            "SIMPLEFEED_ARCHIVE_DIR": str(archive_dir),
        }
        upgraded = run(tmp_path, "db", "upgrade", **env)
        # Migrated, and then refused: one feed's pages say nothing of their base URL.
        assert upgraded.returncode == 1, upgraded.stderr
        assert upgraded.stderr.splitlines() == [
            f"simplefeed: feed 'events': its archived pages link to {BASE} (recorded)",
            f"simplefeed: feed 'orders': its archived pages link to {BASE} (recorded)",
            "simplefeed: feed 'broken' has archived pages, but its page 1 names no base URL:"
            " none recorded (`simplefeed archive rebase URL` records one)",
            f"simplefeed: wrote 4 page files missing from {archive_dir} from the database's"
            " bytes, before they leave it",
            "Error: feed 'broken' has archived pages but no recorded base URL: check that their"
            f" links are right, then record {BASE} with"
            f" `simplefeed archive rebase {BASE} --feed broken`",
        ]
        recorded = dict(query(old, "SELECT name, base_url FROM feeds"))
        assert recorded == {"events": BASE, "orders": BASE, "broken": None}


def _marks(columns: str) -> str:
    return ", ".join(f":{name}" for name in columns.split(", "))


def test_base_url_problem_only_for_archived_pages_with_another_base() -> None:
    def feed(head_seq: int, base_url: str | None) -> Feed:
        return Feed(1, "orders", "u", "orders", 5, 0, head_seq, None, 0, base_url=base_url)

    assert base_url_problem(feed(4, None), BASE) is None  # nothing frozen yet
    assert base_url_problem(feed(5, BASE), BASE) is None
    moved = base_url_problem(feed(5, "http://old.test"), BASE)
    assert moved is not None
    assert moved.startswith("feed 'orders' has archived pages linking to http://old.test, but ")
    assert "SIMPLEFEED_BASE_URL=http://old.test again" in moved
    assert f"`simplefeed archive rebase {BASE} --feed orders`" in moved
    unknown = base_url_problem(feed(5, None), BASE)
    assert unknown is not None and "no recorded base URL" in unknown
    # Recorded by `archive rebase` before any page froze: it binds as well (the next freeze by
    # a process with the old base URL overwrote it, answering 201).
    rebased = base_url_problem(feed(4, "http://new.test"), BASE)
    assert rebased is not None
    assert rebased.startswith("feed 'orders' has its base URL recorded as http://new.test")
    assert base_url_problem(feed(4, BASE), BASE) is None


def test_a_base_url_recorded_before_any_page_froze_is_not_overwritten_by_a_freeze(
    core: Simplefeed, clock: FakeClock
) -> None:
    """`archive rebase NEW --feed orders` on a feed with no archived page recorded NEW; a
    process still running with the old base URL then froze page 1 with its own links,
    answered 201, and recorded its own URL over NEW."""
    core.create_feed("orders", page_size=3)
    core.publish("orders", [Event(title=f"o{i}") for i in range(2)])
    other = Simplefeed(replace(core.settings, base_url="http://new.test"), clock=clock)
    try:
        (rebased,) = other.rebase_archive("orders")
        assert (rebased.pages, rebased.base_url) == (0, "http://new.test")
    finally:
        other.store.close()
    with pytest.raises(BaseUrlMismatch, match=re.escape("recorded as http://new.test")):
        core.publish("orders", [Event(title=f"p{i}") for i in range(2)])  # would freeze page 1
    after = core.feed("orders")
    assert (after.head_seq, after.base_url) == (2, "http://new.test")  # nothing stored


def test_no_page_freezes_with_another_base_url_than_the_pages_before(
    core: Simplefeed, clock: FakeClock
) -> None:
    """A process started with another base URL (another node, before the check could see a
    archived page) may append, but never freeze a page that links elsewhere than page 1."""
    core.publish("events", [Event(title=f"e{i}") for i in range(5)])  # page 1 freezes
    assert core.feed("events").base_url == BASE
    other = Simplefeed(replace(core.settings, base_url="http://other.test"), clock=clock)
    try:
        other.publish("events", [Event(title="e5")])  # stays in the working page
        with pytest.raises(BaseUrlMismatch, match=re.escape(f"linking to {BASE}, but")):
            other.publish("events", [Event(title=f"f{i}") for i in range(4)])
        with pytest.raises(BaseUrlMismatch):
            other.check_base_url()
    finally:
        other.store.close()
    after = core.feed("events")
    assert (after.head_seq, after.base_url) == (6, BASE)  # the refused batch stored nothing
    core.publish("events", [Event(title=f"f{i}") for i in range(4)])
    assert core.page(core.feed("events"), 2).body.count(BASE.encode()) > 0


def test_archive_rebase_renders_every_archived_page_with_the_new_base_url(
    core: Simplefeed, clock: FakeClock, tmp_path: Path
) -> None:
    new = "https://feeds.new.test/sf"
    core.create_feed("orders", page_size=3)
    core.publish("events", [Event(title=f"e{i}") for i in range(7)])
    core.publish("orders", [Event(title=f"o{i}") for i in range(10)])
    orders = core.feed("orders")
    before = {p.number: p for p in core.store.iter_pages(orders.id)}
    bytes_before = {n: core.page_path("orders", n).read_bytes() for n in before}
    events_before = list(core.store.iter_pages(core.feed("events").id))
    assert sorted(before) == [1, 2, 3]

    done = cli(core, tmp_path, "archive", "rebase", new, "--feed", "orders")
    assert ok(done).splitlines() == [
        *(f"{BASE}/feeds/orders/pages/{n}" for n in (1, 2, 3, 4)),
        f"{BASE}/feeds/orders/recent",
        *(f"{new}/feeds/orders/pages/{n}" for n in (1, 2, 3, 4)),
        f"{new}/feeds/orders/recent",
    ]
    assert done.stderr.splitlines() == [
        f"feed 'orders': 3 of 3 archived pages rendered again with {new} (they linked to {BASE})",
        f"feed 'orders': also purge the entry locators, by prefix: {BASE}/feeds/orders/entries/",
        f"feed 'orders': also purge the entry locators, by prefix: {new}/feeds/orders/entries/",
        f"now start the service with SIMPLEFEED_BASE_URL={new}",
    ]
    after = {p.number: p for p in core.store.iter_pages(orders.id)}
    for number, page in after.items():
        path = core.page_path("orders", number)
        body = path.read_bytes()
        assert BASE.encode() not in body
        assert f'href="{new}/feeds/orders/pages/{number}"'.encode() in body
        assert page.sha256 != before[number].sha256
        assert hashlib.sha256(body).hexdigest() == page.sha256
        assert path.stat().st_mtime_ns // 1000 == page.frozen_us
    # The digest chain is the new bytes': verify passes with the new base URL.
    verified = run(
        tmp_path,
        "archive",
        "verify",
        SIMPLEFEED_DATABASE_URL=core.settings.database_url,
        SIMPLEFEED_ARCHIVE_DIR=str(core.settings.archive_dir),
        SIMPLEFEED_BASE_URL=new,
    )
    first, last = ok(verified).strip().splitlines()
    assert first.startswith(f"checking archive {core.settings.archive_dir} against database ")
    assert last == "checked 4 archived pages, 0 problems"
    assert list(core.store.iter_pages(core.feed("events").id)) == events_before  # not touched

    # Served from the new base URL: the start check passes for orders, the append goes on
    # (page 4 chains to the new page 3), and the old base is refused.
    moved = Simplefeed(replace(core.settings, base_url=new), clock=clock)
    try:
        with pytest.raises(BaseUrlMismatch) as refused:
            moved.check_base_url()
        assert [p.split(" has ")[0] for p in refused.value.problems] == ["feed 'events'"]
        moved.publish("orders", [Event(title=f"p{i}") for i in range(3)])
        page4 = moved.page(moved.feed("orders"), 4)
        assert f'href="{new}/feeds/orders/pages/3"'.encode() in page4.body
        assert after[3].sha256.encode() in page4.body
    finally:
        moved.store.close()
    with pytest.raises(BaseUrlMismatch, match="feed 'orders' has archived pages linking to"):
        core.check_base_url()

    # Rendering is deterministic: back to the old base URL, the old bytes, ETags and digests.
    ok(cli(core, tmp_path, "archive", "rebase", BASE, "--feed", "orders"))
    back = {p.number: p for p in core.store.iter_pages(orders.id)}
    assert {n: back[n].sha256 for n in before} == {n: p.sha256 for n, p in before.items()}
    assert {n: core.page_path("orders", n).read_bytes() for n in before} == bytes_before
    assert core.feed("orders").base_url == BASE

    bad = cli(core, tmp_path, "archive", "rebase", "ftp://feeds.test")
    assert bad.returncode == 2
    assert "Invalid value for NEW_BASE_URL: 'ftp://feeds.test' is not an absolute http(s) URL" in (
        bad.stderr
    )
    bad = cli(core, tmp_path, "archive", "rebase", "https://feeds.test/?v=2")
    assert bad.returncode == 2 and "has a query or a fragment" in bad.stderr, bad.stderr
    bad = cli(core, tmp_path, "archive", "rebase", "https://feeds.test/recent")
    assert bad.returncode == 2 and "is one of the service's URLs" in bad.stderr, bad.stderr


def test_archive_rebase_names_page_files_it_could_not_write(
    core: Simplefeed, tmp_path: Path
) -> None:
    core.publish("events", [Event(title=f"e{i}") for i in range(10)])
    pages = core.page_path("events", 1).parent
    shutil.rmtree(pages)
    pages.write_text("not a directory")  # even root cannot write files under it
    done = cli(core, tmp_path, "archive", "rebase", "http://moved.test")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    for number in (1, 2):
        assert (
            f"{pages / str(number)}: Not a directory (`simplefeed archive rebuild` writes it)"
            in (lines)
        )
    assert lines[-1] == "Error: 2 page files could not be written"
    assert "http://moved.test/pages/1" in done.stdout.splitlines()  # still told what to purge
    assert core.feed("events").base_url == "http://moved.test"  # the database moved


def test_a_publish_that_would_freeze_under_another_base_url_is_a_503_and_healthz_says_why(
    core: Simplefeed, clock: FakeClock
) -> None:
    """Through the app: the refused freeze is the operator's fault, not the producer's, so it
    is a 503 with Retry-After (the producer keeps its events and retries), never a 500; nothing
    of the batch is stored, and /healthz is unhealthy naming the feed and both URLs."""
    core.publish("events", [Event(title=f"e{i}") for i in range(5)])  # page 1 freezes
    other = Simplefeed(replace(core.settings, base_url="http://other.test"), clock=clock)
    try:
        client = falcon.testing.TestClient(create_app(other.settings, core=other))
        token = other.create_token(label="t", feed="events")
        answer = client.simulate_post(
            "/entries",
            json=[{"title": f"f{i}"} for i in range(5)],
            headers={"Authorization": f"Bearer {token}"},
        )
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"].isdigit()
        assert "base URL" in answer.json["message"]
        health = client.simulate_get("/healthz")
        assert health.status_code == 503
        (problem,) = health.json["problems"]
        assert "'events'" in problem and BASE in problem and "http://other.test" in problem
    finally:
        other.store.close()
    assert core.feed("events").head_seq == 5
    own = falcon.testing.TestClient(create_app(core.settings, core=core))
    assert own.simulate_get("/healthz").status_code == 200


# `archive verify` and `archive rebuild` exit 1 for what they found, 3 when they could not
# look (docs/how-to/monitor.md, "Check the archive"): a cron job's `|| mail` tells the two apart.


def frozen_archive(core: Simplefeed) -> Path:
    """Pages 1 and 2 of the default feed frozen, their files written; the pages directory."""
    core.publish("events", [Event(title=f"e{i}") for i in range(12)])
    return core.page_path("events", 1).parent


def could_not_check(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a command that could not check ends with (status 3)."""
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("Error: "), line
    return line


def test_archive_verify_exits_0_when_every_page_file_is_the_databases(
    core: Simplefeed, tmp_path: Path
) -> None:
    frozen_archive(core)
    done = cli(core, tmp_path, "archive", "verify")
    assert ok(done).splitlines()[-1] == "checked 2 archived pages, 0 problems"
    assert done.stderr == ""


def test_archive_verify_exits_1_naming_a_damaged_page_file_which_rebuild_restores(
    core: Simplefeed, tmp_path: Path
) -> None:
    pages = frozen_archive(core)
    page1 = pages / "1"
    page1.write_bytes(page1.read_bytes().replace(b"e0", b"eX"))
    done = cli(core, tmp_path, "archive", "verify")
    assert done.returncode == 1, (done.stdout, done.stderr)
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{page1}: not the database's page 1 ("), line
    assert done.stdout.splitlines()[-1] == "checked 2 archived pages, 1 problem"
    rebuilt = cli(core, tmp_path, "archive", "rebuild")
    assert f"restored {page1}" in ok(rebuilt).splitlines()
    ok(cli(core, tmp_path, "archive", "verify"))


def test_the_archive_reports_name_a_directory_with_a_newline_on_one_line(
    core: Simplefeed, tmp_path: Path
) -> None:
    """A newline in the archive directory's name forged lines in `archive verify`'s and
    `rebuild`'s reports (each path a problem or a file restored names): each is one line."""
    settings = replace(core.settings, archive_dir=tmp_path / "arch\nError: forged")
    forged = Simplefeed(settings, clock=core.clock)
    try:
        page1 = frozen_archive(forged) / "1"
    finally:
        forged.close()
    page1.unlink()
    shown = str(page1).replace("\n", "\\n")
    checked = cli_on(settings, tmp_path, "archive", "verify")
    assert checked.returncode == 1, (checked.stdout, checked.stderr)
    assert checked.stderr.splitlines() == [
        f"{shown}: missing (`simplefeed archive rebuild` writes it)"
    ]
    assert checked.stdout.splitlines()[0].startswith(f"checking archive {tmp_path}/arch\\nError")
    rebuilt = cli_on(settings, tmp_path, "archive", "rebuild")
    assert ok(rebuilt).splitlines()[1:] == [
        f"restored {shown}",
        "checked 2 archived pages, restored 1",
    ]


def test_archive_verify_exits_2_on_usage_and_its_help_gives_every_status(
    core: Simplefeed, tmp_path: Path
) -> None:
    done = cli(core, tmp_path, "archive", "verify", "--no-such-option")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "No such option '--no-such-option'" in done.stderr
    for command in ("verify", "rebuild"):
        shown = ok(cli(core, tmp_path, "archive", command, "--help"))
        statuses = [line.split()[0] for line in shown.splitlines() if re.match(r" +\d  ", line)]
        assert statuses == ["0", "1", "2", "3"], shown


@pytest.mark.parametrize("kind", ["postgres-closed-port", "sqlite-no-file", "sqlite-empty"])
def test_archive_verify_and_rebuild_exit_3_when_the_database_is_not_ready(
    tmp_path: Path, kind: str
) -> None:
    """The database does not answer, does not exist or is not migrated: nothing was checked,
    which is not a damaged archive (that is 1)."""
    said = {
        "postgres-closed-port": "does not answer",
        "sqlite-no-file": "does not exist",
        "sqlite-empty": "has no Simplefeed tables",
    }[kind]
    if kind == "postgres-closed-port":
        url = f"postgresql+psycopg://operator:hunter2@127.0.0.1:{free_port()}/simplefeed"
    else:
        path = tmp_path / f"{kind}.sqlite3"
        if kind == "sqlite-empty":
            sqlite3.connect(path).close()
        url = f"sqlite:///{path}"
    for command in ("verify", "rebuild"):
        done = run(tmp_path, "archive", command, SIMPLEFEED_DATABASE_URL=url)
        line = could_not_check(done)
        assert said in line and "hunter2" not in line, line
        assert done.stdout == ""


def test_archive_verify_exits_3_when_the_archive_directory_cannot_be_checked(
    core: Simplefeed, tmp_path: Path
) -> None:
    """No page file at all while the database has archived pages (an empty or missing
    directory: the wrong one, or a volume not mounted), a file where the directory should
    be, a directory inside it that is a file: each one line, status 3, not 1."""
    pages = frozen_archive(core)
    root = core.settings.archive_dir
    shutil.move(root, tmp_path / "kept")
    empty = (
        f"Error: {root}: no page files at all, but the database has 2 archived pages: is this"
        " the service's archive? (SIMPLEFEED_ARCHIVE_DIR, relative to the directory the"
        " command runs in; `simplefeed archive rebuild` writes the files)"
    )
    assert could_not_check(cli(core, tmp_path, "archive", "verify")) == empty  # missing
    (root / "pages").mkdir(parents=True)
    done = cli(core, tmp_path, "archive", "verify")  # empty
    assert could_not_check(done) == empty
    assert done.stdout.splitlines()[0].startswith(f"checking archive {root} against database ")
    # The repository's archive/ holds a README and a .gitignore: they are no page files.
    (root / "README.md").write_text("Archived pages land here.\n")
    (root / ".gitignore").write_text("*\n")
    assert could_not_check(cli(core, tmp_path, "archive", "verify")) == empty
    (root / "README.md").unlink()
    (root / ".gitignore").unlink()
    (root / "pages").rmdir()
    root.rmdir()
    root.write_text("not a directory")
    assert could_not_check(cli(core, tmp_path, "archive", "verify")) == (
        f"Error: {root}: not a directory (SIMPLEFEED_ARCHIVE_DIR)"
    )
    root.unlink()
    shutil.move(tmp_path / "kept", root)
    ok(cli(core, tmp_path, "archive", "verify"))
    for path in pages.iterdir():
        path.unlink()
    pages.rmdir()
    pages.write_text("not a directory")  # unreadable, even to root
    assert could_not_check(cli(core, tmp_path, "archive", "verify")) == (
        f"Error: {pages / '1'}: cannot be read (Not a directory)"
    )
    assert could_not_check(cli(core, tmp_path, "archive", "verify", "--feed", "nope")) == (
        "Error: no feed named 'nope'"
    )


def test_archive_rebuild_exits_1_naming_page_files_it_could_not_write(
    core: Simplefeed, tmp_path: Path
) -> None:
    pages = frozen_archive(core)
    shutil.rmtree(pages)
    pages.write_text("not a directory")  # even root cannot write files under it
    done = cli(core, tmp_path, "archive", "rebuild")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.splitlines() == [
        f"{pages / '1'}: Not a directory",
        f"{pages / '2'}: Not a directory",
        "Error: 2 page files could not be written",
    ]
    assert done.stdout.splitlines()[-1] == "checked 2 archived pages, restored 0"
    pages.unlink()
    assert ok(cli(core, tmp_path, "archive", "rebuild")).splitlines()[-1] == (
        "checked 2 archived pages, restored 6"  # each page and its .br and .gz copies
    )
    assert could_not_check(cli(core, tmp_path, "archive", "rebuild", "--feed", "nope")) == (
        "Error: no feed named 'nope'"
    )


def test_the_monitor_guide_s_cron_line_mails_a_failure_with_verify_s_status_in_the_subject(
    core: Simplefeed, tmp_path: Path
) -> None:
    """The crontab line of docs/how-to/monitor.md, run as cron runs it (`sh -c`, from
    elsewhere), with `mail` a stub: nothing for 0, and a subject saying 1 (run `archive
    rebuild`) or 3 (nothing was checked) otherwise."""
    (crontab,) = code_blocks(doc_text("docs/how-to/monitor.md"), "cron")
    found = re.fullmatch(r"0 \* \* \* \* (cd /srv/simplefeed && .*verify.*)\n", crontab)
    assert found is not None
    install, stubs, mailbox = tmp_path / "install", tmp_path / "bin", tmp_path / "mailbox"
    (install / ".venv" / "bin").mkdir(parents=True)
    (install / ".venv" / "bin" / "simplefeed").symlink_to(simplefeed_command()[0])
    stubs.mkdir()
    (stubs / "mail").write_text(f'#!/bin/sh\necho "$*" >> {mailbox}\n')
    (stubs / "mail").chmod(0o755)
    command = found.group(1).replace("/srv/simplefeed", str(install))
    s = core.settings

    def cron(database_url: str = s.database_url) -> list[str]:
        environ = clean_environ()
        environ.update(
            PYTHONPATH=str(PROJECT_ROOT),
            PATH=f"{stubs}:{environ['PATH']}",
            SIMPLEFEED_DATABASE_URL=database_url,
            SIMPLEFEED_ARCHIVE_DIR=str(s.archive_dir),
            SIMPLEFEED_BASE_URL=s.base_url,
        )
        subprocess.run(["sh", "-c", command], cwd=tmp_path, env=environ, timeout=60, check=False)
        mailed = mailbox.read_text().splitlines() if mailbox.exists() else []
        mailbox.unlink(missing_ok=True)
        return mailed

    pages = frozen_archive(core)
    assert cron() == []
    (pages / "1").write_bytes(b"<feed/>")
    assert cron() == ["-s archive verify: exit 1 ops@example.com"]
    down = f"postgresql+psycopg://operator@127.0.0.1:{free_port()}/simplefeed"
    assert cron(down) == ["-s archive verify: exit 3 ops@example.com"]

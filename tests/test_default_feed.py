"""The default feed cannot change once feeds have archived pages.

The default feed's pages are at ``/pages/N``, in the files ``archive/pages/N``. Every other
feed's are at ``/feeds/NAME/pages/N``. Archived pages are cached for a year, and link to each
other there. Say ``SIMPLEFEED_DEFAULT_FEED=event`` is mistyped after ``events`` archived
pages. ``db upgrade`` must not create a feed ``event``, nor ``serve`` start. /pages/N would
become the new feed's.

The commands run as an operator runs them, the installed ``simplefeed`` in a subprocess. They
run on a real SQLite file and a real PostgreSQL database (the ``database_url`` fixture).
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import falcon.testing
import pytest

from simplefeed import atom
from simplefeed.app import create_app
from simplefeed.errors import DefaultFeedMismatch
from simplefeed.model import Event, Feed
from simplefeed.rules.feeds import default_feed_problem
from simplefeed.service import Simplefeed
from tests.conftest import FakeClock, query
from tests.test_cli_errors import one_line_error, run, wsgi_refusal

MISTYPED = (
    "feed 'events' has archived pages at /pages/N (rendered as the default feed's), but"
    " SIMPLEFEED_DEFAULT_FEED is 'event': set SIMPLEFEED_DEFAULT_FEED=events again (a feed's"
    " archived pages never move; caches keep them for a year)"
)
#: ``serve`` must refuse before it starts uWSGI. Otherwise this host name stops it.
NOT_A_HOST = ("--host", "no-such-host.invalid")


def cli(
    core: Simplefeed, tmp_path: Path, *args: str, default_feed: str
) -> subprocess.CompletedProcess[str]:
    """Run ``simplefeed ARGS`` on the core's database and archive, with ``default_feed``."""
    s = core.settings
    return run(
        tmp_path,
        *args,
        SIMPLEFEED_DATABASE_URL=s.database_url,
        SIMPLEFEED_ARCHIVE_DIR=str(s.archive_dir),
        SIMPLEFEED_BASE_URL=s.base_url,
        SIMPLEFEED_PAGE_SIZE=str(s.page_size),
        SIMPLEFEED_DEFAULT_FEED=default_feed,
    )


def feed_names(core: Simplefeed) -> list[str]:
    return sorted(name for (name,) in query(core.settings.database_url, "SELECT name FROM feeds"))


def healthz(core: Simplefeed, clock: FakeClock, default_feed: str) -> falcon.testing.Result:
    """Return ``GET /healthz`` of a process that runs with ``default_feed``.

    The process started while the database did not answer, so its start-up check saw nothing.
    """
    other = Simplefeed(replace(core.settings, default_feed=default_feed), clock=clock)
    try:
        return falcon.testing.TestClient(create_app(other.settings, core=other)).simulate_get(
            "/healthz"
        )
    finally:
        other.close()


# -- reading an archived page's self link, and the decision ---------------------------------


def test_self_href_is_the_feed_s_own_and_read_up_to_the_first_entry(core: Simplefeed) -> None:
    core.publish("events", [Event(title=f"e{i}") for i in range(5)])
    body = (core.settings.archive_dir / "pages" / "1").read_bytes()
    assert atom.self_href(body) == "http://feeds.example.test/pages/1"
    head, _ = body.split(b"<entry>", 1)
    # Read no further than the first entry. What comes after it is not parsed at all.
    assert atom.self_href(head + b"<entry><link rel='self' href='x'/>&broken;<") == (
        "http://feeds.example.test/pages/1"
    )
    assert atom.self_href(b"<feed xmlns='http://www.w3.org/2005/Atom'/>") is None
    assert atom.self_href(b"not XML") is None


def _feed(name: str, head_seq: int, base_url: str | None = "http://h.test/sf") -> Feed:
    return Feed(
        id=1,
        name=name,
        uuid="u",
        title=name,
        page_size=5,
        created_us=0,
        head_seq=head_seq,
        head_updated_us=0,
        modified_us=0,
        base_url=base_url,
    )


@pytest.mark.parametrize(
    ("name", "head_seq", "href", "default_feed", "says"),
    [
        ("events", 12, "http://h.test/sf/pages/2", "event", MISTYPED),
        ("events", 12, "http://h.test/sf/pages/2", "events", None),
        ("orders", 12, "http://h.test/sf/feeds/orders/pages/2", "events", None),
        ("orders", 12, "http://h.test/sf/feeds/orders/pages/2", "orders", "/feeds/orders/pages/N"),
        ("events", 4, None, "event", None),  # Nothing archived.
        ("events", 12, None, "event", None),  # No self link. archive verify finds that.
        ("events", 12, "http://h.test/sf/pages/1", "event", None),  # Not this page's.
        ("events", 12, "http://h.test/sf/feeds/orders/pages/2", "event", None),  # Another's.
    ],
    ids=[
        "mistyped",
        "default",
        "named",
        "named-made-default",
        "none-frozen",
        "no-self-link",
        "another-page",
        "another-feed",
    ],
)
def test_default_feed_problem(
    name: str, head_seq: int, href: str | None, default_feed: str, says: str | None
) -> None:
    found = default_feed_problem(_feed(name, head_seq), href, default_feed)
    if says is None:
        assert found is None
    else:
        assert found is not None and says in found


def test_a_base_url_whose_path_ends_like_a_feed_s_is_read_as_the_base() -> None:
    """A base URL whose path ends like a feed's is read as the base.

    ``/feeds/x/pages/2`` under the base ``http://h.test/feeds/x`` is the default feed's.
    """
    feed = _feed("x", 12, base_url="http://h.test/feeds/x")
    assert default_feed_problem(feed, "http://h.test/feeds/x/pages/2", "x") is None
    assert "rendered as the default feed's" in (
        default_feed_problem(feed, "http://h.test/feeds/x/pages/2", "y") or ""
    )


# -- the default feed mistyped after it archived pages ------------------------------------


def test_db_upgrade_refuses_a_default_feed_whose_name_is_not_the_archived_pages_and_creates_none(
    core: Simplefeed, tmp_path: Path
) -> None:
    core.publish("events", [Event(title=f"e{i}") for i in range(7)])  # Archives page 1.
    assert one_line_error(cli(core, tmp_path, "db", "upgrade", default_feed="event")) == (
        f"Error: {MISTYPED}"
    )
    assert feed_names(core) == ["events"]  # No feed 'event'.
    assert cli(core, tmp_path, "db", "upgrade", default_feed="events").returncode == 0


def test_serve_refuses_a_default_feed_whose_name_is_not_the_archived_pages(
    core: Simplefeed, tmp_path: Path
) -> None:
    core.publish("events", [Event(title=f"e{i}") for i in range(5)])
    core.create_feed("event")  # It exists, as a `db upgrade` without the check would make it.
    done = cli(core, tmp_path, "serve", *NOT_A_HOST, default_feed="event")
    assert one_line_error(done) == f"Error: {MISTYPED}"


def test_uwsgi_s_load_refuses_it_in_one_critical_line(core: Simplefeed, tmp_path: Path) -> None:
    """uWSGI's load refuses it in one CRITICAL line.

    The test imports ``simplefeed.runtime.wsgi`` as a uWSGI worker does, but outside uWSGI,
    where the refusal is status 1.
    """
    core.publish("events", [Event(title=f"e{i}") for i in range(5)])
    core.create_feed("event")
    s = core.settings
    message = wsgi_refusal(
        tmp_path,
        SIMPLEFEED_DATABASE_URL=s.database_url,
        SIMPLEFEED_ARCHIVE_DIR=str(s.archive_dir),
        SIMPLEFEED_BASE_URL=s.base_url,
        SIMPLEFEED_DEFAULT_FEED="event",
    )
    assert message == f"not starting: {MISTYPED}"


def test_healthz_names_it_and_a_freeze_at_another_feed_s_urls_is_a_503(
    core: Simplefeed, clock: FakeClock, tmp_path: Path
) -> None:
    core.publish("events", [Event(title=f"e{i}") for i in range(5)])
    health = healthz(core, clock, "event")
    assert health.status_code == 503
    assert health.json["problems"] == [MISTYPED]
    # A process that could not check at start archives no page where another feed's are.
    other = Simplefeed(replace(core.settings, default_feed="event"), clock=clock)
    try:
        client = falcon.testing.TestClient(create_app(other.settings, core=other))
        token = other.create_token(label="t", feed="events")
        answer = client.simulate_post(
            "/feeds/events/entries",
            json=[{"title": f"f{i}"} for i in range(5)],
            headers={"Authorization": f"Bearer {token}"},
        )
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"].isdigit()
        assert "default feed" in answer.json["message"]
        with pytest.raises(DefaultFeedMismatch):
            other.rebuild_archive()
    finally:
        other.close()
    assert core.feed("events").head_seq == 5
    assert not (core.settings.archive_dir / "feeds" / "events").exists()


def test_archive_rebuild_and_rebase_refuse_to_write_a_feed_s_pages_elsewhere(
    core: Simplefeed, tmp_path: Path
) -> None:
    core.publish("events", [Event(title=f"e{i}") for i in range(5)])
    core.create_feed("event")
    rebuild = cli(core, tmp_path, "archive", "rebuild", default_feed="event")
    assert one_line_error(rebuild, status=3) == f"Error: {MISTYPED}"  # Refused, nothing checked.
    rebase = cli(core, tmp_path, "archive", "rebase", "http://moved.test", default_feed="event")
    assert one_line_error(rebase) == f"Error: {MISTYPED}"
    assert core.feed("events").base_url == "http://feeds.example.test"
    assert not (core.settings.archive_dir / "feeds" / "events").exists()


def test_archive_verify_says_the_default_feed_is_mistyped_not_that_files_differ(
    core: Simplefeed, tmp_path: Path
) -> None:
    """`archive verify` says the default feed is mistyped, not that files differ.

    Otherwise it looks for the pages at the other feed's files. It then reports eight
    differences that are not there, and sends the operator to ``archive rebuild``.
    """
    core.publish("events", [Event(title=f"e{i}") for i in range(5)])
    verify = cli(core, tmp_path, "archive", "verify", default_feed="event")
    assert one_line_error(verify, status=3) == f"Error: {MISTYPED}"
    assert cli(core, tmp_path, "archive", "verify", default_feed="events").returncode == 0


# -- the reverse: a named feed's archived pages made the default feed's ---------------------


def test_a_feed_with_pages_under_feeds_name_cannot_become_the_default(
    core: Simplefeed, clock: FakeClock, tmp_path: Path
) -> None:
    core.create_feed("orders", page_size=3)
    core.publish("orders", [Event(title=f"o{i}") for i in range(4)])  # Archives orders page 1.
    line = one_line_error(cli(core, tmp_path, "db", "upgrade", default_feed="orders"))
    assert line.startswith(
        "Error: feed 'orders' has archived pages at /feeds/orders/pages/N, but"
        " SIMPLEFEED_DEFAULT_FEED is 'orders', which would serve them at /pages/N"
    )
    assert one_line_error(cli(core, tmp_path, "serve", *NOT_A_HOST, default_feed="orders")) == line
    (problem,) = healthz(core, clock, "orders").json["problems"]
    assert f"Error: {problem}" == line


# -- no false alarm --------------------------------------------------------------------------


def test_a_fresh_database_takes_any_default_feed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.sqlite3'}"
    done = run(tmp_path, "db", "upgrade", SIMPLEFEED_DATABASE_URL=url, SIMPLEFEED_DEFAULT_FEED="x")
    assert done.returncode == 0, done.stderr
    assert "created default feed 'x'" in done.stdout


def test_feeds_without_archived_pages_let_the_default_feed_change(
    core: Simplefeed, clock: FakeClock, tmp_path: Path
) -> None:
    core.publish("events", [Event(title=f"e{i}") for i in range(4)])  # Nothing archived.
    done = cli(core, tmp_path, "db", "upgrade", default_feed="event")
    assert done.returncode == 0, done.stderr
    assert feed_names(core) == ["event", "events"]
    assert healthz(core, clock, "event").json.get("problems", []) == []


def test_named_feeds_under_feeds_name_and_the_default_at_pages_are_no_problem(
    core: Simplefeed, clock: FakeClock, tmp_path: Path
) -> None:
    core.create_feed("orders", page_size=3)
    core.publish("orders", [Event(title=f"o{i}") for i in range(7)])
    core.publish("events", [Event(title=f"e{i}") for i in range(12)])
    assert core.default_feed_problems() == []
    assert cli(core, tmp_path, "db", "upgrade", default_feed="events").returncode == 0
    line = one_line_error(cli(core, tmp_path, "serve", *NOT_A_HOST, default_feed="events"))
    assert "cannot listen on no-such-host.invalid" in line  # Past every start-up check.
    health = healthz(core, clock, "events")
    assert health.status_code == 200, health.text

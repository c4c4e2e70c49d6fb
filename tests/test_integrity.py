"""Integrity: every ``prev-archive`` link carries ``sf:sha256``, the SHA-256 of the previous
page's bytes as served (archived pages, the working page, the recent document), and
``simplefeed archive verify`` checks every static file against the database."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import replace
from pathlib import Path

import falcon.testing
from click.testing import CliRunner
from lxml import etree
from sqlalchemy import create_engine, text

from simplefeed import archive
from simplefeed.app import create_app
from simplefeed.model import ATOM_NS, SF_NS
from simplefeed.runtime.cli import main
from simplefeed.service import Simplefeed
from simplefeed.settings import Settings
from tests.conftest import FakeClock, migrate

BASE = "http://feeds.example.test"
PAGE_SIZE = 5  # the `settings` fixture's


def post(client: falcon.testing.TestClient, count: int, tag: str) -> None:
    events = [{"title": f"{tag} {i}", "content": f"<{tag}> & {i}"} for i in range(count)]
    result = client.simulate_post("/entries", json=events if count > 1 else events[0])
    assert result.status_code == 201, result.text


def served(client: falcon.testing.TestClient) -> dict[str, bytes]:
    """Every document of the default feed, by URL: /recent, then the working page and the
    pages behind it."""
    docs: dict[str, bytes] = {}

    def get(url: str) -> bytes:
        result = client.simulate_get(url.removeprefix(BASE))
        assert result.status_code == 200, (url, result.text)
        docs[url] = result.content
        return result.content

    url: str | None = prev_links(get(f"{BASE}/recent"))["via"]
    while url is not None:
        url = prev_links(get(url)).get("prev-archive")
    return docs


def prev_links(body: bytes) -> dict[str, str]:
    root = etree.fromstring(body)
    return {
        str(link.get("rel")): str(link.get("href")) for link in root.iterfind(f"{{{ATOM_NS}}}link")
    }


def digest_given(body: bytes) -> str | None:
    root = etree.fromstring(body)
    for link in root.iterfind(f"{{{ATOM_NS}}}link"):
        if link.get("rel") == "prev-archive":
            value: str | None = link.get(f"{{{SF_NS}}}sha256")
            return value
    return None


def check_chain(docs: dict[str, bytes]) -> int:
    """Every document's prev-archive digest is the SHA-256 of the page it names; the number
    of links checked."""
    checked = 0
    for url, body in docs.items():
        prev = prev_links(body).get("prev-archive")
        if prev is None:
            assert digest_given(body) is None
            continue
        assert digest_given(body) == hashlib.sha256(docs[prev]).hexdigest(), (url, prev)
        checked += 1
    return checked


def test_every_prev_archive_link_carries_the_digest_of_the_page_before(
    core: Simplefeed, client: falcon.testing.TestClient, clock: FakeClock, settings: Settings
) -> None:
    post(client, 1, "single")  # page 1 working
    clock.advance(1)
    post(client, 3 * PAGE_SIZE + 2, "batch")  # freezes pages 1-3 in one append, chained in memory
    clock.advance(1)
    for i in range(PAGE_SIZE):  # page 4 freezes on a single event: page 3's digest, remembered
        post(client, 1, f"one-{i}")
    docs = served(client)
    assert set(docs) == {f"{BASE}/recent", *(f"{BASE}/pages/{n}" for n in range(1, 6))}
    assert check_chain(docs) == 5  # pages 2-4, the working page 5 and the recent document
    # Another process (nothing remembered) takes the digest from the store, and renders the
    # same bytes: the live documents, and page 5 when a batch freezes it with page 6.
    other = Simplefeed(settings, clock=clock, new_uuid=lambda: str(uuid.uuid4()))
    try:
        other_client = falcon.testing.TestClient(
            create_app(settings, core=other), headers=client._default_headers
        )
        assert served(other_client) == docs
        clock.advance(1)
        post(other_client, 2 * PAGE_SIZE, "later")
        docs = served(client)
        assert len(docs) == 8
        assert check_chain(docs) == 7
        report = other.verify_archive()
        assert (report.checked, report.problems) == (6, [])
    finally:
        other.store.close()


def test_archive_verify_names_what_differs(
    core: Simplefeed, client: falcon.testing.TestClient, settings: Settings
) -> None:
    post(client, 3 * PAGE_SIZE + 1, "batch")
    assert core.verify_archive().problems == []
    env = {
        "SIMPLEFEED_DATABASE_URL": settings.database_url,
        "SIMPLEFEED_ARCHIVE_DIR": str(settings.archive_dir),
        "SIMPLEFEED_BASE_URL": settings.base_url,
        "SIMPLEFEED_DEFAULT_FEED": settings.default_feed,
    }
    clean = CliRunner(env=env).invoke(main, ["archive", "verify"], catch_exceptions=False)
    assert clean.exit_code == 0, clean.output
    assert "checked 3 archived pages, 0 problems" in clean.output

    page1, page2 = core.page_path("events", 1), core.page_path("events", 2)
    page1.write_bytes(page1.read_bytes().replace(b"batch 0", b"batch X"))  # damaged
    page2.unlink()  # missing
    stray = core.page_path("events", 9)
    stray.write_bytes(b"<feed/>")  # a page that never froze
    # The files of a feed the database does not have (a restored older database).
    gone = settings.archive_dir / "feeds" / "gone"
    (gone / "pages").mkdir(parents=True)
    (gone / "pages" / "1").write_bytes(b"<feed/>")
    # The database's page 3 altered behind the service's back: its digest is no longer its
    # file's, and page 4 does not exist to vouch for it; page 2 vouches for page 1 through
    # its link, unchanged.
    other = hashlib.sha256(b"<?xml version='1.0'?><feed/>").hexdigest()
    engine = create_engine(settings.database_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE pages SET sha256 = :sha256 WHERE number = 3"), {"sha256": other})
    engine.dispose()
    problems = core.verify_archive().problems
    assert any(str(page1) in p and "not the database's page 1" in p for p in problems), problems
    assert any(str(page2) in p and "missing" in p for p in problems), problems
    assert any(str(stray) in p and "no archived page 9" in p for p in problems), problems
    page3 = core.page_path("events", 3)
    assert any(
        str(page3) in p and "not the database's page 3" in p and f"not its recorded {other}" in p
        for p in problems
    ), problems
    assert f"{gone}: files of a feed the database does not have" in problems[0], problems
    # The five: the file of page 3 is not its page, so its copies say nothing more.
    assert len(problems) == 5, problems

    failed = CliRunner(env=env).invoke(main, ["archive", "verify"], catch_exceptions=False)
    assert failed.exit_code == 1
    assert str(page1) in failed.output and "5 problems" in failed.output


def test_archive_verify_follows_the_chain(
    core: Simplefeed, client: falcon.testing.TestClient, settings: Settings, tmp_path: Path
) -> None:
    """A page whose file was replaced along with its recorded digest (consistent on its own)
    is found by the digest the next page gives for it."""
    post(client, 3 * PAGE_SIZE + 1, "batch")
    page2 = core.page_path("events", 2)
    forged = page2.read_bytes().replace(b"batch 5", b"forged")
    engine = create_engine(settings.database_url)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE pages SET sha256 = :sha256 WHERE number = 2"),
            {"sha256": hashlib.sha256(forged).hexdigest()},
        )
    engine.dispose()
    archive.write_page(page2, forged, page2.stat().st_mtime_ns // 1000)  # and its copies
    (problem,) = core.verify_archive().problems
    assert problem.startswith("feed 'events': page 3 gives page 2 the SHA-256 ")


def test_archive_verify_names_the_default_feeds_files_a_new_database_lacks(
    core: Simplefeed, client: falcon.testing.TestClient, settings: Settings, tmp_path: Path
) -> None:
    """An archive with the default feed's pages beside a new, empty
    database passed ("checked 0 archived pages, 0 problems"), while a named feed's files were
    named; ``serve`` refuses such a database."""
    post(client, 2 * PAGE_SIZE, "batch")
    empty = f"sqlite:///{tmp_path / 'new.sqlite3'}"
    migrate(empty)
    other = Simplefeed(replace(settings, database_url=empty))
    try:
        problems = other.verify_archive().problems
    finally:
        other.store.close()
    (problem,) = problems  # one for the feed, as for a named feed's directory
    page1 = core.page_path("events", 1).resolve()
    assert problem.startswith(f"the archive has page 1 of feed 'events' ({page1}), which the")
    assert "database does not have" in problem and "`simplefeed archive recover`" in problem

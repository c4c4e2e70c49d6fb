"""Managing feeds and tokens from the command line, as an operator does: the installed
``simplefeed`` command in a subprocess, on a real SQLite file and a real PostgreSQL database
(the ``database_url`` fixture), with events published through the core beforehand.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from simplefeed.core import Simplefeed
from simplefeed.model import Event
from tests.test_cli_errors import run

BASE = "http://feeds.example.test"


def cli(core: Simplefeed, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``simplefeed ARGS`` on the core's database and archive, with its base URL."""
    s = core.settings
    return run(
        tmp_path,
        *args,
        SIMPLEFEED_DATABASE_URL=s.database_url,
        SIMPLEFEED_ARCHIVE_DIR=str(s.archive_dir),
        SIMPLEFEED_BASE_URL=s.base_url,
        SIMPLEFEED_PAGE_SIZE=str(s.page_size),
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return done.stdout


def test_feed_list_has_a_header_and_json(core: Simplefeed, tmp_path: Path) -> None:
    core.create_feed("orders", title="Order events", page_size=3)
    core.publish("orders", [Event(title=f"o{i}") for i in range(7)])
    lines = ok(cli(core, tmp_path, "feed", "list")).splitlines()
    assert lines[0].split() == [
        "FEED",
        "HEAD",
        "PAGES",
        "PAGE",
        "SIZE",
        "LAST",
        "PUBLISH",
        "(UTC)",
        "TITLE",
    ]
    events, orders = (line.split() for line in lines[1:])
    assert events[:5] == ["events", "0", "1", "5", "never"]
    assert orders[:4] == ["orders", "7", "3", "3"]
    assert orders[4].startswith("2027-01-15T08:00:00")  # the injected clock
    assert " ".join(orders[5:]) == "Order events"
    # The columns line up under the header.
    assert lines[0].index("HEAD") == lines[2].index(" 7 ") + 1

    listed = json.loads(ok(cli(core, tmp_path, "feed", "list", "--json")))
    assert [f["name"] for f in listed] == ["events", "orders"]
    assert listed[1]["head_seq"] == 7
    assert (listed[1]["pages"], listed[1]["frozen_pages"]) == (3, 2)
    assert listed[0]["last_publish"] is None


def test_feed_show_gives_the_stats_and_entry_points(core: Simplefeed, tmp_path: Path) -> None:
    core.create_feed("orders", page_size=3)
    core.publish("orders", [Event(title=f"o{i}") for i in range(7)])
    shown = json.loads(ok(cli(core, tmp_path, "feed", "show", "orders", "--json")))
    assert shown["head_seq"] == 7
    assert (shown["pages"], shown["frozen_pages"], shown["page_size"]) == (3, 2, 3)
    assert shown["last_publish"].startswith("2027-01-15T08:00:00")
    assert shown["base_url"] == BASE
    assert shown["entry_points"] == {
        "recent": f"{BASE}/feeds/orders/recent",
        "working": f"{BASE}/feeds/orders/pages/3",
        "first": f"{BASE}/feeds/orders/pages/1",
        "html": f"{BASE}/feeds/orders",
    }
    text = ok(cli(core, tmp_path, "feed", "show", "orders"))
    assert "frozen_pages  2" in text
    assert f"url recent    {BASE}/feeds/orders/recent" in text

    missing = cli(core, tmp_path, "feed", "show", "nope")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "Error: no feed named 'nope'"

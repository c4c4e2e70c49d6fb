"""Managing feeds and tokens from the command line, as an operator does: the installed
``simplefeed`` command in a subprocess, on a real SQLite file and a real PostgreSQL database
(the ``database_url`` fixture), with events published through the core beforehand.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import falcon.testing

from simplefeed.app import create_app
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

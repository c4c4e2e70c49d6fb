"""REDbot finds nothing above "info" in any kind of response the service gives.

REDbot (``redbot``) is lint for HTTP, from the dev extras. It runs through the shipped uWSGI
and through the shipped nginx block. The one note allowed is that ``Cache-Control: public`` is
probably unnecessary. Issue #12 accepts it, because ``public`` tells caches to store a response
to an authenticated request, which they would otherwise not do.

REDbot runs its own follow-up requests against each URL: conditional, Range and compression.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.test_routes import LOCATED_ID, Routes, routes  # noqa: F401 - the fixture

pytestmark = pytest.mark.e2e

ACCEPTED = {"STORE_PUBLIC_UNNECESSARY"}
FINE = {"good", "info"}

PATHS = [
    "/recent",
    "/pages/3",  # The working page.
    "/pages/1",  # An archived page.
    "/feeds/orders/pages/1",
    "/healthz",
    "/openapi.json",
    "/metrics",
    "/",  # The pages for people.
    "/feeds/orders",
    "/feeds/events?page=1",
    "/pages/99",  # A 404.
    "/pages/01",  # A 308 to /pages/1.
    f"/entries/{quote(LOCATED_ID, safe='')}",  # The entry locator, a 303 to an archived page.
    "/entries/tag%3Aexample.com%2C2026%3Anone",  # The entry locator, a 404.
]


def redbot() -> str:
    found = shutil.which("redbot") or str(Path(sys.executable).with_name("redbot"))
    if not Path(found).exists():
        pytest.fail("redbot is not installed: `pip install -e .[dev]` (scripts/setup) installs it")
    return found


def notes(url: str) -> list[dict[str, str]]:
    done = subprocess.run(
        [redbot(), "-o", "har", url], capture_output=True, text=True, timeout=120, check=True
    )
    har = json.loads(done.stdout)
    entries = har["log"]["entries"]
    assert entries, f"REDbot checked nothing at {url}: {done.stdout[:500]} {done.stderr[:500]}"
    return [note for entry in entries for note in entry.get("_red_messages", [])]


@pytest.mark.parametrize("route", ["uwsgi", "nginx"])
def test_redbot_finds_nothing_above_info(routes: Routes, route: str) -> None:  # noqa: F811
    base = routes.uwsgi.base_url if route == "uwsgi" else routes.nginx.url("")
    problems = {}
    for path in PATHS:
        found = notes(base + path)
        assert any(n["level"].lower() == "good" for n in found), (path, found)
        bad = [
            f"{n['level']} {n['note_id']}: {n['summary']}"
            for n in found
            if n["level"].lower() not in FINE and n["note_id"] not in ACCEPTED
        ]
        if bad:
            problems[path] = bad
    assert not problems, json.dumps(problems, indent=1)

"""The entry locator answers 303 to the permanent URL of the page that holds the entry.

The locator is ``GET /entries/{percent-encoded id}``, and ``/feeds/{feed}/entries/...``. Its
answer gives the entry's sequence number too. An entry without content links to it as its
alternate.
"""

from __future__ import annotations

from urllib.parse import quote

import falcon.testing
from lxml import etree

from simplefeed.model import ATOM_NS
from simplefeed.service import Simplefeed
from tests.conftest import FakeClock

BASE = "http://feeds.example.test"
PAGE_SIZE = 5  # As in the `settings` fixture.
YEAR = "public, max-age=31536000, immutable"
LIVE = "public, max-age=10"  # The `settings` fixture's recent_max_age.

#: Ids with every character percent-encoding must carry: '/', '?', '#', '%', '&', '+', ',',
#: non-ASCII.
ODD_IDS = [
    "https://example.com/a/b?x=1&y=a+b#frag",
    "tag:example.com,2025:orders/7%2F8",
    "urn:example:caf%C3%A9",
    "urn:uuid:6f1c2a4e-1d2b-4c3d-9e8f-0a1b2c3d4e5f",
]


def locator(entry_id: str, feed: str | None = None) -> str:
    prefix = "" if feed is None else f"/feeds/{feed}"
    return f"{prefix}/entries/{quote(entry_id, safe='')}"


def publish(
    client: falcon.testing.TestClient, events: list[dict[str, str]], feed: str = ""
) -> list[dict[str, object]]:
    path = f"/feeds/{feed}/entries" if feed else "/entries"
    result = client.simulate_post(path, json=events)
    assert result.status_code == 201, result.text
    entries: list[dict[str, object]] = result.json["entries"]
    return entries


def test_an_entry_is_located_on_its_page_before_and_after_it_freezes(
    client: falcon.testing.TestClient, clock: FakeClock
) -> None:
    replies = publish(client, [{"title": f"odd {i}", "id": i} for i in ODD_IDS])
    for reply in replies:
        result = client.simulate_get(locator(str(reply["id"])))
        assert result.status_code == 303, result.text
        assert result.headers["location"] == f"{BASE}/pages/1"
        assert result.headers["simplefeed-seq"] == str(reply["seq"])
        assert result.headers["cache-control"] == LIVE  # Page 1 is still the working page.
        assert result.content == b""
    clock.advance(1)
    publish(client, [{"title": "fills page 1"}, {"title": "on page 2"}])
    for reply in replies:
        result = client.simulate_get(locator(str(reply["id"])))
        assert result.status_code == 303
        assert result.headers["location"] == f"{BASE}/pages/1"
        assert result.headers["cache-control"] == YEAR  # Archived now.
    head = client.simulate_head(locator(ODD_IDS[0]))
    assert (head.status_code, head.headers["location"]) == (303, f"{BASE}/pages/1")
    options = client.simulate_options(locator(ODD_IDS[0]))
    assert (options.status_code, options.headers["allow"]) == (200, "GET, HEAD, OPTIONS")


def test_entries_of_named_feeds_and_unknown_ids(
    core: Simplefeed, client: falcon.testing.TestClient
) -> None:
    core.create_feed("orders")
    (reply,) = publish(client, [{"title": "in orders", "id": ODD_IDS[1]}], feed="orders")
    result = client.simulate_get(locator(ODD_IDS[1], "orders"))
    assert result.status_code == 303
    assert result.headers["location"] == f"{BASE}/feeds/orders/pages/1"
    assert result.headers["simplefeed-seq"] == str(reply["seq"])
    # Another feed's id, an unknown id and an unknown feed get 404 with the JSON error body.
    for path in (locator(ODD_IDS[1]), locator("urn:example:nothing"), locator("x", "nofeed")):
        missing = client.simulate_get(path)
        assert missing.status_code == 404, path
        assert missing.json["error"] == "not_found"
    # The default feed by name is the default feed. The locator is no document of its own.
    (default,) = publish(client, [{"title": "in events", "id": ODD_IDS[2]}])
    by_name = client.simulate_get(locator(ODD_IDS[2], "events"))
    assert (by_name.status_code, by_name.headers["location"]) == (303, f"{BASE}/pages/1")
    assert by_name.headers["simplefeed-seq"] == str(default["seq"])
    # POST /entries publishes. Other methods on a locator are refused with its Allow.
    refused = client.simulate_post(locator(ODD_IDS[2]))
    assert (refused.status_code, refused.headers["allow"]) == (405, "GET, HEAD, OPTIONS")


def test_the_alternate_link_of_an_entry_without_content_leads_to_its_page(
    client: falcon.testing.TestClient, clock: FakeClock
) -> None:
    events = [{"title": f"bare {i}", "id": i} for i in ODD_IDS] + [
        {"title": "with content", "content": "x"}
    ]
    publish(client, events)
    clock.advance(1)
    publish(client, [{"title": "bare on page 2"}])
    followed = 0
    for path in ("/pages/1", "/pages/2", "/recent"):
        document = etree.fromstring(client.simulate_get(path).content)
        for entry in document.iter(f"{{{ATOM_NS}}}entry"):
            entry_id = entry.findtext(f"{{{ATOM_NS}}}id")
            links = [
                link.get("href")
                for link in entry.iter(f"{{{ATOM_NS}}}link")
                if link.get("rel") == "alternate"
            ]
            if entry.find(f"{{{ATOM_NS}}}content") is not None:
                assert links == [], entry_id
                continue
            (href,) = links
            assert href == BASE + locator(str(entry_id))
            result = client.simulate_get(href.removeprefix(BASE))
            assert result.status_code == 303
            page = etree.fromstring(
                client.simulate_get(result.headers["location"].removeprefix(BASE)).content
            )
            ids = [e.findtext(f"{{{ATOM_NS}}}id") for e in page.iter(f"{{{ATOM_NS}}}entry")]
            assert entry_id in ids
            followed += 1
    assert followed == len(ODD_IDS) + 2  # Page 1's, and page 2's twice, as page and recent.

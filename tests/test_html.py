"""The pages for people (``GET /``, ``GET /feeds/{feed}``), in process.

The tests check what the pages show, and that nothing a producer sent can run in them. They
check that the Atom documents are untouched.
"""

from __future__ import annotations

import falcon.testing
import pytest

from simplefeed.app import create_app
from simplefeed.service import Simplefeed


@pytest.fixture
def app(core: Simplefeed, token: str) -> falcon.testing.TestClient:
    core.create_feed("orders", page_size=3)
    return falcon.testing.TestClient(
        create_app(core.settings, core=core), headers={"Authorization": f"Bearer {token}"}
    )


def publish(app: falcon.testing.TestClient, feed: str, events: list[dict[str, object]]) -> None:
    result = app.simulate_post(f"/feeds/{feed}/entries", json=events)
    assert result.status_code == 201, result.text


def test_index_lists_feeds_with_head_pages_and_entry_points(app: falcon.testing.TestClient) -> None:
    publish(app, "orders", [{"title": f"o{i}"} for i in range(4)])
    page = app.simulate_get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    html = page.text
    assert '<a href="/feeds/orders">orders</a>' in html
    assert "http://feeds.example.test/feeds/orders/recent" in html
    assert "http://feeds.example.test/feeds/orders/pages/2" in html  # The working page.
    assert "<script" not in html


def test_feed_page_shows_decoded_content_newest_first_and_escapes_everything(
    app: falcon.testing.TestClient,
) -> None:
    publish(
        app,
        "orders",
        [
            {"title": "json one", "content": {"order": 42, "items": ["a", "b"]}},
            {"title": "<b>bold</b> title", "content": "<p>hi <b>there</b></p>",
             "content_type": "html"},
            {"title": "text", "content": "plain & simple <script>alert(1)</script>"},
        ],
    )  # fmt: skip
    publish(app, "orders", [{"title": "newest"}])
    working = app.simulate_get("/feeds/orders")
    assert working.status_code == 200
    assert "newest" in working.text and "json one" not in working.text  # Page 2 only.
    assert "default-src 'none'" in working.headers["content-security-policy"]

    page1 = app.simulate_get("/feeds/orders", params={"page": "1"}).text
    assert page1.index("text") < page1.index("json one")  # Newest first.
    assert '"order": 42' in page1.replace("&#34;", '"')  # Pretty-printed JSON.
    assert "<script>" not in page1 and "<p>hi" not in page1  # Shown, never rendered.
    assert "&lt;p&gt;hi &lt;b&gt;there&lt;/b&gt;&lt;/p&gt;" in page1
    assert "&lt;b&gt;bold&lt;/b&gt; title" in page1
    assert "plain &amp; simple &lt;script&gt;alert(1)&lt;/script&gt;" in page1
    assert 'href="/feeds/orders?page=2"' in page1  # Newer.
    assert "?page=0" not in page1


def test_pages_for_people_leave_atom_alone(app: falcon.testing.TestClient) -> None:
    publish(app, "orders", [{"title": "x"}])
    atom = app.simulate_get("/feeds/orders/recent")
    assert atom.headers["content-type"] == "application/atom+xml; charset=utf-8"
    assert app.simulate_get("/feeds/missing").status_code == 404
    past = app.simulate_get("/feeds/orders", params={"page": "9"})
    assert (past.status_code, past.json["message"]) == (404, "feed 'orders' has pages 1 to 1")
    for malformed in ("0", "abc"):
        assert app.simulate_get("/feeds/orders", params={"page": malformed}).status_code == 400


BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.mark.parametrize(
    ("path", "params", "status", "message"),
    [
        ("/feeds/missing", {}, 404, "no feed named &#39;missing&#39;"),
        ("/feeds/orders", {"page": "9"}, 404, "feed &#39;orders&#39; has pages 1 to 1"),
        ("/feeds/orders", {"page": "abc"}, 400, "The value must be an integer."),
    ],
)
def test_a_browser_is_told_what_is_missing_in_a_page_others_in_json(
    app: falcon.testing.TestClient, path: str, params: dict[str, str], status: int, message: str
) -> None:
    """A browser is told what is missing in a page, and others in JSON.

    A person who follows a stale link to a feed's page must not get a JSON error in the
    browser.
    """
    publish(app, "orders", [{"title": "x"}])
    page = app.simulate_get(path, params=params, headers={"Accept": BROWSER_ACCEPT})
    assert page.status_code == status
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert message in page.text and 'href="/"' in page.text
    assert page.headers["vary"] == "Accept, Accept-Encoding"
    assert "default-src 'none'" in page.headers["content-security-policy"]
    for accept in ("*/*", "application/json", None):
        other = app.simulate_get(path, params=params, headers={"Accept": accept} if accept else {})
        assert other.status_code == status
        assert other.headers["content-type"] == "application/json"
        assert other.headers["vary"] == "Accept, Accept-Encoding"

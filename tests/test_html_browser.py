"""The pages for people work in a real browser.

Headless Chromium runs against a real uWSGI. It is Debian's, driven by Playwright from PyPI.
The page loads and shows a published event's title and content. Following "older" reaches
page 1. Screenshots are saved for people to look at. They go to the test's temporary
directory, or to SIMPLEFEED_SCREENSHOT_DIR when set.

Playwright's own browser downloads are not used. It launches /usr/bin/chromium (apt-get
install chromium). The test installs it when it is missing and we are root. Otherwise the
test skips and says why.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from bench.servers import UwsgiServer, ensure_debian_binary

pytestmark = pytest.mark.e2e

CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-extensions",
    "--no-first-run",
]


def test_feed_pages_in_headless_chromium(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = ensure_debian_binary("chromium", lambda: shutil.which("chromium"))
    shots = Path(os.environ.get("SIMPLEFEED_SCREENSHOT_DIR") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)

    with UwsgiServer.scratch(tmp_path, page_size=3) as s:
        events = [
            {"title": f"order {i} paid", "content": {"order": i, "amount": "9.99"}}
            for i in range(7)
        ]
        events.append(
            {"title": "a <script> in the title", "content": "<img src=x onerror=alert(1)>"}
        )  # fmt: skip
        s.publish(events)  # 8 entries. Pages 1-2 archived, 3 working.

        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 390, "height": 844})  # A phone.
                dialogs: list[str] = []
                page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

                page.goto(s.url("/"))
                assert page.locator("table").inner_text().count("events") == 1
                page.screenshot(path=str(shots / "index.png"), full_page=True)

                page.click("text=events")
                assert page.locator("h2").first.inner_text() == "a <script> in the title"
                assert "<img src=x onerror=alert(1)>" in page.locator("pre").first.inner_text()
                page.screenshot(path=str(shots / "feed-working-page.png"), full_page=True)

                for expected in (2, 1):
                    page.locator("a[rel=prev]").first.click()
                    assert page.url.endswith(f"?page={expected}")
                assert page.locator("h2").first.inner_text() == "order 2 paid"
                assert '"order": 0' in page.locator("pre").last.inner_text()
                assert page.locator("a[rel=prev]").count() == 0  # Page 1 is the oldest.
                page.screenshot(path=str(shots / "feed-page-1.png"), full_page=True)

                # A stale link gets a page for people. It says what is missing, and gives a
                # way back.
                missing = page.goto(s.url("/feeds/events?page=9"))
                assert missing is not None and missing.status == 404
                assert page.locator("p").nth(1).inner_text() == "feed 'events' has pages 1 to 3"
                page.click("text=Every feed")
                assert page.url == s.url("/")
                assert dialogs == []  # Nothing the producer sent ran.
            finally:
                browser.close()
    assert (shots / "feed-page-1.png").stat().st_size > 1000


def test_an_atom_document_in_headless_chromium_loads_and_runs_nothing(tmp_path: Path) -> None:
    """An Atom document in headless Chromium loads and runs nothing.

    Atom documents are for feed readers. A browser may show one in Chromium's XML viewer. It
    loads nothing the document names and runs nothing, because of the
    Content-Security-Policy and nosniff headers. The document is still shown.
    """
    import http.server
    import threading

    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = ensure_debian_binary("chromium", lambda: shutil.which("chromium"))
    fetched: list[str] = []

    class Pixel(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fetched.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    tracker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pixel)
    threading.Thread(target=tracker.serve_forever, daemon=True).start()
    pixel = f"http://127.0.0.1:{tracker.server_address[1]}/pixel.png"
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
        f'<image href="{pixel}" width="10" height="10"/></svg>'
    )
    try:
        with UwsgiServer.scratch(tmp_path, page_size=3) as s:
            reply = httpx.post(
                s.url("/entries"),
                json=[
                    {"title": "a picture", "content": svg, "content_type": "image/svg+xml"},
                    {"title": "order 1 paid"},
                ],
                headers={"Authorization": f"Bearer {s.token}"},
            )
            assert reply.status_code == 201, reply.text
            with sync_api.sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
                try:
                    page = browser.new_page()
                    for path in ("/recent", "/pages/1"):
                        shown = page.goto(s.url(path))
                        assert shown is not None and shown.status == 200
                        assert shown.headers["x-content-type-options"] == "nosniff"
                        assert "sandbox" in shown.headers["content-security-policy"]
                        page.wait_for_timeout(500)
                        assert "order 1 paid" in page.content(), path
                finally:
                    browser.close()
    finally:
        tracker.shutdown()
        tracker.server_close()
    assert fetched == []

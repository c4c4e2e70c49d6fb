"""Memory stays flat in the number of pages a consumer walks.

The test measures with tracemalloc, and takes no timings. The real app renders the documents
of two feeds once, and one feed is ten times longer than the other. A small WSGI app then
serves them from memory. So what tracemalloc sees allocated during the walk is the consumer's.
A first run over each feed walks back through every page to the first, and forward again. Its
peak must not grow with the number of pages. It must stay well below what holding the parsed
pages would take.

Bounded caches fill up over the first hundred-odd URLs a process sees. For example, the
standard library's ``urlsplit`` cache keeps 128, and httpx's cookie handling reaches it. That
would pass for growth between a short walk and a long one. So a first, untraced run over the
long feed fills them before anything is measured.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import falcon.testing
import httpx
import pytest
from lxml import etree

from simplefeed.app import create_app
from simplefeed.client import Consumer
from simplefeed.client.parse import Page, Parser, parse_page
from simplefeed.model import ATOM_NS, Event
from simplefeed.service import Simplefeed
from tests.conftest import FakeClock

BASE = "http://feeds.example.test"
PAGE_SIZE = 50
PAGES = 6  # The short feed. The long one has ten times as many.


@pytest.fixture
def database_url(tmp_path: Path, sqlite_template: Path) -> str:
    """Return a SQLite database only, because the documents matter here, not the database."""
    import shutil

    path = tmp_path / "simplefeed.sqlite3"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


class Served:
    """A WSGI app that answers fixed documents by path.

    Their bytes are built before tracing starts.
    """

    def __init__(self, docs: dict[str, bytes]) -> None:
        self.docs = docs

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        body = self.docs[environ["PATH_INFO"]]
        start_response(
            "200 OK",
            [("Content-Type", "application/atom+xml"), ("Content-Length", str(len(body)))],
        )
        return [body]


def build_feed(core: Simplefeed, name: str, pages: int, clock: FakeClock) -> dict[str, bytes]:
    """Publish ``pages`` full pages and two entries more to a new feed.

    Return its documents by path.
    """
    core.create_feed(name, page_size=PAGE_SIZE)
    for n in range(pages):
        clock.advance(1)
        core.publish(
            name,
            [
                Event(
                    title=f"order {n}-{i} placed",
                    # Heavy pages, since the peak is per page, not per feed. JSON goes as
                    # text, so a large value keeps them as heavy as Base64 with a summary.
                    content=json.dumps(
                        {"order": n * PAGE_SIZE + i, "lines": [{"sku": "A-1"}] * 8, "n": "x" * 400}
                    ),
                    content_type="application/json",
                )
                for i in range(PAGE_SIZE)
            ],
        )
    core.publish(name, [Event(title="one"), Event(title="two")])
    client = falcon.testing.TestClient(create_app(core.settings, core=core))
    docs: dict[str, bytes] = {}
    path: str | None = f"/feeds/{name}/recent"
    while path is not None:
        body = client.simulate_get(path).content
        docs[path] = body
        links = {
            str(el.get("rel")): str(el.get("href"))
            for el in etree.fromstring(body).iter(f"{{{ATOM_NS}}}link")
        }
        if path.endswith("/recent"):
            docs[links["via"][len(BASE) :]] = body  # The working page.
        prev = links.get("prev-archive")
        path = prev[len(BASE) :] if prev else None
    return docs


def peak_of_a_first_run(docs: dict[str, bytes], name: str, state: Path, parser: Parser) -> int:
    """Return the bytes allocated at the peak of a first run, above what was there before."""
    app = Served(docs)
    count = 0

    def handle(_: object) -> None:
        nonlocal count
        count += 1

    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        with Consumer(
            f"{BASE}/feeds/{name}/recent",
            state,
            transport=httpx.WSGITransport(app=app),
            checkpoint_every="page",
            parser=parser,
        ) as consumer:
            consumer.run(handle)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == (len(docs) - 2) * PAGE_SIZE + 2
    return peak - before


def warm_up(docs: dict[str, bytes], name: str, state: Path, parser: Parser) -> None:
    with Consumer(
        f"{BASE}/feeds/{name}/recent",
        state,
        transport=httpx.WSGITransport(app=Served(docs)),
        checkpoint_every="page",
        parser=parser,
    ) as consumer:
        consumer.run(lambda _: None)


def held(docs: dict[str, bytes], parser: Parser) -> int:
    """Return what holding every parsed page takes.

    A walk that does not read outlines would hold them all.
    """
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        pages: list[Page] = [parse_page(path, body, parser=parser) for path, body in docs.items()]
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert pages
    return after - before


@pytest.mark.parametrize("parser", ["feedparser", "lxml"])
def test_a_first_run_takes_as_much_memory_for_ten_times_the_pages(
    core: Simplefeed, clock: FakeClock, tmp_path: Path, parser: Parser
) -> None:
    short = build_feed(core, "short", PAGES, clock)
    long = build_feed(core, "long", 10 * PAGES, clock)
    assert len(long) - 2 == 10 * (len(short) - 2)
    warm_up(long, "long", tmp_path / "warm.sqlite3", parser)
    # A walk's peak is its highest moment, and a short walk has few moments. About one run in
    # ten of the short feed peaks before the page read ahead overlaps the page being handled.
    # It then peaks at 3.5 parsed pages' worth instead of 4.8. The long walk always meets that
    # moment, at 5.0-5.4. So the short feed's peak is the highest of three runs.
    peak_short = max(
        peak_of_a_first_run(short, "short", tmp_path / f"short-{run}.sqlite3", parser)
        for run in range(3)
    )
    peak_long = peak_of_a_first_run(long, "long", tmp_path / "long.sqlite3", parser)
    # Flat: ten times the pages give about the same peak. The walk holds one page at a time,
    # and a bounded trail.
    assert peak_long < 1.25 * peak_short, (peak_short, peak_long)
    # And far below holding every page of the long feed, which has ten times the short one's.
    holding_all = 10 * held(short, parser)
    assert peak_long < holding_all / 3, (peak_long, holding_all)

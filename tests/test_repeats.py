"""Plain polls of a live document are answered again in front of the app.

simplefeed.app.repeats does this. Each answer is the app's own. Each request counts one access
line and one read. No answer is of a version the feed has left. The tests run in-process on
both databases, with the real store.
"""

from __future__ import annotations

import itertools
from typing import Any

import falcon.testing
import pytest

from simplefeed import metrics
from simplefeed.app import create_app
from simplefeed.app.repeats import Repeats
from simplefeed.model import Event
from simplefeed.service import Simplefeed
from tests.conftest import FakeClock

#: Headers each answer has of its own.
OWN = ("date", "x-request-id")


class Front:
    """The app as served, and the number of requests that reach falcon behind Repeats."""

    def __init__(self, core: Simplefeed, monkeypatch: pytest.MonkeyPatch) -> None:
        app = create_app(core.settings, core=core)
        self.client = falcon.testing.TestClient(app)
        repeats = app.app  # type: ignore[attr-defined]
        assert isinstance(repeats, Repeats)
        self.asked = 0
        real = repeats.app

        def counted(*args: Any) -> Any:
            self.asked += 1
            return real(*args)

        monkeypatch.setattr(repeats, "app", counted)

    def get(self, path: str, headers: dict[str, str], method: str = "GET") -> Any:
        return self.client.simulate_request(method, path, headers=headers)


@pytest.fixture
def front(core: Simplefeed, monkeypatch: pytest.MonkeyPatch) -> Front:
    core.create_feed("other")
    return Front(core, monkeypatch)


def publish(core: Simplefeed, feed: str = "events", n: int = 3) -> None:
    core.publish(feed, [Event(title=f"t{i}", content="some text") for i in range(n)])


def same(a: Any, b: Any) -> None:
    assert a.status_code == b.status_code
    assert a.content == b.content
    assert {k: v for k, v in a.headers.items() if k not in OWN} == {
        k: v for k, v in b.headers.items() if k not in OWN
    }
    assert "date" in b.headers and "x-request-id" in b.headers


CODINGS = ["", "gzip", "br", "identity", "gzip;q=0, identity", "deflate, gzip;q=0.5"]


@pytest.mark.parametrize("path", ["/recent", "/pages/1", "/feeds/other/recent"])
def test_a_poll_asked_again_is_the_app_s_answer(
    front: Front, core: Simplefeed, clock: FakeClock, path: str
) -> None:
    """A poll asked again gets the app's answer.

    The ways of asking vary the method, the coding, and If-None-Match: current, stale, a list
    or ``*``. Each is answered the second time in front of the app. The answer has the app's
    status, body and headers.
    """
    publish(core)
    publish(core, "other")
    clock.advance(2)  # Last-Modified settles.
    current = {c: front.get(path, {"Accept-Encoding": c}).headers["etag"] for c in CODINGS}
    asked = front.asked
    tags = ["", '"r1-stale"', "*", *set(current.values())]
    tags.append(", ".join(['"x"', *current.values()]))
    ways = list(itertools.product(["GET", "HEAD"], CODINGS, tags))
    firsts = {}
    for method, coding, tag in ways:
        headers = {"Accept-Encoding": coding, **({"If-None-Match": tag} if tag else {})}
        firsts[(method, coding, tag)] = front.get(path, headers, method)
    assert front.asked > asked
    asked = front.asked
    for method, coding, tag in ways:
        headers = {"Accept-Encoding": coding, **({"If-None-Match": tag} if tag else {})}
        same(firsts[(method, coding, tag)], front.get(path, headers, method))
    # Sixteen ways of asking per document are kept; the others are asked of the app each time.
    assert front.asked - asked == max(0, len(ways) - 16)


def test_a_publish_ends_the_answers_of_the_version_it_left(
    front: Front, core: Simplefeed, clock: FakeClock
) -> None:
    publish(core)
    clock.advance(2)
    first = front.get("/recent", {})
    etag = first.headers["etag"]
    assert front.get("/recent", {"If-None-Match": etag}).status_code == 304
    assert front.get("/recent", {"If-None-Match": etag}).status_code == 304
    asked = front.asked
    publish(core)
    clock.advance(2)
    r = front.get("/recent", {"If-None-Match": etag})
    assert r.status_code == 200 and r.headers["etag"] != etag
    assert b"<sf:seq>6</sf:seq>" in r.content
    assert front.asked == asked + 1


def test_nothing_is_kept_while_last_modified_is_not_final(
    front: Front, core: Simplefeed, clock: FakeClock
) -> None:
    """Nothing is kept while Last-Modified is not final.

    In the second of the last change, the app leaves Last-Modified out. Once that second is
    over, the app sends it, so those earlier answers are not given again.
    """
    publish(core)
    asked = front.asked
    early = [front.get("/recent", {}) for _ in range(3)]
    assert front.asked == asked + 3 and all("last-modified" not in r.headers for r in early)
    clock.advance(2)
    late = [front.get("/recent", {}) for _ in range(3)]
    assert front.asked == asked + 4 and all("last-modified" in r.headers for r in late)


@pytest.mark.parametrize(
    "headers,query",
    [
        ({"Prefer": "wait=1"}, ""),
        ({"If-Match": "*"}, ""),
        ({"If-Unmodified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"}, ""),
        ({"If-Modified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"}, ""),
        ({}, "x=1"),
        ({"Content-Length": "2"}, ""),
        ({"X-Many": "y" * 20_000}, ""),
    ],
)
def test_what_could_change_the_answer_goes_to_the_app(
    front: Front, core: Simplefeed, clock: FakeClock, headers: dict[str, str], query: str
) -> None:
    publish(core)
    clock.advance(2)
    etag = front.get("/recent", {}).headers["etag"]
    front.get("/recent", {"If-None-Match": etag})
    asked = front.asked
    # If-Modified-Since decides only without If-None-Match (RFC 9110 13.1.3).
    asking = headers if "If-Modified-Since" in headers else {"If-None-Match": etag, **headers}
    for _ in range(2):
        front.client.simulate_get(
            "/recent",
            headers=asking,
            query_string=query,
            body=b"{}" if "Content-Length" in headers else None,
        )
    assert front.asked == asked + 2


def test_each_answer_given_again_has_its_access_line_and_its_count(
    front: Front, core: Simplefeed, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    publish(core)
    clock.advance(2)
    etag = front.get("/recent", {}).headers["etag"]
    front.get("/recent", {"If-None-Match": etag})
    counted = metrics.READS.labels("recent", "304")._value.get()
    caplog.set_level("INFO", logger="simplefeed.access")
    asked = front.asked
    answers = [front.get("/recent", {"If-None-Match": etag}) for _ in range(5)]
    assert front.asked == asked
    assert metrics.READS.labels("recent", "304")._value.get() == counted + 5
    lines = [rec for rec in caplog.records if rec.name == "simplefeed.access"]
    assert len(lines) == 5 and len({r.headers["x-request-id"] for r in answers}) == 5
    for rec in lines:
        fields = rec.fields  # type: ignore[attr-defined]
        assert fields["status"] == 304 and fields["path"] == "/recent"
        assert fields["feed"] == "events" and fields["bytes"] == 0

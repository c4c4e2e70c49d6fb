"""HTTP semantics of the app (RFC 9110).

The tests cover Date, conditional requests, HEAD, OPTIONS, and one URL per document. They run
in-process over real databases. tests/test_routes.py asks the same of the shipped uWSGI and
nginx routes.
"""

from __future__ import annotations

import calendar

import falcon.testing
import pytest

from simplefeed.app import preconditions
from simplefeed.service import Simplefeed
from tests.conftest import FakeClock

Client = falcon.testing.TestClient

NOW_S = calendar.timegm((2027, 1, 15, 8, 0, 0))  # tests.conftest.START_US


@pytest.mark.parametrize(
    "value,expected",
    [
        ("Sun, 06 Nov 1994 08:49:37 GMT", 784111777),
        ("Sunday, 06-Nov-94 08:49:37 GMT", 784111777),
        ("Sun Nov  6 08:49:37 1994", 784111777),
        ("Thu, 14 Jan 2027 08:00:00 GMT", NOW_S - 86400),
        ("Thursday, 14-Jan-27 08:00:00 GMT", NOW_S - 86400),
        # RFC 850 two-digit years. More than 50 years ahead means the past century.
        ("Friday, 14-Jan-77 08:00:00 GMT", calendar.timegm((2077, 1, 14, 8, 0, 0))),
        ("Tuesday, 14-Jan-78 08:00:00 GMT", calendar.timegm((1978, 1, 14, 8, 0, 0))),
        (" Sun, 06 Nov 1994 08:49:37 GMT ", 784111777),
        ("Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:38 GMT", None),
        ("Sun, 06 Nov 1994 08:49:37 UTC", None),
        ("Sun, 31 Feb 1994 08:49:37 GMT", None),
        ("Sun, 06 Nov 1994 25:49:37 GMT", None),
        ("yesterday", None),
        ("", None),
        ("1994-11-06T08:49:37Z", None),
        # DIGIT is ASCII (RFC 5234), so other scripts' digits are no date.
        ("Sun, \u0660\u0666 Nov 1994 08:49:37 GMT", None),
        ("Sun Nov  \uff16 08:49:37 1994", None),
    ],
)
def test_http_dates(value: str, expected: int | None) -> None:
    assert preconditions.parse_http_date(value, NOW_S) == expected


@pytest.mark.parametrize(
    "header,tags",
    [
        ('"a"', [(False, "a")]),
        ('W/"a", "b"', [(True, "a"), (False, "b")]),
        (' "a" ,, "b" ', [(False, "a"), (False, "b")]),
        ('"a', None),
        ("a", None),
        ('"a" "b"', None),
    ],
)
def test_entity_tag_lists(header: str, tags: list[tuple[bool, str]] | None) -> None:
    assert preconditions.entity_tags(header) == tags


ETAG = '"abc"'
MODIFIED = NOW_S - 100
EARLIER = "Fri, 15 Jan 2027 07:58:19 GMT"  # MODIFIED - 1
AT = "Fri, 15 Jan 2027 07:58:20 GMT"  # MODIFIED
LATER = "Fri, 15 Jan 2027 07:58:21 GMT"


@pytest.mark.parametrize(
    "headers,expected",
    [
        ({}, None),
        ({"HTTP_IF_NONE_MATCH": ETAG}, 304),
        ({"HTTP_IF_NONE_MATCH": 'W/"abc"'}, 304),
        ({"HTTP_IF_NONE_MATCH": '"x", "abc"'}, 304),
        ({"HTTP_IF_NONE_MATCH": "*"}, 304),
        ({"HTTP_IF_NONE_MATCH": '"x"'}, None),
        ({"HTTP_IF_MODIFIED_SINCE": AT}, 304),
        ({"HTTP_IF_MODIFIED_SINCE": LATER}, 304),
        ({"HTTP_IF_MODIFIED_SINCE": EARLIER}, None),
        ({"HTTP_IF_MODIFIED_SINCE": "garbage"}, None),
        ({"HTTP_IF_MODIFIED_SINCE": f"{AT}, {LATER}"}, None),
        # With If-None-Match present, If-Modified-Since is not evaluated (13.2.2 step 3/4).
        ({"HTTP_IF_NONE_MATCH": '"x"', "HTTP_IF_MODIFIED_SINCE": LATER}, None),
        ({"HTTP_IF_NONE_MATCH": ETAG, "HTTP_IF_MODIFIED_SINCE": EARLIER}, 304),
        ({"HTTP_IF_MATCH": ETAG}, None),
        ({"HTTP_IF_MATCH": "*"}, None),
        ({"HTTP_IF_MATCH": '"x"'}, 412),
        ({"HTTP_IF_MATCH": 'W/"abc"'}, 412),  # Strong comparison.
        ({"HTTP_IF_MATCH": "not a tag"}, 412),
        ({"HTTP_IF_UNMODIFIED_SINCE": AT}, None),
        ({"HTTP_IF_UNMODIFIED_SINCE": EARLIER}, 412),
        ({"HTTP_IF_UNMODIFIED_SINCE": "garbage"}, None),
        # With If-Match present, If-Unmodified-Since is not evaluated (13.2.2 step 1/2).
        ({"HTTP_IF_MATCH": ETAG, "HTTP_IF_UNMODIFIED_SINCE": EARLIER}, None),
        # Preconditions failing come before "not modified".
        ({"HTTP_IF_MATCH": '"x"', "HTTP_IF_NONE_MATCH": ETAG}, 412),
        ({"HTTP_IF_UNMODIFIED_SINCE": EARLIER, "HTTP_IF_NONE_MATCH": ETAG}, 412),
        ({"HTTP_IF_MATCH": ETAG, "HTTP_IF_NONE_MATCH": ETAG}, 304),
    ],
)
def test_evaluation_order(headers: dict[str, str], expected: int | None) -> None:
    assert preconditions.evaluate(headers, ETAG, MODIFIED, settled=True, now_s=NOW_S) == expected


def test_a_second_still_running_is_no_validator() -> None:
    env = {"HTTP_IF_MODIFIED_SINCE": AT}
    assert preconditions.evaluate(env, ETAG, MODIFIED, settled=False, now_s=NOW_S) is None
    # A change may still follow within AT's second. So it is unmodified since LATER, not AT.
    env = {"HTTP_IF_UNMODIFIED_SINCE": AT}
    assert preconditions.evaluate(env, ETAG, MODIFIED, settled=False, now_s=NOW_S) == 412
    env = {"HTTP_IF_UNMODIFIED_SINCE": LATER}
    assert preconditions.evaluate(env, ETAG, MODIFIED, settled=False, now_s=NOW_S) is None


# -- the app -----------------------------------------------------------------------------------


@pytest.fixture
def feed(client: Client, clock: FakeClock) -> Client:
    """Return a client with seven events, all in a past second.

    Page 1 is archived, and page 2 is the working page.
    """
    r = client.simulate_post("/entries", json=[{"title": f"e{i}"} for i in range(7)])
    assert r.status_code == 201
    clock.advance(5)
    return client


DOCUMENTS = ["/recent", "/pages/1", "/pages/2"]


def test_date_on_every_response(feed: Client, clock: FakeClock) -> None:
    date = "Fri, 15 Jan 2027 08:00:05 GMT"
    etag = feed.simulate_get("/recent").headers["etag"]
    for r in [
        feed.simulate_get("/recent"),
        feed.simulate_get("/recent", headers={"If-None-Match": etag}),
        feed.simulate_head("/pages/1"),
        feed.simulate_get("/pages/2"),
        feed.simulate_get("/healthz"),
        feed.simulate_get("/openapi.json"),
        feed.simulate_get("/nothing"),
        feed.simulate_delete("/recent"),
        feed.simulate_options("/recent"),
        feed.simulate_get("/recent", headers={"If-Match": '"other"'}),
        feed.simulate_post("/entries", json={"title": "x"}),
    ]:
        assert r.headers["date"] == date, r.status


@pytest.mark.parametrize("path", DOCUMENTS)
def test_conditional_requests_on_documents(feed: Client, path: str) -> None:
    r = feed.simulate_get(path)
    etag, last_modified = r.headers["etag"], r.headers["last-modified"]
    cases: list[tuple[dict[str, str], int]] = [
        ({"If-None-Match": etag}, 304),
        ({"If-None-Match": "*"}, 304),
        ({"If-None-Match": '"other"'}, 200),
        ({"If-Modified-Since": last_modified}, 304),
        ({"If-Modified-Since": "not a date"}, 200),
        ({"If-Modified-Since": f"{last_modified}, {last_modified}"}, 200),
        ({"If-Modified-Since": "Friday, 15-Jan-27 08:00:00 GMT"}, 304),
        ({"If-Modified-Since": "Fri Jan 15 08:00:00 2027"}, 304),
        ({"If-Modified-Since": "Fri Jan 15 07:00:00 2027"}, 200),
        ({"If-Match": etag}, 200),
        ({"If-Match": '"other"'}, 412),
        ({"If-Unmodified-Since": last_modified}, 200),
        ({"If-Unmodified-Since": "Fri, 15 Jan 2027 07:00:00 GMT"}, 412),
        ({"If-Unmodified-Since": "nonsense"}, 200),
    ]
    for method in ("GET", "HEAD"):
        for headers, status in cases:
            got = feed.simulate_request(method, path, headers=headers)
            assert got.status_code == status, (method, headers)
            if status in (200, 304):
                assert got.headers["etag"] == etag
                assert got.headers["last-modified"] == last_modified
                assert got.headers["cache-control"] == r.headers["cache-control"]
            else:
                assert got.headers["cache-control"] == "no-store"
                if method == "GET":
                    assert got.json["error"] == "precondition_failed"
            if status == 304 or method == "HEAD":
                assert got.content == b""


def test_head_wherever_get(feed: Client) -> None:
    for path in [*DOCUMENTS, "/healthz", "/openapi.json", "/feeds/events/recent", "/pages/01"]:
        get, head = feed.simulate_get(path), feed.simulate_head(path)
        assert head.status_code == get.status_code, path
        assert head.content == b""
        for name in ("content-type", "etag", "cache-control", "location"):
            assert head.headers.get(name) == get.headers.get(name), (path, name)


@pytest.mark.parametrize(
    "path,allow",
    [
        ("/recent", "GET, HEAD, OPTIONS"),
        ("/pages/1", "GET, HEAD, OPTIONS"),
        ("/pages/2", "GET, HEAD, OPTIONS"),
        ("/healthz", "GET, HEAD, OPTIONS"),
        ("/openapi.json", "GET, HEAD, OPTIONS"),
        ("/entries", "OPTIONS, POST"),
    ],
)
def test_options_and_405_allow_the_same(feed: Client, path: str, allow: str) -> None:
    options = feed.simulate_options(path)
    assert options.status_code == 200 and options.content == b""
    assert options.headers["allow"] == allow
    refused = feed.simulate_request("PUT", path)
    assert refused.status_code == 405
    assert refused.headers["allow"] == allow


def test_options_on_what_does_not_exist_is_404(feed: Client, core: Simplefeed) -> None:
    core.create_feed("orders")
    assert feed.simulate_options("/feeds/orders/recent").status_code == 200
    assert feed.simulate_options("/feeds/orders/entries").status_code == 200
    for path in ["/feeds/nope/recent", "/feeds/nope/pages/1", "/feeds/nope/entries", "/pages/3"]:
        r = feed.simulate_options(path)
        assert r.status_code == 404, path
        assert r.json["error"] == "not_found"


@pytest.mark.parametrize(
    "path,location",
    [
        ("/pages/01", "http://feeds.example.test/pages/1"),
        ("/pages/0002", "http://feeds.example.test/pages/2"),
        ("/feeds/events/recent", "http://feeds.example.test/recent"),
        ("/feeds/events/pages/1", "http://feeds.example.test/pages/1"),
        ("/feeds/events/pages/01", "http://feeds.example.test/pages/1"),
    ],
)
def test_aliases_redirect_to_the_one_url(feed: Client, path: str, location: str) -> None:
    r = feed.simulate_get(path)
    assert r.status_code == 308
    assert r.headers["location"] == location
    assert "etag" not in r.headers and b"<feed" not in r.content


@pytest.mark.parametrize(
    "path",
    [
        "/pages/+1",
        "/pages/%EF%BC%91",  # A fullwidth digit one.
        "/pages/\uff11",
        "/pages/1_0",
        "/pages/1.0",
        "/pages/ 1",
        "/pages/0",
        "/pages/-1",
        "/pages/0x1",
        "/pages/1234567890123456789",
        "//recent",
        "//pages/1",
        "/feeds//recent",
    ],
)
def test_no_other_spelling_serves_a_document(feed: Client, path: str) -> None:
    r = feed.simulate_get(path)
    assert r.status_code == 404, r.status
    assert r.json["error"] == "not_found"


def test_page_zero_is_refused_for_what_it_is(feed: Client) -> None:
    """Page zero is refused for what it is.

    It is not "not a page number (decimal digits, no leading zero)", since 0 breaks neither
    rule.
    """
    assert feed.simulate_get("/pages/0").json["message"] == (
        "'0' is not a page number (pages are numbered from 1, in decimal digits)"
    )


def test_publishing_to_the_default_feed_by_name_still_works(feed: Client) -> None:
    r = feed.simulate_post("/feeds/events/entries", json={"title": "by name"})
    assert r.status_code == 201
    assert r.json["url"] == "http://feeds.example.test/pages/2"


@pytest.mark.parametrize(
    "path,headers,status",
    [
        ("/recent?" + "a" * 8200, {}, 414),
        ("/recent", {"X-Big": "a" * 16400}, 431),
        ("/recent", {f"X-Many-{i}": "a" for i in range(101)}, 431),
        ("/recent?" + "a" * 8000, {f"X-Many-{i}": "a" * 100 for i in range(90)}, 200),
    ],
    ids=["long target", "one long field", "many fields", "within both limits"],
)
def test_request_heads_over_the_limits(
    feed: Client, path: str, headers: dict[str, str], status: int
) -> None:
    target, _, query = path.partition("?")
    r = feed.simulate_get(target, query_string=query, headers=headers)
    assert r.status_code == status
    if status != 200:
        assert r.json["error"] in ("uri_too_long", "request_header_fields_too_large")
        assert r.headers["cache-control"] == "no-store"

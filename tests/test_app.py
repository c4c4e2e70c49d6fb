"""The HTTP app in-process (falcon TestClient) over real databases.

The tests cover documents, caching and errors.
"""

from __future__ import annotations

import json
from typing import Any

import falcon.testing
import pytest

from simplefeed.app import create_app, openapi
from simplefeed.service import Live, Simplefeed
from tests.conftest import FakeClock
from tests.markdown import doc_text, table_after

Client = falcon.testing.TestClient
ATOM = "application/atom+xml; charset=utf-8"


def post(client: Client, body: Any, path: str = "/entries") -> falcon.testing.Result:
    return client.simulate_post(path, json=body)


def state(client: Client, core: Simplefeed) -> tuple[Any, ...]:
    """Return everything a rejected request must leave as it was."""
    feed = core.feed("events")
    recent = client.simulate_get("/recent")
    files = sorted(
        (str(p), p.read_bytes()) for p in core.settings.archive_dir.rglob("*") if p.is_file()
    )
    return feed, recent.headers.get("etag"), recent.content, files


def test_publish_one_event(client: Client) -> None:
    r = post(client, {"title": "hello", "content": "world"})
    assert r.status_code == 201
    assert r.json == {
        "id": "urn:uuid:00000000-0000-0000-0000-000000000002",
        "seq": 1,
        "page": 1,
        "url": "http://feeds.example.test/pages/1",
        "created": True,
    }
    assert r.headers["location"] == "http://feeds.example.test/pages/1"


def test_publish_a_batch_and_replays(client: Client) -> None:
    batch = [{"title": f"e{i}", "id": f"urn:test:{i}"} for i in range(3)]
    r = post(client, batch)
    assert r.status_code == 201
    assert [(e["seq"], e["created"]) for e in r.json["entries"]] == [
        (1, True),
        (2, True),
        (3, True),
    ]
    r = post(client, batch)
    assert r.status_code == 200
    assert [(e["seq"], e["created"]) for e in r.json["entries"]] == [
        (1, False),
        (2, False),
        (3, False),
    ]
    r = post(client, batch[1])
    assert r.status_code == 200 and r.json["seq"] == 2 and r.json["created"] is False
    r = post(client, [*batch, {"title": "new"}])
    assert r.status_code == 201
    assert [e["created"] for e in r.json["entries"]] == [False, False, False, True]


def test_a_retry_that_names_the_default_content_type_or_drops_it_is_a_replay(
    client: Client,
) -> None:
    """A retry that names the default content type, or drops it, is a replay.

    Both render `<content type="text">`, so `content_type: "text"` sent and then left out is
    not a 409. This runs through the app on each backend. On PostgreSQL, the one-round-trip
    append hands an id it holds to the ordinary way.
    """
    first = {"title": "t", "content": "hi", "content_type": "text", "id": "urn:test:t"}
    assert post(client, first).status_code == 201
    without = {k: v for k, v in first.items() if k != "content_type"}
    for retry in (without, {**first, "content_type": "text/plain"}, [without, first]):
        r = post(client, retry)
        assert r.status_code == 200, r.text
    html = {"title": "h", "content": "<b>x</b>", "content_type": "text/html", "id": "urn:test:h"}
    assert post(client, html).status_code == 201
    assert post(client, {**html, "content_type": "html"}).status_code == 200
    assert post(client, {**html, "content_type": "text"}).status_code == 409
    assert client.simulate_get("/recent").text.count("<entry>") == 2


def test_recent_document_headers(client: Client, clock: FakeClock) -> None:
    post(client, {"title": "one"})
    r = client.simulate_get("/recent")
    assert r.status_code == 200
    assert r.headers["content-type"] == ATOM
    assert r.headers["cache-control"] == "public, max-age=10"
    assert r.headers["etag"].startswith('"')
    # Modified in the current second, so Last-Modified would not be a safe validator yet.
    assert "last-modified" not in r.headers
    clock.advance(1)
    r2 = client.simulate_get("/recent")
    assert r2.headers["etag"] == r.headers["etag"]
    assert r2.headers["last-modified"] == "Fri, 15 Jan 2027 08:00:00 GMT"
    assert r2.content == r.content
    head = client.simulate_head("/recent")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["etag"] == r.headers["etag"]


def test_conditional_get_of_recent(client: Client, clock: FakeClock) -> None:
    post(client, {"title": "one"})
    clock.advance(2)
    r = client.simulate_get("/recent")
    etag, last_modified = r.headers["etag"], r.headers["last-modified"]
    r304 = client.simulate_get("/recent", headers={"If-None-Match": etag})
    assert r304.status_code == 304 and r304.content == b""
    assert r304.headers["etag"] == etag
    assert r304.headers["cache-control"] == "public, max-age=10"
    assert client.simulate_get("/recent", headers={"If-None-Match": f"W/{etag}"}).status_code == 304
    ims = client.simulate_get("/recent", headers={"If-Modified-Since": last_modified})
    assert ims.status_code == 304
    post(client, {"title": "two"})
    r2 = client.simulate_get("/recent", headers={"If-None-Match": etag})
    assert r2.status_code == 200 and r2.headers["etag"] != etag
    clock.advance(2)
    r3 = client.simulate_get("/recent", headers={"If-Modified-Since": last_modified})
    assert r3.status_code == 200


class CountingCore(Simplefeed):
    renders = 0

    def live_body(self, live: Live) -> bytes:
        CountingCore.renders += 1
        return super().live_body(live)


def test_304_on_recent_renders_nothing(core: Simplefeed, clock: FakeClock, token: str) -> None:
    counting = CountingCore(core.settings, store=core.store, clock=clock)
    client = falcon.testing.TestClient(
        create_app(core.settings, core=counting), headers={"Authorization": f"Bearer {token}"}
    )
    post(client, {"title": "one"})
    etag = client.simulate_get("/recent").headers["etag"]
    CountingCore.renders = 0
    for _ in range(5):
        assert client.simulate_get("/recent", headers={"If-None-Match": etag}).status_code == 304
    assert CountingCore.renders == 0


def test_archived_and_working_pages(client: Client, core: Simplefeed, clock: FakeClock) -> None:
    post(client, [{"title": f"e{i}"} for i in range(7)])
    clock.advance(5)
    page1 = client.simulate_get("/pages/1")
    assert page1.status_code == 200
    assert page1.headers["content-type"] == ATOM
    assert page1.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert page1.headers["last-modified"] == "Fri, 15 Jan 2027 08:00:00 GMT"
    assert page1.content == core.page_path("events", 1).read_bytes()
    assert (
        client.simulate_get(
            "/pages/1", headers={"If-None-Match": page1.headers["etag"]}
        ).status_code
        == 304
    )
    assert (
        client.simulate_get(
            "/pages/1", headers={"If-Modified-Since": page1.headers["last-modified"]}
        ).status_code
        == 304
    )
    working = client.simulate_get("/pages/2")
    assert working.headers["cache-control"] == "public, max-age=10"
    assert b'rel="current"' in working.content and b"fh:archive" not in working.content
    recent = client.simulate_get("/recent")
    assert b'href="http://feeds.example.test/pages/2" rel="via"' in recent.content
    assert client.simulate_head("/pages/1").content == b""
    assert client.simulate_get("/pages/3").status_code == 404


def test_links_come_from_the_base_url_not_the_host_header(client: Client) -> None:
    post(client, [{"title": f"e{i}"} for i in range(5)])
    a = client.simulate_get("/pages/1", headers={"Host": "evil.test"})
    b = client.simulate_get("/recent", headers={"Host": "evil.test", "X-Forwarded-Host": "x"})
    assert b"evil.test" not in a.content + b.content
    assert b"http://feeds.example.test/" in a.content


def test_named_feeds(client: Client, core: Simplefeed) -> None:
    core.create_feed("orders", page_size=2)
    r = post(client, [{"title": "a"}, {"title": "b"}, {"title": "c"}], "/feeds/orders/entries")
    assert r.status_code == 201
    assert r.json["entries"][2]["url"] == "http://feeds.example.test/feeds/orders/pages/2"
    page = client.simulate_get("/feeds/orders/pages/1")
    assert page.status_code == 200
    assert b"http://feeds.example.test/feeds/orders/recent" in page.content
    assert client.simulate_get("/feeds/orders/recent").status_code == 200
    assert client.simulate_get("/recent").content.count(b"<entry>") == 0


def test_healthz(client: Client) -> None:
    r = client.simulate_get("/healthz")
    assert r.status_code == 200 and r.json["status"] == "ok"


DOCTYPE_XML = '<!DOCTYPE a [<!ENTITY e "x">]><a>&e;</a>'


def _bad_requests() -> list[tuple[str, dict[str, Any], int, str]]:
    """Return (name, simulate_post kwargs, status, a word the message must contain)."""
    j = {"Content-Type": "application/json"}
    return [
        ("malformed JSON", {"body": b'{"title": ', "headers": j}, 400, "JSON"),
        ("invalid UTF-8", {"body": b'{"title": "\xff\xfe"}', "headers": j}, 400, "UTF-8"),
        (
            "text/plain",
            {"body": b'{"title": "x"}', "headers": {"Content-Type": "text/plain"}},
            415,
            "Content-Type",
        ),
        ("no Content-Type", {"body": b'{"title": "x"}'}, 415, "Content-Type"),
        (
            "latin-1 charset",
            {
                "body": b'{"title": "x"}',
                "headers": {"Content-Type": "application/json; charset=latin-1"},
            },
            415,
            "UTF-8",
        ),
        ("missing title", {"json": {"content": "x"}}, 422, "title"),
        ("title wrong type", {"json": {"title": 5}}, 422, "title"),
        ("unknown field", {"json": {"title": "x", "colour": "red"}}, 422, "colour"),
        ("empty title", {"json": {"title": "  "}}, 422, "title"),
        ("control character", {"json": {"title": "a\u0001b"}}, 422, "U+0001"),
        ("NUL", {"json": {"title": "ok", "summary": "a\u0000"}}, 422, "U+0000"),
        ("lone surrogate", {"body": b'{"title": "\\ud800"}', "headers": j}, 422, "U+D800"),
        ("id not a URI", {"json": {"title": "x", "id": "not an iri"}}, 422, "URI"),
        ("relative id", {"json": {"title": "x", "id": "/just/a/path"}}, 422, "URI"),
        (
            "naive updated",
            {"json": {"title": "x", "updated": "2026-01-01T00:00:00"}},
            422,
            "updated",
        ),
        (
            "far-future updated",
            {"json": {"title": "x", "updated": "2099-01-01T00:00:00Z"}},
            422,
            "future",
        ),
        ("not an object", {"json": "hello"}, 422, "object"),
        ("empty batch", {"json": []}, 422, "batch"),
        (
            "bad element in batch",
            {"json": [{"title": "ok"}, {"title": "ok"}, {"nope": 1}]},
            422,
            "[2]",
        ),
        (
            "XML content not well-formed",
            {"json": {"title": "x", "content": "<a><b></a>", "content_type": "application/xml"}},
            422,
            "XML",
        ),
        (
            "XML content with DOCTYPE",
            {
                "json": {
                    "title": "x",
                    "content_type": "application/xml",
                    "content": '<!DOCTYPE a [<!ENTITY e "x">]><a>&e;</a>',
                }
            },
            422,
            "content",
        ),
        (
            "xhtml escaping its div",
            {"json": {"title": "x", "content_type": "xhtml", "content": "</div><script/><div>"}},
            422,
            "XML",
        ),
        (
            "JSON value with text type",
            {"json": {"title": "x", "content": {"a": 1}, "content_type": "text/plain"}},
            422,
            "JSON",
        ),
        (
            "invalid JSON string content",
            {"json": {"title": "x", "content": "{nope", "content_type": "application/json"}},
            422,
            "JSON",
        ),
        (
            "bad media type",
            {"json": {"title": "x", "content": "x", "content_type": "a b"}},
            422,
            "content_type",
        ),
        (
            "link rel not allowed",
            {"json": {"title": "x", "links": [{"href": "http://a", "rel": "prev-archive"}]}},
            422,
            "rel",
        ),
        (
            "link href with space",
            {"json": {"title": "x", "links": [{"href": "http://a b"}]}},
            422,
            "href",
        ),
        (
            "too many categories",
            {"json": {"title": "x", "categories": ["c"] * 33}},
            422,
            "categories",
        ),
        (
            "content nested too deep",
            {"json": {"title": "x", "content": _nested(40)}},
            422,
            "nested",
        ),
        ("title too long", {"json": {"title": "x" * 1025}}, 422, "title"),
    ]


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "kwargs,status,word", [b[1:] for b in _bad_requests()], ids=[b[0] for b in _bad_requests()]
)
def test_bad_input_is_refused_and_stores_nothing(
    client: Client, core: Simplefeed, kwargs: dict[str, Any], status: int, word: str
) -> None:
    post(client, [{"title": f"seed {i}"} for i in range(6)])  # Page 1 archived, page 2 live.
    before = state(client, core)
    r = client.simulate_post("/entries", **kwargs)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.json["error"] and word in r.json["message"], r.json
    assert state(client, core) == before


def test_bad_element_in_a_batch_is_named_by_index(client: Client) -> None:
    r = post(client, [{"title": "ok"}, {"title": 7}])
    assert r.status_code == 422
    assert r.json["index"] == 1 and r.json["field"] == "title"


def test_conflict_names_the_id(client: Client, core: Simplefeed) -> None:
    post(client, {"title": "a", "id": "urn:test:1"})
    before = state(client, core)
    r = post(client, [{"title": "fresh"}, {"title": "b", "id": "urn:test:1"}])
    assert r.status_code == 409
    assert r.json["id"] == "urn:test:1" and r.json["index"] == 1
    assert state(client, core) == before


def test_the_reference_names_every_field_of_an_error_body(client: Client) -> None:
    """The reference names every field of an error body.

    The reference's table of an error's fields (docs/reference/events.md) is the OpenAPI
    document's Error schema. Each field is described, such as the `id` and `index` of a 409.
    """
    rows = table_after(doc_text("docs/reference/events.md"), "An error body has these fields.")
    documented = {name.strip("`") for name, *_ in rows}
    assert documented == set(openapi.build()["components"]["schemas"]["Error"]["properties"])
    for name, present, described in rows:
        assert present and described, name
    post(client, {"title": "a", "id": "urn:test:1"})
    single = post(client, {"title": "b", "id": "urn:test:1"})
    assert single.status_code == 409
    assert single.json == {
        "error": "conflict",
        "message": "entry id 'urn:test:1' is already in the feed with different content",
        "id": "urn:test:1",
        "index": 0,
    }


def test_body_over_the_limit(core: Simplefeed, token: str) -> None:
    from dataclasses import replace

    from simplefeed.settings import Limits

    settings = replace(core.settings, limits=Limits(max_body_bytes=100))
    client = falcon.testing.TestClient(
        create_app(settings, core=Simplefeed(settings, store=core.store, clock=core.clock)),
        headers={"Authorization": f"Bearer {token}"},
    )
    body = json.dumps({"title": "x" * 200}).encode()
    r = client.simulate_post("/entries", body=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "limit" in r.json["message"]
    assert core.feed("events").head_seq == 0


@pytest.mark.parametrize(
    "method,path,status",
    [
        ("GET", "/feeds/nope/recent", 404),
        ("GET", "/feeds/nope/pages/1", 404),
        ("POST", "/feeds/nope/entries", 404),
        ("GET", "/feeds/NOT..valid/recent", 404),
        ("GET", "/pages/0", 404),
        ("GET", "/pages/99999999999999999999999", 404),
        ("GET", "/pages/abc", 404),
        ("GET", "/nothing-here", 404),
        ("POST", "/recent", 405),
        ("DELETE", "/pages/1", 405),
    ],
)
def test_errors_are_json(client: Client, method: str, path: str, status: int) -> None:
    r = client.simulate_request(method, path, json={"title": "x"})
    assert r.status_code == status
    assert r.headers["content-type"].startswith("application/json")
    assert r.json["error"] and r.json["message"]


# -- authentication --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization,invalid_token",
    [
        (None, False),
        ("", False),
        ("Basic dXNlcjpwYXNz", False),
        ("Bearer", False),
        ("Bearer not-a-token", True),
        ("Bearer sft_1_" + "A" * 43, True),  # Right shape, wrong secret.
        ("Bearer sft_999_" + "A" * 43, True),  # No such token.
    ],
)
def test_publishing_needs_a_valid_token(
    client: Client, core: Simplefeed, authorization: str | None, invalid_token: bool
) -> None:
    before = state(client, core)
    headers = {"Authorization": authorization} if authorization is not None else {}
    if authorization is None:
        headers = {"Authorization": ""}
    r = client.simulate_post("/entries", json={"title": "x"}, headers=headers)
    assert r.status_code == 401
    assert r.json["error"] == "unauthorized"
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="simplefeed"')
    assert ('error="invalid_token"' in challenge) is invalid_token
    assert state(client, core) == before


def test_auth_comes_before_everything_else(client: Client) -> None:
    no_auth = {"Authorization": ""}
    # An anonymous client learns nothing, neither whether the feed exists nor what is wrong.
    for path, kwargs in [
        ("/feeds/nope/entries", {"json": {"title": "x"}}),
        ("/entries", {"body": b"not json", "headers": {"Content-Type": "application/json"}}),
        ("/entries", {"body": b"{}", "headers": {"Content-Type": "text/plain"}}),
    ]:
        headers = {**kwargs.pop("headers", {}), **no_auth}  # type: ignore[dict-item]
        assert client.simulate_post(path, headers=headers, **kwargs).status_code == 401


def test_a_made_up_token_costs_a_lookup_never_the_parsing_of_the_body(
    client: Client, core: Simplefeed, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A made-up token costs a lookup, never the parsing of the body.

    Refusing 24 KB of HTML content takes seconds of CPU. So the token is looked up first.
    """
    from simplefeed.app import resources

    read: list[bytes] = []
    real = resources.read_body

    def spy(body: bytes) -> Any:
        read.append(body)
        return real(body)

    monkeypatch.setattr(resources, "read_body", spy)
    event = {"title": "x", "content": "<p>x</p>", "content_type": "html"}
    for made_up in ("sft_999_" + "A" * 43, token[:-1] + ("A" if token[-1] != "A" else "B")):
        headers = {"Authorization": f"Bearer {made_up}"}
        r = client.simulate_post("/entries", json=event, headers=headers)
        assert r.status_code == 401 and read == []
    assert client.simulate_post("/entries", json=event).status_code == 201
    assert len(read) == 1


def test_every_response_with_a_body_says_nosniff(client: Client) -> None:
    """Every response with a body says nosniff.

    JSON replies quote what a request sent, such as a path or a query. A browser must read
    none of them as anything but its type. So the header goes on every body, not on Atom only.
    """
    post(client, [{"title": "x"}])
    answers = [
        client.simulate_get(path)
        for path in ("/recent", "/pages/1", "/healthz", "/openapi.json", "/nope?<b>", "/")
    ]
    answers.append(client.simulate_post("/entries", json={}, headers={"Authorization": ""}))
    answers.append(client.simulate_options("/entries"))
    assert [a.headers.get("x-content-type-options") for a in answers] == ["nosniff"] * 8
    etag = answers[0].headers["etag"]
    again = client.simulate_get("/recent", headers={"If-None-Match": etag})
    assert again.status_code == 304 and "x-content-type-options" not in again.headers


def test_reading_is_public(client: Client) -> None:
    post(client, [{"title": f"e{i}"} for i in range(6)])
    no_auth = {"Authorization": ""}
    for path in ("/recent", "/pages/1", "/pages/2", "/healthz", "/openapi.json"):
        assert client.simulate_get(path, headers=no_auth).status_code == 200, path


def test_a_feed_token_publishes_only_to_its_feed(client: Client, core: Simplefeed) -> None:
    core.create_feed("orders")
    orders_token = core.create_token(feed="orders")
    headers = {"Authorization": f"Bearer {orders_token}"}
    ok = client.simulate_post("/feeds/orders/entries", json={"title": "x"}, headers=headers)
    assert ok.status_code == 201
    before = state(client, core)
    r = client.simulate_post("/entries", json={"title": "x"}, headers=headers)
    assert r.status_code == 403 and r.json["feed"] == "events"
    assert state(client, core) == before


def test_revoked_tokens_stop_working(client: Client, core: Simplefeed) -> None:
    token = core.create_token(label="short-lived")
    headers = {"Authorization": f"Bearer {token}"}
    assert client.simulate_post("/entries", json={"title": "a"}, headers=headers).status_code == 201
    (record,) = [t for t in core.tokens() if t.label == "short-lived"]
    assert core.revoke_token(record.id) is True
    assert core.revoke_token(record.id) is False
    r = client.simulate_post("/entries", json={"title": "b"}, headers=headers)
    assert r.status_code == 401


def test_only_a_hash_of_the_token_is_stored(core: Simplefeed, token: str) -> None:
    from tests.conftest import query

    rows = query(core.settings.database_url, "SELECT * FROM tokens")
    # A token is sft_<id>_<secret>. The secret is 43 base64url characters, and may hold "_".
    secret = token.split("_", 2)[2]
    assert len(secret) == 43
    assert rows and all(secret not in str(row) and token not in str(row) for row in rows)

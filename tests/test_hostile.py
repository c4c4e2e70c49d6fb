"""Hostile input through the HTTP app: injection attempts, XML bombs and limits.

Whatever is sent, no field adds an element or attribute to a page. Nothing refused is stored,
and there is never a 5xx.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import falcon.testing
import pytest
from lxml import etree

from simplefeed.app import create_app
from simplefeed.service import Simplefeed
from simplefeed.settings import Limits, Settings
from tests.atomcheck import check_atom
from tests.test_app import state

ATOM = "{http://www.w3.org/2005/Atom}"
INJECTIONS = [
    "</title><entry><id>urn:evil</id></entry><title>",
    '"><evil xmlns="urn:evil"/><x a="',
    "<![CDATA[ ]]> ]]> <script>alert(1)</script>",
    "&amp; &lt; &#0; &bogus; &#x1F600;",
    "' onload='x' \" onclick=\"y\"",
    "<!-- --> <?pi x?> <!DOCTYPE x>",
]


def _tags(body: bytes) -> list[str]:
    root = etree.fromstring(body)
    return sorted({str(el.tag) for el in root.iter(etree.Element)})


@pytest.mark.parametrize("payload", INJECTIONS)
def test_no_field_can_add_an_element_or_attribute(
    client: falcon.testing.TestClient, payload: str
) -> None:
    baseline = {
        "title": "plain",
        "content": "plain",
        "summary": "plain",
        "author": "plain",
        "categories": [{"term": "plain", "label": "plain"}],
        "links": [{"href": "http://example.test/a", "title": "plain"}],
    }
    r = client.simulate_post("/entries", json=baseline)
    assert r.status_code == 201
    clean = client.simulate_get("/recent").content
    hostile = {
        "title": payload,
        "content": payload,
        "summary": payload,
        "author": payload,
        "categories": [{"term": payload, "label": payload}],
        "links": [{"href": "http://example.test/a", "title": payload}],
    }
    r = client.simulate_post("/entries", json=hostile)
    assert r.status_code == 201, r.text
    body = client.simulate_get("/recent").content
    assert check_atom(body, kind="recent") == []
    root = etree.fromstring(body)
    entries = root.findall(f"{ATOM}entry")
    assert len(entries) == 2  # Nothing injected a third.
    shape = [(str(el.tag), sorted(el.attrib)) for el in entries[0].iter(etree.Element)]
    expected = [(str(el.tag), sorted(el.attrib)) for el in entries[1].iter(etree.Element)]
    assert shape == expected
    assert entries[0].findtext(f"{ATOM}title") == payload  # Carried as text, escaped.
    assert _tags(body) == _tags(clean)


def test_xml_bombs_and_external_entities_are_refused_by_a_guard(
    client: falcon.testing.TestClient, core: Simplefeed
) -> None:
    laughs = (
        '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        + "".join(
            f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
            for i in range(1, 10)
        )
        + ']><lolz xmlns="urn:x">&lol9;</lolz>'
    )
    xxe = '<!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><r xmlns="urn:x">&x;</r>'
    remote = '<!DOCTYPE r SYSTEM "http://127.0.0.1:9/evil.dtd"><r xmlns="urn:x"/>'
    # Each is refused by a guard, never after an expansion: libxml2's limit on entity
    # amplification, the door's refusal of any DOCTYPE, or, inside XHTML's div, a syntax error.
    guards = {
        (laughs, "xml"): "Maximum entity amplification factor exceeded",
        (laughs, "xhtml"): "XML declaration allowed only at the start",
        (xxe, "xml"): "DOCTYPE declarations are not allowed",
        (xxe, "xhtml"): "StartTag: invalid element name",
        (remote, "xml"): "DOCTYPE declarations are not allowed",
        (remote, "xhtml"): "StartTag: invalid element name",
    }
    before = state(client, core)
    for payload in (laughs, xxe, remote):
        for content_type in ("application/xml", "application/atom+xml", "xhtml"):
            r = client.simulate_post(
                "/entries",
                json={"title": "x", "content": payload, "content_type": content_type},
            )
            assert r.status_code == 422, r.text
            kind = "xhtml" if content_type == "xhtml" else "xml"
            assert guards[payload, kind] in r.json["message"], r.json
            assert "passwd" not in r.text and "root:" not in r.text
    assert state(client, core) == before


def _client(core: Simplefeed, token: str, **limits: int) -> falcon.testing.TestClient:
    settings: Settings = replace(core.settings, limits=Limits(**limits))
    app = create_app(settings, core=Simplefeed(settings, store=core.store, clock=core.clock))
    return falcon.testing.TestClient(app, headers={"Authorization": f"Bearer {token}"})


@pytest.mark.parametrize(
    "limits,body,status,word",
    [
        ({"max_batch": 3}, [{"title": "x"}] * 4, 413, "batch"),
        ({"max_title_chars": 10}, {"title": "x" * 11}, 422, "title"),
        ({"max_summary_chars": 10}, {"title": "x", "summary": "y" * 11}, 422, "summary"),
        ({"max_content_chars": 10}, {"title": "x", "content": "z" * 11}, 422, "content"),
        ({"max_content_chars": 10}, {"title": "x", "content": {"k": "z" * 20}}, 422, "content"),
        ({"max_json_depth": 3}, {"title": "x", "content": [[[[1]]]]}, 422, "nested"),
        ({"max_categories": 2}, {"title": "x", "categories": ["a", "b", "c"]}, 422, "categories"),
        (
            {"max_links": 1},
            {
                "title": "x",
                "links": [
                    {"href": "http://a.test/1"},
                    {"href": "http://a.test/2", "rel": "related"},
                ],
            },
            422,
            "links",
        ),
        ({"max_id_bytes": 20}, {"title": "x", "id": "urn:test:" + "a" * 20}, 422, "bytes"),
    ],
)
def test_each_limit_is_configurable_and_enforced(
    core: Simplefeed,
    token: str,
    limits: dict[str, int],
    body: Any,
    status: int,
    word: str,
) -> None:
    client = _client(core, token, **limits)
    before = state(client, core)
    r = client.simulate_post("/entries", json=body)
    assert r.status_code == status, r.text
    assert word in r.json["message"]
    assert state(client, core) == before
    # Just inside the limit is accepted.
    ok = client.simulate_post("/entries", json={"title": "fine"})
    assert ok.status_code == 201


def test_limits_come_from_the_environment() -> None:
    env = {
        "SIMPLEFEED_MAX_BODY_BYTES": "1000",
        "SIMPLEFEED_MAX_BATCH": "10",
        "SIMPLEFEED_MAX_TITLE_CHARS": "11",
        "SIMPLEFEED_MAX_SUMMARY_CHARS": "12",
        "SIMPLEFEED_MAX_CONTENT_CHARS": "13",
        "SIMPLEFEED_MAX_JSON_DEPTH": "4",
        "SIMPLEFEED_MAX_CATEGORIES": "5",
        "SIMPLEFEED_MAX_LINKS": "6",
        "SIMPLEFEED_MAX_ID_BYTES": "64",
    }
    assert Settings.from_env(env).limits == Limits(
        max_body_bytes=1000,
        max_batch=10,
        max_title_chars=11,
        max_summary_chars=12,
        max_content_chars=13,
        max_json_depth=4,
        max_categories=5,
        max_links=6,
        max_id_bytes=64,
    )


def test_deeply_nested_json_body_is_a_clean_400_or_422(
    client: falcon.testing.TestClient, core: Simplefeed
) -> None:
    before = state(client, core)
    for depth in (100, 5000, 100_000):
        body = b'{"title": "x", "content": ' + b"[" * depth + b"]" * depth + b"}"
        r = client.simulate_post(
            "/entries", body=body, headers={"Content-Type": "application/json"}
        )
        assert r.status_code in (400, 413, 422), (depth, r.status_code)
        assert json.loads(r.text)["message"]
    assert state(client, core) == before


@pytest.mark.parametrize(
    "base_url,words",
    [
        ("http://example.com/feeds?x=1", "query"),  # Pages would be .../feeds?x=1/pages/1.
        ("http://example.com/#top", "fragment"),
        ("https://user:secret@example.com", "password"),  # It would be in every document.
        ("http://example.com/%zz", "two hex digits"),
        ("ftp://example.com", "absolute http"),
        ("http://example.com\n", "absolute http"),  # A $ would match before the newline.
        ("http://[::1/feeds", "Invalid IPv6 URL"),  # Not a traceback of urlsplit's ValueError.
        ("http://example.com:99999", "Port out of range"),
        ("http://example.com:0", "port 0"),
    ],
)
def test_a_base_url_no_archived_page_should_keep_is_a_clear_error(
    base_url: str, words: str
) -> None:
    """A base URL that no archived page should keep is a clear error.

    Every link of an archived page is built on SIMPLEFEED_BASE_URL and kept for good.
    """
    from simplefeed.errors import ConfigError

    with pytest.raises(ConfigError, match=words):
        Settings.from_env({"SIMPLEFEED_BASE_URL": base_url})


def test_a_bad_limit_setting_is_a_clear_error() -> None:
    from simplefeed.errors import ConfigError

    with pytest.raises(ConfigError, match="at most 1024"):
        Settings.from_env({"SIMPLEFEED_MAX_ID_BYTES": "5000"})
    with pytest.raises(ConfigError, match="integer"):
        Settings.from_env({"SIMPLEFEED_MAX_BATCH": "many"})
    with pytest.raises(ConfigError, match="not a valid feed name"):
        Settings.from_env({"SIMPLEFEED_DEFAULT_FEED": "events\n"})
    # Content nested 1,000 deep would be refused by every reader decoding it with Python's json.
    with pytest.raises(ConfigError, match="at most 256"):
        Settings.from_env({"SIMPLEFEED_MAX_JSON_DEPTH": "1000"})
